//! The viewer's look in one place: the palette (taken from `collector::palette`, which the
//! exported pictures use too: curves, phases, block states, verdict colours, markers) and the few
//! layout numbers the views share.

use collector::palette;
use collector::recording::Phase;
use egui::Color32;

use crate::view::TraceKind;

const fn rgb(c: collector::palette::Rgb) -> Color32 {
    Color32::from_rgb(c.0, c.1, c.2)
}

/// PyTorch's allocated bytes; live (active) blocks; the late steps of a step shape.
pub const RED: Color32 = rgb(palette::ALLOCATED);
/// Reserved bytes; free cached blocks; the early steps of a step shape.
pub const BLUE: Color32 = rgb(palette::RESERVED);
/// The peak watermark; blocks waiting to be freed.
pub const AMBER: Color32 = rgb(palette::PEAK);
/// The device's used memory; a verdict with no problem; a followed file's status.
pub const GREEN: Color32 = rgb(palette::DEVICE_USED);
/// Host memory.
pub const PURPLE: Color32 = rgb(palette::HOST);
/// The time pinned by a click on the timeline (a neutral marker, like the events).
pub const PINNED: Color32 = Color32::from_rgb(0xe0, 0xe0, 0xe0);
/// The two moments marked to compare (A and B): a neutral marker, dashed.
pub const MOMENT: Color32 = Color32::from_rgb(0xc8, 0xc8, 0xc8);
/// An out-of-memory error marker (neutral: no curve's or phase's hue).
pub const OOM: Color32 = rgb(palette::EVENT_ON_SCREEN);
/// Lost probe messages.
pub const DROPPED: Color32 = rgb(palette::EVENT_ON_SCREEN);
/// A snapshot's leak suspects, marked where their live blocks were allocated.
pub const SUSPECT: Color32 = rgb(palette::SUSPECT);
/// Behind the steps whose phases the probe did not observe: the palette's grey, faint, under the
/// phases' bands.
pub const UNOBSERVED: Color32 = Color32::from_rgba_premultiplied(
    palette::UNOBSERVED.0 / 8,
    palette::UNOBSERVED.1 / 8,
    palette::UNOBSERVED.2 / 8,
    0x20,
);
/// The OK colour of a verdict.
pub const OK_GREEN: Color32 = GREEN;

/// Rows of the tables (phase table, run info) alternate their background.
pub const STRIPED: bool = true;

/// The colour of a curve's kind.
pub fn trace_color(kind: TraceKind) -> Color32 {
    rgb(kind.rgb())
}

/// The colour of one curve (its kind's, in its own shade: [`collector::plot::Trace::rgb`]).
pub fn curve_color(trace: &crate::view::Trace) -> Color32 {
    rgb(trace.rgb())
}

/// The colour of a category stacked under the curves: parameters, gradients, optimizer state,
/// and the C heap's total line (host categories only).
pub fn category_color(category: usize, alpha: u8) -> Color32 {
    let (_, c) = palette::CATEGORIES[category.min(palette::CATEGORIES.len() - 1)];
    Color32::from_rgba_unmultiplied(c.0, c.1, c.2, alpha)
}

/// The colour of a phase, opaque (`alpha` 255) or for a band behind curves.
pub fn phase_color(phase: &Phase, alpha: u8) -> Color32 {
    let c = palette::phase(phase.as_str());
    Color32::from_rgba_unmultiplied(c.0, c.1, c.2, alpha)
}

/// What a plot of memory says under the pointer: the nearest series' name, where it is (`x`
/// formats it) and its value in bytes ("allocated\n1.5 s\n13.2 GiB"); egui_plot's own label says
/// raw numbers ("y = 14173392896.000").
pub fn bytes_label<'a>(
    x: impl Fn(f64) -> String + 'a,
) -> impl Fn(&egui_plot::HoverPosition<'_>) -> Option<String> + 'a {
    move |hover| match hover {
        egui_plot::HoverPosition::NearDataPoint {
            plot_name,
            position,
            ..
        } => Some(format!(
            "{plot_name}\n{}\n{}",
            x(position.x),
            collector::format::format_bytes(position.y)
        )),
        egui_plot::HoverPosition::Elsewhere { .. } => None,
    }
}

/// What a bar of bytes says under the pointer: its name (or its chart's) and its value in
/// bytes, not egui_plot's raw number.
pub fn bar_bytes(bar: &egui_plot::Bar, chart: &egui_plot::BarChart) -> String {
    use egui_plot::PlotItem;
    let name = if bar.name.is_empty() {
        chart.name()
    } else {
        &bar.name
    };
    format!("{name}\n{}", collector::format::format_bytes(bar.value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_say_bytes_not_raw_numbers() {
        let label = bytes_label(|x| format!("step {x:.0}"));
        let near = egui_plot::HoverPosition::NearDataPoint {
            plot_name: "late",
            position: egui_plot::PlotPoint::new(12.0, 16.0 * 1024.0 * 1024.0),
            index: 3,
        };
        assert_eq!(label(&near).as_deref(), Some("late\nstep 12\n16.0 MiB"));
        let elsewhere = egui_plot::HoverPosition::Elsewhere {
            position: egui_plot::PlotPoint::new(1.0, 2.0),
        };
        assert_eq!(label(&elsewhere), None);
        let bar = egui_plot::Bar::new(0.0, -16.0 * 1024.0 * 1024.0).name("backward");
        let chart = egui_plot::BarChart::new("net Δ", vec![bar.clone()]);
        assert_eq!(bar_bytes(&bar, &chart), "backward\n-16.0 MiB");
        let unnamed = egui_plot::Bar::new(0.0, 512.0);
        assert_eq!(bar_bytes(&unnamed, &chart), "net Δ\n512 B");
    }
}
