//! Recording a job: sets up the output, the probe's channel and the samplers, runs the job, and
//! finishes the recording when the job ends.

mod clock;
mod gpu;
mod host;
mod job;
mod kernel;
mod probe;
mod recorder;
mod session;
mod stall;

pub use self::host::alive;
pub use self::session::{Options, run};
