//! A Kineto chrome trace (`torch.profiler.profile(profile_memory=True)`) as a [`Recording`]:
//! the `[memory]` events become allocated and reserved curves per device (PyTorch's totals where
//! the events carry them, else the running sum of their `Bytes`) and the CPU's as host memory,
//! `[OutOfMemory]` events out-of-memory errors, `ProfilerStep#N` spans steps, and the spans that
//! name phases (`record_function` labels such as `## forward ##`, autograd's backward functions,
//! `Optimizer.step#…`, `Optimizer.zero_grad#…`) phase edges, with the allocator's levels at
//! every edge as the probe would send them. `distributedInfo` gives the rank.

use std::collections::BTreeMap;

use super::TraceError;
use super::events::{self, Args, Event, Meta, Name, Named};
use super::loose::Loose;
use super::operators::{Operators, thread};
use crate::recording::{
    AllocatorSample, Chunk, Column, Device, Edge, End, Header, Note, Oom, Origin, Phase, PhaseEdge,
    Record, Recording, SeriesKey, SeriesKind,
};

/// One `[memory]` event, read.
#[derive(Clone, Copy, Debug)]
struct Mem {
    /// µs, as the trace writes it.
    ts: f64,
    /// Its place in the file (ties in time keep it; beyond 2^32 events, ties are kept in
    /// that order modulo 2^32).
    order: u32,
    /// The CUDA device; `None`: the CPU.
    device: Option<u32>,
    bytes: i64,
    total_allocated: Option<u64>,
    total_reserved: Option<u64>,
    /// The thread that allocated ([`thread`]).
    tid: u32,
}

const _: () = assert!(std::mem::size_of::<Mem>() == 64);

#[derive(Clone, Debug)]
struct Span {
    what: Named,
    begin: f64,
    end: f64,
}

/// A chrome trace's JSON as a recording ([`read_chrome_trace_from`] on bytes held in memory).
pub fn read_chrome_trace(bytes: &[u8]) -> Result<Recording, TraceError> {
    read_chrome_trace_from(bytes, |err| TraceError::Json(err.to_string()))
}

/// A chrome trace's JSON read from `input` as it streams in ([`events::read_events`]): only the
/// memory events, OOMs and named spans are kept, never the file. `read_error` says what a failed
/// read of `input` is.
pub fn read_chrome_trace_from(
    input: impl std::io::Read,
    read_error: fn(std::io::Error) -> TraceError,
) -> Result<Recording, TraceError> {
    let mut read = Read::default();
    let (meta, events) = events::read_events(input, read_error, |e| read.add(e))?;
    convert(&meta, read, events)
}

/// The memory events, OOMs and named spans of a trace.
#[derive(Default)]
struct Read {
    mems: Vec<Mem>,
    ooms: Vec<Mem>,
    spans: Vec<Span>,
    /// Operators' spans: what ran at a device's peak.
    ops: Operators,
    pid: Option<u32>,
    unfinished: usize,
    memory_named: usize,
    /// Events seen.
    seen: usize,
}

impl Read {
    /// Keeps what `e` (the next event in the file) says of memory, steps and phases.
    fn add(&mut self, e: Event) {
        let order = self.seen;
        self.seen += 1;
        let Some(ts) = e.ts.num() else {
            return;
        };
        let memory = match e.name {
            Name::Memory => true,
            Name::OutOfMemory => false,
            Name::Span(what) => {
                if e.ph.0
                    && let Some(dur) = e.dur.num()
                {
                    self.spans.push(Span {
                        what,
                        begin: ts,
                        end: ts + dur.max(0.0),
                    });
                }
                return;
            }
            Name::Op(name) => {
                if e.ph.0
                    && e.cat.0
                    && let Some(dur) = e.dur.num()
                {
                    self.ops.add(name.as_str(), thread(e.tid.int()), ts, dur);
                }
                return;
            }
            Name::Other => return,
        };
        self.memory_named += usize::from(memory);
        let args = e.args.as_ref();
        let arg = |f: fn(&Args) -> Loose| args.map_or(Loose::Absent, f);
        let (Some(bytes), Some(kind)) = (arg(|a| a.bytes).int(), arg(|a| a.device_type).int())
        else {
            return;
        };
        let device = match kind {
            0 => None,
            // Device Type is c10::DeviceType: 1 is CUDA. Other accelerators keep their ids.
            _ => Some(
                arg(|a| a.device_id)
                    .int()
                    .and_then(|d| u32::try_from(d).ok())
                    .unwrap_or(0),
            ),
        };
        if e.finished.bool().or(arg(|a| a.finished).bool()) == Some(false) {
            self.unfinished += 1;
        }
        if self.pid.is_none() {
            self.pid = e.pid.int().and_then(|p| u32::try_from(p).ok());
        }
        let mem = Mem {
            ts,
            order: order as u32,
            device,
            bytes,
            total_allocated: arg(|a| a.total_allocated).uint(),
            total_reserved: arg(|a| a.total_reserved).uint(),
            tid: thread(e.tid.int()),
        };
        if memory {
            self.mems.push(mem);
        } else {
            self.ooms.push(mem);
        }
    }
}

/// One device's levels after each of its events, by time.
#[derive(Default)]
struct Levels {
    /// (time ns, allocated, reserved, peak).
    points: Vec<(u64, u64, u64, u64)>,
    /// Whether allocated is PyTorch's total, not a running sum.
    totals: bool,
    /// Whether reserved is known.
    reserved_known: bool,
    /// What the running sum was raised by so that it never falls below zero.
    raised: u64,
}

impl Levels {
    /// The levels of `mems` (one device's, sorted by time then place in the file).
    fn of(mems: &[&Mem], t_ns: impl Fn(f64) -> u64) -> Self {
        let totals = mems.iter().any(|m| m.total_allocated.is_some());
        let reserved_known = mems.iter().any(|m| m.total_reserved.is_some());
        // The running sum starts at 0: memory allocated before profiling started is not in it,
        // and frees of it would take it below zero; it is raised by the lowest it reaches.
        let mut sum: i128 = 0;
        let mut lowest: i128 = 0;
        let mut running = Vec::with_capacity(mems.len());
        for m in mems {
            sum = match m.total_allocated {
                Some(total) => i128::from(total),
                None => sum + i128::from(m.bytes),
            };
            lowest = lowest.min(sum);
            running.push(sum);
        }
        let raised = if totals { 0 } else { -lowest };
        let mut points = Vec::with_capacity(mems.len());
        let (mut reserved, mut peak) = (0u64, 0u64);
        for (m, sum) in mems.iter().zip(running) {
            let allocated = u64::try_from((sum + raised).max(0)).unwrap_or(u64::MAX);
            reserved = m.total_reserved.unwrap_or(reserved);
            peak = peak.max(allocated);
            let shown_reserved = if reserved_known { reserved } else { allocated };
            points.push((t_ns(m.ts), allocated, shown_reserved, peak));
        }
        Self {
            points,
            totals,
            reserved_known,
            raised: u64::try_from(raised).unwrap_or(0),
        }
    }

    /// The levels at `t_ns`: after the events before it (and, with `inclusive`, at it).
    fn at(&self, t_ns: u64, inclusive: bool) -> (u64, u64, u64) {
        let n = self
            .points
            .partition_point(|p| if inclusive { p.0 <= t_ns } else { p.0 < t_ns });
        match n.checked_sub(1).map(|i| self.points[i]) {
            Some((_, a, r, p)) => (a, r, p),
            // Before the first event: the level it started from.
            None => self
                .points
                .first()
                .map_or((0, 0, 0), |&(_, a, r, _)| (a, r, a)),
        }
    }
}

fn convert(file: &Meta, mut read: Read, events: usize) -> Result<Recording, TraceError> {
    if read.mems.is_empty() && read.ooms.is_empty() {
        if read.memory_named > 0 {
            return Err(TraceError::OtherProfiler {
                count: read.memory_named,
            });
        }
        return Err(TraceError::NoMemoryEvents { events });
    }
    read.mems
        .sort_by(|a, b| a.ts.total_cmp(&b.ts).then(a.order.cmp(&b.order)));
    // Time zero: the first memory event, step or OOM.
    let ts0 = read
        .mems
        .iter()
        .chain(&read.ooms)
        .map(|m| m.ts)
        .chain(read.spans.iter().map(|s| s.begin))
        .fold(f64::INFINITY, f64::min);
    let ts0 = if ts0.is_finite() { ts0 } else { 0.0 };
    let t_ns = |ts: f64| ((ts - ts0) * 1000.0).round().max(0.0) as u64;
    // Fractional `ts` are µs after `baseTimeNanoseconds`; older traces write epoch µs.
    let base_ns = file.base_time_ns.uint().unwrap_or(0);
    let start_unix_ns = base_ns.saturating_add((ts0 * 1000.0).max(0.0) as u64);
    let rank = file
        .distributed_info
        .as_ref()
        .and_then(|d| d.rank.uint())
        .and_then(|r| u32::try_from(r).ok());
    let origin = Origin {
        pid: read.pid.unwrap_or(0),
        rank,
    };

    // Levels per device.
    let mut by_device: BTreeMap<Option<u32>, Vec<&Mem>> = BTreeMap::new();
    for m in &read.mems {
        by_device.entry(m.device).or_default().push(m);
    }
    let levels: BTreeMap<Option<u32>, Levels> = by_device
        .iter()
        .map(|(d, mems)| (*d, Levels::of(mems, t_ns)))
        .collect();
    let gpus: Vec<u32> = levels.keys().filter_map(|d| *d).collect();

    // The header: the devices the events are on, named by deviceProperties.
    let properties = file.device_properties.as_deref().unwrap_or_default();
    let mut devices: Vec<u32> = gpus.clone();
    devices.extend(read.ooms.iter().filter_map(|o| o.device));
    devices.sort_unstable();
    devices.dedup();
    let capacity = |device: u32| {
        properties
            .iter()
            .find(|p| p.id.uint() == Some(u64::from(device)))
            .and_then(|p| p.total_global_mem.uint())
    };
    let mut header = Header::new(
        start_unix_ns,
        String::new(),
        std::iter::once(crate::recording::Imported::Trace.command().to_owned())
            .chain(file.trace_name.clone())
            .collect(),
    );
    header.pid = read.pid;
    header.devices = devices
        .iter()
        .map(|&index| {
            let props = properties
                .iter()
                .find(|p| p.id.uint() == Some(u64::from(index)));
            Device {
                index,
                name: props
                    .and_then(|p| p.name.clone())
                    .unwrap_or_else(|| format!("cuda:{index}")),
                uuid: String::new(),
                total_bytes: capacity(index).unwrap_or(0),
            }
        })
        .collect();
    let mut recording = Recording::new(header);

    // Phases, and the allocator's levels at every edge (as the probe sends them).
    let edges = phase_edges(&read.spans, t_ns);
    let mut readings: Vec<(u64, bool, AllocatorSample)> = Vec::new();
    for (t, edge, phase, step) in &edges {
        recording.phases.push(PhaseEdge {
            t_ns: *t,
            edge: *edge,
            phase: phase.clone(),
            step: Some(*step),
            origin,
            host_heap: None,
            host_rss: None,
        });
        for &device in &gpus {
            let (allocated, reserved, peak) = levels[&Some(device)].at(*t, *edge == Edge::End);
            readings.push((
                *t,
                false,
                AllocatorSample {
                    t_ns: *t,
                    origin,
                    device,
                    allocated,
                    reserved,
                    peak,
                    ..AllocatorSample::default()
                },
            ));
        }
    }
    for &device in &gpus {
        for &(t, allocated, reserved, peak) in &levels[&Some(device)].points {
            readings.push((
                t,
                true,
                AllocatorSample {
                    t_ns: t,
                    origin,
                    device,
                    allocated,
                    reserved,
                    peak,
                    ..AllocatorSample::default()
                },
            ));
        }
    }
    // By time; at one instant an edge's reading first (the analysis finds it by its time).
    readings.sort_by_key(|&(t, event, _)| (t, event));
    recording.allocator.reserve_exact(readings.len());
    for (_, _, sample) in readings {
        recording.allocator.push(sample);
    }
    recording.phases = std::mem::take(&mut recording.phases).sorted_by_time();

    // The CPU's memory as host memory.
    if let Some(host) = levels.get(&None) {
        let (times_ns, values) = host.points.iter().map(|p| (p.0, p.1)).unzip();
        recording.push(Record::Chunk(Chunk {
            times_ns,
            columns: vec![Column {
                series: SeriesKey::new(SeriesKind::HostRss),
                values,
                valid: None,
            }],
        }));
    }

    for o in &read.ooms {
        let reserved_unallocated = match (o.total_reserved, o.total_allocated) {
            (Some(r), Some(a)) => Some(r.saturating_sub(a)),
            _ => None,
        };
        let place = o
            .device
            .map_or("the CPU".to_owned(), |d| format!("cuda:{d}"));
        let capacity_bytes = o.device.and_then(capacity);
        recording.push(Record::Oom(Oom {
            t_ns: t_ns(o.ts),
            device: o.device,
            rank,
            tried_bytes: u64::try_from(o.bytes).ok(),
            capacity_bytes,
            free_bytes: None,
            allocated_bytes: o.total_allocated,
            reserved_unallocated_bytes: reserved_unallocated,
            private_pools_bytes: None,
            process_bytes: None,
            other_processes_bytes: None,
            message: format!(
                "out of memory on {place} (the profiler's [OutOfMemory] event): tried to allocate {} bytes{}{}",
                o.bytes,
                o.total_allocated
                    .map_or(String::new(), |a| format!(", {a} bytes allocated")),
                o.total_reserved
                    .map_or(String::new(), |r| format!(", {r} bytes reserved")),
            ),
        }));
    }

    let steps = read
        .spans
        .iter()
        .filter(|s| matches!(s.what, Named::Step(_)))
        .count();
    let count = |device: Option<u32>| by_device.get(&device).map_or(0, Vec::len);
    let mut on: Vec<String> = gpus
        .iter()
        .map(|&d| format!("{} on cuda:{d}", count(Some(d))))
        .collect();
    if count(None) > 0 {
        on.push(format!("{} on the CPU", count(None)));
    }
    recording.push(Record::Note(Note {
        t_ns: 0,
        text: format!(
            "imported from a PyTorch profiler trace: {} [memory] events ({}), {} profiler step{}{}{}",
            read.mems.len(),
            on.join(", "),
            steps,
            if steps == 1 { "" } else { "s" },
            rank.map_or(String::new(), |r| format!(", rank {r}")),
            match read.ooms.len() {
                0 => String::new(),
                n => format!(", {n} [OutOfMemory] event(s)"),
            }
        ),
    }));
    for (device, l) in &levels {
        let place = device.map_or("the CPU".to_owned(), |d| format!("cuda:{d}"));
        if !l.totals {
            recording.push(Record::Note(Note {
                t_ns: 0,
                text: format!(
                    "allocated memory on {place} is the running sum of the events' Bytes (this trace's memory events carry no Total Allocated): memory allocated before profiling started is not counted{}",
                    if l.raised > 0 {
                        format!(
                            "; raised by {} bytes, the most the trace frees of it",
                            l.raised
                        )
                    } else {
                        String::new()
                    }
                ),
            }));
        }
        if device.is_some() && !l.reserved_known {
            recording.push(Record::Note(Note {
                t_ns: 0,
                text: format!(
                    "reserved memory on {place} is unknown (no Total Reserved in the trace): shown equal to allocated"
                ),
            }));
        }
    }
    for (device, mems) in &by_device {
        recording.push(Record::Note(Note {
            t_ns: 0,
            text: peak_sentence(*device, mems, &levels[device], &read, t_ns),
        }));
    }
    if levels.contains_key(&None) {
        recording.push(Record::Note(Note {
            t_ns: 0,
            text: "host memory is what PyTorch allocated on the CPU (the profiler's [memory] events of Device Type 0), not the process' resident memory".to_owned(),
        }));
    }
    if read.unfinished > 0 {
        recording.push(Record::Note(Note {
            t_ns: 0,
            text: format!(
                "{} memory events are marked finished: false (counted as the others)",
                read.unfinished
            ),
        }));
    }
    // The profiler wrote the file whole: the recording is complete (how the job ended is not
    // in it).
    recording.end = Some(End {
        t_ns: recording.duration_ns(),
        records: 0,
        samples: recording.sample_count(),
        dropped: 0,
    });
    if steps == 0 {
        recording.warnings.push(
            "the trace holds no ProfilerStep spans: call prof.step() every training step (torch.profiler.schedule) for a verdict per step".to_owned(),
        );
    }
    recording.shrink_to_fit();
    Ok(recording)
}

/// A device's peak, when, and the operators that were running then on the thread that allocated.
fn peak_sentence(
    device: Option<u32>,
    mems: &[&Mem],
    levels: &Levels,
    read: &Read,
    t_ns: impl Fn(f64) -> u64,
) -> String {
    let place = device.map_or("the CPU".to_owned(), |d| format!("cuda:{d}"));
    // The first event at the highest level (levels' points are the events', in their order).
    let mut at = 0;
    for (i, p) in levels.points.iter().enumerate() {
        if p.1 > levels.points[at].1 {
            at = i;
        }
    }
    let (Some(m), Some(&(_, allocated, _, _))) = (mems.get(at), levels.points.get(at)) else {
        return format!("{place}: no memory event");
    };
    let during = read.ops.running(m.tid, m.ts);
    format!(
        "peak on {place}: {} allocated, {} into the trace{during}",
        crate::format::format_bytes(allocated as f64),
        crate::format::format_duration(t_ns(m.ts) as f64 / 1e9)
    )
}

/// The phase edges of every profiler step, by time: (time, edge, phase, step). Within a step,
/// the spans that name phases are taken as they are (labels, the optimizer's step and
/// zero_grad); autograd's backward functions make one backward from the first to the last;
/// and where no span is labelled forward, forward is the longest stretch before the backward
/// (or, in a step without one, the longest stretch) that no other phase or the data loader
/// covers.
fn phase_edges(spans: &[Span], t_ns: impl Fn(f64) -> u64) -> Vec<(u64, Edge, Phase, u64)> {
    let mut steps: Vec<(u64, f64, f64)> = spans
        .iter()
        .filter_map(|s| match s.what {
            Named::Step(n) => Some((n, s.begin, s.end)),
            _ => None,
        })
        .collect();
    steps.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out = Vec::new();
    for (k, &(step, begin, end)) in steps.iter().enumerate() {
        // A step ends where the next begins, at the latest (backward threads may run on).
        let end = steps.get(k + 1).map_or(end, |next| end.min(next.1));
        let inside = |s: &&Span| s.begin >= begin && s.begin < end;
        let mut phases: Vec<(Phase, f64, f64)> = Vec::new();
        let mut data: Vec<(f64, f64)> = Vec::new();
        let mut autograd: Option<(f64, f64)> = None;
        for s in spans.iter().filter(inside) {
            match &s.what {
                Named::Phase(p) => phases.push((p.clone(), s.begin, s.end.min(end))),
                Named::Autograd => {
                    let (b, e) = autograd.get_or_insert((s.begin, s.end));
                    *b = b.min(s.begin);
                    *e = e.max(s.end.min(end));
                }
                Named::Data => data.push((s.begin, s.end.min(end))),
                Named::Step(_) => {}
            }
        }
        let has =
            |phases: &[(Phase, f64, f64)], phase: &Phase| phases.iter().any(|(p, _, _)| p == phase);
        if !has(&phases, &Phase::Backward)
            && let Some((b, e)) = autograd
        {
            phases.push((Phase::Backward, b, e));
        }
        if !has(&phases, &Phase::Forward) && !has(&phases, &Phase::Eval) {
            let backward = phases
                .iter()
                .filter(|(p, _, _)| *p == Phase::Backward)
                .map(|(_, b, _)| *b)
                .fold(f64::INFINITY, f64::min);
            let limit = if backward.is_finite() { backward } else { end };
            let mut covered: Vec<(f64, f64)> = phases
                .iter()
                .map(|(_, b, e)| (*b, *e))
                .chain(data.iter().copied())
                .collect();
            covered.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut best: Option<(f64, f64)> = None;
            let mut from = begin;
            for (b, e) in covered.iter().copied().chain([(limit, limit)]) {
                let to = b.min(limit);
                if to > from && best.is_none_or(|(bb, be)| to - from > be - bb) {
                    best = Some((from, to));
                }
                from = from.max(e);
                if from >= limit {
                    break;
                }
            }
            if let Some((b, e)) = best {
                phases.push((Phase::Forward, b, e));
            }
        }
        for (phase, b, e) in phases {
            let (b, e) = (t_ns(b), t_ns(e));
            if e > b {
                out.push((b, Edge::Begin, phase.clone(), step));
                out.push((e, Edge::End, phase, step));
            }
        }
    }
    out.sort_by_key(|(t, edge, _, _)| (*t, *edge == Edge::Begin));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peak's sentence names the operators around the allocation on its own thread,
    /// outermost first, not one running on another thread at the same time.
    #[test]
    fn a_peak_names_the_operators_running_on_its_thread() {
        let json = br#"{"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "tid": 1, "ts": 100000, "dur": 50000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": 110000, "dur": 20000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "tid": 1, "ts": 111000, "dur": 1000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "tid": 2, "ts": 105000, "dur": 40000},
            {"ph": "X", "cat": "kernel", "name": "sgemm", "tid": 1, "ts": 111000, "dur": 30000},
            {"ph": "i", "name": "[memory]", "tid": 1, "ts": 100000, "args": {"Bytes": 1024, "Total Allocated": 1024, "Device Type": 1, "Device Id": 0}},
            {"ph": "i", "name": "[memory]", "tid": 1, "ts": 111500, "args": {"Bytes": 4194304, "Total Allocated": 4195328, "Device Type": 1, "Device Id": 0}},
            {"ph": "i", "name": "[memory]", "tid": 1, "ts": 140000, "args": {"Bytes": -4194304, "Total Allocated": 1024, "Device Type": 1, "Device Id": 0}},
            {"ph": "i", "name": "[memory]", "tid": 3, "ts": 120000, "args": {"Bytes": 64, "Total Allocated": 64, "Device Type": 0}}
        ]}"#;
        let recording = read_chrome_trace(json).unwrap();
        let notes: Vec<&str> = recording.notes.iter().map(|n| n.text.as_str()).collect();
        assert!(
            notes.contains(&"peak on cuda:0: 4.00 MiB allocated, 12 ms into the trace, while aten::linear › aten::mm › aten::empty ran"),
            "{notes:#?}"
        );
        assert!(
            notes.contains(&"peak on the CPU: 64 B allocated, 20 ms into the trace, in no operator's span on its thread"),
            "{notes:#?}"
        );
    }

    #[test]
    fn forward_is_the_longest_stretch_before_the_backward() {
        let span = |what, begin, end| Span { what, begin, end };
        // Data 0–10, forward (unlabelled) 10–50, zero_grad 50–55, backward 60–90, optimizer 90–99.
        let spans = vec![
            span(Named::Step(3), 0.0, 100.0),
            span(Named::Data, 1.0, 10.0),
            span(
                Named::Phase(Phase::Custom("zero_grad".to_owned())),
                50.0,
                55.0,
            ),
            span(Named::Autograd, 60.0, 70.0),
            span(Named::Autograd, 65.0, 90.0),
            span(Named::Phase(Phase::Optimizer), 90.0, 99.0),
        ];
        let edges = phase_edges(&spans, |ts| (ts * 1000.0) as u64);
        let of = |phase: Phase| -> Vec<(u64, Edge)> {
            edges
                .iter()
                .filter(|e| e.2 == phase)
                .map(|e| (e.0, e.1))
                .collect()
        };
        assert_eq!(
            of(Phase::Forward),
            [(10_000, Edge::Begin), (50_000, Edge::End)]
        );
        assert_eq!(
            of(Phase::Backward),
            [(60_000, Edge::Begin), (90_000, Edge::End)]
        );
        assert_eq!(
            of(Phase::Optimizer),
            [(90_000, Edge::Begin), (99_000, Edge::End)]
        );
        assert!(edges.iter().all(|e| e.3 == 3));
        // An end comes before a begin at the same instant.
        let at_90: Vec<Edge> = edges
            .iter()
            .filter(|e| e.0 == 90_000)
            .map(|e| e.1)
            .collect();
        assert_eq!(at_90, [Edge::End, Edge::Begin]);
    }
}
