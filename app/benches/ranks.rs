//! Eight ranks opened together, each at the rate of the 10 M-sample benchmark (issue #17's
//! budget): the time to the first drawn frame (≤ 2 s) and the CPU per frame with small multiples
//! on (≤ 8 ms), natively. `cargo bench -p tidemark-app --bench ranks` (`RANKS_BENCH_SAMPLES`: the
//! instants per series, default that benchmark's 5,000,000).

use std::time::{Duration, Instant};

#[path = "support/synthetic.rs"]
mod synthetic;

#[path = "support/frame.rs"]
mod frame;
use frame::{frame, open_and_draw};

const RANKS: u32 = 8;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("ranks: bench");
        return;
    }
    let samples: u64 = std::env::var("RANKS_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    let steps = samples / 100;
    let bytes = synthetic::recording_bytes_ranks(samples, steps, RANKS);
    println!(
        "recording: {RANKS} ranks, {:.0} MB, {} samples ({} instants × {} series), {steps} steps per rank",
        bytes.len() as f64 / 1e6,
        samples * u64::from(RANKS + 1),
        samples,
        RANKS + 1
    );
    let start = Instant::now();
    let recording = collector::recording::read_recording(&bytes);
    let read = start.elapsed();
    let start = Instant::now();
    let findings = recording
        .as_ref()
        .map_or(0, |r| collector::analysis::analyze(r).findings.len());
    let analyzed = start.elapsed();
    println!(
        "parts: the read alone {:.0} ms, the analysis alone {:.0} ms ({} findings)",
        read.as_secs_f64() * 1e3,
        analyzed.as_secs_f64() * 1e3,
        findings
    );
    drop(recording);
    let start = Instant::now();
    let (mut app, ctx, opened, first) = open_and_draw("ranks.msgpack", &bytes);
    println!(
        "open: read + analysis + views {:.0} ms, first frame {:.1} ms, total {:.0} ms (budget 2000 ms)",
        opened.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        start.elapsed().as_secs_f64() * 1e3
    );
    if let Some(open) = app.current_run_mut() {
        open.timeline.per_rank = true;
    }
    let mut times: Vec<Duration> = (0..60).map(|_| frame(&ctx, &mut app)).collect();
    times.sort();
    println!(
        "small multiples ({RANKS} mini-timelines): median {:.2} ms, p95 {:.2} ms per frame (budget 8 ms)",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() * 95 / 100].as_secs_f64() * 1e3
    );
}
