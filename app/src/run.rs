//! One open file: the recording, its analysis and what the views draw (a [`Run`]), or why it
//! could not be opened, with the state of its views (an [`OpenRun`]).

use collector::analysis::{Analysis, analyze};
use collector::open::Kind;
use collector::recording::Recording;

use crate::timeline::TimelineState;
use crate::view::RunView;

/// The recording shown when nothing else is opened: made by the collector from a real job
/// (`collector/tests/data/corpus/eval_keeps_predictions.py`, recorded by `make.sh` there).
pub const EXAMPLE_RECORDING: &[u8] =
    include_bytes!("../../collector/tests/data/corpus/eval_keeps_predictions.msgpack");

/// The name the embedded example is shown under.
pub const EXAMPLE_NAME: &str = "example: eval_keeps_predictions.msgpack";

/// The largest snapshot a browser tab opens as it arrives (fetched by `?url=`, or picked with
/// Open…), refused from its size before it is read: a tab has 4 GB of memory (wasm32), and a
/// snapshot read part by part holds what was found in it, not its bytes (3.46 GB for a 2.07 GB
/// one). Below this, one is refused from its entries once read ([`too_many_for_a_tab`]).
pub const WEB_MAX_SNAPSHOT: u64 = 5 << 29;

/// The largest snapshot a browser tab opens from bytes it already holds (a file dropped on the
/// page arrives whole): its bytes and what was found in them together.
pub const WEB_MAX_SNAPSHOT_HELD: u64 = 1 << 30;

/// The largest profiler trace a browser tab opens: the tab holds its bytes, then up to half
/// as much of its events while they become a recording (a 1 GB trace: about 1.5 GB).
pub const WEB_MAX_TRACE: u64 = 3 << 29;

/// The largest recording a browser tab opens: the viewer holds 20 to 26 bytes per sample, and a
/// recording stores one in 2.6 to 8 bytes.
pub const WEB_MAX_RECORDING: u64 = 256 << 20;

/// The largest file of any kind a browser tab opens: a file the server says is longer is refused
/// before it is downloaded (`web/index.html`'s early fetch holds the same number).
pub const TAB_FETCH_MOST: u64 = max(max(WEB_MAX_SNAPSHOT, WEB_MAX_RECORDING), WEB_MAX_TRACE);

/// At most this many bytes of a file fetched by `?url=` are read ahead of what the tab parsed
/// (`web/index.html`'s early fetch holds the same number).
pub const TAB_FETCH_WINDOW: u32 = 64 << 20;

const fn max(a: u64, b: u64) -> u64 {
    if a > b { a } else { b }
}

/// What a file opened in a browser tab is, for [`too_big_for_a_tab`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TabFile {
    /// A recording (held whole while it is read).
    Recording,
    /// A snapshot read as it arrives.
    Snapshot,
    /// A snapshot whose bytes the tab holds whole.
    SnapshotHeld,
    /// A profiler trace or memory timeline: its bytes held, and what is kept of its events.
    Trace,
    /// A file whose first bytes have not arrived yet: too big when too big for any kind.
    Any,
}

/// Why a file of `len` bytes is too big to open in a browser tab (`None`: it is not). Said
/// before reading (or as soon as that many bytes arrived), instead of the tab dying of memory.
pub fn too_big_for_a_tab(name: &str, len: u64, kind: TabFile) -> Option<String> {
    let (limit, what) = match kind {
        TabFile::Recording => (WEB_MAX_RECORDING, "recording"),
        TabFile::Snapshot => (WEB_MAX_SNAPSHOT, "snapshot"),
        TabFile::SnapshotHeld => (WEB_MAX_SNAPSHOT_HELD, "snapshot"),
        TabFile::Trace => (WEB_MAX_TRACE, "profiler file"),
        TabFile::Any => (TAB_FETCH_MOST, "file"),
    };
    (len > limit).then(|| {
        let how = if kind == TabFile::SnapshotHeld {
            " when dropped (open it with Open…, which reads it as it arrives, up to "
        } else {
            " (up to "
        };
        format!(
            "{name}: this {} {what} is more than a browser tab can open{how}{}: a tab has 4 GB of memory); open it with the desktop viewer (tidemark FILE) or `collector report FILE`",
            collector::format::format_bytes(len as f64),
            collector::format::format_bytes(if kind == TabFile::SnapshotHeld { WEB_MAX_SNAPSHOT as f64 } else { limit as f64 })
        )
    })
}

/// What a browser tab holds for a snapshot of `entries` trace entries of which `readings` change
/// allocated or reserved memory, once it is shown: the app itself, the entries (40 bytes each
/// when this was calibrated, plus the parse's remains) and, per reading, the recording's
/// allocator numbers (by column, ~20 bytes), the curves and their levels, and the blocks'
/// lifetimes. Measured in Chromium then: 2.12 GB for 19.5 M entries and 13 M readings (a 2.07 GB
/// snapshot), 0.74 GB for 6 M and 4 M (636 MB); this says 2.35 and 0.79 GB. (With 48-byte
/// entries, 60 bytes an entry here: 2.51 and 0.84 GB said for 2.28 and 0.79 measured.) Since
/// entries take 32 bytes and the judging copies less, the same files take 1.52 and 0.56 GB: this
/// errs on the safe side by more.
pub fn tab_memory_for_snapshot(entries: usize, readings: usize) -> u64 {
    100_000_000 + entries as u64 * 52 + readings as u64 * 95
}

/// The memory a tab may fill: wasm32 addresses 4 GiB, and the app itself needs some.
pub const TAB_MEMORY: u64 = 3_800_000_000;

/// Why a snapshot read in a browser tab is too big to show there (`None`: it is not), from what
/// was found in it: said after reading it, before the views would take more than the tab has.
pub fn too_many_for_a_tab(name: &str, snapshot: &collector::snapshot::Snapshot) -> Option<String> {
    too_many_entries_for_a_tab(name, snapshot.entries.len(), snapshot.reading_count())
}

/// [`too_many_for_a_tab`] from the counts.
fn too_many_entries_for_a_tab(name: &str, entries: usize, readings: usize) -> Option<String> {
    let need = tab_memory_for_snapshot(entries, readings);
    (need > TAB_MEMORY).then(|| {
        let millions = |n: usize| format!("{:.1} million", n as f64 / 1e6);
        format!(
            "{name}: this snapshot holds {} trace entries ({} of them allocations and frees): showing it would take about {} of memory, more than a browser tab has (4 GB); open it with the desktop viewer (tidemark FILE) or `collector report FILE`",
            millions(entries),
            millions(readings),
            collector::format::format_bytes(need as f64)
        )
    })
}

/// A file arriving part by part (a fetch's body, a picked file's stream): what it is is told
/// from its first bytes ([`Kind::of`]); a snapshot is read as its parts come, so the tab never
/// holds its bytes; a recording is gathered and read at the end; anything else is refused at once.
pub struct Arriving {
    name: String,
    received: u64,
    /// The file's length when known beforehand (a `Content-Length`, a picked file's size): it is
    /// refused as too big as soon as its kind is known.
    expected: Option<u64>,
    reading: Reading,
}

enum Reading {
    /// The first bytes, until there are enough to tell the kind.
    Head(Vec<u8>),
    Snapshot(Box<collector::snapshot::SnapshotReader>),
    /// Bytes held whole until the end, and what they are as a tab's limit counts them.
    Bytes(Vec<u8>, TabFile),
}

impl Arriving {
    /// A file called `name` (errors name it) of which nothing has arrived yet.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            received: 0,
            expected: None,
            reading: Reading::Head(Vec::new()),
        }
    }

    /// [`Arriving::new`] of a file known to be `len` bytes long.
    pub fn expecting(name: &str, len: u64) -> Self {
        Self {
            expected: Some(len),
            ..Self::new(name)
        }
    }

    /// The next part of the file; an error (the file's, or that it is too big) ends it.
    pub fn push(&mut self, part: &[u8]) -> Result<(), String> {
        self.push_from(part.len(), |room| room.write_copy_of_slice(part))
    }

    /// The next `len` bytes of the file, which `fill` writes: straight into what holds them once
    /// the kind is known (a snapshot reader's window, a recording's bytes), so that a browser's
    /// part is copied into the tab's memory once. An error ends it, as for [`Arriving::push`].
    pub fn push_from(
        &mut self,
        len: usize,
        fill: impl collector::snapshot::Fill,
    ) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        self.received += len as u64;
        let Reading::Head(head) = &mut self.reading else {
            return self.take(len, fill);
        };
        // The first bytes are gathered until they tell what the file is.
        collector::snapshot::append_filled(head, len, fill);
        if head.len() < collector::open::KIND_BYTES {
            return Ok(());
        }
        let head = std::mem::take(head);
        self.reading = match Kind::of(&head) {
            Kind::Snapshot => {
                Reading::Snapshot(Box::new(collector::snapshot::SnapshotReader::new()))
            }
            Kind::Recording => Reading::Bytes(Vec::new(), TabFile::Recording),
            // A profiler trace or timeline (gzipped or not) is held whole, then read as it
            // streams from those bytes.
            Kind::Trace | Kind::MemoryTimeline | Kind::Compressed => {
                Reading::Bytes(Vec::new(), TabFile::Trace)
            }
            _ => {
                let why = collector::open::FormatError::Unknown {
                    found: collector::open::describe(&head),
                };
                return Err(format!("{}: {why}", self.name));
            }
        };
        self.take(head.len(), |room| room.write_copy_of_slice(&head))
    }

    /// Hands `len` bytes, which `fill` writes, to what reads the file (its kind known), unless
    /// the file is now too big for a tab.
    fn take(&mut self, len: usize, fill: impl collector::snapshot::Fill) -> Result<(), String> {
        let kind = match self.reading {
            Reading::Snapshot(_) => TabFile::Snapshot,
            Reading::Bytes(_, kind) => kind,
            Reading::Head(_) => TabFile::Any,
        };
        let total = self.received.max(self.expected.unwrap_or(0));
        if let Some(why) = too_big_for_a_tab(&self.name, total, kind) {
            return Err(why);
        }
        match &mut self.reading {
            Reading::Snapshot(reader) => reader
                .push_from(len, fill)
                .map_err(|err| format!("{}: {err}", self.name)),
            Reading::Bytes(bytes, _) => {
                collector::snapshot::append_filled(bytes, len, fill);
                Ok(())
            }
            Reading::Head(_) => Ok(()),
        }
    }

    /// The snapshot, once every part has arrived (anything else is refused, named).
    pub fn finish_snapshot(self) -> Result<collector::snapshot::Snapshot, String> {
        match self.reading {
            Reading::Snapshot(reader) => reader
                .finish()
                .map_err(|err| format!("{}: {err}", self.name)),
            _ => Err(format!(
                "{}: not a PyTorch memory snapshot (a folder of per-rank snapshots holds only those)",
                self.name
            )),
        }
    }

    /// The run, once every part has arrived.
    pub fn finish(self) -> Result<Run, String> {
        match self.reading {
            Reading::Snapshot(reader) => {
                let snapshot = reader
                    .finish()
                    .map_err(|err| format!("{}: {err}", self.name))?;
                if let Some(why) = too_many_for_a_tab(&self.name, &snapshot) {
                    return Err(why);
                }
                Ok(Run::from_opened(collector::open::Opened::Snapshot(
                    Box::new(snapshot),
                )))
            }
            // Fewer bytes than tell the kind: the whole file.
            Reading::Bytes(bytes, _) | Reading::Head(bytes) => Run::from_bytes(&self.name, &bytes),
        }
    }
}

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
    /// When a folder of per-rank snapshots was opened: each rank's file and memory, and the rank
    /// that stands out (the traces are the recording).
    pub rank_folder: Option<collector::snapshot::ranks::RankFolder>,
    /// What was opened: a recording, a snapshot, a folder of nodes' recordings or of per-rank
    /// snapshots.
    pub input: Kind,
}

/// A recording's analysis and its curves' levels of detail: independent, so natively computed
/// in parallel.
fn analyzed(recording: &Recording) -> (Analysis, Vec<crate::view::Trace>) {
    #[cfg(not(target_arch = "wasm32"))]
    let both = std::thread::scope(|scope| {
        let traces = scope.spawn(|| RunView::traces(recording));
        let analysis = analyze(recording);
        let traces = traces
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (analysis, traces)
    });
    #[cfg(target_arch = "wasm32")]
    let both = (analyze(recording), RunView::traces(recording));
    both
}

impl Run {
    /// Analyses a recording and prepares its views.
    pub fn new(recording: Recording) -> Self {
        let (analysis, traces) = analyzed(&recording);
        let input = Kind::of_recording(&recording);
        Self::assemble(recording, analysis, traces, None, None, input)
    }

    /// A run from its parts; the views drawn from the verdict are made here, their caption led
    /// by the run's headline ([`Run::headline`]), a snapshot's leak suspects marked.
    fn assemble(
        recording: Recording,
        analysis: Analysis,
        traces: Vec<crate::view::Trace>,
        snapshot: Option<crate::blocks::SnapshotView>,
        rank_folder: Option<collector::snapshot::ranks::RankFolder>,
        input: Kind,
    ) -> Self {
        let mut run = Self {
            recording,
            analysis,
            view: RunView::default(),
            snapshot,
            rank_folder,
            input,
        };
        let lead = run.headline();
        run.view = RunView::with_traces(&run.recording, &run.analysis, traces, &lead.text);
        if let Some(s) = run.snapshot.as_ref().filter(|_| input == Kind::Snapshot) {
            let v = &mut run.view.verdict;
            v.suspects = s.verdict.suspect_marks(&s.snapshot, &run.recording);
            v.caption
                .push_str(&collector::snapshot::SuspectMarks::caption(&v.suspects));
        }
        run
    }

    /// A snapshot judged ([`collector::snapshot::Judged`], as `collector report` judges it): its
    /// trace as the recording, that recording's analysis, its blocks and verdict.
    pub fn from_judged(judged: collector::snapshot::Judged) -> Self {
        let collector::snapshot::Judged {
            snapshot,
            recording,
            analysis,
            index,
            verdict,
        } = judged;
        let traces = RunView::traces(&recording);
        let view = crate::blocks::SnapshotView::new(snapshot, index, verdict);
        Self::assemble(
            recording,
            analysis,
            traces,
            Some(view),
            None,
            Kind::Snapshot,
        )
    }

    /// The run of a recording that grew from this one's (a followed file): the curves extended
    /// by what arrived; the analysis, and what the views draw from it, made again only when
    /// `reanalyze` (the caller throttles it: a whole analysis at every poll would take the
    /// frames' time on a long recording).
    pub fn grow(&mut self, recording: Recording, reanalyze: bool) {
        let traces = RunView::grow_traces(std::mem::take(&mut self.view.traces), &recording);
        if reanalyze {
            self.analysis = analyze(&recording);
            let lead = self.headline();
            self.view = RunView::with_traces(&recording, &self.analysis, traces, &lead.text);
        } else {
            self.view.traces = traces;
            self.view.duration_ns = recording.duration_ns();
        }
        self.recording = recording;
    }

    /// Takes an analysis of this run's recording made elsewhere (of the recording as it was a
    /// moment ago, for a followed file): the views drawn from the analysis are made again, the
    /// curves kept.
    pub fn adopt(&mut self, analysis: Analysis) {
        let traces = std::mem::take(&mut self.view.traces);
        self.analysis = analysis;
        let lead = self.headline();
        self.view = RunView::with_traces(&self.recording, &self.analysis, traces, &lead.text);
    }

    /// A folder of per-rank snapshots as one run: the traces on one timeline, each rank judged
    /// on its own, and the ranks' memory side by side.
    pub fn from_rank_folder(mut folder: collector::snapshot::ranks::RankFolder) -> Self {
        let recording = folder.recording.take().unwrap_or_else(|| {
            let mut empty = Recording::new(collector::recording::Header::new(
                0,
                String::new(),
                vec!["torch.cuda.memory._dump_snapshot".to_owned()],
            ));
            empty.warnings.push(format!(
                "no snapshot in {} has a trace: there is nothing on the timeline; the Verdict tab compares the ranks",
                folder.folder.display()
            ));
            empty
        });
        let (analysis, traces) = analyzed(&recording);
        Self::assemble(
            recording,
            analysis,
            traces,
            None,
            Some(folder),
            Kind::RankSnapshots,
        )
    }

    /// Whatever [`collector::open::open_path`] opened.
    pub fn from_input(input: collector::open::Input) -> Self {
        use collector::open::{Input, Opened};
        match input {
            Input::Recording(r) => Self::from_opened(Opened::Recording(r)),
            Input::Snapshot(s) => Self::from_opened(Opened::Snapshot(s)),
            Input::NodeRecordings { recording, .. } => Self::from_nodes(*recording),
            Input::RankSnapshots(folder) => Self::from_rank_folder(*folder),
        }
    }

    /// Nodes' recordings merged into one run ([`collector::open::read_one_run`]).
    pub fn from_nodes(recording: Recording) -> Self {
        let (analysis, traces) = analyzed(&recording);
        Self::assemble(
            recording,
            analysis,
            traces,
            None,
            None,
            Kind::NodeRecordings,
        )
    }

    /// The verdict in one line that leads, as `collector report` leads with it
    /// ([`collector::headline::leading`]): an opened snapshot's own verdict, a folder of
    /// per-rank snapshots' (the rank that stands out), else the recording's (also when a
    /// snapshot dumped next to it is shown in the Blocks tab).
    pub fn headline(&self) -> collector::headline::Headline {
        let snapshot = self
            .snapshot
            .as_ref()
            .filter(|_| self.input == Kind::Snapshot)
            .map(|view| &view.verdict);
        collector::headline::leading(Some(&self.analysis), snapshot, self.rank_folder.as_ref())
    }

    /// Reads a recording, or a PyTorch memory snapshot (a pickle), held in memory; the error
    /// names `name`.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self, String> {
        #[cfg(target_arch = "wasm32")]
        if let Some(why) = too_big_for_a_tab(
            name,
            bytes.len() as u64,
            match Kind::of(bytes) {
                Kind::Snapshot => TabFile::SnapshotHeld,
                Kind::Trace | Kind::MemoryTimeline | Kind::Compressed => TabFile::Trace,
                _ => TabFile::Recording,
            },
        ) {
            return Err(why);
        }
        let opened = collector::open::read_any(bytes).map_err(|err| format!("{name}: {err}"))?;
        #[cfg(target_arch = "wasm32")]
        if let collector::open::Opened::Snapshot(snapshot) = &opened
            && let Some(why) = too_many_for_a_tab(name, snapshot)
        {
            return Err(why);
        }
        Ok(Self::from_opened(opened))
    }

    /// A recording, or a snapshot with its views, already read.
    pub fn from_opened(opened: collector::open::Opened) -> Self {
        match opened {
            collector::open::Opened::Recording(recording) => Self::new(*recording),
            collector::open::Opened::Snapshot(snapshot) => {
                Self::from_judged(collector::snapshot::Judged::new(*snapshot))
            }
        }
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
    /// The active memory timeline's view (snapshots only).
    pub memory: crate::memtimeline::MemoryState,
    /// The flame graph's view (snapshots only).
    pub flame: crate::flame::FlameState,
    pub(crate) follow: Option<crate::follow::Follow>,
    /// Whether the page was told that this file is shown (see `web::announce`).
    #[cfg(target_arch = "wasm32")]
    pub(crate) announced: Announced,
}

/// Where telling the page that a file is shown stands: it is told at the start of the frame after
/// the one that first laid it out, once that one was painted and the browser had a frame to show
/// it (the first paint of a big run takes a tenth of a second with software WebGL).
#[cfg(target_arch = "wasm32")]
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announced {
    /// Not laid out yet.
    Not,
    /// Laid out and painted in the frame before: told at the next frame's start.
    Painted,
    /// Told.
    Told,
}

impl OpenRun {
    pub(crate) fn new(name: String, run: Result<Run, String>) -> Self {
        Self {
            name,
            run,
            timeline: TimelineState::default(),
            blocks: crate::blocks::BlocksState::default(),
            memory: crate::memtimeline::MemoryState::default(),
            flame: crate::flame::FlameState::default(),
            follow: None,
            #[cfg(target_arch = "wasm32")]
            announced: Announced::Not,
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

    /// One followed file: what arrived goes into its recording, its curves grow, and it is analyzed
    /// again when that is due — on a thread of its own, unless `now` or the recording is complete
    /// (then at once): the frames go on meanwhile, and the file is read again once it is done.
    pub(crate) fn poll_follow(&mut self, now: bool) {
        let Some(follow) = &mut self.follow else {
            return;
        };
        let run = &mut self.run;
        if let Some(analysis) = follow.analysis(now) {
            match run {
                Ok(run) => run.adopt(analysis),
                Err(_) => drop(analysis),
            }
        }
        if follow.analyzing() {
            return;
        }
        // The run stays, its recording lent to the follower to grow.
        let mut kept: Option<Run> = None;
        let taken = || match std::mem::replace(run, Err(String::new())) {
            Ok(mut previous) => {
                let empty = collector::recording::Recording::new(previous.recording.header.clone());
                let recording = std::mem::replace(&mut previous.recording, empty);
                kept = Some(previous);
                Some(recording)
            }
            Err(_) => None,
        };
        let Some(update) = follow.poll(taken, now) else {
            if follow.analysis_due()
                && let Ok(run) = run
            {
                follow.analyze_in_background(&run.recording);
            }
            return;
        };
        let started = web_time::Instant::now();
        match (update, kept) {
            (Ok(recording), Some(mut previous)) => {
                let at_once = now || recording.end.is_some();
                previous.grow(recording, at_once);
                #[cfg(target_arch = "wasm32")]
                crate::web::announce_growth(previous.recording.sample_count());
                if at_once {
                    follow.analyzed_in(started.elapsed());
                } else {
                    follow.grew();
                    if follow.analysis_due() {
                        follow.analyze_in_background(&previous.recording);
                    }
                }
                *run = Ok(previous);
            }
            (update, _) => {
                // The first bytes, or a run fetched whole again ([`crate::follow::Fetch::Whole`]).
                #[cfg(target_arch = "wasm32")]
                if let Ok(recording) = &update {
                    crate::web::announce_growth(recording.sample_count());
                }
                *run = update.map(Run::new);
                follow.analyzed_in(started.elapsed());
            }
        }
    }
}

#[cfg(test)]
mod tests;
