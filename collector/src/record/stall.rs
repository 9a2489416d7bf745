//! Watching for a hang: when no step has ended anywhere in the job for far longer than steps
//! took, the collector asks every probed process for the Python stacks of all its threads and
//! writes what they answered as a [`Stall`] record, again while the stall lasts.
//!
//! The listener tells [`Progress`] of every phase edge and of each process that can answer (`tm2
//! T`: the probe registered `faulthandler` on a real-time signal and named it); the watcher
//! thread ([`watch`]) looks twice a second. A stall is no step ending for the threshold: 10× the
//! median time between steps and at least a minute (five minutes before the first step: a job's
//! start loads data and meets its peers), or `--stall-after`. The stacks are asked for when it
//! passes the threshold, then at 2×, 4× … that long, at most [`MAX_ASKS`] times. The collector
//! signals only a process that named its signal, and only while its start time and program are
//! the ones it had then (a pid used again is another process; a process that `exec`s another
//! program lost the handler). The probe keeps the signal ignored under its handler, so an ask
//! that meets a process as it exits does nothing.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use collector::recording::{
    Edge, Origin, Phase, PhaseEdge, Record, StackFrame, Stall, StalledProcess, ThreadStack,
};

use super::clock::Clock;
use super::recorder::Msg;

/// The least time without a step that is a stall, when no `--stall-after` is given.
const FLOOR_NS: u64 = 60_000_000_000;
/// Before the first step ends, the least time that is a stall.
const FIRST_STEP_FLOOR_NS: u64 = 300_000_000_000;
/// A stall is this many median steps without one.
const MEDIAN_STEPS: u64 = 10;
/// The steps the median is taken over (the latest).
const GAPS_KEPT: usize = 64;
/// Asks for the stacks in one stall, at most.
pub const MAX_ASKS: u32 = 8;
/// An answer is whole once its file has not grown for this long: `faulthandler` writes a frame
/// in several calls, and on a busy machine a writer can be preempted for tens of milliseconds
/// (the main thread, written last, would be cut off).
const STEADY_FOR: Duration = Duration::from_millis(250);
/// How long a process has to write its stacks once signalled.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// What the watcher knows of the job's progress, kept by the listener.
#[derive(Debug, Default)]
pub struct Progress {
    processes: BTreeMap<u32, Watched>,
    /// Times between step ends, the latest last.
    gaps: VecDeque<u64>,
}

#[derive(Debug, Default)]
struct Watched {
    origin: Origin,
    step: Option<u64>,
    /// Whether its steps are numbered (then only a new step is progress, else any edge).
    numbered: bool,
    phase: Option<Phase>,
    progress_ns: u64,
    /// The signal it answers, and who it was when it named it.
    answers: Option<(i32, Identity)>,
}

impl Progress {
    /// A phase edge from the probe.
    pub fn edge(&mut self, edge: &PhaseEdge) {
        let watched = self.watched(edge.origin, edge.t_ns);
        match edge.edge {
            // (The listener's path: a phase of PyTorch's is kept without allocating.)
            Edge::Begin => watched.phase = Some(edge.phase.clone()),
            Edge::End => {
                if watched.phase.as_ref() == Some(&edge.phase) {
                    watched.phase = None;
                }
            }
        }
        let gap = match edge.step {
            Some(step) if watched.step != Some(step) => {
                let gap = watched
                    .numbered
                    .then(|| edge.t_ns.saturating_sub(watched.progress_ns));
                watched.step = Some(step);
                watched.numbered = true;
                watched.progress_ns = edge.t_ns;
                gap
            }
            Some(_) => None,
            None => {
                if !watched.numbered {
                    watched.progress_ns = edge.t_ns;
                }
                None
            }
        };
        if let Some(gap) = gap {
            if self.gaps.len() == GAPS_KEPT {
                self.gaps.pop_front();
            }
            self.gaps.push_back(gap);
        }
    }

    /// A process named the signal it answers with its stacks.
    pub fn answers(&mut self, origin: Origin, t_ns: u64, signal: i32) {
        let identity = identity(origin.pid);
        let watched = self.watched(origin, t_ns);
        watched.answers = identity.map(|identity| (signal, identity));
    }

    fn watched(&mut self, origin: Origin, t_ns: u64) -> &mut Watched {
        self.processes.entry(origin.pid).or_insert_with(|| Watched {
            origin,
            progress_ns: t_ns,
            ..Watched::default()
        })
    }

    /// When the job last made progress, if a probed process has spoken.
    fn last_progress_ns(&self) -> Option<u64> {
        self.processes.values().map(|w| w.progress_ns).max()
    }

    /// How long without progress is a stall now.
    fn threshold_ns(&self, stall_after: Option<Duration>) -> u64 {
        if let Some(after) = stall_after {
            return after.as_nanos().try_into().unwrap_or(u64::MAX);
        }
        if self.gaps.is_empty() {
            return FIRST_STEP_FLOOR_NS;
        }
        let mut gaps: Vec<u64> = self.gaps.iter().copied().collect();
        gaps.sort_unstable();
        (gaps[gaps.len() / 2].saturating_mul(MEDIAN_STEPS)).max(FLOOR_NS)
    }
}

/// Watches for stalls until `stop`; asks for the stacks (files in `stacks_dir`) and sends what
/// it learnt to the recorder.
pub fn watch(
    progress: &Mutex<Progress>,
    stacks_dir: &Path,
    stall_after: Option<Duration>,
    clock: Clock,
    stop: &AtomicBool,
    tx: &Sender<Msg>,
) {
    // The stall now: when it began, and how many times the stacks were asked for in it.
    let mut asked: Option<(u64, u32)> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(250));
        let now = clock.now_ns();
        let (since, threshold) = {
            let Ok(progress) = progress.lock() else {
                return;
            };
            let Some(since) = progress.last_progress_ns() else {
                continue;
            };
            (since, progress.threshold_ns(stall_after))
        };
        let asks = match asked {
            Some((began, asks)) if began == since => asks,
            _ => 0,
        };
        let due = threshold.saturating_mul(1 << asks.min(31));
        if asks >= MAX_ASKS || now.saturating_sub(since) < due {
            continue;
        }
        asked = Some((since, asks + 1));
        // An ask that found every process gone (the job being stopped) tells nothing.
        let Some(stall) = ask(progress, stacks_dir, since, threshold, clock) else {
            continue;
        };
        if tx.send(Msg::Record(Record::Stall(stall))).is_err() {
            return;
        }
    }
}

/// Asks every probed process for its stacks at once, and waits for their answers; `None` when
/// none of them was there any more.
fn ask(
    progress: &Mutex<Progress>,
    stacks_dir: &Path,
    since_ns: u64,
    after_ns: u64,
    clock: Clock,
) -> Option<Stall> {
    let t_ns = clock.now_ns();
    let mut present = 0;
    let mut asked: Vec<(StalledProcess, Option<(PathBuf, u64)>)> = Vec::new();
    if let Ok(progress) = progress.lock() {
        for (&pid, watched) in &progress.processes {
            let mut process = StalledProcess {
                origin: watched.origin,
                step: watched.step,
                phase: watched.phase.as_ref().map(|p| p.as_str().to_owned()),
                since_ns: watched.progress_ns,
                ..StalledProcess::default()
            };
            let file = stacks_dir.join(format!("{pid}.txt"));
            let asking = match watched.answers {
                None => {
                    // (A zombie has no program any more.)
                    if identity(pid).is_some_and(|i| i.program.is_some()) {
                        present += 1;
                    }
                    process.missing = Some(
                        "it named no signal to ask it by (the job or a library handles the probe's)"
                            .to_owned(),
                    );
                    None
                }
                Some((_, ref was)) if identity(pid).as_ref() != Some(was) => {
                    process.missing = Some("it had ended (or runs another program)".to_owned());
                    None
                }
                Some((signal, _)) => {
                    present += 1;
                    let offset = std::fs::metadata(&file).map_or(0, |m| m.len());
                    match send_signal(pid, signal) {
                        Ok(()) => Some((file, offset)),
                        Err(err) => {
                            process.missing = Some(format!("it could not be signalled ({err})"));
                            None
                        }
                    }
                }
            };
            asked.push((process, asking));
        }
    }
    // faulthandler writes from the signal handler at once: an answer is whole once its file has
    // stopped growing for a while (`STEADY_FOR`).
    let deadline = Instant::now() + ANSWER_WITHIN;
    let mut processes = Vec::with_capacity(asked.len());
    for (mut process, asking) in asked {
        if let Some((file, offset)) = asking {
            match answer(&file, offset, deadline) {
                Some((main, text)) => process.threads = parse_stacks(&text, main),
                None => {
                    process.missing = Some(format!(
                        "it did not answer within {} s",
                        ANSWER_WITHIN.as_secs()
                    ));
                }
            }
        }
        processes.push(process);
    }
    (present > 0).then_some(Stall {
        t_ns,
        since_ns,
        after_ns,
        processes,
    })
}

/// Sends a real-time signal the probe named (nix's `Signal` has none of them).
fn send_signal(pid: u32, signal: i32) -> Result<(), nix::errno::Errno> {
    let Ok(pid) = i32::try_from(pid) else {
        return Err(nix::errno::Errno::ESRCH);
    };
    // Only the real-time signals: a malformed message must not make the collector send another.
    if !(nix::libc::SIGRTMIN()..=nix::libc::SIGRTMAX()).contains(&signal) {
        return Err(nix::errno::Errno::EINVAL);
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let status = unsafe { nix::libc::kill(pid, signal) };
    nix::errno::Errno::result(status).map(drop)
}

/// The main thread's identifier (from the file's first line, `tidemark stacks pid P main 0x…`)
/// and the text the process appended to its file after `offset`, once whole; `None` when nothing
/// came by the deadline. The file is read once.
fn answer(file: &Path, offset: u64, deadline: Instant) -> Option<(Option<u64>, String)> {
    let mut last = offset;
    let mut steady_since = None;
    loop {
        let len = std::fs::metadata(file).map_or(offset, |m| m.len());
        let now = Instant::now();
        if len != last {
            last = len;
            steady_since = Some(now);
        } else if let Some(steady) = steady_since
            && now.duration_since(steady) >= STEADY_FOR
        {
            break;
        }
        if now >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if last <= offset {
        return None;
    }
    let bytes = std::fs::read(file).ok()?;
    let from = usize::try_from(offset).ok()?.min(bytes.len());
    let header = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let main = String::from_utf8_lossy(header)
        .rsplit_once(" main 0x")
        .and_then(|(_, hex)| u64::from_str_radix(hex.trim(), 16).ok());
    Some((main, String::from_utf8_lossy(&bytes[from..]).into_owned()))
}

/// Parses what `faulthandler` writes for all threads: a `Thread 0x…` or `Current thread 0x…`
/// line, then `  File "…", line N in name` lines, innermost first. The main thread comes first.
pub fn parse_stacks(text: &str, main: Option<u64>) -> Vec<ThreadStack> {
    let mut threads: Vec<ThreadStack> = Vec::new();
    for line in text.lines() {
        let header = line
            .strip_prefix("Current thread 0x")
            .or_else(|| line.strip_prefix("Thread 0x"));
        if let Some(rest) = header {
            let hex = rest.split(|c: char| !c.is_ascii_hexdigit()).next();
            if let Some(id) = hex.and_then(|h| u64::from_str_radix(h, 16).ok()) {
                threads.push(ThreadStack {
                    id,
                    main: main == Some(id),
                    frames: Vec::new(),
                });
            }
            continue;
        }
        let (Some(thread), Some(frame)) = (threads.last_mut(), parse_frame(line)) else {
            continue;
        };
        thread.frames.push(frame);
    }
    threads.sort_by_key(|thread| !thread.main);
    threads
}

/// `  File "path", line 12 in name`.
fn parse_frame(line: &str) -> Option<StackFrame> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (file, rest) = rest.rsplit_once("\", line ")?;
    let (number, function) = rest.split_once(" in ")?;
    Some(StackFrame {
        file: file.to_owned(),
        line: number.trim().parse().ok()?,
        function: function.trim_end().to_owned(),
    })
}

/// Who a process is: its start time, which with the pid names one process even when the pid is
/// used again, and the program it runs (one that `exec`s another no longer answers).
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    start_time: u64,
    program: Option<PathBuf>,
}

fn identity(pid: u32) -> Option<Identity> {
    Some(Identity {
        start_time: start_time(pid)?,
        program: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
    })
}

/// A process' start time (clock ticks after boot, `/proc/PID/stat`'s 22nd field).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Starts the watcher thread.
pub fn spawn_watcher(
    progress: Arc<Mutex<Progress>>,
    stacks_dir: PathBuf,
    stall_after: Option<Duration>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("stall-watch".to_owned())
        .spawn(move || watch(&progress, &stacks_dir, stall_after, clock, &stop, &tx))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Python 3.11's faulthandler wrote for a job blocked in a queue's get, with a thread
    /// blocked on a lock.
    const DUMP: &str = r#"Thread 0x00007f354bf376c0 (most recent call first):
  File "/tmp/job.py", line 9 in worker
  File "/usr/lib/python3.11/threading.py", line 982 in run
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f354ca83b80 (most recent call first):
  File "/usr/lib/python3.11/queue.py", line 171 in get
  File "/tmp/job.py", line 13 in inner
  File "/tmp/job.py", line 17 in <module>
"#;

    #[test]
    fn parses_the_threads_the_main_one_first() {
        let threads = parse_stacks(DUMP, Some(0x7f354ca83b80));
        assert_eq!(threads.len(), 2);
        assert!(threads[0].main);
        assert_eq!(threads[0].id, 0x7f354ca83b80);
        assert_eq!(
            threads[0].frames[0],
            StackFrame {
                file: "/usr/lib/python3.11/queue.py".to_owned(),
                line: 171,
                function: "get".to_owned(),
            }
        );
        assert_eq!(threads[0].frames[2].function, "<module>");
        assert!(!threads[1].main);
        assert_eq!(threads[1].frames.len(), 3);
    }

    #[test]
    fn a_truncated_dump_keeps_what_it_has() {
        let text = "Thread 0x00000000000000ff (most recent call first):\n  File \"a.py\", line 3 in f\n  ...\n  <no Python frame>\nThread 0xzz\n  File \"broken";
        let threads = parse_stacks(text, None);
        assert_eq!(threads.len(), 1);
        assert_eq!(threads[0].frames.len(), 1);
        assert!(!threads[0].main);
    }

    fn edge(t_s: u64, step: Option<u64>, edge: Edge) -> PhaseEdge {
        PhaseEdge {
            t_ns: t_s * 1_000_000_000,
            edge,
            phase: Phase::Forward,
            step,
            origin: Origin { pid: 7, rank: None },
            host_heap: None,
            host_rss: None,
        }
    }

    #[test]
    fn the_threshold_is_ten_median_steps_and_at_least_a_minute() {
        let mut progress = Progress::default();
        progress.edge(&edge(1, Some(0), Edge::Begin));
        assert_eq!(progress.threshold_ns(None), FIRST_STEP_FLOOR_NS);
        for step in 1..=5 {
            progress.edge(&edge(1 + 10 * step, Some(step), Edge::Begin));
        }
        // Steps of 10 s: 100 s.
        assert_eq!(progress.threshold_ns(None), 100_000_000_000);
        assert_eq!(progress.last_progress_ns(), Some(51_000_000_000));
        // The phase is the one begun; an edge within the step is not progress.
        progress.edge(&edge(55, Some(5), Edge::End));
        assert_eq!(progress.last_progress_ns(), Some(51_000_000_000));
        assert_eq!(progress.processes[&7].phase, None);
        assert_eq!(
            progress.threshold_ns(Some(Duration::from_secs(2))),
            2_000_000_000
        );
        let mut quick = Progress::default();
        for step in 0..5 {
            quick.edge(&edge(step, Some(step), Edge::Begin));
        }
        assert_eq!(quick.threshold_ns(None), FLOOR_NS);
    }

    #[test]
    fn unnumbered_steps_progress_at_every_edge() {
        let mut progress = Progress::default();
        progress.edge(&edge(1, None, Edge::Begin));
        progress.edge(&edge(4, None, Edge::End));
        assert_eq!(progress.last_progress_ns(), Some(4_000_000_000));
    }

    #[test]
    fn only_a_real_time_signal_is_sent() {
        assert_eq!(
            send_signal(std::process::id(), 9),
            Err(nix::errno::Errno::EINVAL)
        );
        assert!(start_time(std::process::id()).is_some());
    }
}
