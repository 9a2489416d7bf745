//! The verdict card and the run information.

use collector::analysis::FindingKind;
use collector::format::{format_bytes, format_duration};

use crate::run::Run;

/// The verdict in one line, as the report leads with it ([`Run::headline`]), and its colour.
pub fn headline(ui: &egui::Ui, run: &Run) -> (String, egui::Color32) {
    let lead = run.headline();
    let color = match lead.problem {
        Some(true) => ui.visuals().error_fg_color,
        // A snapshot's verdict is a finding or a statement of what it holds, never an all-clear.
        Some(false) if lead.snapshot => ui.visuals().strong_text_color(),
        Some(false) => crate::style::OK_GREEN,
        None => ui.visuals().warn_fg_color,
    };
    (lead.text, color)
}

/// A folder of per-rank snapshots: each rank's file, its memory at the snapshot and its peak,
/// what holds the most, and which files are not on the timeline or claim a rank twice.
fn rank_folder_ui(ui: &mut egui::Ui, folder: &collector::snapshot::ranks::RankFolder) {
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.strong(format!(
            "Per-rank snapshots in {} ({} files)",
            folder.folder.display(),
            folder.rows.len()
        ));
        if folder.standout.is_none() {
            ui.label("No rank stands out: the peaks are within a fifth of each other");
        }
        if !folder.missing.is_empty() {
            let list: Vec<String> = folder.missing.iter().map(u32::to_string).collect();
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!(
                    "No snapshot for rank {}: its file is missing from the folder",
                    list.join(", ")
                ),
            );
        }
        let bytes = |b: Option<u64>| b.map_or("—".to_owned(), |b| format_bytes(b as f64));
        egui::Grid::new("rank_folder").striped(true).show(ui, |ui| {
            for heading in ["rank", "reserved", "allocated", "peak allocated", "file"] {
                ui.strong(heading);
            }
            ui.end_row();
            for r in &folder.rows {
                ui.label(r.rank.to_string());
                ui.label(bytes(r.reserved_bytes));
                ui.label(bytes(r.allocated_bytes));
                ui.label(bytes(r.peak_allocated_bytes));
                let mut file = collector::snapshot::ranks::short(&r.file).to_owned();
                if r.duplicate {
                    file.push_str(" (rank claimed twice)");
                }
                if r.error.is_none() && !r.on_timeline {
                    file.push_str(" (not on the timeline)");
                }
                match (&r.error, &r.top_site) {
                    (Some(err), _) => {
                        ui.colored_label(ui.visuals().error_fg_color, format!("{file}: {err}"))
                    }
                    (None, Some(site)) => ui.label(format!("{file}: {site}")),
                    (None, None) => ui.label(file),
                };
                ui.end_row();
            }
        });
    });
}

/// The findings with their evidence and hints, the projected OOM, and what the recording lacks;
/// for a snapshot, its own verdict and evidence first.
pub fn verdict_ui(ui: &mut egui::Ui, run: &Run) {
    let analysis = &run.analysis;
    let (text, color) = headline(ui, run);
    ui.label(egui::RichText::new(text).heading().color(color));
    if let Some(view) = run
        .snapshot
        .as_ref()
        .filter(|_| run.input == collector::open::Kind::Snapshot)
    {
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.strong("What the snapshot holds");
            for line in &view.verdict.evidence {
                ui.label(format!("- {line}"));
            }
        });
    }
    if let Some(folder) = &run.rank_folder {
        rank_folder_ui(ui, folder);
    }
    if let Some(p) = &analysis.projection {
        let when = p.oom_after_s.map_or(String::new(), |s| {
            format!(", about {} after the start", format_duration(s))
        });
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!(
                "Projected out of memory at step {}{when}: {} of {} used at step {}",
                p.oom_step,
                format_bytes(p.level_bytes as f64),
                format_bytes(p.capacity_bytes as f64),
                p.last_step
            ),
        );
    }
    if let Some(trend) = &analysis.trend {
        ui.label(format!(
            "Trend of {} at the same point of every {}: {}/{}, Mann–Kendall p = {}, over {} points",
            analysis.basis.name(),
            analysis.unit(),
            format_bytes(trend.slope_per_step),
            analysis.unit(),
            collector::format::format_p(trend.p_value),
            trend.points
        ));
    }
    ui.add_space(6.0);
    let snapshot = run.input == collector::open::Kind::Snapshot;
    let findings = analysis
        .findings
        .iter()
        .filter(|f| !snapshot || f.kind != FindingKind::NotEnoughData);
    for (i, finding) in findings.enumerate() {
        let color = if finding.kind.is_problem() {
            ui.visuals().error_fg_color
        } else {
            ui.visuals().text_color()
        };
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.colored_label(color, egui::RichText::new(&finding.title).strong());
            if let Some(phase) = &finding.phase {
                ui.label(format!("phase: {phase}"));
            }
            for line in &finding.evidence {
                ui.label(format!("- {line}"));
            }
            if !finding.hints.is_empty() {
                egui::CollapsingHeader::new("What to try")
                    .id_salt(("hints", i))
                    .default_open(finding.kind.is_problem())
                    .show(ui, |ui| {
                        for hint in &finding.hints {
                            ui.label(format!("- {hint}"));
                        }
                    });
            }
        });
    }
    if !analysis.lacks.is_empty() {
        ui.add_space(6.0);
        ui.strong(if snapshot {
            "Not in this snapshot"
        } else {
            "Not in this recording"
        });
        for lack in &analysis.lacks {
            ui.weak(format!("- {lack}"));
        }
    }
}

/// Command, host, devices, duration, samples, lost messages, warnings and notes.
pub fn run_info_ui(ui: &mut egui::Ui, name: &str, opened: &Run) {
    let run = &opened.recording;
    let header = &run.header;
    egui::Grid::new("run_info")
        .num_columns(2)
        .striped(crate::style::STRIPED)
        .show(ui, |ui| {
            let row = |ui: &mut egui::Ui, key: &str, value: String| {
                ui.strong(key);
                ui.label(value);
                ui.end_row();
            };
            row(ui, "File", name.to_owned());
            row(ui, "Command", header.command.join(" "));
            row(ui, "Host", header.host.clone());
            row(
                ui,
                "Process",
                header.pid.map_or("–".to_owned(), |p| p.to_string()),
            );
            let devices = if header.devices.is_empty() {
                "none recorded".to_owned()
            } else {
                header
                    .devices
                    .iter()
                    .map(|d| {
                        let name = header.device_name(d.index);
                        if name == collector::format::PINNED_HOST {
                            name
                        } else {
                            format!("{name} {} ({})", d.name, format_bytes(d.total_bytes as f64))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            row(ui, "Devices", devices);
            row(
                ui,
                "Duration",
                format_duration(run.duration_ns() as f64 / 1e9),
            );
            row(
                ui,
                "Samples",
                format!(
                    "{} in {} series, {} allocator readings, {} phase edges",
                    run.sample_count(),
                    run.series.len(),
                    run.allocator.len(),
                    run.phases.len()
                ),
            );
            row(ui, "Lost probe messages", run.dropped_total().to_string());
            let end = match (run.exits.last(), &run.end) {
                (Some(exit), _) => match (exit.code, exit.signal) {
                    (_, Some(signal)) => format!("killed by signal {signal}"),
                    (Some(code), None) => format!("exit status {code}"),
                    (None, None) => "ended".to_owned(),
                },
                // A snapshot has no job's end: its trace ends where it was dumped.
                (None, _) if opened.input == collector::open::Kind::Snapshot => {
                    "the snapshot (no job's end in it)".to_owned()
                }
                (None, Some(_)) => "recording complete, no exit recorded".to_owned(),
                (None, None) => "incomplete recording".to_owned(),
            };
            row(ui, "End", end);
            row(
                ui,
                "Written by",
                format!("tidemark {}", header.tool_version),
            );
        });
    for warning in &run.warnings {
        ui.colored_label(ui.visuals().warn_fg_color, format!("Warning: {warning}"));
    }
    if !run.notes.is_empty() {
        egui::CollapsingHeader::new(format!("Notes ({})", run.notes.len()))
            .id_salt("notes")
            .show(ui, |ui| {
                for note in run.notes.iter().take(500) {
                    ui.label(format!(
                        "{}: {}",
                        collector::format::format_seconds(note.t_ns as f64 / 1e9),
                        note.text
                    ));
                }
            });
    }
}
