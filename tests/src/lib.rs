//! What the tests and benchmarks of both crates build their synthetic recordings from: a header
//! with one GPU, phase edges, allocator readings, and training steps with allocator numbers at
//! every edge. (The cross-crate end-to-end tests live in `tests/tests/`.)

use collector::recording::{
    AllocatorSample, Device, Edge, Header, Origin, Phase, PhaseEdge, Record,
};

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
