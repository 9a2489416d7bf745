//! One frame of the app as the benches time it: egui's layout of every panel and plot, then
//! tessellation into triangles (only the GPU upload is left out), at 1600 × 900.

use std::time::{Duration, Instant};

use tidemark_app::{Run, TidemarkApp};

/// Runs one frame and says how long it took.
#[allow(dead_code)] // not every bench draws frames without input
pub fn frame(ctx: &egui::Context, app: &mut TidemarkApp) -> Duration {
    frame_with(ctx, app, Vec::new())
}

/// Runs one frame with these input events (a pointer moved, a click) and says how long it took.
#[allow(dead_code)] // not every bench sends input
pub fn frame_with(
    ctx: &egui::Context,
    app: &mut TidemarkApp,
    events: Vec<egui::Event>,
) -> Duration {
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1600.0, 900.0),
        )),
        events,
        ..Default::default()
    };
    let start = Instant::now();
    let output = ctx.run_ui(input, |ui| app.show(ui));
    let primitives = ctx.tessellate(output.shapes, output.pixels_per_point);
    std::hint::black_box(primitives);
    start.elapsed()
}

/// Opens `bytes` as the viewer does (read, analysis, views) and draws the first frame: the app,
/// its context, the time to open and the first frame's. Exits with the error if it cannot open.
#[allow(dead_code)] // not every bench opens a file this way
pub fn open_and_draw(name: &str, bytes: &[u8]) -> (TidemarkApp, egui::Context, Duration, Duration) {
    let start = Instant::now();
    let run = match Run::from_bytes(name, bytes) {
        Ok(run) => run,
        Err(err) => {
            eprintln!("{err}");
            std::process::exit(1);
        }
    };
    let opened = start.elapsed();
    let mut app = TidemarkApp::empty();
    let ctx = egui::Context::default();
    app.add_run(name, run);
    let first = frame(&ctx, &mut app);
    (app, ctx, opened, first)
}
