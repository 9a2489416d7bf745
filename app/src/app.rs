//! The top-level app: what is open, and the panels around the views.

use collector::analysis::{Analysis, analyze, format_bytes};
use collector::recording::{Recording, read_recording};

/// The recording shown when nothing else is opened: made by the collector from a real job
/// (`collector/tests/data/corpus/eval_keeps_predictions.py`, recorded by `make.sh` there).
pub const EXAMPLE_RECORDING: &[u8] =
    include_bytes!("../../collector/tests/data/corpus/eval_keeps_predictions.msgpack");

/// An opened recording and its diagnosis.
pub struct Run {
    /// The recording.
    pub recording: Recording,
    /// What the analysis makes of it.
    pub analysis: Analysis,
}

/// The viewer's state.
pub struct TidemarkApp {
    run: Result<Run, String>,
}

impl Default for TidemarkApp {
    fn default() -> Self {
        Self::from_bytes("embedded example", EXAMPLE_RECORDING)
    }
}

impl TidemarkApp {
    /// Opens a recording held in memory; `name` says where it came from in error messages.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Self {
        let run = read_recording(bytes)
            .map(|recording| {
                let analysis = analyze(&recording);
                Run {
                    recording,
                    analysis,
                }
            })
            .map_err(|err| format!("{err}: {name}"));
        Self { run }
    }

    /// The recording being shown, or the error that stopped it from opening.
    pub fn run(&self) -> Result<&Run, &str> {
        self.run.as_ref().map_err(String::as_str)
    }
}

impl eframe::App for TidemarkApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        egui::CentralPanel::default().show(ui, |ui| {
            ui.heading("tidemark");
            match &self.run {
                Ok(run) => {
                    run_info_ui(ui, &run.recording);
                    ui.separator();
                    verdict_ui(ui, &run.analysis);
                }
                Err(message) => {
                    ui.colored_label(ui.visuals().error_fg_color, message);
                }
            }
        });
    }
}

fn run_info_ui(ui: &mut egui::Ui, run: &Recording) {
    let header = &run.header;
    egui::Grid::new("run_info").num_columns(2).show(ui, |ui| {
        ui.label("Command");
        ui.label(header.command.join(" "));
        ui.end_row();
        ui.label("Host");
        ui.label(&header.host);
        ui.end_row();
        ui.label("Devices");
        ui.label(header.devices.len().to_string());
        ui.end_row();
        ui.label("Samples");
        ui.label(run.sample_count().to_string());
        ui.end_row();
    });
    for warning in &run.warnings {
        ui.colored_label(ui.visuals().warn_fg_color, warning);
    }
}

/// The findings with their evidence, problems first.
fn verdict_ui(ui: &mut egui::Ui, analysis: &Analysis) {
    ui.strong("Verdict");
    if !analysis.findings.iter().any(|f| f.kind.is_problem()) {
        ui.label("No leak: memory at the same point of every step does not rise");
    }
    for finding in &analysis.findings {
        let color = if finding.kind.is_problem() {
            ui.visuals().error_fg_color
        } else {
            ui.visuals().text_color()
        };
        ui.colored_label(color, &finding.title);
        ui.indent(finding.kind.as_str(), |ui| {
            for line in &finding.evidence {
                ui.label(line);
            }
        });
    }
    if let Some(trend) = &analysis.trend {
        ui.label(format!(
            "Trend: {}/step, Mann–Kendall p = {:.2e}",
            format_bytes(trend.slope_per_step),
            trend.p_value
        ));
    }
    for lack in &analysis.lacks {
        ui.weak(format!("Not recorded: {lack}"));
    }
}
