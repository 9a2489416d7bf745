//! What the tests and benchmarks of both crates build their synthetic recordings from: a header
//! with one GPU, phase edges, allocator readings, and training steps with allocator numbers at
//! every edge; snapshots built in memory (`snapshots`); and (`inputs`) one input of every kind a path can hold, with what the library
//! makes of each. (The cross-crate end-to-end tests live in `tests/tests/`.)

use collector::recording::{
    AllocatorSample, Chunk, Column, Device, Edge, Header, Origin, Phase, PhaseEdge, Record,
    Recording, SeriesKey, SeriesKind,
};

#[cfg(not(target_arch = "wasm32"))] // Files: native only.
pub mod inputs;
pub mod snapshots;
pub mod traces;

/// 1 MiB.
pub const MIB: u64 = 1 << 20;
/// 1 GiB.
pub const GIB: u64 = 1 << 30;

/// A header for `command`, with one 80 GiB GPU (index 0, `GPU-0`).
pub fn header(command: &[&str]) -> Header {
    let mut header = Header::new(
        0,
        "test".to_owned(),
        command.iter().map(|s| (*s).to_owned()).collect(),
    );
    header.devices = vec![Device {
        index: 0,
        name: "GPU".to_owned(),
        uuid: "GPU-0".to_owned(),
        total_bytes: 80 * GIB,
    }];
    header
}

/// A phase edge from `origin` (without the probe's host numbers).
pub fn edge(t_ns: u64, edge: Edge, phase: Phase, step: Option<u64>, origin: Origin) -> PhaseEdge {
    PhaseEdge {
        t_ns,
        edge,
        phase,
        step,
        origin,
        host_heap: None,
        host_rss: None,
    }
}

/// An allocator reading of device 0 from `origin`; the other counters zero.
pub fn reading(
    t_ns: u64,
    origin: Origin,
    allocated: u64,
    reserved: u64,
    peak: u64,
) -> AllocatorSample {
    AllocatorSample {
        t_ns,
        origin,
        device: 0,
        allocated,
        reserved,
        peak,
        ..AllocatorSample::default()
    }
}

/// `steps` steps of one forward each from `origin`, `step_ns` apart and `busy_ns` long, every
/// edge carrying the process' host memory `rss(step)` as the probe reads it at its edges.
pub fn forward_steps(
    origin: Origin,
    steps: u64,
    step_ns: u64,
    busy_ns: u64,
    rss: impl Fn(u64) -> u64,
) -> Vec<Record> {
    let mut records = Vec::with_capacity(2 * steps as usize);
    for step in 0..steps {
        for (k, which) in [Edge::Begin, Edge::End].into_iter().enumerate() {
            let t_ns = step * step_ns + k as u64 * busy_ns;
            let mut e = edge(t_ns, which, Phase::Forward, Some(step), origin);
            e.host_rss = Some(rss(step));
            records.push(Record::Phase(e));
        }
    }
    records
}

/// `steps` steps of one forward each, 100 ms apart, on the 80 GiB GPU of [`header`], allocated
/// memory `base + step × per_step` at both edges (a leak as steady as can be).
pub fn gpu_leak(steps: u64, base: u64, per_step: u64) -> Recording {
    let mut recording = Recording::new(header(&["python", "train.py"]));
    let origin = Origin { pid: 1, rank: None };
    for step in 0..steps {
        for (k, which) in [Edge::Begin, Edge::End].into_iter().enumerate() {
            let t_ns = step * 100_000_000 + k as u64 * 50_000_000;
            let allocated = base + step * per_step;
            recording.push(Record::Phase(edge(
                t_ns,
                which,
                Phase::Forward,
                Some(step),
                origin,
            )));
            recording.push(Record::Allocator(reading(
                t_ns,
                origin,
                allocated,
                allocated + GIB,
                allocated,
            )));
        }
    }
    recording
}

/// Step `step` of a run whose steps last `step_ns`: forward, backward and optimizer, each edge
/// with an allocator reading. Allocated memory is 4 GiB plus 4 KiB per step (a slow leak) plus
/// 512 MiB inside each phase (the sawtooth); reserved is 1 GiB above, the peak 256 MiB above.
pub fn sawtooth_step(step: u64, step_ns: u64, origin: Origin) -> Vec<Record> {
    let mut records = Vec::with_capacity(12);
    for (k, phase) in [Phase::Forward, Phase::Backward, Phase::Optimizer]
        .into_iter()
        .enumerate()
    {
        for (e, which) in [Edge::Begin, Edge::End].into_iter().enumerate() {
            let t_ns = step * step_ns + (2 * k as u64 + e as u64) * step_ns / 8;
            let allocated = (4 << 30) + step * 4096 + e as u64 * 512 * MIB;
            records.push(Record::Phase(edge(
                t_ns,
                which,
                phase.clone(),
                Some(step),
                origin,
            )));
            records.push(Record::Allocator(reading(
                t_ns,
                origin,
                allocated,
                allocated + GIB,
                allocated + 256 * MIB,
            )));
        }
    }
    records
}

/// The long-run benchmark recording: 10 million device samples (a sawtooth with a slow leak) and
/// 100,000 steps of phases with allocator numbers, shared by the analysis and report benches.
pub fn long_run() -> Recording {
    let steps = 100_000u64;
    let samples = 10_000_000u64;
    let step_ns = 100_000_000u64;
    let mut recording = Recording::new(header(&["python"]));
    // Device memory at 10 samples per step, in chunks of 20: a sawtooth with a slow leak.
    let per_step = samples / steps;
    let chunk = 20u64;
    for start in (0..samples).step_by(chunk as usize) {
        let times: Vec<u64> = (start..start + chunk)
            .map(|i| i * step_ns / per_step)
            .collect();
        let values: Vec<u64> = (start..start + chunk)
            .map(|i| 8 << 30 | ((i % per_step) * 64 * MIB + i / per_step * 4096))
            .collect();
        recording.push(Record::Chunk(Chunk {
            times_ns: times,
            columns: vec![Column {
                series: SeriesKey::device(SeriesKind::DeviceUsed, 0),
                values,
                valid: None,
            }],
        }));
    }
    let origin = Origin {
        pid: 7,
        rank: Some(0),
    };
    for step in 0..steps {
        for record in sawtooth_step(step, step_ns, origin) {
            recording.push(record);
        }
    }
    recording
}

/// A step's edges: a forward, then a backward.
pub const FORWARD_BACKWARD: [(Phase, Edge); 4] = [
    (Phase::Forward, Edge::Begin),
    (Phase::Forward, Edge::End),
    (Phase::Backward, Edge::Begin),
    (Phase::Backward, Edge::End),
];

/// `steps` steps of a forward that keeps 2 MiB and a backward that allocates and frees 4 MiB of
/// gradients, on the host; resident memory only rises (`rss_per_step` MiB a step: at least the
/// 2 MiB kept, more where the heap leaves holes), and in backward (fresh pages for what the
/// forward kept). The probe read the C heap at edge `n` (counted from 1) of step `s` where
/// `heap_read(s, n)`; the collector sampled resident memory at every edge.
pub fn forward_keeps_on_the_host(
    steps: u64,
    rss_per_step: u64,
    heap_read: impl Fn(u64, u64) -> bool,
) -> Recording {
    let origin = Origin { pid: 7, rank: None };
    let mut recording = Recording::new(header(&["python", "train.py"]));
    let (mut times, mut rss_samples) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    for step in 0..steps {
        for (k, (phase, which)) in FORWARD_BACKWARD.into_iter().enumerate() {
            let t_ns = step * 100_000_000 + k as u64 * 20_000_000;
            let heap = 100 * MIB + step * 2 * MIB + if k >= 1 { 2 * MIB } else { 0 };
            let rss = 300 * MIB + step * rss_per_step * MIB + if k == 3 { 2 * MIB } else { 0 };
            let mut e = edge(t_ns, which, phase, Some(step), origin);
            n += 1;
            e.host_heap = heap_read(step, n).then_some(heap);
            e.host_rss = Some(rss);
            recording.push(Record::Phase(e));
            times.push(t_ns);
            rss_samples.push(rss);
        }
    }
    recording.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values: rss_samples,
            valid: None,
        }],
    }));
    recording
}
