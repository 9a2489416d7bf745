//! The top-level app: the open runs, how files come in, and the panels around the views.

use std::sync::mpsc::{Receiver, Sender, channel};

use collector::analysis::{Analysis, analyze};

use collector::format::format_bytes;
use collector::recording::Recording;

use crate::timeline::{Overlay, TimelineState};
use crate::view::RunView;

/// The recording shown when nothing else is opened: made by the collector from a real job
/// (`collector/tests/data/corpus/eval_keeps_predictions.py`, recorded by `make.sh` there).
pub const EXAMPLE_RECORDING: &[u8] =
    include_bytes!("../../collector/tests/data/corpus/eval_keeps_predictions.msgpack");

/// The name the embedded example is shown under.
pub const EXAMPLE_NAME: &str = "example: eval_keeps_predictions.msgpack";

/// A recording with its diagnosis and what the views draw.
pub struct Run {
    /// The recording.
    pub recording: Recording,
    /// What the analysis makes of it.
    pub analysis: Analysis,
    /// What the views draw.
    pub view: RunView,
    /// When the file was a PyTorch memory snapshot: its blocks, suspects and segments.
    pub snapshot: Option<crate::blocks::SnapshotView>,
}

impl Run {
    /// Analyses a recording and prepares its views.
    pub fn new(recording: Recording) -> Self {
        // The analysis and the curves' levels of detail are independent: natively, in parallel.
        #[cfg(not(target_arch = "wasm32"))]
        let (analysis, traces) = std::thread::scope(|scope| {
            let traces = scope.spawn(|| RunView::traces(&recording));
            let analysis = analyze(&recording);
            let traces = traces
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (analysis, traces)
        });
        #[cfg(target_arch = "wasm32")]
        let (analysis, traces) = (analyze(&recording), RunView::traces(&recording));
        let view = RunView::with_traces(&recording, &analysis, traces);
        Self {
            recording,
            analysis,
            view,
            snapshot: None,
        }
    }

    /// Reads a recording, or a PyTorch memory snapshot (a pickle), held in memory; the error
    /// names `name`.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self, String> {
        let opened = collector::open::read_any(bytes).map_err(|err| format!("{name}: {err}"))?;
        let (recording, snapshot) = opened.into_recording();
        let mut run = Self::new(recording);
        run.snapshot = snapshot.map(|s| crate::blocks::SnapshotView::new(s, &run.analysis));
        Ok(run)
    }

    /// Bytes held: the recording's samples and the view's levels and curves.
    pub fn heap_bytes(&self) -> usize {
        let series: usize = self
            .recording
            .series
            .iter()
            .map(|s| (s.times_ns.capacity() + s.values.capacity()) * 8)
            .sum();
        series
            + self.recording.allocator.capacity()
                * std::mem::size_of::<collector::recording::AllocatorSample>()
            + self.recording.phases.capacity()
                * std::mem::size_of::<collector::recording::PhaseEdge>()
            + self.view.heap_bytes()
    }
}

/// One open file: its run, or why it could not be opened.
pub struct OpenRun {
    /// Where it came from (a path, a file name, a URL).
    pub name: String,
    /// The run, or the error that stopped it from opening.
    pub run: Result<Run, String>,
    /// What the timeline shows.
    pub timeline: TimelineState,
    /// The blocks view's time (snapshots only).
    pub blocks: crate::blocks::BlocksState,
    #[cfg(not(target_arch = "wasm32"))]
    follow: Option<crate::follow::Follow>,
    /// Whether the page was told that this file is shown (see `web::announce`).
    #[cfg(target_arch = "wasm32")]
    announced: bool,
}

impl OpenRun {
    fn new(name: String, run: Result<Run, String>) -> Self {
        Self {
            name,
            run,
            timeline: TimelineState::default(),
            blocks: crate::blocks::BlocksState::default(),
            #[cfg(not(target_arch = "wasm32"))]
            follow: None,
            #[cfg(target_arch = "wasm32")]
            announced: false,
        }
    }

    /// The short name shown on its tab.
    pub fn title(&self) -> &str {
        self.name
            .rsplit(['/', '\\'])
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.name)
    }
}

/// A file arriving from a dialog, a drop, a download or a background read.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))] // `Run` comes from browsers only.
pub(crate) enum Incoming {
    /// A file, read (or not).
    Run {
        /// Where it came from.
        name: String,
        /// It, or why it could not be opened.
        run: Result<Box<Run>, String>,
    },
    /// A file read from this path (remembered among the recent files when it opened).
    #[cfg(not(target_arch = "wasm32"))]
    Path {
        /// The file.
        path: std::path::PathBuf,
        /// It, or why it could not be opened.
        run: Result<Box<Run>, String>,
    },
    /// The task that sent the files is done.
    Done,
}

impl Incoming {
    /// Reads and opens a file.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn read(path: std::path::PathBuf) -> Self {
        let run = read_path(&path).map(Box::new);
        Self::Path { path, run }
    }
}

/// Reads and opens a file; the error names it.
#[cfg(not(target_arch = "wasm32"))]
fn read_path(path: &std::path::Path) -> Result<Run, String> {
    let name = path.to_string_lossy();
    match std::fs::read(path) {
        Ok(bytes) => Run::from_bytes(&name, &bytes),
        Err(err) => Err(format!("{name}: cannot read the file: {err}")),
    }
}

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
}

/// The viewer's state.
pub struct TidemarkApp {
    runs: Vec<OpenRun>,
    current: usize,
    /// The view shown.
    pub tab: Tab,
    /// The run drawn over the current one, by index.
    pub compare: Option<usize>,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    recent: Vec<String>,
    inbox: (Sender<Incoming>, Receiver<Incoming>),
    /// Files being read in the background.
    loading: usize,
}

impl Default for TidemarkApp {
    fn default() -> Self {
        let mut app = Self::empty();
        app.open_bytes(EXAMPLE_NAME, EXAMPLE_RECORDING);
        app
    }
}

/// How many recent files are remembered.
#[cfg(not(target_arch = "wasm32"))]
const RECENT: usize = 10;

impl TidemarkApp {
    /// An app with nothing open.
    pub fn empty() -> Self {
        Self {
            runs: Vec::new(),
            current: 0,
            tab: Tab::Timeline,
            compare: None,
            recent: Vec::new(),
            inbox: channel(),
            loading: 0,
        }
    }

    /// Restores the recent files from the app's storage.
    pub fn with_storage(mut self, storage: Option<&dyn eframe::Storage>) -> Self {
        if let Some(recent) = storage.and_then(|s| s.get_string("recent_files")) {
            self.recent = recent.lines().map(str::to_owned).collect();
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

    fn add(&mut self, run: OpenRun) {
        // The embedded example gives way to the first file the user opens.
        if self.runs.len() == 1 && self.runs[0].name == EXAMPLE_NAME && run.name != EXAMPLE_NAME {
            self.runs.clear();
            self.compare = None;
        }
        // A snapshot without a trace has no timeline: open it on what it has.
        if let Ok(Run {
            snapshot: Some(view),
            ..
        }) = &run.run
            && !view.has_timeline()
        {
            self.tab = Tab::Blocks;
        }
        self.runs.push(run);
        self.current = self.runs.len() - 1;
    }

    /// A sender for files read elsewhere (a download, a dialog); `ctx` is woken when one comes.
    pub(crate) fn sender(&self) -> Sender<Incoming> {
        self.inbox.0.clone()
    }

    fn receive(&mut self) {
        while let Ok(incoming) = self.inbox.1.try_recv() {
            match incoming {
                Incoming::Run { name, run } => self.add(OpenRun::new(name, run.map(|r| *r))),
                #[cfg(not(target_arch = "wasm32"))]
                Incoming::Path { path, run } => {
                    if run.is_ok() {
                        self.remember(&path);
                    }
                    let name = path.to_string_lossy().into_owned();
                    self.add(OpenRun::new(name, run.map(|r| *r)));
                }
                Incoming::Done => self.loading = self.loading.saturating_sub(1),
            }
        }
    }

    /// Draws the whole app into `ui`.
    pub fn show(&mut self, ui: &mut egui::Ui) {
        self.receive();
        self.take_dropped_files(ui.ctx());
        #[cfg(not(target_arch = "wasm32"))]
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
                    if run.snapshot.is_some() {
                        ui.selectable_value(&mut self.tab, Tab::Blocks, "Blocks");
                    } else if self.tab == Tab::Blocks {
                        self.tab = Tab::Timeline;
                    }
                    ui.separator();
                    let (text, color) = crate::cards::headline(ui, run);
                    ui.colored_label(color, text);
                });
            });
        }
        egui::CentralPanel::default().show(ui, |ui| self.central(ui));
        drop_hint(ui.ctx());
        #[cfg(target_arch = "wasm32")]
        if let Some(open) = self.runs.get_mut(self.current)
            && !open.announced
        {
            open.announced = true;
            crate::web::announce(&open.name, open.run.as_ref().err());
        }
    }

    fn files_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("tidemark");
            if ui.button("Open…").clicked() {
                self.pick_files(ui.ctx());
            }
            #[cfg(not(target_arch = "wasm32"))]
            self.recent_menu(ui);
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
            if self.loading > 0 {
                ui.spinner();
                ui.label("reading…");
            }
        });
    }

    /// Closes the file at `index`.
    pub fn close(&mut self, index: usize) {
        if index >= self.runs.len() {
            return;
        }
        self.runs.remove(index);
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
                    #[cfg(not(target_arch = "wasm32"))]
                    if let Some(follow) = &open.follow {
                        ui.colored_label(
                            egui::Color32::from_rgb(0x2f, 0xa3, 0x6b),
                            follow.status(),
                        );
                        ui.separator();
                    }
                    compare_ui(ui, &mut self.compare, current, &names, run, other);
                });
                crate::timeline::toolbar(ui, &run.view, &mut open.timeline);
                crate::timeline::timeline_ui(
                    ui,
                    current,
                    &run.recording,
                    &run.view,
                    &mut open.timeline,
                    overlay.as_ref(),
                );
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
                    crate::cards::run_info_ui(ui, &open.name, &run.recording);
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
                    crate::blocks::blocks_ui(ui, view, &mut open.blocks, times);
                }
            }
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

    fn take_dropped_files(&mut self, ctx: &egui::Context) {
        let dropped = ctx.input(|i| i.raw.dropped_files.clone());
        for file in dropped {
            #[cfg(not(target_arch = "wasm32"))]
            self.open_path_in_background(ctx, file.path().to_owned());
            #[cfg(target_arch = "wasm32")]
            {
                let tx = self.sender();
                let ctx = ctx.clone();
                self.loading += 1;
                wasm_bindgen_futures::spawn_local(async move {
                    let name = file.path().to_string_lossy().into_owned();
                    let run = match file.bytes_async().await {
                        Ok(bytes) => Run::from_bytes(&name, &bytes).map(Box::new),
                        Err(err) => Err(format!("{name}: cannot read the file: {err}")),
                    };
                    let _ = tx.send(Incoming::Run { name, run });
                    let _ = tx.send(Incoming::Done);
                    ctx.request_repaint();
                });
            }
        }
    }

    fn pick_files(&mut self, ctx: &egui::Context) {
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        const TITLE: &str = "Open recordings";
        const KINDS: &str = "tidemark recordings and PyTorch snapshots";
        const EXTENSIONS: [&str; 3] = ["msgpack", "pickle", "pkl"];
        #[cfg(not(target_arch = "wasm32"))]
        {
            // The dialog blocks its thread until the user answers; files are read there too.
            let dialog = rfd::FileDialog::new()
                .set_title(TITLE)
                .add_filter(KINDS, &EXTENSIONS)
                .add_filter("all files", &["*"]);
            std::thread::spawn(move || {
                for path in dialog.pick_files().unwrap_or_default() {
                    let _ = tx.send(Incoming::read(path));
                }
                let _ = tx.send(Incoming::Done);
                ctx.request_repaint();
            });
        }
        #[cfg(target_arch = "wasm32")]
        {
            let dialog = rfd::AsyncFileDialog::new()
                .set_title(TITLE)
                .add_filter(KINDS, &EXTENSIONS)
                .add_filter("all files", &["*"]);
            wasm_bindgen_futures::spawn_local(async move {
                for file in dialog.pick_files().await.unwrap_or_default() {
                    let bytes = file.read().await;
                    let name = file.file_name();
                    let run = Run::from_bytes(&name, &bytes).map(Box::new);
                    let _ = tx.send(Incoming::Run { name, run });
                }
                let _ = tx.send(Incoming::Done);
                ctx.request_repaint();
            });
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl TidemarkApp {
    /// Reads a file in the background and shows it when it is read.
    pub fn open_path_in_background(&mut self, ctx: &egui::Context, path: std::path::PathBuf) {
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        std::thread::spawn(move || {
            let _ = tx.send(Incoming::read(path));
            let _ = tx.send(Incoming::Done);
            ctx.request_repaint();
        });
    }

    /// Opens a file now, on this thread.
    pub fn open_path(&mut self, path: &std::path::Path) {
        let run = read_path(path);
        if run.is_ok() {
            self.remember(path);
        }
        self.add(OpenRun::new(path.to_string_lossy().into_owned(), run));
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

    /// Reads what was added to followed files (at most every 250 ms unless `now`).
    fn poll_follow(&mut self, ctx: &egui::Context) {
        let mut any = false;
        for open in &mut self.runs {
            if let Some(follow) = &mut open.follow {
                any = true;
                follow.poll(&mut open.run, false);
            }
        }
        if any {
            ctx.request_repaint_after(std::time::Duration::from_millis(250));
        }
    }

    fn poll_follow_now(&mut self) {
        for open in &mut self.runs {
            if let Some(follow) = &mut open.follow {
                follow.poll(&mut open.run, true);
            }
        }
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
            if let Some(follow) = &mut open.follow {
                follow.poll(&mut open.run, true);
            }
        }
    }

    fn remember(&mut self, path: &std::path::Path) {
        let path = std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.to_owned())
            .to_string_lossy()
            .into_owned();
        self.recent.retain(|p| p != &path);
        self.recent.insert(0, path);
        self.recent.truncate(RECENT);
    }

    /// Recently opened files, newest first.
    pub fn recent(&self) -> &[String] {
        &self.recent
    }

    fn recent_menu(&mut self, ui: &mut egui::Ui) {
        let mut open = None;
        ui.add_enabled_ui(!self.recent.is_empty(), |ui| {
            ui.menu_button("Recent", |ui| {
                for path in &self.recent {
                    if ui.button(path).clicked() {
                        open = Some(path.clone());
                        ui.close();
                    }
                }
            });
        });
        if let Some(path) = open {
            self.open_path_in_background(ui.ctx(), path.into());
        }
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
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        wasm_bindgen_futures::spawn_local(async move {
            let run = match crate::web::fetch(&url).await {
                Ok(bytes) => Run::from_bytes(&url, &bytes).map(Box::new),
                Err(err) => Err(format!("{url}: {err}")),
            };
            let _ = tx.send(Incoming::Run { name: url, run });
            let _ = tx.send(Incoming::Done);
            ctx.request_repaint();
        });
    }
}

/// "compare with: [run]" and the difference in growth per step.
fn compare_ui(
    ui: &mut egui::Ui,
    compare: &mut Option<usize>,
    current: usize,
    names: &[(usize, String)],
    run: &Run,
    other: Option<&OpenRun>,
) {
    let others: Vec<&(usize, String)> = names.iter().filter(|(i, _)| *i != current).collect();
    if others.is_empty() {
        ui.weak("Open a second recording to compare (before/after a fix).");
        return;
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
    if let Some(Ok(other_run)) = other.map(|o| &o.run) {
        ui.label(compare_text(&run.analysis, &other_run.analysis));
    }
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

/// While files are dragged over the window, say that dropping opens them.
fn drop_hint(ctx: &egui::Context) {
    if ctx.input(|i| i.raw.hovered_files.is_empty()) {
        return;
    }
    let painter = ctx.layer_painter(egui::LayerId::new(
        egui::Order::Foreground,
        egui::Id::unique("drop_hint"),
    ));
    let rect = ctx.content_rect();
    painter.rect_filled(rect, 0.0, egui::Color32::from_black_alpha(160));
    painter.text(
        rect.center(),
        egui::Align2::CENTER_CENTER,
        "Drop to open",
        egui::FontId::proportional(28.0),
        egui::Color32::WHITE,
    );
}

impl eframe::App for TidemarkApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        storage.set_string("recent_files", self.recent.join("\n"));
    }
}
