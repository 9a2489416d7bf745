//! What the timeline draws inside its plot besides the curves: the categories stacked, the
//! verdict's marks, the phase bands, the step ticks, the events, another run's curve overlaid,
//! and the plot's extent.

use collector::recording::{Phase, Recording};
use egui::Color32;
use egui_plot::{
    Line, LineStyle, MarkerShape, PlotPoint, PlotPoints, PlotUi, Points, Polygon, VLine,
};

use super::{Overlay, TimelineState, XAxis, XMap};
use crate::style::phase_color;
use crate::view::{EventKind, RunView};

/// The categories of the selected device (else the first one with any, the host last), stacked
/// from the bottom: parameters, + gradients, + optimizer state, each held until the next step's
/// start; for the host also the C heap's total, whose distance to the stack is the rest.
pub(super) fn categories(
    pui: &mut PlotUi<'_>,
    view: &RunView,
    state: &TimelineState,
    map: &XMap<'_>,
    width: usize,
) {
    let chosen = match state.device {
        Some(d) => view.categories.iter().find(|c| c.device == Some(d)),
        None => view
            .categories
            .iter()
            .find(|c| c.device.is_some())
            .or_else(|| view.categories.first()),
    };
    let Some(stats) = chosen else { return };
    let points = &stats.points;
    if points.is_empty() {
        return;
    }
    // At most one step per pixel column.
    let stride = points.len().div_ceil(width.max(1)).max(1);
    let end = map.end_ns();
    let stack = |level: usize, c: &collector::recording::Categories| -> f64 {
        let mut v = c.parameters as f64;
        if level >= 1 {
            v += c.gradients as f64;
        }
        if level >= 2 {
            v += c.optimizer_total() as f64;
        }
        v
    };
    let steps = |value: &dyn Fn(&collector::recording::Categories) -> Option<f64>| {
        let mut out = Vec::with_capacity(2 * points.len() / stride + 2);
        let mut i = 0;
        while i < points.len() {
            let next = (i + stride).min(points.len());
            let until = points.get(next).map_or(end, |p| p.t_ns);
            if let Some(v) = value(&points[i]) {
                out.push(PlotPoint::new(map.x(points[i].t_ns), v));
                out.push(PlotPoint::new(map.x(until), v));
            }
            i = next;
        }
        out
    };
    let names = ["parameters", "+ gradients", "+ optimizer state"];
    for level in (0..3).rev() {
        pui.line(
            Line::new(
                names[level],
                PlotPoints::Owned(steps(&|c| Some(stack(level, c)))),
            )
            .color(crate::style::category_color(level, 255))
            .fill(0.0)
            .fill_alpha(0.35)
            .width(1.0)
            .allow_band(false),
        );
    }
    if stats.device.is_none() {
        pui.line(
            Line::new(
                "C heap in use (at step starts)",
                PlotPoints::Owned(steps(&|c| c.total.map(|t| t as f64))),
            )
            .color(crate::style::category_color(3, 255))
            .style(LineStyle::dashed_loose())
            .width(1.0)
            .allow_band(false),
        );
    }
}

/// The rightmost x and the highest value drawn, for the plot's automatic bounds.
pub(super) fn extent(
    recording: &Recording,
    view: &RunView,
    state: &TimelineState,
    map: &XMap<'_>,
) -> (f64, f64) {
    let mut y_max: f64 = 1.0;
    for trace in view.traces.iter().filter(|t| state.is_shown(t.kind)) {
        let data = trace.data(recording);
        if let Some((_, max)) = data.levels.min_max(data.values, 0, data.values.len()) {
            y_max = y_max.max(max as f64);
        }
    }
    let mut x_end = map.x(map.end_ns()).max(1e-3);
    if let Some(o) = view.verdict.projected.filter(|_| state.verdict) {
        x_end = x_end.max(map.x_step(o.step, o.at_ns));
        y_max = y_max.max(o.capacity);
    }
    (x_end, y_max)
}

/// Phase bands for the visible range, from `y0` to `y1`: one band per run of occurrences of the
/// same phase when they are a few pixels wide, else the phase at the middle of each pixel column,
/// merged. Drawn as filled rectangles, which (unlike spans) lay out no text.
/// Bands of the phase the verdict names stand out; the others step back.
/// A phase band's opacity: the phase the verdict blames (`blamed` `Some(true)`) stands out, the
/// others (`Some(false)`; `None` where the verdict blames none) stay readable behind the curves.
/// The phases' light tints need more of it on the dark theme, where at the light theme's
/// opacity they were ~5 % from the background.
pub(super) fn band_alpha(blamed: Option<bool>, dark: bool) -> u8 {
    match (blamed, dark) {
        (Some(true), false) => 90,
        (Some(true), true) => 120,
        (Some(false), false) => 22,
        (Some(false), true) => 48,
        (None, false) => 45,
        (None, true) => 70,
    }
}

/// The verdict drawn: the step baseline as dots, its trend as a line, the capacity it heads for
/// and, when that comes soon, the trend extended to it with the projected step marked.
pub(super) fn verdict(pui: &mut PlotUi<'_>, view: &RunView, map: &XMap<'_>, dark: bool) {
    let v = &view.verdict;
    let ink = if dark {
        Color32::from_gray(0xf0)
    } else {
        Color32::from_gray(0x22)
    };
    if !v.baseline.is_empty() {
        let points: Vec<[f64; 2]> = v.baseline.iter().map(|&(t, b)| [map.x(t), b]).collect();
        pui.points(
            Points::new("step baseline", points)
                .color(ink)
                .radius(2.5)
                .shape(MarkerShape::Circle)
                .filled(true),
        );
    }
    if let Some([(ta, a), (tb, b)]) = v.trend {
        pui.line(
            Line::new("trend after warm-up", vec![[map.x(ta), a], [map.x(tb), b]])
                .color(ink)
                .width(2.0),
        );
    }
    if let Some(o) = v.projected {
        let from = [map.x_step(o.from_step, o.from.0), o.from.1];
        let at = [map.x_step(o.step, o.at_ns), o.capacity];
        pui.line(
            Line::new("projected: the trend reaches the capacity", vec![from, at])
                .color(ink)
                .style(LineStyle::dashed_loose())
                .width(2.0),
        );
        pui.points(
            Points::new(
                format!("projected out of memory at step {}", o.step),
                vec![at],
            )
            .color(crate::style::OOM)
            .radius(7.0)
            .shape(MarkerShape::Cross),
        );
    }
    // One shape per suspect; a halo in the ink keeps them readable on either theme.
    const SHAPES: [MarkerShape; 5] = [
        MarkerShape::Up,
        MarkerShape::Diamond,
        MarkerShape::Down,
        MarkerShape::Square,
        MarkerShape::Asterisk,
    ];
    for (i, s) in v.suspects.iter().enumerate() {
        let points: Vec<[f64; 2]> = s.points.iter().map(|&(t, b)| [map.x(t), b]).collect();
        let shape = SHAPES[i % SHAPES.len()];
        // The halo has no name: the legend shows the suspect's own colour.
        pui.points(
            Points::new("", points.clone())
                .color(ink)
                .radius(6.5)
                .shape(shape)
                .filled(true),
        );
        pui.points(
            Points::new(s.label.clone(), points)
                .color(crate::style::SUSPECT)
                .radius(5.0)
                .shape(shape)
                .filled(true),
        );
    }
    if let Some(capacity) = v.capacity {
        pui.hline(
            egui_plot::HLine::new("device capacity (the trend reaches it)", capacity)
                .color(crate::style::OOM)
                .style(LineStyle::dashed_dense())
                .width(1.5),
        );
    }
}

/// The legend's name for the steps whose phases the probe did not observe.
pub(crate) const UNOBSERVED: &str = "steps not observed (a sample of short steps is)";

pub(super) fn phase_bands(
    pui: &mut PlotUi<'_>,
    view: &RunView,
    map: &XMap<'_>,
    (t0, t1): (u64, u64),
    (y0, y1): (f64, f64),
    width: usize,
    dark: bool,
) {
    // Columns of 4 pixels: narrower bands cannot be told apart anyway.
    for (from, to) in collector::plot::spans_in(&view.unobserved, t0, t1, width / 4) {
        let (xa, xb) = (map.x(from), map.x(to));
        pui.polygon(
            Polygon::new(UNOBSERVED, vec![[xa, y0], [xa, y1], [xb, y1], [xb, y0]])
                .fill_color(crate::style::UNOBSERVED)
                .stroke(egui::Stroke::new(0.0, crate::style::UNOBSERVED))
                .allow_hover(false),
        );
    }
    let blamed = |phase: &Phase| view.verdict.problem_phase.as_ref().map(|p| p == phase);
    let bands = collector::plot::phase_bands(&view.occurrences, t0, t1, width / 4);
    for band in bands {
        let phase = band.phase;
        let (xa, xb) = (map.x(band.begin_ns), map.x(band.end_ns));
        let corners = vec![[xa, y0], [xa, y1], [xb, y1], [xb, y0]];
        pui.polygon(
            Polygon::new(phase.as_str(), corners)
                .fill_color(phase_color(phase, band_alpha(blamed(phase), dark)))
                // No visible edge; its colour is what the legend shows.
                .stroke(egui::Stroke::new(0.0, phase_color(phase, 255)))
                .allow_hover(false),
        );
    }
}

/// A notebook's cells: each run a block in a lane along the top of the plot (a twentieth of its
/// height), neutral grey, alternately lighter, labelled `[N]` where it is wide enough; the
/// readout under the pointer names the cell and what it kept.
pub(super) fn cells(
    pui: &mut PlotUi<'_>,
    view: &RunView,
    map: &XMap<'_>,
    (t0, t1): (u64, u64),
    (y0, y1): (f64, f64),
    dark: bool,
) {
    let top = y1;
    let bottom = y1 - (y1 - y0) / 20.0;
    let px_per_x = pui.transform().dpos_dvalue_x().abs();
    let ink = if dark {
        Color32::from_gray(235)
    } else {
        Color32::from_gray(20)
    };
    for (i, cell) in view.cells.iter().enumerate() {
        let end = cell.end_ns.unwrap_or(map.end_ns());
        if end < t0 || cell.begin_ns > t1 {
            continue;
        }
        let (xa, xb) = (map.x(cell.begin_ns), map.x(end));
        let grey = if i % 2 == 0 { 170 } else { 95 };
        pui.polygon(
            Polygon::new(
                "cells",
                vec![[xa, bottom], [xa, top], [xb, top], [xb, bottom]],
            )
            .fill_color(Color32::from_gray(grey).gamma_multiply(0.6))
            .stroke(egui::Stroke::new(0.0, Color32::from_gray(grey)))
            .allow_hover(false),
        );
        let label = format!("[{}]", cell.count);
        if (xb - xa) * px_per_x >= 8.0 * label.len() as f64 {
            pui.text(
                egui_plot::Text::new(
                    "cells",
                    PlotPoint::new((xa + xb) / 2.0, (top + bottom) / 2.0),
                    label,
                )
                .color(ink)
                .allow_hover(false),
            );
        }
    }
}

/// Small ticks along the bottom at each step start, when they are far enough apart to see.
pub(super) fn step_ticks(
    pui: &mut PlotUi<'_>,
    view: &RunView,
    map: &XMap<'_>,
    t0: u64,
    t1: u64,
    width: usize,
) {
    if !view.steps.is_available() || map.axis == XAxis::Steps {
        return;
    }
    let (s0, s1) = (
        view.steps.step_at(t0 as f64).ceil(),
        view.steps.step_at(t1 as f64).floor(),
    );
    if s1 < s0 || (s1 - s0) as usize > width / 6 {
        return;
    }
    let points: Vec<[f64; 2]> = (s0 as i64..=s1 as i64)
        .map(|s| [map.x(view.steps.time_at(s as f64) as u64), 0.0])
        .collect();
    pui.points(
        Points::new("step starts", points)
            .shape(MarkerShape::Up)
            .radius(3.0)
            .color(Color32::GRAY),
    );
}

pub(super) fn events(pui: &mut PlotUi<'_>, view: &RunView, map: &XMap<'_>, t0: u64, t1: u64) {
    let first = view.events.partition_point(|e| e.t_ns < t0);
    for event in view.events[first..]
        .iter()
        .take_while(|e| e.t_ns <= t1)
        .take(200)
    {
        let (name, color) = match event.kind {
            EventKind::Oom => ("OOM", crate::style::OOM),
            EventKind::Exit => ("exit", Color32::GRAY),
            EventKind::Stall => ("stall", Color32::GRAY),
            EventKind::Dropped => ("lost messages", crate::style::DROPPED),
        };
        pui.vline(
            VLine::new(name, map.x(event.t_ns))
                .color(color)
                .width(2.0)
                .style(LineStyle::dashed_loose()),
        );
    }
}

pub(super) fn overlay_line(
    pui: &mut PlotUi<'_>,
    overlay: &Overlay<'_>,
    axis: XAxis,
    t0: u64,
    t1: u64,
    width: usize,
    map: &XMap<'_>,
) {
    let Some(trace) = overlay
        .view
        .basis_trace
        .and_then(|i| overlay.view.traces.get(i))
    else {
        return;
    };
    let other = XMap {
        axis,
        view: overlay.view,
    };
    // The same x range, in the other run's time.
    let (a, b) = (other.t_ns(map.x(t0)), other.t_ns(map.x(t1)));
    let points: Vec<PlotPoint> = trace
        .data(overlay.recording)
        .visible(a, b, width)
        .into_iter()
        .map(|(t, v)| PlotPoint::new(other.x(t), v as f64))
        .collect();
    pui.line(
        Line::new(
            format!("{} — {}", trace.name(), overlay.name),
            PlotPoints::Owned(points),
        )
        .color(Color32::from_gray(140))
        .style(LineStyle::dashed_dense())
        .width(1.5),
    );
}

#[cfg(test)]
mod tests {
    use super::band_alpha;

    /// Every built-in phase's band, on the dark theme's plot, is at least 12 % from the
    /// background in its brightest channel, and the blamed phase more than the others.
    #[test]
    fn the_phase_bands_are_seen_on_the_dark_theme() {
        let background = egui::Visuals::dark().extreme_bg_color;
        for (name, c) in collector::palette::PHASES {
            for blamed in [None, Some(false), Some(true)] {
                let alpha = f32::from(band_alpha(blamed, true)) / 255.0;
                let apart = [
                    (c.0, background.r()),
                    (c.1, background.g()),
                    (c.2, background.b()),
                ]
                .into_iter()
                .map(|(band, bg)| alpha * (f32::from(band) - f32::from(bg)))
                .fold(0.0f32, f32::max);
                assert!(apart >= 0.12 * 255.0, "{name} ({blamed:?}): {apart}");
            }
        }
        assert!(band_alpha(Some(true), true) > band_alpha(Some(false), true));
    }
}
