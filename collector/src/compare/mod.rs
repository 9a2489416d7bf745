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
mod recordings;
mod snapshots;

use serde::Serialize;

pub use self::gate::{Gate, GateRow, PERCENT_FLOOR_BYTES, Threshold, signed_bytes};
pub use self::moments::{MomentHolder, MomentPhase, MomentSeries, Moments, compare_moments};
pub use self::recordings::{
    CategoryChange, DeviceChange, HolderChange, PhaseChange, RecordingDiff, compare_recordings,
};
pub use self::snapshots::{
    NO_FRAMES, SiteChange, SiteStatus, SnapshotDevice, SnapshotDiff, SnapshotFacts,
    compare_snapshots, site_of,
};

const MIB: f64 = 1024.0 * 1024.0;

/// How a device of a comparison is named: `cuda:N`, or pinned host memory (keyed
/// [`crate::format::HOST_DEVICE`] in a comparison, whatever its index in each snapshot).
pub fn device_name(device: u32) -> String {
    crate::format::device_name(device, Some(crate::format::HOST_DEVICE))
}

/// The notes for devices only one side has: they are not compared.
fn devices_in_one(
    a: &std::collections::BTreeSet<u32>,
    b: &std::collections::BTreeSet<u32>,
    notes: &mut Vec<String>,
) {
    for (side, x, y) in [("A", a, b), ("B", b, a)] {
        let only: Vec<String> = x.difference(y).map(|d| device_name(*d)).collect();
        if !only.is_empty() {
            notes.push(format!(
                "devices only in {side}: {} (not compared)",
                only.join(", ")
            ));
        }
    }
}

/// A quantity in A, in B, and B − A (`None` where a side lacks it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pair {
    /// In A (the baseline).
    pub a: Option<f64>,
    /// In B (the run compared with it).
    pub b: Option<f64>,
    /// B − A, when both have it.
    pub change: Option<f64>,
}

impl Pair {
    /// A pair and its change.
    pub fn new(a: Option<f64>, b: Option<f64>) -> Self {
        let change = match (a, b) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        Self { a, b, change }
    }

    /// Both sides have it.
    pub fn both(&self) -> bool {
        self.change.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_change_only_with_both_sides() {
        assert_eq!(Pair::new(Some(1.0), Some(3.0)).change, Some(2.0));
        assert_eq!(Pair::new(None, Some(3.0)).change, None);
    }
}
