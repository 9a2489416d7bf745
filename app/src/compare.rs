//! Comparing two runs: the overlay's picker and the difference in growth per step.

use collector::analysis::Analysis;
use collector::format::format_bytes;

use crate::run::{OpenRun, Run};

/// "compare with: [run]" and the difference in growth per step.
pub(crate) fn compare_ui(
    ui: &mut egui::Ui,
    compare: &mut Option<usize>,
    current: usize,
    names: &[(usize, String)],
    run: &Run,
    other: Option<&OpenRun>,
) {
    if picker(ui, compare, current, names) {
        return;
    }
    if let Some(Ok(other_run)) = other.map(|o| &o.run) {
        ui.label(compare_text(&run.analysis, &other_run.analysis));
    }
}

/// "compare with: [run]"; `true` when there is no other run to pick.
pub(crate) fn picker(
    ui: &mut egui::Ui,
    compare: &mut Option<usize>,
    current: usize,
    names: &[(usize, String)],
) -> bool {
    let others: Vec<&(usize, String)> = names.iter().filter(|(i, _)| *i != current).collect();
    if others.is_empty() {
        ui.weak("Open a second recording to compare (before/after a fix).");
        return true;
    }
    let selected = compare
        .and_then(|c| others.iter().find(|(i, _)| *i == c))
        .map_or("nothing".to_owned(), |(_, n)| n.clone());
    egui::ComboBox::from_label("compare with")
        .selected_text(selected)
        .show_ui(ui, |ui| {
            ui.selectable_value(compare, None, "nothing");
            for (i, name) in others {
                ui.selectable_value(compare, Some(*i), name);
            }
        });
    false
}

/// The growth per step of both runs and the difference, in words.
pub fn compare_text(this: &Analysis, other: &Analysis) -> String {
    let slope = |a: &Analysis| a.trend.as_ref().map(|t| t.slope_per_step);
    match (slope(this), slope(other)) {
        (Some(a), Some(b)) => format!(
            "growth per step: {}/step here vs. {}/step there ({}{}/step)",
            format_bytes(a),
            format_bytes(b),
            if a - b >= 0.0 { "+" } else { "" },
            format_bytes(a - b)
        ),
        _ => "growth per step: one of the runs has too few steps for a trend".to_owned(),
    }
}
