//! A week on eight GPUs (issue #19): every GPU's used and reserved memory at 20 Hz, host memory
//! at the same instants, and 10 phase edges a second with allocator numbers at each: 17 series,
//! 200 million samples at the default size. Measures the time to the first drawn frame (budget
//! ≤ 4 s), the bytes held per sample (≤ 12) and the CPU per frame while panning (≤ 8 ms),
//! natively. `cargo bench -p tidemark-app --bench week` (`WEEK_BENCH_SAMPLES`: the samples, for
//! a smaller run; `WEEK_BENCH_READ_ONLY`, `WEEK_BENCH_ANALYSIS_ONLY`: only that part, to profile;
//! `WEEK_BENCH_PAN_ROUNDS`: the panning that many times, to profile it).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use collector::recording::{Chunk, Column, Origin, Record, SeriesKey, SeriesKind, Writer};
use tidemark_tests::MIB;

#[path = "../../collector/benches/support/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[path = "support/frame.rs"]
mod frame;
use frame::{frame, open_and_draw};

const GPUS: u32 = 8;
/// Used and reserved per GPU, and host memory.
const SERIES: u64 = 2 * GPUS as u64 + 1;
const SAMPLE_NS: u64 = 50_000_000;
/// A step (forward, backward, optimizer: six edges) every 0.6 s: 10 edges a second.
const STEP_NS: u64 = 600_000_000;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("week: bench");
        return;
    }
    let samples: u64 = std::env::var("WEEK_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000_000);
    let instants = samples / SERIES;
    let start = Instant::now();
    let bytes = recording_bytes(instants);
    println!(
        "recording: {:.0} MB, {} samples ({instants} instants × {SERIES} series, {:.1} days at 20 Hz), {} steps; written in {:.0} s",
        bytes.len() as f64 / 1e6,
        instants * SERIES,
        (instants * SAMPLE_NS) as f64 / 86_400e9,
        instants * SAMPLE_NS / STEP_NS,
        start.elapsed().as_secs_f64()
    );
    if std::env::var("WEEK_BENCH_READ_ONLY").is_ok() {
        // For a profile of the read: three reads, nothing else.
        for _ in 0..3 {
            let start = Instant::now();
            let read = collector::recording::read_recording(&bytes);
            println!("read: {:.2} s", start.elapsed().as_secs_f64());
            drop(std::hint::black_box(read));
        }
        return;
    }
    if std::env::var("WEEK_BENCH_ANALYSIS_ONLY").is_ok() {
        // For a profile of the analysis and the curves: one read, then each three times.
        let Ok(recording) = collector::recording::read_recording(&bytes) else {
            unreachable!("the bench's own recording reads")
        };
        let samples = (instants * SERIES) as f64;
        for _ in 0..3 {
            let before = LIVE.load(Ordering::Relaxed);
            PEAK.store(before, Ordering::Relaxed);
            let start = Instant::now();
            let analysis = collector::analysis::analyze(&recording);
            let took = start.elapsed();
            let (held, peak) = (
                LIVE.load(Ordering::Relaxed) - before,
                PEAK.load(Ordering::Relaxed) - before,
            );
            drop(std::hint::black_box(analysis));
            let before = LIVE.load(Ordering::Relaxed);
            PEAK.store(before, Ordering::Relaxed);
            let start = Instant::now();
            let traces = tidemark_app::view::RunView::traces(&recording);
            println!(
                "analysis: {:.2} s, {:.1} B per sample held, peak {:.1}; curves: {:.2} s, {:.1} B held, peak {:.1}",
                took.as_secs_f64(),
                held as f64 / samples,
                peak as f64 / samples,
                start.elapsed().as_secs_f64(),
                (LIVE.load(Ordering::Relaxed) - before) as f64 / samples,
                (PEAK.load(Ordering::Relaxed) - before) as f64 / samples,
            );
            drop(std::hint::black_box(traces));
        }
        return;
    }
    let samples = (instants * SERIES) as f64;
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let start = Instant::now();
    let recording = collector::recording::read_recording(&bytes);
    let read = start.elapsed();
    let recording_held = LIVE.load(Ordering::Relaxed) - before;
    drop(recording);
    let start = Instant::now();
    let (mut app, ctx, opened, first) = open_and_draw("week.msgpack", &bytes);
    let total = start.elapsed();
    let held = LIVE.load(Ordering::Relaxed) - before;
    let peak = PEAK.load(Ordering::Relaxed) - before;
    println!(
        "open: read + analysis + views {:.2} s (the read alone {:.2} s), first frame {:.1} ms, total {:.2} s (budget 4 s)",
        opened.as_secs_f64(),
        read.as_secs_f64(),
        first.as_secs_f64() * 1e3,
        total.as_secs_f64()
    );
    println!(
        "memory: {:.1} bytes held per sample (budget 12; the recording alone {:.1}), peak while opening {:.1} (the file's own bytes not counted: {:.2} per sample)",
        held as f64 / samples,
        recording_held as f64 / samples,
        peak as f64 / samples,
        bytes.len() as f64 / samples
    );
    let duration_s = (instants * SAMPLE_NS) as f64 / 1e9;
    let mut times: Vec<Duration> = Vec::new();
    let mut by_zoom = Vec::new();
    let rounds: usize = std::env::var("WEEK_BENCH_PAN_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let views = [(1.0, 20), (0.1, 40), (0.001, 40)];
    for (zoom, frames) in views.into_iter().cycle().take(views.len() * rounds) {
        let width = duration_s * zoom;
        let mut these = Vec::new();
        for f in 0..frames {
            let a = (duration_s - width) * f as f64 / frames as f64;
            if let Some(open) = app.current_run_mut() {
                open.timeline.request_x = Some((a, a + width));
            }
            these.push(frame(&ctx, &mut app));
        }
        times.extend(&these);
        these.sort();
        by_zoom.push(format!(
            "{:.0} % of the week: median {:.2} ms, best {:.2}, max {:.2}",
            zoom * 100.0,
            these[these.len() / 2].as_secs_f64() * 1e3,
            these[0].as_secs_f64() * 1e3,
            these.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
        ));
    }
    times.sort();
    println!(
        "panning: {} frames, median {:.2} ms, p95 {:.2} ms, max {:.2} ms per frame (budget 8 ms)",
        times.len(),
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() * 95 / 100].as_secs_f64() * 1e3,
        times.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
    println!("  by view: {}", by_zoom.join("; "));
}

/// The recording as the collector streams it: one chunk a second of 20 instants × 17 series;
/// every GPU a sawtooth over the step with noise, GPU 3 leaking slowly.
fn recording_bytes(instants: u64) -> Vec<u8> {
    let mut header = tidemark_tests::header(&["torchrun", "train.py"]);
    header.device_interval_ns = Some(SAMPLE_NS);
    let Ok(mut writer) = Writer::new(Vec::with_capacity(256 << 20), &header) else {
        unreachable!("writing to memory cannot fail")
    };
    let origin = Origin { pid: 7, rank: None };
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_step = 0u64;
    let steps = instants * SAMPLE_NS / STEP_NS;
    for start in (0..instants).step_by(20) {
        let range = start..(start + 20).min(instants);
        let times: Vec<u64> = range.clone().map(|i| i * SAMPLE_NS).collect();
        let mut columns = Vec::with_capacity(SERIES as usize);
        for device in 0..GPUS {
            let leak = if device == 3 { 64 * 1024 } else { 0 };
            let used: Vec<u64> = range
                .clone()
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let t = i * SAMPLE_NS;
                    (20 << 30)
                        + (t % STEP_NS) / SAMPLE_NS * 512 * MIB
                        + t / STEP_NS * leak
                        + (x % 4) * 2 * MIB
                })
                .collect();
            // NVML's reserved: what the driver and firmware keep, all but constant.
            let reserved = range
                .clone()
                .map(|i| 512 * MIB + (i / 72_000 % 2) * 2 * MIB)
                .collect();
            columns.push(Column {
                series: SeriesKey::device(SeriesKind::DeviceUsed, device),
                values: used,
                valid: None,
            });
            columns.push(Column {
                series: SeriesKey::device(SeriesKind::DeviceReserved, device),
                values: reserved,
                valid: None,
            });
        }
        columns.push(Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values: range.clone().map(|i| (40 << 30) + (i % 13) * MIB).collect(),
            valid: None,
        });
        let chunk = Chunk {
            times_ns: times,
            columns,
        };
        if writer.write_chunk(&chunk).is_err() {
            unreachable!("writing to memory cannot fail");
        }
        let chunk_end = range.end * SAMPLE_NS;
        while next_step < steps && next_step * STEP_NS < chunk_end {
            for record in tidemark_tests::sawtooth_step(next_step, STEP_NS, origin) {
                let record = match record {
                    Record::Allocator(mut a) => {
                        a.device = 3;
                        Record::Allocator(a)
                    }
                    other => other,
                };
                if writer.write(&record).is_err() {
                    unreachable!("writing to memory cannot fail");
                }
            }
            next_step += 1;
        }
    }
    writer.finish(instants * SAMPLE_NS).unwrap_or_default()
}
