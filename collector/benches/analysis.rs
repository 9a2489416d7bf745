//! Analysis time for a long run: 10 million samples and 100,000 steps (issue #4's budget:
//! ≤ 200 ms on one core). `cargo bench -p tidemark-collector --bench analysis`.

use collector::analysis::analyze;
use collector::recording::{
    AllocatorSample, Chunk, Column, Device, Edge, Header, Origin, Phase, PhaseEdge, Record,
    Recording, SeriesKey, SeriesKind,
};
use criterion::{Criterion, criterion_group, criterion_main};

const MIB: u64 = 1 << 20;

fn long_run() -> Recording {
    let steps = 100_000u64;
    let samples = 10_000_000u64;
    let step_ns = 100_000_000u64;
    let mut header = Header::new(0, "bench".to_owned(), vec!["python".to_owned()]);
    header.devices = vec![Device {
        index: 0,
        name: "GPU".to_owned(),
        uuid: "GPU-0".to_owned(),
        total_bytes: 80 << 30,
    }];
    let mut recording = Recording::new(header);
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
        for (k, phase) in [Phase::Forward, Phase::Backward, Phase::Optimizer]
            .into_iter()
            .enumerate()
        {
            for (e, edge) in [Edge::Begin, Edge::End].into_iter().enumerate() {
                let t_ns = step * step_ns + (2 * k as u64 + e as u64) * step_ns / 8;
                recording.push(Record::Phase(PhaseEdge {
                    t_ns,
                    edge,
                    phase: phase.clone(),
                    step: Some(step),
                    origin,
                    host_heap: None,
                    host_rss: None,
                }));
                let allocated = 4 << 30 | (step * 4096 + e as u64 * 512 * MIB);
                recording.push(Record::Allocator(AllocatorSample {
                    t_ns,
                    origin,
                    device: 0,
                    allocated,
                    reserved: allocated + (1 << 30),
                    peak: allocated + 256 * MIB,
                    ..AllocatorSample::default()
                }));
            }
        }
    }
    recording
}

fn analysis(c: &mut Criterion) {
    let recording = long_run();
    println!(
        "recording: {} samples, {} phase edges, {} allocator samples",
        recording.sample_count(),
        recording.phases.len(),
        recording.allocator.len()
    );
    let result = analyze(&recording);
    println!(
        "verdict: {:?}",
        result
            .findings
            .iter()
            .map(|f| f.title.as_str())
            .collect::<Vec<_>>()
    );
    let mut group = c.benchmark_group("analysis");
    group.sample_size(10);
    group.bench_function("10M samples, 100k steps", |b| {
        b.iter(|| analyze(&recording))
    });
    group.finish();
}

criterion_group!(benches, analysis);
criterion_main!(benches);
