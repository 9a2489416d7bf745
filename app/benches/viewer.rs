//! The viewer on a 10-million-sample recording: time to open it to the first drawn frame, CPU
//! per frame while panning across it, and memory held per sample. Budgets (issue #5): ≤ 1 s,
//! ≤ 8 ms, ≤ 32 bytes. `cargo bench -p tidemark-app --bench viewer`.
//!
//! A frame here is what the app does on the CPU for one frame: egui's layout of every panel and
//! plot (with the levels of detail), then tessellation into triangles; only the GPU upload is
//! left out. A live-bytes counter around the allocator measures memory.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tidemark_app::{Run, TidemarkApp};

#[path = "../../collector/benches/support/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[path = "support/synthetic.rs"]
mod synthetic;

#[path = "support/frame.rs"]
mod frame;
use frame::frame;

const SAMPLES_PER_SERIES: u64 = 5_000_000;
const STEPS: u64 = 50_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("viewer: bench");
        return;
    }
    let bytes = synthetic::recording_bytes(SAMPLES_PER_SERIES, STEPS);
    println!(
        "recording: {:.1} MB, {} samples, {} steps",
        bytes.len() as f64 / 1e6,
        2 * SAMPLES_PER_SERIES,
        STEPS
    );

    for round in 0..3 {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let start = Instant::now();
        let read = collector::recording::read_recording(&bytes);
        let read_time = start.elapsed();
        let recording_held = LIVE.load(Ordering::Relaxed) - before;
        drop(std::hint::black_box(read));
        let start = Instant::now();
        let run = Run::from_bytes("bench.msgpack", &bytes);
        let opened = start.elapsed();
        let mut app = TidemarkApp::empty();
        let ctx = egui::Context::default();
        match run {
            Ok(run) => app.add_run("bench.msgpack", run),
            Err(err) => {
                eprintln!("{err}");
                std::process::exit(1);
            }
        }
        let first_frame = frame(&ctx, &mut app);
        let total = start.elapsed();
        let held = LIVE.load(Ordering::Relaxed) - before;
        let peak = PEAK.load(Ordering::Relaxed) - before;
        let samples = (2 * SAMPLES_PER_SERIES) as f64;
        println!(
            "open {round}: read + analysis + views {:.0} ms (the read alone {:.0} ms), first frame {:.1} ms, total {:.0} ms (budget 1000 ms)",
            opened.as_secs_f64() * 1e3,
            read_time.as_secs_f64() * 1e3,
            first_frame.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        );
        println!(
            "memory {round}: {:.1} bytes held per sample (budget 32; the recording alone {:.1}), peak while opening {:.1} bytes per sample (the file's own bytes not counted: {:.2} per sample)",
            held as f64 / samples,
            recording_held as f64 / samples,
            peak as f64 / samples,
            bytes.len() as f64 / samples
        );

        // Panning: the view moved by a fraction of its width every frame, at three zoom levels.
        let duration_s = (SAMPLES_PER_SERIES * 20_000_000) as f64 / 1e9;
        let mut times = Vec::new();
        if let (Ok(what), Some(open)) = (std::env::var("VIEWER_BENCH_OFF"), app.current_run_mut()) {
            match what.as_str() {
                "bands" => open.timeline.phase_bands = false,
                "curves" => open.timeline.shown = [false; tidemark_app::view::TraceKind::ALL.len()],
                _ => {}
            }
        }
        for (zoom, frames) in [(1.0, 30), (0.1, 60), (0.001, 60)] {
            let width = duration_s * zoom;
            let mut these = Vec::new();
            for f in 0..frames {
                let a = (duration_s - width) * f as f64 / frames as f64;
                if let Some(open) = app.current_run_mut() {
                    open.timeline.request_x = Some((a, a + width));
                }
                these.push(frame(&ctx, &mut app));
            }
            these.sort();
            println!(
                "  view {:.1} % of the run wide: median {:.2} ms, p95 {:.2} ms",
                zoom * 100.0,
                percentile(&these, 0.5).as_secs_f64() * 1e3,
                percentile(&these, 0.95).as_secs_f64() * 1e3
            );
            times.extend(these);
        }
        times.sort();
        println!(
            "panning {round}: {} frames, median {:.2} ms, p95 {:.2} ms, max {:.2} ms per frame (budget 8 ms)",
            times.len(),
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.95).as_secs_f64() * 1e3,
            times.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
        );
    }
}
