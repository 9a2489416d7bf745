//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot("snap.pickle")`): read them, turn
//! their trace into a [`Recording`](crate::recording::Recording) the analysis and the viewer understand, and answer what the
//! snapshot alone can: the live blocks at any time with their stacks, leak suspects, and the
//! segments' state (fragmentation); and judge it once ([`Judged`]) for the report, `check`, the
//! viewer and a folder of ranks.
//!
//! ```no_run
//! let bytes = std::fs::read("snap.pickle").unwrap();
//! let snapshot = collector::snapshot::read_snapshot(&bytes).unwrap();
//! let recording = snapshot.to_recording();
//! println!("{} trace entries, {} live blocks at the end", snapshot.entries.len(),
//!     snapshot.live_blocks_at(i64::MAX, None).len());
//! ```

mod convert;
pub mod flame;
mod judged;
mod model;
mod pickle;
mod query;
pub mod ranks;
mod read;
mod segments;
pub mod segments_timeline;
mod sites;
pub mod timeline;
mod verdict;

pub use convert::PhaseSpan;
pub use judged::Judged;
pub use model::{
    Action, Annotation, Behind, Entries, LeakSuspect, LiveBlock, Snapshot, SnapshotError,
    SuspectMarks, TraceEntry, metadata_text,
};
pub use pickle::Frame;
pub use query::{LiveIndex, spell_frame};
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use read::SourceError;
pub use read::{Fill, SnapshotReader, append_filled, read_snapshot, read_snapshot_general};
pub use segments::{Block, BlockState, PoolId, PoolSummary, Segment, SegmentSummary};
pub use sites::{
    BEFORE_HISTORY, CPP_ONLY, PrivateSegments, SiteGroup, SiteKey, group_by_site, in_pool,
};
pub(crate) use sites::{Owner, owner};
pub use verdict::{Fragmentation, OomAtSnapshot, Site, SnapshotVerdict, TOP_SITES};
