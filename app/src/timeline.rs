//! The timeline: memory curves over time or steps, phase bands behind them, events as markers,
//! and a readout of the exact values under the pointer.

use collector::format::{format_bytes, format_seconds};
use collector::recording::Recording;
use egui_plot::{
    Corner, GridInput, GridMark, Legend, Line, LineStyle, Plot, PlotBounds, PlotPoint, PlotPoints,
    VLine,
};

use crate::envelope::Envelope;
use crate::style::{phase_color, trace_color};
use crate::view::{RunView, TraceKind};
use collector::plot::Shown;

mod marks;
use marks::{categories, events, extent, overlay_line, phase_bands, step_ticks, verdict};

/// What goes on the x axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    /// Seconds since the start.
    Time,
    /// Training steps.
    Steps,
}

/// What the user chose to see.
#[derive(Clone, Debug)]
pub struct TimelineState {
    /// Which curves are drawn, by [`TraceKind::ALL`] order.
    pub shown: [bool; TraceKind::ALL.len()],
    /// Phase bands behind the curves.
    pub phase_bands: bool,
    /// Parameters, gradients and optimizer state stacked under the curves.
    pub categories: bool,
    /// The verdict drawn: the step baseline, its trend, the capacity, the leaking phase.
    pub verdict: bool,
    /// One mini-timeline per rank (or process), on the same scale, instead of the timeline.
    pub per_rank: bool,
    /// Time or steps.
    pub x_axis: XAxis,
    /// Only this device (`None`: all).
    pub device: Option<u32>,
    /// Only this process (`None`: all).
    pub origin: Option<String>,
    /// The x range to show next frame, in seconds since the start (then cleared).
    pub request_x: Option<(f64, f64)>,
    /// Fit everything next frame (then cleared).
    pub request_reset: bool,
    /// The x range the plot showed last (its own units: seconds or steps), and whether its y
    /// range fits the data by itself.
    pub shown_x: Option<(f64, f64)>,
    pub y_fits: bool,
    /// The time under the pointer, nanoseconds, while it is over the plot.
    pub hovered_ns: Option<u64>,
    /// The last time the pointer was over the plot (kept when it leaves: the blocks view of a
    /// snapshot offers it).
    pub last_hovered_ns: Option<u64>,
    /// A time pinned by clicking on the plot (a snapshot's blocks view shows the blocks then).
    pub pinned_ns: Option<u64>,
    /// Two moments marked by right-clicking the plot, nanoseconds: what changed between them is
    /// shown under it.
    pub moments: crate::diff::Marks<u64>,
    /// What the moments panel showed last, kept while the moments and the run stay the same.
    pub(crate) moments_memo:
        crate::diff::Memo<(u64, u64, (u64, usize)), collector::compare::Moments>,
}

impl Default for TimelineState {
    fn default() -> Self {
        Self {
            shown: [true; TraceKind::ALL.len()],
            phase_bands: true,
            categories: true,
            verdict: true,
            per_rank: false,
            x_axis: XAxis::Time,
            device: None,
            origin: None,
            request_x: None,
            request_reset: false,
            shown_x: None,
            y_fits: true,
            hovered_ns: None,
            last_hovered_ns: None,
            pinned_ns: None,
            moments: crate::diff::Marks::default(),
            moments_memo: crate::diff::Memo::default(),
        }
    }
}

impl TimelineState {
    /// Whether curves of this kind are drawn.
    pub fn is_shown(&self, kind: TraceKind) -> bool {
        TraceKind::ALL
            .iter()
            .position(|&k| k == kind)
            .is_some_and(|i| self.shown[i])
    }
}

/// Another run drawn over this one, aligned by step (or by time since the start).
pub struct Overlay<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its recording.
    pub recording: &'a Recording,
    /// Its view.
    pub view: &'a RunView,
}

/// Grid lines at binary multiples (1, 4, 16 … of a power of two), so that byte labels are round:
/// [`collector::format::byte_marks`], which the report's pictures tick by too.
pub fn binary_grid(input: GridInput) -> Vec<GridMark> {
    let (lo, hi) = input.bounds;
    collector::format::byte_marks(lo, hi, input.base_step_size)
        .into_iter()
        .map(|(value, step_size)| GridMark { value, step_size })
        .collect()
}

/// Plot x coordinate of a time, and back.
struct XMap<'a> {
    axis: XAxis,
    view: &'a RunView,
}

impl XMap<'_> {
    /// The last time the axis shows: the end on the time axis, the last step's end on steps.
    fn end_ns(&self) -> u64 {
        match self.axis {
            XAxis::Time => self.view.duration_ns,
            XAxis::Steps => self.view.steps.end_ns(self.view.duration_ns),
        }
    }

    fn x(&self, t_ns: u64) -> f64 {
        match self.axis {
            XAxis::Time => t_ns as f64 / 1e9,
            XAxis::Steps => self.view.steps.step_at(t_ns as f64),
        }
    }

    /// Where step `step`, starting at `t_ns`, is on the axis (exact on the steps axis, also
    /// for a step after the last one recorded).
    fn x_step(&self, step: u64, t_ns: u64) -> f64 {
        match self.axis {
            XAxis::Time => t_ns as f64 / 1e9,
            XAxis::Steps => step as f64,
        }
    }

    fn t_ns(&self, x: f64) -> u64 {
        let t = match self.axis {
            XAxis::Time => x * 1e9,
            XAxis::Steps => self.view.steps.time_at(x),
        };
        t.max(0.0) as u64
    }
}

/// The toolbar above the plot: curves, bands, axis, device, process.
pub fn toolbar(ui: &mut egui::Ui, view: &RunView, state: &mut TimelineState) {
    ui.horizontal_wrapped(|ui| {
        for (i, kind) in TraceKind::ALL.into_iter().enumerate() {
            if view.traces.iter().any(|t| t.kind == kind) {
                let text = egui::RichText::new(kind.label()).color(trace_color(kind));
                let toggle = ui.checkbox(&mut state.shown[i], text);
                if kind == TraceKind::OutsidePytorch {
                    toggle.on_hover_text("each process' device memory as the driver counts it (about once a second) less what PyTorch reserved: the CUDA context, NCCL's buffers, cuBLAS and cuDNN workspaces, other libraries' own allocations");
                } else if kind == TraceKind::PrivatePools {
                    toggle.on_hover_text("the part of allocated in private pools (CUDA graphs, torch.cuda.MemPool), shaded under the allocated curve");
                }
            }
        }
        ui.separator();
        ui.checkbox(&mut state.phase_bands, "phase bands");
        ui.checkbox(&mut state.verdict, "verdict")
            .on_hover_text("the step baseline the verdict judged (dots), its trend after warm-up, the capacity it heads for");
        if !view.categories.is_empty() {
            ui.checkbox(&mut state.categories, "categories")
                .on_hover_text("parameters, gradients and optimizer state at each step's start, stacked; the rest of the memory is above them");
        }
        ui.separator();
        ui.label("x axis:");
        ui.selectable_value(&mut state.x_axis, XAxis::Time, "time");
        ui.add_enabled_ui(view.steps.is_available(), |ui| {
            ui.selectable_value(&mut state.x_axis, XAxis::Steps, "steps")
                .on_disabled_hover_text("no steps in this recording");
        });
        if view.devices.len() > 1 {
            ui.separator();
            egui::ComboBox::from_label("device")
                .selected_text(state.device.map_or("all".to_owned(), |d| {
                    view.devices
                        .iter()
                        .zip(&view.device_names)
                        .find(|(x, _)| **x == d)
                        .map_or_else(|| format!("cuda:{d}"), |(_, name)| name.clone())
                }))
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut state.device, None, "all");
                    for (&d, name) in view.devices.iter().zip(&view.device_names) {
                        ui.selectable_value(&mut state.device, Some(d), name.as_str());
                    }
                });
        }
        if view.origins.len() > 1 {
            ui.separator();
            ui.checkbox(&mut state.per_rank, "per rank")
                .on_hover_text("one small timeline per rank, on the same scale: an odd rank stands out");
            egui::ComboBox::from_label("process")
                .selected_text(state.origin.clone().unwrap_or_else(|| "all".to_owned()))
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut state.origin, None, "all");
                    for o in &view.origins {
                        ui.selectable_value(&mut state.origin, Some(o.clone()), o);
                    }
                });
        }
        ui.separator();
        if ui.button("Reset view").clicked() {
            state.request_reset = true;
        }
    });
}

/// A tick of the memory axis: memory levels are never below zero, so a tick there (the margin
/// under 0 B, a view dragged down) is left blank rather than read as "-16.0 MiB".
fn level_tick(bytes: f64) -> String {
    if bytes < 0.0 {
        String::new()
    } else {
        format_bytes(bytes)
    }
}

/// Small multiples: one mini-timeline per rank (or process), the same y scale for all and the
/// time axes linked, each drawing that rank's allocated bytes (else its host memory).
pub fn small_multiples(ui: &mut egui::Ui, id: usize, recording: &Recording, view: &RunView) {
    let preference = |kind: TraceKind| match kind {
        TraceKind::Allocated => 0,
        TraceKind::Host => 1,
        TraceKind::DeviceUsed => 2,
        TraceKind::Reserved => 3,
        TraceKind::OutsidePytorch => 4,
        TraceKind::Peak => 5,
        TraceKind::PrivatePools => 6,
    };
    let chosen: Vec<(&String, &crate::view::Trace)> = view
        .origins
        .iter()
        .filter_map(|origin| {
            view.traces
                .iter()
                .filter(|t| t.origin.as_ref() == Some(origin))
                .min_by_key(|t| preference(t.kind))
                .map(|t| (origin, t))
        })
        .collect();
    let end = view.duration_ns.max(1);
    let y_max = chosen
        .iter()
        .flat_map(|(_, t)| t.data(recording).visible(0, end, 64))
        .map(|(_, v)| v as f64)
        .fold(0.0, f64::max);
    let columns = if chosen.len() > 4 { 2 } else { 1 };
    let width = (ui.available_width() / columns as f32 - 8.0).max(200.0);
    let height =
        ((ui.available_height() / chosen.len().div_ceil(columns) as f32) - 8.0).clamp(90.0, 220.0);
    egui::ScrollArea::vertical().show(ui, |ui| {
        egui::Grid::new(("ranks", id))
            .num_columns(columns)
            .show(ui, |ui| {
                for (i, (origin, trace)) in chosen.iter().enumerate() {
                    ui.vertical(|ui| {
                        ui.label(format!("{origin}: {}", trace.kind.label()));
                        Plot::new(("rank", id, i))
                            .width(width)
                            .height(height)
                            .link_axis(egui::Id::unique(("ranks", id)), [true, false])
                            .link_cursor(egui::Id::unique(("ranks", id)), [true, false])
                            .include_x(0.0)
                            .include_x(end as f64 / 1e9)
                            .include_y(0.0)
                            .include_y(y_max * 1.05)
                            .y_axis_formatter(|mark, _| level_tick(mark.value))
                            .x_axis_formatter(|mark, _| format_seconds(mark.value))
                            .label_formatter(crate::style::bytes_label(format_seconds))
                            .y_axis_min_width(56.0)
                            .show(ui, |pui| {
                                let bounds = pui.plot_bounds();
                                let t0 = (bounds.min()[0].max(0.0) * 1e9) as u64;
                                let t1 = ((bounds.max()[0].max(0.0) * 1e9) as u64).min(end);
                                let points: Vec<PlotPoint> = trace
                                    .data(recording)
                                    .visible(t0, t1, width as usize)
                                    .into_iter()
                                    .map(|(t, v)| PlotPoint::new(t as f64 / 1e9, v as f64))
                                    .collect();
                                pui.line(
                                    Line::new(trace.name(), PlotPoints::Owned(points))
                                        .color(crate::style::curve_color(trace))
                                        .width(1.5)
                                        .allow_band(false),
                                );
                            });
                    });
                    if (i + 1) % columns == 0 {
                        ui.end_row();
                    }
                }
            });
    });
}

/// The plot. Returns nothing; the hovered time is kept in `state`.
pub fn timeline_ui(
    ui: &mut egui::Ui,
    id: usize,
    recording: &Recording,
    view: &RunView,
    state: &mut TimelineState,
    overlay: Option<&Overlay<'_>>,
) {
    let axis = if view.steps.is_available() {
        state.x_axis
    } else {
        XAxis::Time
    };
    let map = XMap { axis, view };
    let (x_end, y_max) = extent(recording, view, state, &map);
    let columns = ui.available_width().max(100.0) as usize;
    let x_label = match axis {
        XAxis::Time => "time since start",
        XAxis::Steps => "step",
    };
    let below = if state.moments.both().is_some() {
        crate::diff::PANEL_HEIGHT
    } else {
        0.0
    };
    let mut plot = Plot::new(("timeline", id, axis == XAxis::Steps))
        .legend(
            Legend::default()
                .position(Corner::LeftTop)
                .follow_insertion_order(true),
        )
        .x_axis_label(x_label)
        .y_axis_formatter(|mark, _| level_tick(mark.value))
        .y_grid_spacer(binary_grid)
        .y_axis_min_width(64.0)
        .label_formatter(|_| None)
        .include_x(0.0)
        .include_x(x_end)
        .include_y(0.0)
        .include_y(y_max * 1.05)
        // The wheel zooms time, as on the memory timeline (egui_plot's own scroll pans y).
        .allow_scroll(false)
        // Room for the caption and the moments' hint (or panel) under the plot.
        .height((ui.available_height() - 48.0 - below).max(120.0));
    plot = match axis {
        XAxis::Time => plot.x_axis_formatter(|mark, _| format_seconds(mark.value)),
        XAxis::Steps => plot.x_axis_formatter(|mark, _| format!("{:.0}", mark.value)),
    };
    if state.request_reset {
        plot = plot.reset();
        state.request_reset = false;
    }
    let request_x = state.request_x.take();
    let dark = ui.visuals().dark_mode;
    let pinned = state.pinned_ns;
    let moments = state.moments;
    let response = plot.show(ui, |pui| {
        let wheel = pui.ctx().input(|i| i.smooth_scroll_delta.y);
        if wheel != 0.0 && pui.response().contains_pointer() {
            let y_fits = pui.auto_bounds().y;
            pui.zoom_bounds_around_hovered(egui::vec2((wheel * 0.003).exp(), 1.0));
            pui.set_auto_bounds(egui::Vec2b::new(false, y_fits));
        }
        if let Some((a, b)) = request_x {
            let (a, b) = (map.x((a * 1e9) as u64), map.x((b * 1e9) as u64));
            pui.set_plot_bounds_x(a..=b);
        }
        // Before auto-fitting the first time, the plot's bounds are not known yet: draw it all.
        let bounds = if pui.auto_bounds().x {
            PlotBounds::from_min_max([0.0, 0.0], [x_end, y_max])
        } else {
            pui.plot_bounds()
        };
        let width = (pui.transform().frame().width() as usize).clamp(100, columns.max(100));
        let (t0, t1) = (
            map.t_ns(bounds.min()[0]),
            map.t_ns(bounds.max()[0]).min(map.end_ns()),
        );
        let (y0, y1) = if pui.auto_bounds().y {
            (0.0, y_max * 1.05)
        } else {
            (bounds.min()[1], bounds.max()[1])
        };
        if state.phase_bands {
            phase_bands(pui, view, &map, (t0, t1), (y0, y1), width, dark);
        }
        marks::cells(pui, view, &map, (t0, t1), (y0, y1), dark);
        step_ticks(pui, view, &map, t0, t1, width);
        if state.verdict {
            verdict(pui, view, &map, dark);
        }
        if state.categories {
            categories(pui, view, state, &map, width);
        }
        // The peak first: where it equals allocated (no free yet), allocated stays on top.
        let order = view
            .traces
            .iter()
            .filter(|t| t.kind == TraceKind::Peak)
            .chain(view.traces.iter().filter(|t| t.kind != TraceKind::Peak));
        for trace in order {
            if !state.is_shown(trace.kind)
                || state
                    .device
                    .is_some_and(|d| trace.device.is_some_and(|td| td != d))
                || state
                    .origin
                    .as_ref()
                    .is_some_and(|o| trace.origin.as_ref().is_some_and(|to| to != o))
            {
                continue;
            }
            // The peak is drawn thin rather than dashed: dashes over thousands of points cost
            // more to tessellate than the rest of the frame.
            let line_width = if trace.kind == TraceKind::Peak {
                1.0
            } else {
                1.5
            };
            if trace.kind == TraceKind::PrivatePools {
                pools_area(pui, recording, trace, &map, (t0, t1), width);
                continue;
            }
            match trace.data(recording).shown(t0, t1, width) {
                Shown::Samples(samples) => {
                    let points: Vec<PlotPoint> = samples
                        .into_iter()
                        .map(|(t, v)| PlotPoint::new(map.x(t), v as f64))
                        .collect();
                    pui.line(
                        Line::new(trace.name(), PlotPoints::Owned(points))
                            .color(crate::style::curve_color(trace))
                            .width(line_width)
                            // egui_plot's own banding would fill between far-apart samples.
                            .allow_band(false),
                    );
                }
                // More samples than pixel columns: one band mesh through the columns' spans
                // (tessellating a line of two points a column was most of a frame).
                Shown::Columns(spans) => {
                    let spans = spans
                        .into_iter()
                        .map(|(t, lowest, highest)| [map.x(t), lowest as f64, highest as f64])
                        .collect();
                    pui.add(Envelope::new(
                        trace.name(),
                        spans,
                        crate::style::curve_color(trace),
                        line_width,
                    ));
                }
            }
        }
        if let Some(overlay) = overlay {
            overlay_line(pui, overlay, axis, t0, t1, width, &map);
        }
        events(pui, view, &map, t0, t1);
        if let Some(t) = pinned {
            pui.vline(
                VLine::new("pinned (click to move)", map.x(t))
                    .color(crate::style::PINNED)
                    .width(1.5),
            );
        }
        for (label, t) in moments.labelled() {
            pui.vline(
                VLine::new("", map.x(t))
                    .color(crate::style::MOMENT)
                    .style(LineStyle::dashed_dense())
                    .width(1.5),
            );
            pui.text(
                egui_plot::Text::new(
                    "",
                    PlotPoint::new(map.x(t), pui.plot_bounds().max()[1]),
                    egui::RichText::new(label)
                        .strong()
                        .color(crate::style::MOMENT),
                )
                .anchor(egui::Align2::LEFT_TOP),
            );
        }
        pui.pointer_coordinate().map(|p| map.t_ns(p.x))
    });
    ui.label(egui::RichText::new(&view.verdict.caption).small());
    let shown = response.transform.bounds();
    state.shown_x = Some((shown.min()[0], shown.max()[0]));
    state.y_fits = shown.min()[1] <= 0.0 && shown.max()[1] >= y_max;
    state.hovered_ns = response.inner;
    if response.inner.is_some() {
        state.last_hovered_ns = response.inner;
    }
    if response.response.clicked() && response.inner.is_some() {
        state.pinned_ns = response.inner;
    }
    if response.response.secondary_clicked()
        && let Some(t) = response.inner
    {
        state.moments.mark(t);
    }
    if let Some(t_ns) = response.inner {
        response.response.on_hover_ui_at_pointer(|ui| {
            readout(
                ui,
                recording,
                view,
                state,
                t_ns,
                &map,
                response.transform.dpos_dvalue_x(),
            );
        });
    }
}

/// The part of allocated in private pools (CUDA graphs, `torch.cuda.MemPool`): an area from 0
/// up to it, in allocated's colour, pale, so the curve above reads as the whole of allocated.
fn pools_area(
    pui: &mut egui_plot::PlotUi<'_>,
    recording: &Recording,
    trace: &crate::view::Trace,
    map: &XMap<'_>,
    (t0, t1): (u64, u64),
    width: usize,
) {
    let points: Vec<PlotPoint> = trace
        .data(recording)
        .visible(t0, t1, width)
        .into_iter()
        .map(|(t, v)| PlotPoint::new(map.x(t), v as f64))
        .collect();
    pui.line(
        Line::new(trace.name(), PlotPoints::Owned(points))
            .color(crate::style::curve_color(trace))
            .width(1.0)
            .fill(0.0)
            .fill_alpha(0.3),
    );
}

/// Exact values, phase, step and nearby events at the pointer.
fn readout(
    ui: &mut egui::Ui,
    recording: &Recording,
    view: &RunView,
    state: &TimelineState,
    t_ns: u64,
    map: &XMap<'_>,
    pixels_per_x: f64,
) {
    ui.strong(format_seconds(t_ns as f64 / 1e9));
    if view.steps.is_available() {
        ui.label(format!(
            "step {:.0}",
            view.steps.step_at(t_ns as f64).floor()
        ));
    }
    if let Some(cell) = view.cell_at(t_ns) {
        let kept = cell.kept().map_or(String::new(), |k| {
            format!(" (kept {})", collector::compare::signed_bytes(k as f64))
        });
        ui.label(format!("cell [{}]: {}{kept}", cell.count, cell.source));
    }
    if let Some(o) = view.phase_at(t_ns) {
        ui.colored_label(phase_color(&o.phase, 255), format!("phase: {}", o.phase));
    }
    egui::Grid::new("readout").num_columns(2).show(ui, |ui| {
        for trace in view.traces.iter().filter(|t| state.is_shown(t.kind)) {
            if let Some(v) = trace.data(recording).value_at(t_ns) {
                ui.colored_label(crate::style::curve_color(trace), trace.name());
                ui.label(format_bytes(v as f64));
                ui.end_row();
            }
        }
    });
    // Events within 4 pixels.
    let reach = 4.0 / pixels_per_x.abs().max(1e-9);
    for event in &view.events {
        if (map.x(event.t_ns) - map.x(t_ns)).abs() <= reach {
            ui.label(&event.text);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_memory_axis_has_no_negative_ticks() {
        assert_eq!(super::level_tick(-16.0 * 1024.0 * 1024.0), "");
        assert_eq!(super::level_tick(0.0), "0 B");
        assert_eq!(super::level_tick(16.0 * 1024.0 * 1024.0), "16.0 MiB");
    }
}
