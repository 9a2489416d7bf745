//! The top-level app: the open runs, the tabs, and the panels around the views (files come in
//! through [`crate::intake`]; one file is a [`crate::run::OpenRun`]).

use crate::compare::compare_ui;
use crate::intake::{Intake, drop_hint};
use crate::run::{EXAMPLE_NAME, EXAMPLE_RECORDING, OpenRun, Run};
use crate::timeline::Overlay;

/// Which view of the current run is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    /// Curves over time.
    Timeline,
    /// Per-phase attribution.
    Phases,
    /// Findings with evidence.
    Verdict,
    /// What was recorded, where.
    Info,
    /// Live blocks, leak suspects and segments (PyTorch snapshots).
    Blocks,
    /// The active memory timeline: a band per allocation (PyTorch snapshots).
    Memory,
    /// The flame graph of the memory by allocating stack (PyTorch snapshots).
    Flame,
    /// This run against another open one: by phase and holder, or by allocation site.
    Compare,
}

/// The viewer's state.
pub struct TidemarkApp {
    pub(crate) runs: Vec<OpenRun>,
    pub(crate) current: usize,
    /// The view shown.
    pub tab: Tab,
    /// The run drawn over the current one, by index.
    pub compare: Option<usize>,
    /// The (run, compared run) pair last put on one step axis.
    aligned: Option<(usize, usize)>,
    /// What the Compare tab compared last.
    compared: crate::diff::Memo<crate::diff::ComparedKey, crate::diff::Compared>,
    /// Files on their way in, and the recent ones.
    pub(crate) intake: Intake,
    /// *Save image*: the screenshot on its way, and what saving said.
    pub(crate) picture: crate::picture::Pending,
    /// Where *Save image* writes without asking (set by tests and scripts).
    pub image_destination: Option<std::path::PathBuf>,
}

impl Default for TidemarkApp {
    fn default() -> Self {
        let mut app = Self::empty();
        app.open_bytes(EXAMPLE_NAME, EXAMPLE_RECORDING);
        app
    }
}

impl TidemarkApp {
    /// An app with nothing open.
    pub fn empty() -> Self {
        Self {
            runs: Vec::new(),
            current: 0,
            tab: Tab::Timeline,
            compare: None,
            aligned: None,
            compared: crate::diff::Memo::default(),
            intake: Intake::new(),
            picture: crate::picture::Pending::default(),
            image_destination: None,
        }
    }

    /// Restores the recent files from the app's storage.
    pub fn with_storage(mut self, storage: Option<&dyn eframe::Storage>) -> Self {
        if let Some(recent) = storage.and_then(|s| s.get_string("recent_files")) {
            self.intake.recent = recent.lines().map(str::to_owned).collect();
        }
        self
    }

    /// The open files, in tab order.
    pub fn runs(&self) -> &[OpenRun] {
        &self.runs
    }

    /// The index of the file shown.
    pub fn current(&self) -> usize {
        self.current
    }

    /// Shows the file at `index`.
    pub fn select(&mut self, index: usize) {
        if index < self.runs.len() {
            self.current = index;
        }
    }

    /// The open file shown, if any.
    pub fn current_run_mut(&mut self) -> Option<&mut OpenRun> {
        self.runs.get_mut(self.current)
    }

    /// Opens a recording held in memory and shows it; `name` says where it came from.
    pub fn open_bytes(&mut self, name: &str, bytes: &[u8]) {
        let run = Run::from_bytes(name, bytes);
        self.add(OpenRun::new(name.to_owned(), run));
    }

    /// Shows a run that was opened elsewhere.
    pub fn add_run(&mut self, name: &str, run: Run) {
        self.add(OpenRun::new(name.to_owned(), Ok(run)));
    }

    /// Shows an error in a tab of its own (a file that could not be fetched or read).
    pub fn open_error(&mut self, name: &str, message: String) {
        self.add(OpenRun::new(name.to_owned(), Err(message)));
    }

    pub(crate) fn add(&mut self, run: OpenRun) {
        // The embedded example gives way to the first file the user opens.
        if self.runs.len() == 1 && self.runs[0].name == EXAMPLE_NAME && run.name != EXAMPLE_NAME {
            self.runs.clear();
            self.compare = None;
            self.compared.clear();
        }
        // A snapshot without a trace has no timeline: open it on what it has.
        if let Ok(Run {
            snapshot: Some(view),
            ..
        }) = &run.run
            && view.paired.is_none()
            && !view.has_timeline()
        {
            self.tab = Tab::Blocks;
        }
        // A page that opened several runs learns of each (`tidemark:opened`), shown or not.
        #[cfg(target_arch = "wasm32")]
        if run.run.is_ok() {
            crate::web::announce_opened(&run.name);
        }
        self.runs.push(run);
        self.current = self.runs.len() - 1;
    }

    fn receive(&mut self) {
        for run in self.intake.receive() {
            self.add(run);
        }
    }

    /// Draws the whole app into `ui`.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        #[cfg(target_arch = "wasm32")]
        for open in &mut self.runs {
            if open.announced == crate::run::Announced::Painted {
                open.announced = crate::run::Announced::Told;
                crate::web::announce(&open.name, open.run.as_ref().err());
            }
        }
        self.receive();
        self.intake.take_dropped_files(ui.ctx());
        if let Some(image) = self.picture.take() {
            self.picture.save(&image, self.image_destination.clone());
        }
        self.poll_follow(ui.ctx());

        egui::Panel::top("files").show(ui, |ui| {
            self.files_bar(ui);
        });
        if let Some(open) = self.runs.get(self.current)
            && let Ok(run) = &open.run
        {
            egui::Panel::top("views").show(ui, |ui| {
                ui.horizontal(|ui| {
                    for (tab, label) in [
                        (Tab::Timeline, "Timeline"),
                        (Tab::Phases, "Phases"),
                        (Tab::Verdict, "Verdict"),
                        (Tab::Info, "Run info"),
                    ] {
                        ui.selectable_value(&mut self.tab, tab, label);
                    }
                    if self.runs.iter().filter(|o| o.run.is_ok()).count() > 1 {
                        ui.selectable_value(&mut self.tab, Tab::Compare, "Compare");
                    } else if self.tab == Tab::Compare {
                        self.tab = Tab::Timeline;
                    }
                    if run.snapshot.is_some() {
                        ui.selectable_value(&mut self.tab, Tab::Memory, "Memory timeline");
                        ui.selectable_value(&mut self.tab, Tab::Flame, "Flame graph");
                        ui.selectable_value(&mut self.tab, Tab::Blocks, "Blocks");
                    } else if matches!(self.tab, Tab::Blocks | Tab::Memory | Tab::Flame) {
                        self.tab = Tab::Timeline;
                    }
                    ui.separator();
                    let (text, color) = crate::cards::headline(ui, run);
                    ui.colored_label(color, text);
                });
            });
        }
        egui::CentralPanel::default().show(ui, |ui| self.central(ui));
        // A run compared with another (picked, or opened together): the two are drawn on one
        // step axis, once per pair (the axis stays the user's to switch back).
        let pair = self.compare.map(|c| (self.current, c));
        if pair.is_some_and(|(r, c)| r != c)
            && pair != self.aligned
            && let Some(open) = self.runs.get_mut(self.current)
            && let Ok(run) = &open.run
        {
            if run.view.steps.is_available() {
                open.timeline.x_axis = crate::timeline::XAxis::Steps;
            }
            self.aligned = pair;
        }
        drop_hint(ui.ctx());
        #[cfg(target_arch = "wasm32")]
        // A followed file still waiting for its first bytes is neither shown nor failed yet.
        // Told at the next frame's start, once this one was painted (`Announced`).
        if let Some(open) = self.runs.get_mut(self.current)
            && open.announced == crate::run::Announced::Not
            && !(open.run.is_err() && open.follow.as_ref().is_some_and(|f| !f.is_done()))
        {
            open.announced = crate::run::Announced::Painted;
            ui.ctx().request_repaint();
        }
    }

    fn files_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("tidemark");
            if ui.button("Open…").clicked() {
                self.intake.pick_files(ui.ctx());
            }
            #[cfg(not(target_arch = "wasm32"))]
            {
                self.intake.recent_menu(ui);
                self.follow_checkbox(ui);
            }
            if !self.runs.is_empty()
                && ui
                    .button("Save image")
                    .on_hover_text("the window as it is now, as a PNG")
                    .clicked()
            {
                self.picture.request(ui.ctx());
            }
            if let Some(status) = self.picture.status() {
                ui.weak(status);
            }
            ui.separator();
            let mut close = None;
            for i in 0..self.runs.len() {
                let open = &self.runs[i];
                let text = if open.run.is_err() {
                    egui::RichText::new(format!("(error) {}", open.title()))
                        .color(ui.visuals().error_fg_color)
                } else {
                    egui::RichText::new(open.title())
                };
                if ui
                    .selectable_label(i == self.current, text)
                    .on_hover_text(&open.name)
                    .clicked()
                {
                    self.current = i;
                }
                if ui
                    .small_button("×")
                    .on_hover_text(format!("Close {}", open.title()))
                    .clicked()
                {
                    close = Some(i);
                }
            }
            if let Some(i) = close {
                self.close(i);
            }
            if self.intake.loading > 0 {
                // Not a spinner: it asks for a frame at every refresh of the screen, and in a
                // browser each frame is time taken from the reading, on the same thread (with
                // software WebGL a frame's commit waited 20–110 ms). A frame a second: dots that
                // move.
                let dots = ui.input(|i| i.time) as usize % 3 + 1;
                ui.label(format!("reading{:.<dots$}", ""));
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(1000));
            }
        });
    }

    /// Closes the file at `index`.
    pub fn close(&mut self, index: usize) {
        if index >= self.runs.len() {
            return;
        }
        self.runs.remove(index);
        // The places of the runs after it shift: what was compared is made again.
        self.compared.clear();
        self.compare = match self.compare {
            Some(c) if c == index => None,
            Some(c) if c > index => Some(c - 1),
            other => other,
        };
        if self.current >= index && self.current > 0 {
            self.current -= 1;
        }
    }

    fn central(&mut self, ui: &mut egui::Ui) {
        let current = self.current;
        let compare = self.compare.filter(|&c| c != current);
        let Some(open) = self.runs.get(current) else {
            ui.vertical_centered(|ui| {
                ui.add_space(ui.available_height() / 3.0);
                ui.heading("Open a recording (run.msgpack) or a PyTorch memory snapshot");
                ui.label("Use Open…, or drop a file onto this window.");
                if ui.button("Show the example").clicked() {
                    self.open_bytes(EXAMPLE_NAME, EXAMPLE_RECORDING);
                }
            });
            return;
        };
        let run = match &open.run {
            Ok(run) => run,
            Err(message) => {
                ui.add_space(12.0);
                ui.heading("This file cannot be opened");
                ui.colored_label(ui.visuals().error_fg_color, message);
                ui.add_space(8.0);
                ui.label("The other open files are not affected.");
                return;
            }
        };
        match self.tab {
            Tab::Timeline => {
                let names = self.names_ok();
                // The overlay is another entry of `runs`: split the borrows.
                let (left, right) = self.runs.split_at_mut(current);
                let (open, right) = right
                    .split_first_mut()
                    .map_or((None, &mut [][..]), |(o, r)| (Some(o), r));
                let Some(open) = open else { return };
                let other = compare.and_then(|c| {
                    if c < current {
                        left.get(c)
                    } else {
                        right.get(c - current - 1)
                    }
                });
                let overlay = other.and_then(|o| {
                    o.run.as_ref().ok().map(|r| Overlay {
                        name: o.title(),
                        recording: &r.recording,
                        view: &r.view,
                    })
                });
                let Ok(run) = &open.run else { return };
                ui.horizontal_wrapped(|ui| {
                    if let Some(follow) = &open.follow {
                        ui.colored_label(crate::style::GREEN, follow.status());
                        ui.separator();
                    }
                    compare_ui(ui, &mut self.compare, current, &names, run, other);
                });
                crate::timeline::toolbar(ui, &run.view, &mut open.timeline);
                if open.timeline.per_rank && run.view.origins.len() > 1 {
                    crate::timeline::small_multiples(ui, current, &run.recording, &run.view);
                } else {
                    crate::timeline::timeline_ui(
                        ui,
                        current,
                        &run.recording,
                        &run.view,
                        &mut open.timeline,
                        overlay.as_ref(),
                    );
                    let timeline = &mut open.timeline;
                    crate::diff::moments_panel(
                        ui,
                        run,
                        &mut timeline.moments,
                        &mut timeline.moments_memo,
                    );
                }
            }
            Tab::Phases => {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    crate::attribution::attribution_ui(ui, current, &run.analysis, &run.view);
                });
            }
            Tab::Verdict => {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    crate::cards::verdict_ui(ui, run);
                });
            }
            Tab::Info => {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    crate::cards::run_info_ui(ui, &open.name, run);
                });
            }
            Tab::Blocks => {
                let Some(open) = self.runs.get_mut(current) else {
                    return;
                };
                if let Ok(Run {
                    snapshot: Some(view),
                    ..
                }) = &open.run
                {
                    let times = crate::blocks::TimelineTimes {
                        pinned_ns: open.timeline.pinned_ns,
                        last_hovered_ns: open.timeline.last_hovered_ns,
                    };
                    crate::blocks::blocks_ui(ui, view, &mut open.blocks, times, &mut open.memory);
                }
            }
            Tab::Compare => {
                let names = self.names_ok();
                ui.horizontal(|ui| {
                    crate::compare::picker(ui, &mut self.compare, current, &names);
                });
                let Some((place, other)) = compare.and_then(|c| Some((c, self.runs.get(c)?)))
                else {
                    ui.weak("Pick the run to compare this one with (the baseline, A).");
                    return;
                };
                if let (Ok(base), Some(open)) = (&other.run, self.runs.get(current))
                    && let Ok(run) = &open.run
                {
                    crate::diff::runs_ui(
                        ui,
                        (other.title(), base),
                        (open.title(), run),
                        (place, current),
                        &mut self.compared,
                    );
                }
            }
            Tab::Flame => {
                let Some(open) = self.runs.get_mut(current) else {
                    return;
                };
                if let Ok(Run {
                    snapshot: Some(view),
                    ..
                }) = &open.run
                {
                    crate::flame::flame_ui(ui, &view.snapshot, &mut open.memory, &mut open.flame);
                }
            }
            Tab::Memory => {
                let Some(open) = self.runs.get_mut(current) else {
                    return;
                };
                if let Ok(Run {
                    snapshot: Some(view),
                    ..
                }) = &open.run
                {
                    crate::memtimeline::memory_ui(ui, &view.snapshot, &mut open.memory);
                }
            }
        }
        // A view went to a peak on the memory timeline: show it from the next frame.
        if let Some(open) = self.runs.get_mut(current)
            && std::mem::take(&mut open.memory.open)
        {
            self.tab = Tab::Memory;
            ui.ctx().request_repaint();
        }
    }

    /// The titles of the runs that opened, by index.
    fn names_ok(&self) -> Vec<(usize, String)> {
        self.runs
            .iter()
            .enumerate()
            .filter(|(_, o)| o.run.is_ok())
            .map(|(i, o)| (i, o.title().to_owned()))
            .collect()
    }
}

impl eframe::App for TidemarkApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        storage.set_string("recent_files", self.intake.recent.join("\n"));
    }
}

impl TidemarkApp {
    /// Reads what was added to followed files (each at its own pace, see `Follow::poll`, unless
    /// `now`).
    pub(crate) fn poll_follow(&mut self, ctx: &egui::Context) {
        let mut any = false;
        for open in &mut self.runs {
            any |= open.follow.is_some();
            open.poll_follow(false);
        }
        if any {
            ctx.request_repaint_after(std::time::Duration::from_millis(250));
        }
    }

    fn poll_follow_now(&mut self) {
        for open in &mut self.runs {
            open.poll_follow(true);
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl TidemarkApp {
    /// Reads a file in the background and shows it when it is read.
    pub fn open_path_in_background(&mut self, ctx: &egui::Context, path: std::path::PathBuf) {
        self.intake.open_path_in_background(ctx, path);
    }

    /// Opens several nodes' recordings of one run as one (`tidemark --one-run a b …`): ranks
    /// judged together, the files that do not belong named in the run's warnings.
    pub fn open_as_one_run(&mut self, paths: &[std::path::PathBuf]) {
        if paths.is_empty() {
            return;
        }
        let (name, run) = crate::intake::one_run(paths);
        self.add(OpenRun::new(name, run));
    }

    /// Opens a file now, on this thread.
    pub fn open_path(&mut self, path: &std::path::Path) {
        let run = crate::intake::read_path(path);
        if run.is_ok() {
            self.intake.remember(path);
        }
        self.add(OpenRun::new(path.to_string_lossy().into_owned(), run));
    }

    /// Opens the files named on the command line (`tidemark a b …`), each in its tab. Several
    /// are compared as `collector diff a b` compares them: the last one shown, against the first
    /// (the baseline, A).
    pub fn open_paths(&mut self, paths: &[std::path::PathBuf]) {
        for path in paths {
            self.open_path(path);
        }
        if self.runs.len() >= 2 {
            self.current = self.runs.len() - 1;
            self.compare = Some(0);
        } else {
            self.select(0);
        }
    }

    /// Opens a file that may still be written, and keeps reading what is added to it.
    pub fn follow_path(&mut self, path: &std::path::Path) {
        let name = path.to_string_lossy().into_owned();
        let mut open = OpenRun::new(
            name,
            Err("waiting for the recording's first bytes…".to_owned()),
        );
        open.follow = Some(crate::follow::Follow::new(path.to_owned()));
        self.add(open);
        self.poll_follow_now();
    }

    /// Starts or stops following the current file.
    pub fn set_follow(&mut self, on: bool) {
        let Some(open) = self.runs.get_mut(self.current) else {
            return;
        };
        // A snapshot is written once: there is nothing to follow (and its Blocks would go).
        let snapshot = matches!(
            &open.run,
            Ok(Run {
                snapshot: Some(_),
                ..
            })
        );
        if !on {
            open.follow = None;
        } else if open.follow.is_none() && !snapshot && std::path::Path::new(&open.name).is_file() {
            open.follow = Some(crate::follow::Follow::new(open.name.clone().into()));
            open.poll_follow(true);
        }
    }

    /// Recently opened files, newest first.
    pub fn recent(&self) -> &[String] {
        &self.intake.recent
    }

    /// *Follow*: keeps reading the current file as the collector writes it.
    fn follow_checkbox(&mut self, ui: &mut egui::Ui) {
        if let Some(current) = self.runs.get(self.current) {
            let following = current.follow.is_some();
            let mut on = following;
            if std::path::Path::new(&current.name).is_file() {
                ui.checkbox(&mut on, "Follow")
                    .on_hover_text("Keep reading the file as the collector writes it");
            }
            if on != following {
                self.set_follow(on);
            }
        }
    }
}

#[cfg(target_arch = "wasm32")]
impl TidemarkApp {
    /// Fetches a recording hosted next to the page (same origin) and shows it, or shows why it
    /// could not be fetched.
    pub fn open_url(&mut self, ctx: &egui::Context, url: String) {
        self.intake.open_url(ctx, url);
    }

    /// Opens per-rank snapshots hosted next to the page as one run named `folder`.
    pub fn open_ranks(&mut self, ctx: &egui::Context, folder: String, urls: Vec<String>) {
        self.intake.open_ranks(ctx, folder, urls);
    }

    /// Follows a recording hosted next to the page (same origin) while it is written, about
    /// four times a second: its bytes from where the last fetch stopped (`Range: bytes=N-`), or a run
    /// the server makes from several files whole again when they changed (`If-None-Match`).
    pub fn follow_url(&mut self, url: String, fetch: crate::follow::Fetch) {
        let mut open = OpenRun::new(
            url.clone(),
            Err("waiting for the recording's first bytes…".to_owned()),
        );
        open.follow = Some(crate::follow::Follow::url(url, fetch));
        self.add(open);
        self.poll_follow_now();
    }
}
