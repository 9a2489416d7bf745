//! The events a plot marks at their instant: out-of-memory errors (with their cause), the job's
//! end, lost probe messages.

use crate::analysis::Analysis;
use crate::format::format_bytes;
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
        events.push(Event {
            t_ns: exit.t_ns,
            kind: EventKind::Exit,
            text: format!("the job ended: {how}"),
            label: "exit".to_owned(),
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
