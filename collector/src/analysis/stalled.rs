//! A job that stopped making progress: the last stall the collector recorded (no step ended for
//! far longer than steps took, see `record/stall.rs`) is how the job ended when no step ended
//! after it and the job did not exit on its own with status 0 — whatever then ended it (a
//! scheduler's time limit, a person's Ctrl-C, a collective's timeout). A stall the job came out of
//! was a pause (a checkpoint written), not a hang.
//!
//! The stacks say where: each process' main thread is read for what it waits on (a collective, a
//! queue's `get`, a DataLoader's next batch, a lock) and where the user's code called it, so that
//! ranks that wait in a collective are told from the rank that never reached it. (Stacks come
//! from Linux processes: paths use `/`.)

use super::{Basis, Finding, FindingKind};
use crate::format::format_duration;
use crate::recording::{Phase, Recording, StackFrame, Stall, StalledProcess, ThreadStack};
use crate::snapshot::{Owner, owner, spell_frame};

/// Frames of a stack shown, at most.
const FRAMES_SHOWN: usize = 12;
/// Other threads shown, at most.
const THREADS_SHOWN: usize = 4;

/// What a thread waits on, read from its stack.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Wait {
    /// A collective of `torch.distributed` (or DDP's), named by the call the job made.
    Collective(String),
    /// A DataLoader's next batch (its workers).
    DataLoader,
    /// A queue's `get`.
    Queue,
    /// A lock, an event, a condition or a thread's `join`.
    Lock(String),
}

impl Wait {
    fn describe(&self) -> String {
        match self {
            Self::Collective(call) => format!("waits in a collective ({call})"),
            Self::DataLoader => "waits for the DataLoader's next batch".to_owned(),
            Self::Queue => "waits in a queue's get".to_owned(),
            Self::Lock(call) => format!("waits on {call}"),
        }
    }
}

/// The stall the job ended in, as a finding, when it ended in one.
pub(super) fn judge(recording: &Recording, basis: Basis) -> Option<Finding> {
    let stall = recording.stalls.last()?;
    let exit = recording.exits.last();
    if exit.is_some_and(|e| e.code == Some(0)) || recovered(recording, stall) {
        return None;
    }
    let end_ns = exit
        .map(|e| e.t_ns)
        .or(recording.end.as_ref().map(|e| e.t_ns))
        .unwrap_or(stall.t_ns)
        .max(stall.t_ns);
    let answers = last_answers(recording, stall);
    // With several ranks, a backward that does not return waits on the others: DDP and FSDP
    // reduce the gradients inside it.
    let ranks: std::collections::BTreeSet<u32> =
        answers.iter().filter_map(|p| p.origin.rank).collect();
    let distributed = ranks.len() > 1;
    let mut read: Vec<(&StalledProcess, Option<Wait>)> = answers
        .iter()
        .map(|p| {
            (
                *p,
                main_thread(p).and_then(|t| wait_of(&t.frames, distributed)),
            )
        })
        .collect();
    // Ranks in order, then the processes without one.
    read.sort_by_key(|(p, _)| {
        (
            p.step.is_none(),
            p.origin.rank.is_none(),
            p.origin.rank,
            p.origin.pid,
        )
    });
    // The processes that train (they ended steps) are judged; the others (a launcher, a
    // DataLoader's workers) are shown. Before the first step, every process is judged.
    let trains =
        |p: &StalledProcess| p.step.is_some() || stall.processes.iter().all(|p| p.step.is_none());
    let in_collective = |w: &Option<Wait>| matches!(w, Some(Wait::Collective(_)));
    let waiting: Vec<&StalledProcess> = read
        .iter()
        .filter(|(p, w)| trains(p) && in_collective(w))
        .map(|(p, _)| *p)
        .collect();
    let stalling: Vec<&(&StalledProcess, Option<Wait>)> = read
        .iter()
        .filter(|(p, w)| trains(p) && !in_collective(w) && p.missing.is_none())
        .collect();
    // The process the title is about: one that is not waiting for the others, if any.
    let (lead, lead_wait) = stalling
        .first()
        .map(|(p, w)| (*p, w.clone()))
        .or_else(|| read.first().map(|(p, w)| (*p, w.clone())))?;
    let step = lead
        .step
        .or(stall.processes.iter().filter_map(|p| p.step).max());
    let mut title = format!(
        "Stalled{} for {} {}",
        step.map(|s| format!(" at step {s}")).unwrap_or_default(),
        format_duration(end_ns.saturating_sub(stall.since_ns) as f64 / 1e9),
        lead.phase
            .as_deref()
            .map_or("between phases".to_owned(), |p| format!("in {p}")),
    );
    let named = |p: &StalledProcess| match p.origin.rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("pid {}", p.origin.pid),
    };
    if !waiting.is_empty() && !stalling.is_empty() {
        let call = read.iter().find_map(|(_, w)| match w {
            Some(Wait::Collective(call)) => Some(call.clone()),
            _ => None,
        });
        let stallers: Vec<String> = stalling.iter().map(|(p, _)| named(p)).collect();
        let waiters: Vec<String> = waiting.iter().map(|p| named(p)).collect();
        title.push_str(&format!(
            ": {} never reached the collective {} {} in{}",
            stallers.join(", "),
            waiters.join(", "),
            if waiters.len() == 1 { "waits" } else { "wait" },
            call.map(|c| format!(" ({c})")).unwrap_or_default()
        ));
    } else if let Some(wait) = &lead_wait {
        title.push_str(&format!(": {}", wait.describe()));
        if let Some(frame) = main_thread(lead).and_then(|t| user_frame(&t.frames)) {
            title.push_str(&format!(" in {}", spell(frame)));
        }
        // What the loop waits for: where its DataLoader's worker is.
        let worker = (*wait == Wait::DataLoader)
            .then(|| {
                read.iter().find_map(|(p, _)| {
                    let thread = main_thread(p).filter(|t| is_worker(t))?;
                    Some((p.origin.pid, user_frame(&thread.frames)?))
                })
            })
            .flatten();
        if let Some((pid, frame)) = worker {
            title.push_str(&format!("; its worker (pid {pid}) is in {}", spell(frame)));
        }
    } else if let Some(frame) = main_thread(lead).and_then(|t| user_frame(&t.frames)) {
        title.push_str(&format!(": the main thread is in {}", spell(frame)));
    }

    let mut evidence = vec![format!(
        "no step ended for {} before the job's end; the collector counts {} without one as a stall, and asked for the stacks {} (each process' stacks below are its last answer)",
        format_duration(end_ns.saturating_sub(stall.since_ns) as f64 / 1e9),
        format_duration(stall.after_ns as f64 / 1e9),
        match recording
            .stalls
            .iter()
            .filter(|s| s.since_ns == stall.since_ns)
            .count()
        {
            1 => "once".to_owned(),
            n => format!(
                "{n} times, the last {} into it",
                format_duration(stall.t_ns.saturating_sub(stall.since_ns) as f64 / 1e9)
            ),
        }
    )];
    match exit {
        Some(e) => evidence.push(match (e.code, e.signal) {
            (Some(code), _) => format!("then the job exited with status {code}"),
            (None, Some(signal)) => format!(
                "then the job was killed by signal {signal}{}",
                signal_name(signal)
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
            (None, None) => "then the job ended".to_owned(),
        }),
        None => evidence.push("the recording ends in the stall".to_owned()),
    }
    for (process, wait) in &read {
        evidence.extend(process_lines(
            process,
            wait.as_ref(),
            &named(process),
            trains(process),
        ));
    }
    let mut hints = Vec::new();
    if !waiting.is_empty() {
        hints.push("a rank that never reaches a collective leaves the others waiting in it until their timeout: see what that rank does instead (its stack above); `init_process_group(timeout=…)` ends such a hang with an error sooner".to_owned());
    }
    if read
        .iter()
        .any(|(_, w)| matches!(w, Some(Wait::Collective(c)) if c == IN_BACKWARD))
    {
        hints.push("DistributedDataParallel and FSDP reduce the gradients inside `backward()`: every rank must reach backward for the same step — a rank that skips a batch or runs out of data first hangs the others (`with model.join():` for uneven inputs)".to_owned());
    }
    if read
        .iter()
        .any(|(_, w)| matches!(w, Some(Wait::DataLoader | Wait::Queue)))
    {
        hints.push("a DataLoader worker (or a producer thread) that died or blocks leaves the loop waiting for its next batch: give `DataLoader(timeout=…)` so it raises instead, and look at what the producer does".to_owned());
    }
    hints.push("the stacks are Python's: a thread blocked in C (a collective, I/O, a CUDA synchronisation) shows the Python call that entered it".to_owned());
    Some(Finding {
        kind: FindingKind::Stalled,
        title,
        phase: lead.phase.clone().map(Phase::from),
        basis,
        growth_per_step_bytes: None,
        evidence,
        hints,
    })
}

/// Each process of the stall as it last answered in it: an ask that met it as the job was being
/// stopped finds it gone, and the one before has its stacks.
fn last_answers<'a>(recording: &'a Recording, stall: &'a Stall) -> Vec<&'a StalledProcess> {
    stall
        .processes
        .iter()
        .map(|process| {
            recording
                .stalls
                .iter()
                .rev()
                .filter(|s| s.since_ns == stall.since_ns)
                .find_map(|s| {
                    s.processes
                        .iter()
                        .find(|p| p.origin.pid == process.origin.pid && !p.threads.is_empty())
                })
                .unwrap_or(process)
        })
        .collect()
}

/// Whether a step ended after the stall was recorded: a phase edge of a later step (or, where
/// steps are not numbered, any edge) from a process of the stall.
fn recovered(recording: &Recording, stall: &Stall) -> bool {
    let phases = &recording.phases;
    let from = phases.times_ns().partition_point(|&t| t <= stall.t_ns);
    (from..phases.len()).any(|i| {
        let pid = phases.kind(i).origin.pid;
        stall
            .processes
            .iter()
            .find(|p| p.origin.pid == pid)
            .is_none_or(|p| p.step.is_none() || phases.step(i) != p.step)
    })
}

/// The process' main thread (the first, when none is marked).
fn main_thread(process: &StalledProcess) -> Option<&ThreadStack> {
    process
        .threads
        .iter()
        .find(|t| t.main)
        .or(process.threads.first())
}

/// The collective a rank waits in when its `backward()` does not return in a job of several
/// ranks: DistributedDataParallel's and FSDP's gradient reduction, run by the autograd engine's
/// hooks in C++ (no Python frame of torch.distributed on the stack).
const IN_BACKWARD: &str = "backward's gradient reduction";

/// What the stack waits on: its innermost frame that says so. `in_ranks`: the job has several
/// ranks.
fn wait_of(frames: &[StackFrame], in_ranks: bool) -> Option<Wait> {
    // A collective is named by the outermost call into torch.distributed that is not a
    // decorator's wrapper (the job's own call: `all_reduce`, `barrier`).
    let distributed: Vec<&StackFrame> = frames
        .iter()
        .filter(|f| {
            let file = &f.file;
            // (The launcher's own loop, `torch.distributed.run` and its elastic agent, waits
            // for its workers, not in a collective.)
            (file.contains("/torch/distributed/")
                && !file.contains("/torch/distributed/elastic/")
                && !file.contains("/torch/distributed/launch")
                && !file.ends_with("/torch/distributed/run.py"))
                || file.contains("/torch/nn/parallel/distributed.py")
        })
        .collect();
    let named = distributed.iter().rev().find(|f| {
        !f.function.starts_with('_') && !matches!(f.function.as_str(), "wrapper" | "inner")
    });
    if let Some(frame) = named.or(distributed.first()) {
        return Some(Wait::Collective(frame.function.clone()));
    }
    if in_ranks
        && frames.iter().any(|f| {
            f.file.ends_with("/torch/autograd/graph.py") && f.function == "_engine_run_backward"
        })
    {
        return Some(Wait::Collective(IN_BACKWARD.to_owned()));
    }
    // A queue's get waits on a lock inside it, and a DataLoader's next batch in a queue's get:
    // the outer, more telling wait wins.
    fn base(f: &StackFrame) -> &str {
        f.file.rsplit('/').next().unwrap_or("")
    }
    if frames
        .iter()
        .any(|f| f.file.ends_with("/torch/utils/data/dataloader.py"))
    {
        return Some(Wait::DataLoader);
    }
    if frames
        .iter()
        .any(|f| matches!(base(f), "queue.py" | "queues.py") && f.function == "get")
    {
        return Some(Wait::Queue);
    }
    frames.iter().find_map(|f| {
        (base(f) == "threading.py"
            && matches!(
                f.function.as_str(),
                "wait" | "acquire" | "join" | "_wait_for_tstate_lock"
            ))
        .then(|| Wait::Lock(format!("threading's {}", f.function)))
    })
}

/// Whether a thread is a DataLoader worker's loop.
fn is_worker(thread: &ThreadStack) -> bool {
    thread
        .frames
        .iter()
        .any(|f| f.file.ends_with("/torch/utils/data/_utils/worker.py"))
}

/// The innermost frame of the user's own code.
fn user_frame(frames: &[StackFrame]) -> Option<&StackFrame> {
    frames
        .iter()
        .find(|f| owner(&f.file, &f.function) == Owner::User && !is_probe(&f.file))
}

/// Whether a frame is the probe's own (injected by the collector, or installed).
fn is_probe(file: &str) -> bool {
    file.contains("/probe/tidemark/") || file.contains("-packages/tidemark/")
}

fn spell(frame: &StackFrame) -> String {
    spell_frame(&frame.function, &frame.file, u64::from(frame.line))
}

/// A process' lines of evidence: where it was, what it waits on, its main thread's stack and
/// its other threads' innermost frames.
fn process_lines(
    process: &StalledProcess,
    wait: Option<&Wait>,
    name: &str,
    trains: bool,
) -> Vec<String> {
    let launcher = process.threads.iter().any(|t| {
        t.frames.iter().any(|f| {
            let file = &f.file;
            file.ends_with("/torch/distributed/run.py")
                || file.contains("/torch/distributed/launch")
        })
    });
    let worker = main_thread(process).is_some_and(is_worker);
    let mut place = vec![match (process.origin.rank, launcher, worker) {
        (_, _, true) => format!("a DataLoader worker (pid {})", process.origin.pid),
        (Some(_), _, _) => format!("{name} (pid {})", process.origin.pid),
        (None, true, _) => format!("the launcher (pid {})", process.origin.pid),
        (None, false, _) => name.to_owned(),
    }];
    if let Some(step) = process.step {
        place.push(format!("step {step}"));
    }
    if trains {
        place.push(
            process
                .phase
                .as_deref()
                .map_or("between phases".to_owned(), |p| format!("in {p}")),
        );
    } else {
        place.push("no steps".to_owned());
    }
    let Some(main) = main_thread(process) else {
        return vec![format!(
            "{}: no stacks: {}",
            place.join(", "),
            process.missing.as_deref().unwrap_or("it sent none")
        )];
    };
    let innermost = user_frame(&main.frames).or(main.frames.first());
    // A forked worker's stack goes on below its loop with the frames that forked it (the
    // DataLoader's): what it waits on is its own code's.
    let wait = wait.filter(|_| !worker);
    let doing = wait.map_or_else(
        || innermost.map_or("runs".to_owned(), |f| format!("runs {}", spell(f))),
        Wait::describe,
    );
    // A process that does not train (a launcher, a DataLoader's worker) gets one line: where
    // its own code is.
    if !trains {
        let at = match (wait, innermost) {
            (Some(_), Some(frame)) => format!(", in {}", spell(frame)),
            _ => String::new(),
        };
        return vec![format!("{}: {doing}{at}", place.join(", "))];
    }
    let mut lines = vec![format!(
        "{}: {doing}; its main thread, innermost first:",
        place.join(", ")
    )];
    let shown: Vec<&StackFrame> = main
        .frames
        .iter()
        .filter(|f| !f.file.starts_with("<frozen") && !is_probe(&f.file))
        .collect();
    for frame in shown.iter().take(FRAMES_SHOWN) {
        lines.push(format!("    {}", spell(frame)));
    }
    if shown.len() > FRAMES_SHOWN {
        lines.push(format!("    … {} more frames", shown.len() - FRAMES_SHOWN));
    }
    let others: Vec<String> = process
        .threads
        .iter()
        .filter(|t| !std::ptr::eq(*t, main))
        .filter(|t| !t.frames.iter().any(|f| is_probe(&f.file)))
        .filter_map(|t| {
            // The thread's own code, else what it runs (its target, above threading's frames).
            let frame = user_frame(&t.frames)
                .or_else(|| {
                    t.frames
                        .iter()
                        .rev()
                        .find(|f| !f.file.ends_with("/threading.py"))
                })
                .or(t.frames.first())?;
            let wait = wait_of(&t.frames, false).map(|w| format!(", {}", w.describe()));
            Some(format!("{}{}", spell(frame), wait.unwrap_or_default()))
        })
        .collect();
    if !others.is_empty() {
        let more = others.len().saturating_sub(THREADS_SHOWN);
        lines.push(format!(
            "  its other threads: {}{}",
            others
                .iter()
                .take(THREADS_SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
            if more > 0 {
                format!("; … {more} more")
            } else {
                String::new()
            }
        ));
    }
    lines
}

/// The usual names of the signals a job is stopped with.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        15 => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{Exit, Header, Origin, PhaseEdge, Record};

    fn frame(file: &str, line: u32, function: &str) -> StackFrame {
        StackFrame {
            file: file.to_owned(),
            line,
            function: function.to_owned(),
        }
    }

    /// A backward that does not return waits on the other ranks only where there are others.
    #[test]
    fn a_backward_waits_in_the_gradient_reduction_only_among_ranks() {
        let frames = vec![
            frame("/v/torch/autograd/graph.py", 1113, "_engine_run_backward"),
            frame("/v/torch/autograd/__init__.py", 395, "backward"),
            frame("/v/torch/_tensor.py", 623, "backward"),
            frame("/job/train.py", 14, "<module>"),
        ];
        assert_eq!(
            wait_of(&frames, true),
            Some(Wait::Collective(IN_BACKWARD.to_owned()))
        );
        assert_eq!(wait_of(&frames, false), None);
    }

    fn process(pid: u32, rank: u32, frames: Vec<StackFrame>) -> StalledProcess {
        StalledProcess {
            origin: Origin {
                pid,
                rank: Some(rank),
            },
            step: Some(6),
            phase: Some("forward".to_owned()),
            since_ns: 1_000_000_000,
            threads: vec![ThreadStack {
                id: 1,
                main: true,
                frames,
            }],
            missing: None,
        }
    }

    fn recording(processes: Vec<StalledProcess>, exit: Exit, after: Option<u64>) -> Recording {
        let mut recording = Recording::new(Header::new(
            0,
            "host".to_owned(),
            vec!["train.py".to_owned()],
        ));
        recording.push(Record::Stall(Stall {
            t_ns: 3_000_000_000,
            since_ns: 1_000_000_000,
            after_ns: 2_000_000_000,
            processes,
        }));
        if let Some(step) = after {
            recording.push(Record::Phase(PhaseEdge {
                t_ns: 4_000_000_000,
                edge: crate::recording::Edge::Begin,
                phase: Phase::Forward,
                step: Some(step),
                origin: Origin {
                    pid: 10,
                    rank: Some(0),
                },
                host_heap: None,
                host_rss: None,
            }));
        }
        recording.push(Record::Exit(exit));
        recording
    }

    fn killed(t_ns: u64) -> Exit {
        Exit {
            t_ns,
            code: None,
            signal: Some(15),
            stderr_tail: Vec::new(),
            kernel: None,
        }
    }

    #[test]
    fn the_rank_that_never_reached_the_collective_is_named() {
        let dist = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py";
        let waiting = process(
            11,
            1,
            vec![
                frame(dist, 2501, "all_reduce"),
                frame(
                    "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py",
                    81,
                    "wrapper",
                ),
                frame("/job/train.py", 30, "train_step"),
            ],
        );
        let stalling = process(
            10,
            0,
            vec![
                frame("/usr/lib/python3.11/threading.py", 320, "wait"),
                frame("/job/train.py", 25, "slow_io"),
            ],
        );
        let finding = judge(
            &recording(vec![stalling, waiting], killed(123_000_000_000), None),
            Basis::Allocated,
        )
        .expect("a hang");
        assert_eq!(finding.kind, FindingKind::Stalled);
        assert_eq!(
            finding.title,
            "Stalled at step 6 for 2 min 02 s in forward: rank 0 never reached the collective rank 1 waits in (all_reduce)"
        );
        let text = finding.evidence.join("\n");
        assert!(
            text.contains("then the job was killed by signal 15 (SIGTERM)"),
            "{text}"
        );
        assert!(
            text.contains("rank 1 (pid 11), step 6, in forward: waits in a collective"),
            "{text}"
        );
        assert!(text.contains("    train_step (job/train.py:30)"), "{text}");
    }

    #[test]
    fn a_loop_waiting_for_its_batches_says_where() {
        let waiting = process(
            10,
            0,
            vec![
                frame("/usr/lib/python3.11/queue.py", 171, "get"),
                frame("/job/hang.py", 13, "<module>"),
            ],
        );
        let finding = judge(
            &recording(vec![waiting], killed(10_000_000_000), None),
            Basis::Allocated,
        )
        .unwrap();
        assert_eq!(
            finding.title,
            "Stalled at step 6 for 9 s in forward: waits in a queue's get in <module> (job/hang.py:13)"
        );
        assert!(finding.hints[0].contains("DataLoader(timeout="));
    }

    #[test]
    fn a_pause_the_job_came_out_of_is_not_a_hang() {
        let paused = process(10, 0, vec![frame("/job/train.py", 50, "save_checkpoint")]);
        assert_eq!(
            judge(
                &recording(vec![paused.clone()], killed(10_000_000_000), Some(7)),
                Basis::Allocated
            ),
            None
        );
        // An edge of the same step is not progress.
        assert!(
            judge(
                &recording(vec![paused.clone()], killed(10_000_000_000), Some(6)),
                Basis::Allocated
            )
            .is_some()
        );
        let done = Exit {
            code: Some(0),
            signal: None,
            ..killed(10_000_000_000)
        };
        assert_eq!(
            judge(&recording(vec![paused], done, None), Basis::Allocated),
            None
        );
    }

    #[test]
    fn an_ask_that_met_the_job_stopping_does_not_hide_the_stacks_before_it() {
        let waiting = process(
            10,
            0,
            vec![
                frame("/usr/lib/python3.11/queue.py", 171, "get"),
                frame("/job/hang.py", 13, "<module>"),
            ],
        );
        let mut recording = recording(vec![waiting.clone()], killed(10_000_000_000), None);
        let mut gone = waiting;
        gone.threads.clear();
        gone.missing = Some("it had ended".to_owned());
        recording.push(Record::Stall(Stall {
            t_ns: 7_000_000_000,
            since_ns: 1_000_000_000,
            after_ns: 2_000_000_000,
            processes: vec![gone],
        }));
        let finding = judge(&recording, Basis::Allocated).unwrap();
        assert!(
            finding
                .title
                .ends_with("waits in a queue's get in <module> (job/hang.py:13)"),
            "{}",
            finding.title
        );
        assert!(!finding.evidence.iter().any(|l| l.contains("it had ended")));
    }

    #[test]
    fn a_process_that_did_not_answer_says_why() {
        let mut silent = process(10, 0, Vec::new());
        silent.threads.clear();
        silent.missing = Some("it did not answer within 2 s".to_owned());
        let finding = judge(
            &recording(vec![silent], killed(10_000_000_000), None),
            Basis::Allocated,
        )
        .unwrap();
        assert!(
            finding
                .title
                .starts_with("Stalled at step 6 for 9 s in forward"),
            "{}",
            finding.title
        );
        assert!(
            finding
                .evidence
                .iter()
                .any(|l| l.ends_with("no stacks: it did not answer within 2 s")),
            "{:?}",
            finding.evidence
        );
    }
}
