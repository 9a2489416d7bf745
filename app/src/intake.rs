//! How files come in: dialogs, drops, background reads, `?url=` on the web, recent files, and
//! files followed while the collector writes them.

use std::sync::mpsc::{Receiver, Sender, channel};

use crate::run::OpenRun;
use crate::run::Run;

/// How many recent files are remembered.
#[cfg(not(target_arch = "wasm32"))]
const RECENT: usize = 10;

/// Files on their way in: what reads them in the background sends them here, how many reads
/// are still going on, and the files opened recently.
pub(crate) struct Intake {
    inbox: (Sender<Incoming>, Receiver<Incoming>),
    /// Files being read in the background.
    pub(crate) loading: usize,
    /// Recently opened files, newest first.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) recent: Vec<String>,
}

impl Intake {
    pub(crate) fn new() -> Self {
        Self {
            inbox: channel(),
            loading: 0,
            recent: Vec::new(),
        }
    }

    /// A sender for files read elsewhere (a download, a dialog); the sender wakes the window
    /// (`request_repaint`) after sending.
    pub(crate) fn sender(&self) -> Sender<Incoming> {
        self.inbox.0.clone()
    }

    /// The files that arrived since the last look, to be shown in that order (those read from a
    /// path and opened are remembered among the recent files).
    pub(crate) fn receive(&mut self) -> Vec<OpenRun> {
        let mut arrived = Vec::new();
        while let Ok(incoming) = self.inbox.1.try_recv() {
            match incoming {
                Incoming::Run { name, run } => arrived.push(OpenRun::new(name, run.map(|r| *r))),
                #[cfg(not(target_arch = "wasm32"))]
                Incoming::Path { path, run } => {
                    if run.is_ok() {
                        self.remember(&path);
                    }
                    let name = path.to_string_lossy().into_owned();
                    arrived.push(OpenRun::new(name, run.map(|r| *r)));
                }
                Incoming::Done => self.loading = self.loading.saturating_sub(1),
            }
        }
        arrived
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

/// Nodes' recordings of one run, read and merged, and the name the run is shown under.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn one_run(paths: &[std::path::PathBuf]) -> (String, Result<Run, String>) {
    let files: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let name = match paths {
        [first, _, ..] => format!(
            "{} + {} more (one run)",
            first.to_string_lossy(),
            paths.len() - 1
        ),
        _ => paths
            .first()
            .map_or(String::new(), |p| p.to_string_lossy().into_owned()),
    };
    let run = collector::open::read_one_run(&files)
        .map(Run::from_nodes)
        .map_err(|reasons| format!("{name}: {}", reasons.join("; ")));
    (name, run)
}

/// Whether files dropped together are the nodes of one run: recordings from as many hosts, of
/// one command, started together (their headers say; nothing else is read).
#[cfg(not(target_arch = "wasm32"))]
fn nodes_of_one_run(paths: &[std::path::PathBuf]) -> bool {
    let headers: Option<Vec<_>> = paths
        .iter()
        .map(|p| collector::open::peek_header(p))
        .collect();
    headers
        .is_some_and(|h| collector::recording::are_nodes_of_one_run(&h.iter().collect::<Vec<_>>()))
}

/// Opens what is at `path` as `collector report` does ([`collector::open::open_path`]): a
/// recording, a snapshot, a folder of nodes' recordings as one run, a folder of per-rank
/// snapshots. The error names it.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn read_path(path: &std::path::Path) -> Result<Run, String> {
    let input = collector::open::open_path(path)
        .map_err(|err| format!("{}: {}", path.to_string_lossy(), err.what()))?;
    let recording = input.kind() == collector::open::Kind::Recording;
    let mut run = Run::from_input(input);
    // A recording made with --history opens with the snapshot dumped next to it (at the OOM).
    if recording && let Some(paired) = collector::open::paired_snapshot(path, &run.recording) {
        let file = paired.path.to_string_lossy().into_owned();
        match paired.snapshot {
            Ok(snapshot) => {
                run.snapshot = Some(crate::blocks::SnapshotView::paired(
                    snapshot,
                    file,
                    paired.reason,
                ));
            }
            Err(err) => run.recording.warnings.push(format!(
                "the snapshot dumped next to it cannot be read: {err}"
            )),
        }
    }
    Ok(run)
}

impl Intake {
    pub(crate) fn take_dropped_files(&mut self, ctx: &egui::Context) {
        let dropped = ctx.input(|i| i.raw.dropped_files.clone());
        // Nodes' recordings of one run dropped together open as that run.
        #[cfg(not(target_arch = "wasm32"))]
        {
            let paths: Vec<std::path::PathBuf> =
                dropped.iter().map(|f| f.path().to_owned()).collect();
            if nodes_of_one_run(&paths) {
                self.open_as_one_run_in_background(ctx, paths);
                return;
            }
        }
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

    pub(crate) fn pick_files(&mut self, ctx: &egui::Context) {
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        const TITLE: &str = "Open recordings";
        const KINDS: &str =
            "tidemark recordings, PyTorch snapshots, profiler traces and memory timelines";
        const EXTENSIONS: [&str; 5] = collector::open::EXTENSIONS;
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
                    let name = file.file_name();
                    let run = crate::web::open_file(file.inner()).await.map(Box::new);
                    let _ = tx.send(Incoming::Run { name, run });
                }
                let _ = tx.send(Incoming::Done);
                ctx.request_repaint();
            });
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Intake {
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

    /// [`one_run`], read in the background.
    pub(crate) fn open_as_one_run_in_background(
        &mut self,
        ctx: &egui::Context,
        paths: Vec<std::path::PathBuf>,
    ) {
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        std::thread::spawn(move || {
            let (name, run) = one_run(&paths);
            let _ = tx.send(Incoming::Run {
                name,
                run: run.map(Box::new),
            });
            let _ = tx.send(Incoming::Done);
            ctx.request_repaint();
        });
    }

    pub(crate) fn remember(&mut self, path: &std::path::Path) {
        let path = std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.to_owned())
            .to_string_lossy()
            .into_owned();
        self.recent.retain(|p| p != &path);
        self.recent.insert(0, path);
        self.recent.truncate(RECENT);
    }

    pub(crate) fn recent_menu(&mut self, ui: &mut egui::Ui) {
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
    }
}

#[cfg(target_arch = "wasm32")]
impl Intake {
    /// Fetches a recording hosted next to the page (same origin) and shows it, or shows why it
    /// could not be fetched.
    pub fn open_url(&mut self, ctx: &egui::Context, url: String) {
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        wasm_bindgen_futures::spawn_local(async move {
            let run = crate::web::fetch(&url).await.map(Box::new);
            let _ = tx.send(Incoming::Run { name: url, run });
            let _ = tx.send(Incoming::Done);
            ctx.request_repaint();
        });
    }

    /// Opens per-rank snapshots hosted next to the page as one run named `folder` (as a folder
    /// of them opens natively): each fetched as it arrives, the ranks from their file names,
    /// judged together; one that cannot be fetched or read is a row with its error.
    pub fn open_ranks(&mut self, ctx: &egui::Context, folder: String, urls: Vec<String>) {
        let tx = self.sender();
        let ctx = ctx.clone();
        self.loading += 1;
        wasm_bindgen_futures::spawn_local(async move {
            let mut snapshots = Vec::new();
            for url in urls {
                let file = url.rsplit('/').next().unwrap_or(&url).to_owned();
                let Some(rank) = collector::snapshot::ranks::rank_of(&file) else {
                    continue;
                };
                let snapshot = crate::web::fetch_snapshot(&url).await;
                snapshots.push((rank, file, snapshot));
            }
            let run = if snapshots.is_empty() {
                Err(format!(
                    "{folder}: no file names a rank (rank0_…, …_rank1.pickle): nothing to open as ranks"
                ))
            } else {
                let ranks =
                    collector::snapshot::ranks::RankFolder::new(folder.clone().into(), snapshots);
                Ok(Box::new(Run::from_rank_folder(ranks)))
            };
            let _ = tx.send(Incoming::Run { name: folder, run });
            let _ = tx.send(Incoming::Done);
            ctx.request_repaint();
        });
    }
}

/// While files are dragged over the window, say that dropping opens them.
pub(crate) fn drop_hint(ctx: &egui::Context) {
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
