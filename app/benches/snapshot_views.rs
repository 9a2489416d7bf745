//! The snapshot views on the 8,000,000-entry generated snapshot (~2.7 M allocations, built in
//! memory as `cases.py big` writes them): the *Memory timeline* tab's allocations and segments,
//! the first frame (the layout and the picture made) and then full-view frames (budget: ≤ 8 ms
//! median natively), frames with the pointer moving over the plot (each answers a hover), and
//! frames while panning (a new picture each). `cargo bench -p tidemark-app --bench
//! snapshot_views`; `SNAPSHOT_VIEWS_ENTRIES=N` for another size.
//!
//! A frame is what the app does on the CPU: egui's layout of every panel, then tessellation
//! (only the GPU upload is left out), at 1600 × 900.

use std::time::{Duration, Instant};

use tidemark_app::{Run, Tab, TidemarkApp};

#[path = "support/frame.rs"]
mod support;

/// One frame with these input events; how long it took.
fn frame(ctx: &egui::Context, app: &mut TidemarkApp, events: Vec<egui::Event>) -> Duration {
    support::frame_with(ctx, app, events)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and 95th percentile of `times`, in ms.
fn summary(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let at = |p: f64| ms(times[((times.len() - 1) as f64 * p).round() as usize]);
    (at(0.5), at(0.95))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("snapshot_views: bench");
        return;
    }
    let entries = std::env::var("SNAPSHOT_VIEWS_ENTRIES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8_000_000);
    let start = Instant::now();
    let snapshot = tidemark_tests::snapshots::big_snapshot(entries);
    println!(
        "snapshot: {} trace entries, built in {:.1} s",
        snapshot.entries.len(),
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let run = Run::from_opened(collector::open::Opened::Snapshot(Box::new(snapshot)));
    println!("judged in {:.1} s", start.elapsed().as_secs_f64());
    let mut app = TidemarkApp::empty();
    app.add_run("big.pickle", run);
    app.tab = Tab::Memory;
    let ctx = egui::Context::default();
    for (view, segments) in [("allocations", false), ("segments", true)] {
        if let Some(open) = app.current_run_mut() {
            open.memory.segments = segments;
            open.memory.range = None;
        }
        let first = frame(&ctx, &mut app, Vec::new());
        let (median, p95) = summary((0..40).map(|_| frame(&ctx, &mut app, Vec::new())).collect());
        println!(
            "{view}: first frame {:.0} ms (layout and picture); whole trace in view: median {median:.2} ms, p95 {p95:.2} ms (budget: median ≤ 8 ms)",
            ms(first)
        );
        // The pointer moving across the plot: a hover answered and a tooltip laid out a frame.
        let hovered: Vec<Duration> = (0..60)
            .map(|i| {
                let pos = egui::pos2(120.0 + 23.0 * i as f32, 250.0 + 9.0 * (i % 50) as f32);
                frame(&ctx, &mut app, vec![egui::Event::PointerMoved(pos)])
            })
            .collect();
        let (median, p95) = summary(hovered);
        println!("{view}: pointer moving over it: median {median:.2} ms, p95 {p95:.2} ms a frame");
        // Panning a tenth of the trace wide: a new picture every frame.
        let end = entries as f64;
        let panned: Vec<Duration> = (0..20)
            .map(|i| {
                if let Some(open) = app.current_run_mut() {
                    let a = end * 0.9 * f64::from(i) / 20.0;
                    open.memory.range = Some((a, a + end * 0.1));
                }
                frame(&ctx, &mut app, Vec::new())
            })
            .collect();
        let (median, p95) = summary(panned);
        println!(
            "{view}: panning a tenth of the trace: median {median:.1} ms, p95 {p95:.1} ms a frame (a new picture each)"
        );
    }
}
