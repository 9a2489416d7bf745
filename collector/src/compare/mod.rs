//! Two runs side by side: two PyTorch memory snapshots by allocation site and per device, or two
//! recordings by phase, step baseline, categories, holders, peaks and out-of-memory errors; and
//! the baseline gate (`collector check RUN --baseline BASE`) judged on that difference. No I/O
//! here: the viewer can use it too.
//!
//! ```no_run
//! use collector::compare::{Gate, compare_recordings};
//! let base = collector::recording::read_file("main.msgpack".as_ref()).unwrap();
//! let run = collector::recording::read_file("branch.msgpack".as_ref()).unwrap();
//! let (ab, bb) = (collector::analysis::analyze(&base), collector::analysis::analyze(&run));
//! let diff = compare_recordings(&base, &ab, &run, &bb);
//! for row in Gate::default().judge_recordings(&diff) {
//!     println!("{} {}", row.what, if row.failed { "FAILED" } else { "ok" });
//! }
//! ```

mod gate;
mod moments;
mod pair;
mod recordings;
mod snapshots;

pub use self::gate::{Gate, GateRow, PERCENT_FLOOR_BYTES, Threshold, signed_bytes};
pub use self::moments::{MomentHolder, MomentPhase, MomentSeries, Moments, compare_moments};
use self::pair::{MIB, devices_in_one};
pub use self::pair::{Pair, device_name};
pub use self::recordings::{
    CategoryChange, DeviceChange, HolderChange, PhaseChange, RecordingDiff, compare_recordings,
};
pub use self::snapshots::{
    SiteChange, SiteStatus, SnapshotDevice, SnapshotDiff, SnapshotFacts, compare_snapshots, site_of,
};
