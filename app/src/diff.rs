//! Differences in the viewer: two moments of one run (marked with a right-click on a timeline)
//! and two open runs side by side (the Compare tab), both from `collector::compare` — the same
//! numbers `collector diff` prints.

use collector::compare::{
    Moments, Pair, RecordingDiff, SiteStatus, SnapshotDiff, compare_moments, compare_recordings,
    compare_snapshots, signed_bytes,
};
use collector::format::{format_bytes, format_seconds};
use collector::snapshot::timeline::{Between, DeviceTimeline};

use crate::run::Run;

/// Two moments marked on a timeline: A, then B (a third mark starts again at A).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Marks<T> {
    /// The first moment marked.
    pub a: Option<T>,
    /// The second.
    pub b: Option<T>,
}

impl<T> Default for Marks<T> {
    fn default() -> Self {
        Self { a: None, b: None }
    }
}

impl<T: Copy> Marks<T> {
    /// Marks a moment: A when none or both are marked, else B.
    pub fn mark(&mut self, at: T) {
        if self.a.is_none() || self.b.is_some() {
            *self = Self {
                a: Some(at),
                b: None,
            };
        } else {
            self.b = Some(at);
        }
    }

    /// Both moments, once both are marked.
    pub fn both(&self) -> Option<(T, T)> {
        Some((self.a?, self.b?))
    }

    /// The marks with their labels.
    pub fn labelled(&self) -> impl Iterator<Item = (&'static str, T)> {
        [("A", self.a), ("B", self.b)]
            .into_iter()
            .filter_map(|(l, t)| Some((l, t?)))
    }
}

/// A result kept while what it was made from stays the same (the panels are drawn every frame;
/// their comparisons are made once per pair of moments or runs).
#[derive(Clone, Debug)]
pub struct Memo<K, V> {
    kept: Option<(K, V)>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Self { kept: None }
    }
}

impl<K: PartialEq, V> Memo<K, V> {
    /// The result for `key`, made by `make` when the one kept is for another key.
    pub fn get(&mut self, key: K, make: impl FnOnce() -> V) -> &V {
        if self.kept.as_ref().is_some_and(|(k, _)| *k != key) {
            self.kept = None;
        }
        &self.kept.get_or_insert_with(|| (key, make())).1
    }

    /// Forgets the result kept.
    pub fn clear(&mut self) {
        self.kept = None;
    }
}

/// What makes a run's comparison go stale: it grew (a followed file).
fn version(run: &Run) -> (u64, usize) {
    (run.recording.sample_count(), run.recording.phases.len())
}

/// Two runs compared, kept by the Compare tab.
pub(crate) enum Compared {
    Snapshots(SnapshotDiff),
    Recordings(Box<RecordingDiff>),
    /// A snapshot and a recording: not compared.
    Neither,
}

/// The runs the Compare tab compared last: A's and B's places and versions.
pub(crate) type ComparedKey = (usize, (u64, usize), usize, (u64, usize));

/// The height the moments panel takes under a timeline when both moments are marked.
pub const PANEL_HEIGHT: f32 = 240.0;

/// A hint line, or the header of the panel with a button that clears the marks.
fn header<T: Copy>(ui: &mut egui::Ui, marks: &mut Marks<T>, title: String) -> bool {
    match marks.both() {
        None => {
            ui.weak(if marks.a.is_some() {
                "A is marked: right-click another moment to see what changed between them."
            } else {
                "Right-click two moments on the timeline to see what changed between them."
            });
            false
        }
        Some(_) => {
            ui.horizontal(|ui| {
                ui.strong(title);
                if ui.small_button("Clear A and B").clicked() {
                    *marks = Marks::default();
                }
            });
            true
        }
    }
}

/// A signed change of bytes, coloured: red when memory grew.
fn change_label(ui: &mut egui::Ui, change: Option<f64>) {
    match change {
        Some(c) if c > 0.0 => ui.colored_label(ui.visuals().error_fg_color, signed_bytes(c)),
        Some(c) => ui.label(signed_bytes(c)),
        None => ui.weak("—"),
    };
}

fn bytes_or_dash(value: Option<f64>) -> String {
    value.map_or("—".to_owned(), format_bytes)
}

/// A grid of rows of A, B and the change, under `header`.
fn pairs(ui: &mut egui::Ui, id: &str, header: [&str; 4], rows: impl FnOnce(&mut egui::Ui)) {
    egui::Grid::new(id)
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            for h in header {
                ui.strong(h);
            }
            ui.end_row();
            rows(ui);
        });
}

/// The usual header of [`pairs`].
const A_B: [&str; 4] = ["", "A", "B", "B − A"];

/// A row of A, B and the change.
fn pair_row(ui: &mut egui::Ui, what: &str, pair: &Pair) {
    ui.label(what);
    ui.label(bytes_or_dash(pair.a));
    ui.label(bytes_or_dash(pair.b));
    change_label(ui, pair.change);
    ui.end_row();
}

/// What changed between two moments of a recording: each curve, each phase, the holders.
pub(crate) fn moments_panel(
    ui: &mut egui::Ui,
    run: &Run,
    marks: &mut Marks<u64>,
    memo: &mut Memo<(u64, u64, (u64, usize)), Moments>,
) {
    let title = match marks.both() {
        Some((a, b)) => format!(
            "From {} to {}",
            format_seconds(a.min(b) as f64 / 1e9),
            format_seconds(a.max(b) as f64 / 1e9)
        ),
        None => String::new(),
    };
    if !header(ui, marks, title) {
        return;
    }
    let Some((a, b)) = marks.both() else { return };
    let moments = memo.get((a, b, version(run)), || {
        compare_moments(&run.recording, &run.analysis, a, b)
    });
    egui::ScrollArea::vertical()
        .id_salt("moments")
        .max_height(PANEL_HEIGHT - 24.0)
        .show(ui, |ui| {
            if let [Some(x), Some(y)] = moments.steps {
                ui.label(format!("steps {x} to {y}"));
            }
            pairs(ui, "moments curves", ["", "at A", "at B", "B − A"], |ui| {
                for s in &moments.series {
                    pair_row(ui, &s.label(), &s.value);
                }
            });
            if !moments.phases.is_empty() {
                ui.add_space(6.0);
                egui::Grid::new("moments phases")
                    .striped(true)
                    .num_columns(5)
                    .show(ui, |ui| {
                        for h in ["phase", "times", "net", "largest watermark", "retained"] {
                            ui.strong(h);
                        }
                        ui.end_row();
                        for p in &moments.phases {
                            ui.label(&p.phase);
                            ui.label(p.occurrences.to_string());
                            change_label(ui, Some(p.net_bytes));
                            ui.label(format_bytes(p.watermark_bytes));
                            change_label(ui, p.retained_bytes);
                            ui.end_row();
                        }
                        if let Some(between) = moments.between_phases_bytes {
                            ui.label("between phases");
                            ui.label("");
                            change_label(ui, Some(between));
                            ui.end_row();
                        }
                    });
            }
            if !moments.holders.is_empty() {
                ui.add_space(6.0);
                let [x, y] = moments.census_steps;
                ui.strong(format!(
                    "Who came to hold more (censuses at steps {} and {})",
                    x.map_or("?".to_owned(), |s| s.to_string()),
                    y.map_or("?".to_owned(), |s| s.to_string())
                ));
                egui::Grid::new("moments holders")
                    .striped(true)
                    .num_columns(4)
                    .show(ui, |ui| {
                        for h in &moments.holders {
                            pair_row(ui, &h.name, &h.held);
                        }
                    });
            }
            for note in &moments.notes {
                ui.weak(note);
            }
        });
}

/// What changed between two steps of a snapshot's trace on one device: what was allocated
/// between them and is still alive at the later one, by site, and what was freed.
pub(crate) fn snapshot_moments_panel(
    ui: &mut egui::Ui,
    site_name: &dyn Fn(u32) -> String,
    device: &DeviceTimeline,
    marks: &mut Marks<u32>,
    memo: &mut Memo<(u32, u32, u32), Between>,
) {
    let title = match marks.both() {
        Some((a, b)) => format!("From trace entry {} to {}", a.min(b), a.max(b)),
        None => String::new(),
    };
    if !header(ui, marks, title) {
        return;
    }
    let Some((a, b)) = marks.both() else { return };
    let between = memo.get((device.device, a, b), || device.between(a, b));
    ui.label(format!(
        "alive at A {} · at B {} ({}) · of A's, freed by B {} · allocated in between and alive at B {} in {} blocks",
        format_bytes(between.alive_from as f64),
        format_bytes(between.alive_to as f64),
        signed_bytes(between.alive_to as f64 - between.alive_from as f64),
        format_bytes(between.freed as f64),
        format_bytes(between.kept.iter().map(|s| s.bytes as f64).sum()),
        between.kept.iter().map(|s| s.blocks).sum::<usize>()
    ));
    egui::ScrollArea::vertical()
        .id_salt("snapshot moments")
        .max_height(PANEL_HEIGHT - 48.0)
        .show(ui, |ui| {
            egui::Grid::new("snapshot moments sites")
                .striped(true)
                .num_columns(3)
                .show(ui, |ui| {
                    for h in ["allocated between A and B, alive at B", "bytes", "blocks"] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for s in between.kept.iter().take(50) {
                        ui.label(site_name(s.site));
                        ui.label(format_bytes(s.bytes as f64));
                        ui.label(s.blocks.to_string());
                        ui.end_row();
                    }
                });
        });
}

/// The Compare tab: the run shown (B, at `places.1`) against the one picked (A, the baseline,
/// at `places.0`), compared once per pair and version.
pub(crate) fn runs_ui(
    ui: &mut egui::Ui,
    base: (&str, &Run),
    run: (&str, &Run),
    places: (usize, usize),
    memo: &mut Memo<ComparedKey, Compared>,
) {
    let ((name_a, a), (name_b, b)) = (base, run);
    ui.label(format!("A (baseline): {name_a}    B: {name_b}"));
    let key = (places.0, version(a), places.1, version(b));
    let compared = memo.get(key, || match (&a.snapshot, &b.snapshot) {
        (Some(sa), Some(sb)) => Compared::Snapshots(compare_snapshots(sa.facts(), sb.facts())),
        (None, None) => Compared::Recordings(Box::new(compare_recordings(
            &a.recording,
            &a.analysis,
            &b.recording,
            &b.analysis,
        ))),
        _ => Compared::Neither,
    });
    match compared {
        Compared::Snapshots(diff) => snapshots_ui(ui, diff),
        Compared::Recordings(diff) => recordings_ui(ui, diff),
        Compared::Neither => {
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!(
                    "{} is a snapshot and {} a recording: compare two snapshots, or two recordings",
                    if a.snapshot.is_some() { name_a } else { name_b },
                    if a.snapshot.is_some() { name_b } else { name_a },
                ),
            );
        }
    }
}

fn notes_ui(ui: &mut egui::Ui, notes: &[String], nothing: Option<String>) {
    if let Some(why) = nothing {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!("Nothing to compare: {why}"),
        );
    }
    for note in notes {
        ui.colored_label(ui.visuals().warn_fg_color, note);
    }
}

fn snapshots_ui(ui: &mut egui::Ui, diff: &SnapshotDiff) {
    notes_ui(ui, &diff.notes, diff.nothing_comparable());
    egui::ScrollArea::vertical().show(ui, |ui| {
        pairs(ui, "diff devices", A_B, |ui| {
            for d in &diff.devices {
                let name = collector::compare::device_name(d.device);
                let on = |what: &str| format!("{name} {what}");
                pair_row(ui, &on("alive"), &d.live_bytes);
                pair_row(ui, &on("reserved"), &d.reserved);
                pair_row(ui, &on("allocated"), &d.allocated);
                pair_row(ui, &on("cached, free"), &d.cached);
                pair_row(ui, &on("peak in the trace"), &d.trace_peak);
            }
        });
        ui.add_space(8.0);
        ui.strong("By allocation site, the largest change first");
        // The changes drawn to one scale, as `collector diff --html` draws them: growth to the
        // right in the colour of allocated memory, shrinking to the left in that of reserved.
        let shown = &diff.sites[..diff.sites.len().min(200)];
        let change = |s: &collector::compare::SiteChange| {
            s.bytes.b.unwrap_or(0.0) - s.bytes.a.unwrap_or(0.0)
        };
        let most = shown.iter().map(|s| change(s).abs()).fold(0.0, f64::max);
        egui::Grid::new("diff sites")
            .striped(true)
            .num_columns(6)
            .show(ui, |ui| {
                for h in ["site", "A", "B", "B − A", "shrank · grew", ""] {
                    ui.strong(h);
                }
                ui.end_row();
                for s in shown {
                    ui.label(format!(
                        "{} {}",
                        collector::compare::device_name(s.device),
                        s.site
                    ));
                    ui.label(bytes_or_dash(s.bytes.a));
                    ui.label(bytes_or_dash(s.bytes.b));
                    let change = change(s);
                    change_label(ui, Some(change));
                    change_bar(ui, change, most);
                    ui.weak(match s.status {
                        SiteStatus::Both => "",
                        SiteStatus::New => "new in B",
                        SiteStatus::Gone => "gone from B",
                    });
                    ui.end_row();
                }
            });
    });
}

/// The width of a change's bar, both halves.
const BAR_WIDTH: f32 = 220.0;

/// A change of `change` bytes as a bar from the middle of a cell, to the scale of `most`.
fn change_bar(ui: &mut egui::Ui, change: f64, most: f64) {
    let (rect, _) = ui.allocate_exact_size(
        egui::vec2(BAR_WIDTH, ui.spacing().interact_size.y * 0.7),
        egui::Sense::hover(),
    );
    let middle = rect.center().x;
    let painter = ui.painter();
    painter.vline(
        middle,
        rect.y_range(),
        ui.visuals().widgets.noninteractive.fg_stroke,
    );
    if most <= 0.0 || change == 0.0 {
        return;
    }
    let length = ((change.abs() / most) as f32 * BAR_WIDTH / 2.0).max(1.0);
    let (from, to, c) = if change > 0.0 {
        (middle, middle + length, collector::palette::ALLOCATED)
    } else {
        (middle - length, middle, collector::palette::RESERVED)
    };
    painter.rect_filled(
        egui::Rect::from_x_y_ranges(from..=to, rect.y_range()),
        0.0,
        crate::memtimeline::color(c),
    );
}

fn recordings_ui(ui: &mut egui::Ui, diff: &RecordingDiff) {
    notes_ui(ui, &diff.notes, diff.nothing_comparable());
    egui::ScrollArea::vertical().show(ui, |ui| {
        pairs(ui, "diff overall", A_B, |ui| {
            pair_row(ui, "step baseline (median)", &diff.baseline);
            pair_row(ui, "growth per step", &diff.slope);
            for d in &diff.devices {
                pair_row(
                    ui,
                    &format!("cuda:{} allocated peak", d.device),
                    &d.allocated_peak,
                );
                pair_row(
                    ui,
                    &format!("cuda:{} device memory peak", d.device),
                    &d.device_used_peak,
                );
            }
            pair_row(ui, "host memory peak", &diff.host_peak);
        });
        if !diff.phases.is_empty() {
            ui.add_space(8.0);
            ui.strong("Per phase, the mean of an occurrence");
            pairs(ui, "diff phases", A_B, |ui| {
                for p in &diff.phases {
                    pair_row(ui, &format!("{} net", p.phase), &p.net);
                    pair_row(ui, &format!("{} watermark", p.phase), &p.watermark);
                    pair_row(ui, &format!("{} retained", p.phase), &p.retained);
                }
            });
        }
        if !diff.holders.is_empty() {
            ui.add_space(8.0);
            ui.strong("Holders, by what each grew over its run");
            egui::Grid::new("diff holders")
                .striped(true)
                .num_columns(4)
                .show(ui, |ui| {
                    for h in &diff.holders {
                        pair_row(ui, &h.name, &h.growth);
                    }
                });
        }
        let [oa, ob] = &diff.oom_causes;
        if !oa.is_empty() || !ob.is_empty() {
            ui.add_space(8.0);
            ui.label(format!(
                "out-of-memory errors: A {} ({}), B {} ({})",
                oa.len(),
                oa.join(", "),
                ob.len(),
                ob.join(", ")
            ));
        }
    });
}
