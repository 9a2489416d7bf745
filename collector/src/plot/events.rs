//! The events a plot marks at their instant: out-of-memory errors (with their cause), the job's
//! end (with what killed it, when the kernel's numbers tell), a stall's start, lost probe
//! messages.

use crate::analysis::{Analysis, FindingKind};
use crate::format::{format_bytes, format_duration};
use crate::recording::Recording;

/// What happened at one instant, drawn as a marker.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Nanoseconds after the start.
    pub t_ns: u64,
    /// What kind.
    pub kind: EventKind,
    /// What to show on hover.
    pub text: String,
    /// A short tag to write beside its marker (`OOM: tried 2.00 GiB`).
    pub label: String,
}

/// The kinds of events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A CUDA out-of-memory error.
    Oom,
    /// The job ended.
    Exit,
    /// No step ended from here for far longer than steps took (the collector asked for the
    /// stacks).
    Stall,
    /// Probe messages were lost.
    Dropped,
}

/// The events of a recording, in time order.
pub fn events(recording: &Recording, analysis: &Analysis) -> Vec<Event> {
    let bytes = |b: Option<u64>| b.map_or("?".to_owned(), |b| format_bytes(b as f64));
    let mut events = Vec::new();
    for oom in &recording.ooms {
        let device = oom.device.map_or(String::new(), |d| {
            format!(" on {}", recording.header.device_name(d))
        });
        events.push(Event {
            t_ns: oom.t_ns,
            kind: EventKind::Oom,
            label: match oom.tried_bytes {
                Some(b) => format!("OOM: tried {}", format_bytes(b as f64)),
                None => "OOM".to_owned(),
            },
            text: format!(
                "CUDA out of memory{device}: tried to allocate {}, {} free of {}, {} allocated by PyTorch",
                bytes(oom.tried_bytes),
                bytes(oom.free_bytes),
                bytes(oom.capacity_bytes),
                bytes(oom.allocated_bytes),
            ) + &analysis
                .ooms
                .iter()
                .find(|v| v.t_ns == oom.t_ns)
                .map_or(String::new(), |v| {
                    let mut why = format!("\ncause: {}", v.cause_name());
                    if let Some(first) = v.evidence.first() {
                        why.push_str(&format!(" — {first}"));
                    }
                    why
                }),
        });
    }
    for exit in &recording.exits {
        let how = match (exit.code, exit.signal) {
            (_, Some(signal)) => format!("killed by signal {signal}"),
            (Some(code), None) => format!("exit status {code}"),
            (None, None) => "ended".to_owned(),
        };
        // How it died, where the verdict says (killed by an OOM killer or from outside, a hang).
        let death = analysis
            .findings
            .iter()
            .find(|f| matches!(f.kind, FindingKind::Failed | FindingKind::Stalled))
            .map_or(String::new(), |f| format!("\n{}", f.title));
        events.push(Event {
            t_ns: exit.t_ns,
            kind: EventKind::Exit,
            text: format!("the job ended: {how}{death}"),
            label: "exit".to_owned(),
        });
    }
    for stall in &recording.stalls {
        // One marker a stall: its later asks say how long it lasted.
        if let Some(last) = events.last()
            && last.kind == EventKind::Stall
            && last.t_ns == stall.since_ns
        {
            events.pop();
        }
        let answered = stall
            .processes
            .iter()
            .filter(|p| !p.threads.is_empty())
            .count();
        events.push(Event {
            t_ns: stall.since_ns,
            kind: EventKind::Stall,
            label: "stall".to_owned(),
            text: format!(
                "no step ended from here for {} (a stall after {}); the stacks were asked of {} process{} {} after the start, {answered} answered",
                format_duration(stall.t_ns.saturating_sub(stall.since_ns) as f64 / 1e9),
                format_duration(stall.after_ns as f64 / 1e9),
                stall.processes.len(),
                if stall.processes.len() == 1 { "" } else { "es" },
                format_duration(stall.t_ns as f64 / 1e9)
            ),
        });
    }
    for drop in &recording.drops {
        events.push(Event {
            t_ns: drop.t_ns,
            kind: EventKind::Dropped,
            label: "lost messages".to_owned(),
            text: format!(
                "probe messages lost: {} dropped, {} malformed, {} refused",
                drop.dropped, drop.malformed, drop.refused
            ),
        });
    }
    events.sort_by_key(|e| e.t_ns);
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;
    use crate::recording::{Exit, Header, Origin, Record, Stall, StalledProcess};

    /// A stall is one marker at its start, however many times the stacks were asked for; the
    /// exit's text says how the job died, as the verdict does.
    #[test]
    fn a_stall_is_marked_once_at_its_start_and_the_exit_says_how_the_job_died() {
        let s = 1_000_000_000u64;
        let mut recording = Recording::new(Header::new(0, "test".to_owned(), vec![]));
        for ask in [60, 120] {
            recording.push(Record::Stall(Stall {
                t_ns: (10 + ask) * s,
                since_ns: 10 * s,
                after_ns: 60 * s,
                processes: vec![StalledProcess {
                    origin: Origin { pid: 7, rank: None },
                    ..Default::default()
                }],
            }));
        }
        recording.push(Record::Exit(Exit {
            t_ns: 140 * s,
            code: Some(1),
            signal: None,
            stderr_tail: vec!["RuntimeError: stuck".to_owned()],
            kernel: None,
        }));
        let analysis = analyze(&recording);
        let events = events(&recording, &analysis);
        let stalls: Vec<&Event> = events
            .iter()
            .filter(|e| e.kind == EventKind::Stall)
            .collect();
        assert_eq!(stalls.len(), 1, "{events:#?}");
        assert_eq!(stalls[0].t_ns, 10 * s);
        assert!(
            stalls[0].text.starts_with("no step ended from here for 2 min 00 s (a stall after 1 min 00 s); the stacks were asked of 1 process 2 min 10 s after the start, 0 answered"),
            "{}",
            stalls[0].text
        );
        let exit = events.iter().find(|e| e.kind == EventKind::Exit).unwrap();
        let died = analysis
            .findings
            .iter()
            .find(|f| matches!(f.kind, FindingKind::Failed | FindingKind::Stalled))
            .unwrap();
        assert_eq!(
            exit.text,
            format!("the job ended: exit status 1\n{}", died.title)
        );
    }
}
