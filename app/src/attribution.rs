//! The phase attribution view: which phase grows memory, and by how much.

use collector::analysis::Analysis;
use collector::format::format_bytes;
use egui_plot::{Bar, BarChart, Corner, Legend, Line, Plot};

use crate::style::phase_color;
use crate::timeline::binary_grid;
use crate::view::RunView;

/// "+1.00 MiB ± 12.0 KiB".
fn mean_spread(mean: f64, std: f64) -> String {
    let sign = if mean > 0.0 { "+" } else { "" };
    format!("{sign}{} ± {}", format_bytes(mean), format_bytes(std))
}

/// The table, the bars, retained memory per step by phase, and the average step early vs. late.
pub fn attribution_ui(ui: &mut egui::Ui, id: usize, analysis: &Analysis, view: &RunView) {
    if analysis.phases.is_empty() {
        // Phases marked in a file without steps (a snapshot's `record_function` ranges): named,
        // and why they are not attributed.
        let names: std::collections::BTreeSet<String> = analysis
            .occurrences
            .iter()
            .map(|o| o.phase.to_string())
            .collect();
        if names.is_empty() {
            ui.label(
                "No phases in this recording: run the job under the collector with automatic \
                 phases on (PyTorch), or mark them with tidemark.phase(…).",
            );
        } else {
            ui.label(format!(
                "The phases this file marks ({}) are not attributed: a phase's memory is counted \
                 within the step it belongs to, and the file has no steps (a phase that repeats, \
                 or ProfilerStep spans). The phase bands on the timeline show where they ran.",
                names.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        return;
    }
    ui.heading("Per phase");
    ui.weak(format!(
        "Measured on {}: net Δ from the phase's begin to its end, watermark Δ from its begin to \
         its peak, retained = what it keeps that no later phase of the step gives back.",
        analysis.basis.name()
    ));
    egui::Grid::new(("phase_table", id))
        .num_columns(7)
        .striped(crate::style::STRIPED)
        .show(ui, |ui| {
            for title in [
                "phase",
                "occurrences",
                "net Δ",
                "watermark Δ",
                "retained / occurrence",
                "share of growth",
                "net trend",
            ] {
                ui.strong(title);
            }
            ui.end_row();
            for stats in &analysis.phases {
                ui.colored_label(phase_color(&stats.phase, 255), stats.phase.as_str());
                let count = ui.label(stats.count_text());
                if stats.observed > stats.occurrences {
                    count.on_hover_text(format!(
                        "{} observed; the memory was read at both edges of {} of them (the \
                         others are not in the statistics)",
                        stats.observed, stats.occurrences
                    ));
                }
                ui.label(mean_spread(stats.net_mean_bytes, stats.net_std_bytes));
                ui.label(mean_spread(
                    stats.watermark_mean_bytes,
                    stats.watermark_std_bytes,
                ));
                ui.label(format_bytes(stats.retained_mean_bytes));
                ui.label(
                    stats
                        .share_of_growth
                        .map_or("–".to_owned(), |s| format!("{:.0} %", 100.0 * s)),
                );
                ui.label(stats.net_trend.as_ref().map_or("–".to_owned(), |t| {
                    format!(
                        "{}/occurrence (p = {})",
                        format_bytes(t.slope_per_step),
                        collector::format::format_p(t.p_value)
                    )
                }));
                ui.end_row();
            }
        });

    ui.add_space(8.0);
    let height = (ui.available_height() / 3.0).clamp(140.0, 260.0);
    ui.columns(2, |columns| {
        columns[0].strong("Mean per occurrence");
        Plot::new(("phase_bars", id))
            .height(height)
            .legend(Legend::default().position(Corner::RightTop))
            .y_axis_formatter(|mark, _| format_bytes(mark.value))
            .y_grid_spacer(binary_grid)
            .x_axis_formatter({
                let names: Vec<String> = analysis
                    .phases
                    .iter()
                    .map(|p| p.phase.to_string())
                    .collect();
                move |mark, _| {
                    let i = mark.value.round();
                    if (mark.value - i).abs() < 1e-6 && i >= 0.0 {
                        names.get(i as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                }
            })
            .allow_drag(false)
            .allow_zoom(false)
            .allow_scroll(false)
            .label_formatter(|_| None)
            .show(&mut columns[0], |pui| {
                let bars = |offset: f64, pick: fn(&collector::analysis::PhaseStats) -> f64| {
                    analysis
                        .phases
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            Bar::new(i as f64 + offset, pick(s))
                                .width(0.35)
                                .fill(phase_color(&s.phase, if offset < 0.0 { 255 } else { 120 }))
                                .name(s.phase.as_str())
                        })
                        .collect()
                };
                // The bars take their phase's colour, solid for net Δ and pale for the
                // watermark: the legend says solid and pale, not a colour of its own.
                let swatch = egui::Color32::from_gray(190);
                pui.bar_chart(
                    BarChart::new("net Δ (solid)", bars(-0.2, |s| s.net_mean_bytes))
                        .color(swatch)
                        .element_formatter(Box::new(crate::style::bar_bytes)),
                );
                pui.bar_chart(
                    BarChart::new("watermark Δ (pale)", bars(0.2, |s| s.watermark_mean_bytes))
                        .color(swatch.gamma_multiply(120.0 / 255.0))
                        .element_formatter(Box::new(crate::style::bar_bytes)),
                );
            });
        columns[1].strong("Retained per step, stacked by phase");
        retained_chart(&mut columns[1], id, view, height);
    });
    ui.add_space(8.0);
    shape_chart(ui, id, view, height);
}

fn retained_chart(ui: &mut egui::Ui, id: usize, view: &RunView, height: f32) {
    if view.retained.is_empty() {
        ui.weak("Not enough steps with memory numbers at the phase edges.");
        return;
    }
    Plot::new(("retained", id))
        .height(height)
        .legend(Legend::default().position(Corner::LeftTop))
        .y_axis_formatter(|mark, _| format_bytes(mark.value))
        .y_grid_spacer(binary_grid)
        .x_axis_label("step")
        .label_formatter(|_| None)
        .show(ui, |pui| {
            let mut charts: Vec<BarChart> = Vec::new();
            for (p, phase) in view.phases.iter().enumerate() {
                let bars: Vec<Bar> = view
                    .retained
                    .iter()
                    .map(|bin| {
                        let mid = (bin.first_step + bin.last_step) as f64 / 2.0;
                        let width = (bin.last_step - bin.first_step + 1) as f64 * 0.9;
                        Bar::new(mid, bin.by_phase[p])
                            .width(width)
                            .fill(phase_color(phase, 200))
                    })
                    .collect();
                let chart = BarChart::new(phase.as_str(), bars)
                    .color(phase_color(phase, 255))
                    .element_formatter(Box::new(crate::style::bar_bytes));
                let below: Vec<&BarChart> = charts.iter().collect();
                let chart = chart.stack_on(&below);
                charts.push(chart);
            }
            for chart in charts {
                pui.bar_chart(chart);
            }
        });
}

fn shape_chart(ui: &mut egui::Ui, id: usize, view: &RunView, height: f32) {
    let Some(shape) = &view.shape else {
        ui.weak("The average step needs at least 10 steps whose phases the probe observed.");
        return;
    };
    let steps = |(first, last, count): (u64, u64, usize)| {
        format!(
            "{} between steps {first} and {last}",
            collector::format::count(count, "step")
        )
    };
    ui.strong(format!(
        "The average step: {} vs. {} (memory relative to the step's start: each phase's net Δ as in the table, the step's whole change at its end; the thin line over a phase: the most it held)",
        steps(shape.early_steps),
        steps(shape.late_steps)
    ));
    Plot::new(("shape", id))
        .height(height)
        .legend(Legend::default().position(Corner::LeftTop))
        .y_axis_formatter(|mark, _| format_bytes(mark.value))
        .y_grid_spacer(binary_grid)
        .x_axis_formatter(|mark, _| format!("{:.0} %", mark.value))
        .x_axis_label("through the step")
        .label_formatter(crate::style::bytes_label(|x| {
            format!("{x:.0} % through the step")
        }))
        .show(ui, |pui| {
            // The phases where they lie in the step, in their colours (as on the timeline).
            for (phase, begin, end) in &shape.phases {
                pui.span(
                    egui_plot::Span::new(phase.as_str(), 100.0 * begin..=100.0 * end)
                        .fill(phase_color(phase, 40))
                        .border_width(0.0),
                );
            }
            for (name, line, color) in [
                ("early", &shape.early, crate::style::BLUE),
                ("late", &shape.late, crate::style::RED),
            ] {
                let points: Vec<[f64; 2]> =
                    line.points.iter().map(|&[x, y]| [100.0 * x, y]).collect();
                pui.line(Line::new(name, points.clone()).color(color).width(2.0));
                pui.points(
                    egui_plot::Points::new(name, points)
                        .color(color)
                        .radius(3.0),
                );
                // Each phase's high-water mark over the phase.
                for (k, peak) in line.peaks.iter().enumerate() {
                    let (Some(b), Some(e)) = (line.points.get(2 * k), line.points.get(2 * k + 1))
                    else {
                        continue;
                    };
                    pui.line(
                        Line::new(name, vec![[100.0 * b[0], *peak], [100.0 * e[0], *peak]])
                            .color(color)
                            .width(1.0),
                    );
                }
            }
        });
}
