//! The diagnosis: is it a leak, the allocator's cache, fragmentation or growing peaks — and in
//! which phase? Every finding carries the numbers that fired it.
//!
//! Series are taken at the same point of every step (the step's first phase begin), so that the
//! allocator's sawtooth within a step neither hides nor fakes a trend. The memory the verdict is
//! about is, in order of preference: PyTorch's allocated bytes (from the probe), the device's used
//! memory (NVML), the job's host memory (`/proc`). No I/O here: the viewer uses it too.

mod attribution;
mod categories;
mod cells;
mod device_rules;
mod diagnose;
mod ending;
mod holders;
mod killed;
mod model;
mod oom_cause;
mod phases;
mod ranks;
mod rules;
mod stalled;
mod trend;

pub use self::attribution::{PhaseStats, unobserved};
pub use self::categories::{CategoryStats, CategoryTrend};
pub use self::cells::{CellRun, CellRuns, RERUN_FLOOR_BYTES, Rerun, cells};
pub use self::diagnose::{ALPHA, GROWTH_FLOOR_BYTES, MIN_STEPS, STEPLESS_SNAPSHOT, analyze};
pub(crate) use self::diagnose::{
    GIB, KEEPS_PACE, LACKS_CAPACITY, LACKS_END, MIB, as_snapshot_trace, value_at, value_exactly_at,
};
pub use self::ending::{Ending, Killer, OomCause, OomVerdict};
pub use self::holders::{HolderGrowth, census_pair, holders_between};
pub use self::model::{
    ALL_KINDS, Analysis, Attribution, Basis, Finding, FindingKind, ProjectedOom, Projection,
    StepSeries, caption, headline,
};
pub use self::oom_cause::{CONTEXT_ALLOWANCE_BYTES, Contribution};
pub use self::phases::{Occurrence, StepStart};
pub use self::ranks::RankSummary;
pub use self::trend::{Trend, trend};
