//! A stall's records: the Python stacks of every probed process, asked for when no step ended for
//! far longer than steps took.

use serde::{Deserialize, Serialize};

use super::model::Origin;

/// A stall (since 1.8): no step ended anywhere in the job for far longer than steps took (10× the
/// median step and at least a minute, or `--stall-after`), so the collector asked every probed
/// process for the Python stacks of all its threads. Written at each ask while the stall lasts
/// (when it passes the threshold, then at 2×, 4× … that long). A stall that a step ended after was
/// a pause (a checkpoint written), not a hang.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    /// Nanoseconds after the start when the stacks were asked for.
    pub t_ns: u64,
    /// When the job last made progress (a step ended in any process): the stall's start.
    pub since_ns: u64,
    /// How long without progress counted as a stall, in nanoseconds.
    pub after_ns: u64,
    /// Each probed process and what it answered.
    #[serde(default)]
    pub processes: Vec<StalledProcess>,
}

/// One process of a stalled job: where it was, and its threads' Python stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StalledProcess {
    /// Which process.
    #[serde(flatten)]
    pub origin: Origin,
    /// The last step it was in, if the steps are numbered.
    #[serde(default)]
    pub step: Option<u64>,
    /// The phase it was in (its last edge began it), if any.
    #[serde(default)]
    pub phase: Option<String>,
    /// When it last made progress (ended a step), nanoseconds after the start.
    pub since_ns: u64,
    /// Its threads, the main thread first; empty when it did not answer.
    #[serde(default)]
    pub threads: Vec<ThreadStack>,
    /// Why there are no stacks, when there are none (it did not answer, it had ended).
    #[serde(default)]
    pub missing: Option<String>,
}

/// The Python stack of one thread, as `faulthandler` wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStack {
    /// The thread's identifier (`threading.get_ident()`).
    pub id: u64,
    /// Whether it is the process' main thread.
    #[serde(default)]
    pub main: bool,
    /// Its frames, the innermost (most recent call) first.
    #[serde(default)]
    pub frames: Vec<StackFrame>,
}

/// One frame of a Python stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackFrame {
    /// The source file.
    pub file: String,
    /// The line running in it.
    pub line: u32,
    /// The function (`<module>` at a module's top level).
    pub function: String,
}
