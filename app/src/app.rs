//! The top-level app: what is open, and the panels around the views.

use collector::recording::{Recording, read_recording};

/// The recording shown when nothing else is opened.
pub const EXAMPLE_RECORDING: &[u8] = include_bytes!("../../collector/tests/data/golden_v1.msgpack");

/// The viewer's state.
pub struct TidemarkApp {
    run: Result<Recording, String>,
}

impl Default for TidemarkApp {
    fn default() -> Self {
        Self::from_bytes("embedded example", EXAMPLE_RECORDING)
    }
}

impl TidemarkApp {
    /// Opens a recording held in memory; `name` says where it came from in error messages.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Self {
        let run = read_recording(bytes).map_err(|err| format!("{name}: {err}"));
        Self { run }
    }

    /// The recording being shown, or the error that stopped it from opening.
    pub fn run(&self) -> Result<&Recording, &str> {
        self.run.as_ref().map_err(String::as_str)
    }
}

impl eframe::App for TidemarkApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        egui::CentralPanel::default().show(ui, |ui| {
            ui.heading("tidemark");
            match &self.run {
                Ok(run) => run_info_ui(ui, run),
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
