//! Analysis time for a long run: 10 million samples and 100,000 steps (issue #4's budget:
//! ≤ 200 ms on one core). `cargo bench -p tidemark-collector --bench analysis`.

use collector::analysis::analyze;
use collector::recording::{Chunk, Column, Origin, Record, Recording, SeriesKey, SeriesKind};
use criterion::{Criterion, criterion_group, criterion_main};

use tidemark_tests::MIB;

fn long_run() -> Recording {
    let steps = 100_000u64;
    let samples = 10_000_000u64;
    let step_ns = 100_000_000u64;
    let mut recording = Recording::new(tidemark_tests::header(&["python"]));
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
        for record in tidemark_tests::sawtooth_step(step, step_ns, origin) {
            recording.push(record);
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
