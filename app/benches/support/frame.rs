//! One frame of the app as the benches time it: egui's layout of every panel and plot, then
//! tessellation into triangles (only the GPU upload is left out), at 1600 × 900.

use std::time::{Duration, Instant};

use tidemark_app::TidemarkApp;

/// Runs one frame and says how long it took.
pub fn frame(ctx: &egui::Context, app: &mut TidemarkApp) -> Duration {
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1600.0, 900.0),
        )),
        ..Default::default()
    };
    let start = Instant::now();
    let output = ctx.run_ui(input, |ui| app.show(ui));
    let primitives = ctx.tessellate(output.shapes, output.pixels_per_point);
    std::hint::black_box(primitives);
    start.elapsed()
}
