//! Analysis time for a long run: 10 million samples and 100,000 steps (issue #4's budget:
//! ≤ 200 ms on one core). `cargo bench -p tidemark-collector --bench analysis`.

use collector::analysis::analyze;
use criterion::{Criterion, criterion_group, criterion_main};

fn analysis(c: &mut Criterion) {
    let recording = tidemark_tests::long_run();
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
