//! What both memory views of a snapshot (its allocations and its segments) draw around their
//! data and how they move: zoom and pan over the steps, the byte axis, the device's capacity and
//! the steps and times at the view's ends.

use collector::format::format_bytes;
use collector::palette;
use collector::snapshot::Snapshot;
use collector::snapshot::timeline::DeviceTimeline;
use egui::{Rect, Shape, Stroke, pos2};

use crate::memtimeline::{color, when};

/// Zoom (scroll, pinch) and pan (drag) of a view of steps `0..end`; a double click shows them
/// all again. Returns the steps in view and keeps them in `range`.
pub(crate) fn zoom_pan(
    ui: &egui::Ui,
    response: &egui::Response,
    plot: Rect,
    end: f64,
    range: &mut Option<(f64, f64)>,
) -> (f64, f64) {
    let (mut x0, mut x1) = range.unwrap_or((0.0, end));
    let per_px = (x1 - x0) / f64::from(plot.width().max(1.0));
    if response.double_clicked() {
        (x0, x1) = (0.0, end);
    } else {
        if response.dragged() {
            let dx = f64::from(response.drag_delta().x) * per_px;
            let dx = dx.clamp(x1 - end, x0);
            x0 -= dx;
            x1 -= dx;
        }
        if response.hovered() {
            let (scroll, zoom) = ui.input(|i| (i.smooth_scroll_delta.y, i.zoom_delta()));
            let factor = f64::from(zoom) * (f64::from(scroll) * 0.003).exp();
            if (factor - 1.0).abs() > 1e-6
                && let Some(p) = response.hover_pos()
            {
                let at = x0 + f64::from(p.x - plot.left()) * per_px;
                let span = ((x1 - x0) / factor).clamp(8.0_f64.min(end), end);
                let left = (at - x0) / (x1 - x0);
                x0 = (at - span * left).clamp(0.0, end - span);
                x1 = x0 + span;
            }
        }
    }
    *range = ((x0, x1) != (0.0, end)).then_some((x0, x1));
    (x0, x1)
}

/// The device's memory (when an out-of-memory entry told it) as a dashed line, and the steps
/// and times at both ends of the view under the plot: what both views draw around their data.
#[allow(clippy::too_many_arguments)]
pub(crate) fn capacity_and_ends(
    ui: &egui::Ui,
    painter: &egui::Painter,
    plot: Rect,
    (sx, sy): (&dyn Fn(f64) -> f32, &dyn Fn(f64) -> f32),
    snapshot: &Snapshot,
    device: &DeviceTimeline,
    (x0, x1): (f64, f64),
    start_us: i64,
) {
    if let Some(cap) = device.capacity {
        let y = sy(cap as f64);
        painter.add(Shape::dashed_line(
            &[pos2(plot.left(), y), pos2(plot.right(), y)],
            Stroke::new(1.5, color(palette::BASELINE)),
            6.0,
            4.0,
        ));
        painter.text(
            pos2(plot.left() + 4.0, y - 2.0),
            egui::Align2::LEFT_BOTTOM,
            format!("device memory {}", format_bytes(cap as f64)),
            egui::FontId::proportional(11.0),
            ui.visuals().text_color(),
        );
    }
    for (x, align) in [(x0, egui::Align2::LEFT_TOP), (x1, egui::Align2::RIGHT_TOP)] {
        painter.text(
            pos2(sx(x), plot.bottom() + 3.0),
            align,
            when(snapshot, device, x as u32, start_us),
            egui::FontId::proportional(11.0),
            ui.visuals().weak_text_color(),
        );
    }
}

/// The y axis: a few round byte counts, with their grid lines.
pub(crate) fn axes(
    ui: &egui::Ui,
    painter: &egui::Painter,
    plot: Rect,
    y_max: f64,
    sy: &dyn Fn(f64) -> f32,
) {
    let raw = y_max / 5.0;
    let unit = 1024f64.powf((raw.max(1.0).ln() / 1024f64.ln()).floor());
    let step = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
        .iter()
        .map(|m| m * unit)
        .find(|s| *s >= raw)
        .unwrap_or(unit * 1024.0);
    let grid = ui.visuals().widgets.noninteractive.bg_stroke;
    let mut y = 0.0;
    while y <= y_max {
        let py = sy(y);
        painter.line_segment([pos2(plot.left(), py), pos2(plot.right(), py)], grid);
        painter.text(
            pos2(plot.left() - 4.0, py),
            egui::Align2::RIGHT_CENTER,
            format_bytes(y),
            egui::FontId::proportional(11.0),
            ui.visuals().weak_text_color(),
        );
        y += step;
    }
}
