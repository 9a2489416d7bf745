//! One open file: the recording, its analysis and what the views draw (a [`Run`]), or why it
//! could not be opened, with the state of its views (an [`OpenRun`]).

use collector::analysis::{Analysis, analyze};
use collector::recording::Recording;

use crate::timeline::TimelineState;
use crate::view::RunView;

/// The recording shown when nothing else is opened: made by the collector from a real job
/// (`collector/tests/data/corpus/eval_keeps_predictions.py`, recorded by `make.sh` there).
pub const EXAMPLE_RECORDING: &[u8] =
    include_bytes!("../../collector/tests/data/corpus/eval_keeps_predictions.msgpack");

/// The name the embedded example is shown under.
pub const EXAMPLE_NAME: &str = "example: eval_keeps_predictions.msgpack";

/// The largest snapshot a browser tab opens: a tab has 4 GB of memory (wasm32), and reading a
/// snapshot holds its bytes and about 1.4 times as much again (measured on a 795 MB one).
pub const WEB_MAX_SNAPSHOT: u64 = 1 << 30;

/// The largest recording a browser tab opens: the viewer holds about 30 bytes per sample, and a
/// recording stores one in 2.6 to 8 bytes.
pub const WEB_MAX_RECORDING: u64 = 256 << 20;

/// Why a file of `len` bytes is too big to open in a browser tab (`None`: it is not); `pickle`
/// says whether it is a snapshot. Said before reading, instead of the tab dying of memory.
pub fn too_big_for_a_tab(name: &str, len: u64, pickle: bool) -> Option<String> {
    let (limit, what) = if pickle {
        (WEB_MAX_SNAPSHOT, "snapshot")
    } else {
        (WEB_MAX_RECORDING, "recording")
    };
    (len > limit).then(|| {
        format!(
            "{name}: this {} {what} is more than a browser tab can open (up to {}: a tab has 4 GB of memory); open it with the desktop viewer (tidemark FILE) or `collector report FILE`",
            collector::format::format_bytes(len as f64),
            collector::format::format_bytes(limit as f64)
        )
    })
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
            rank_folder: None,
        }
    }

    /// The run of a recording that grew from this one's (a followed file): the curves extended
    /// by what arrived; the analysis, and what the views draw from it, made again only when
    /// `reanalyse` (the caller throttles it: a whole analysis at every poll would take the
    /// frames' time on a long recording).
    pub fn grow(&mut self, recording: Recording, reanalyse: bool) {
        let traces = RunView::grow_traces(std::mem::take(&mut self.view.traces), &recording);
        if reanalyse {
            self.analysis = analyze(&recording);
            self.view = RunView::with_traces(&recording, &self.analysis, traces);
        } else {
            self.view.traces = traces;
            self.view.duration_ns = recording.duration_ns();
        }
        self.recording = recording;
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
        let mut run = Self::new(recording);
        run.rank_folder = Some(folder);
        run
    }

    /// Reads a recording, or a PyTorch memory snapshot (a pickle), held in memory; the error
    /// names `name`.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self, String> {
        #[cfg(target_arch = "wasm32")]
        if let Some(why) = too_big_for_a_tab(name, bytes.len() as u64, bytes.first() == Some(&0x80))
        {
            return Err(why);
        }
        let opened = collector::open::read_any(bytes).map_err(|err| format!("{name}: {err}"))?;
        Ok(Self::from_opened(opened))
    }

    /// A recording, or a snapshot with its views, already read.
    pub fn from_opened(opened: collector::open::Opened) -> Self {
        let (recording, snapshot) = opened.into_recording();
        let mut run = Self::new(recording);
        run.snapshot = snapshot.map(|s| crate::blocks::SnapshotView::new(s, &run.analysis));
        if let Some(s) = &run.snapshot {
            let v = &mut run.view.verdict;
            v.suspects = s.verdict.suspect_marks(&s.snapshot, &run.recording);
            v.caption
                .push_str(&collector::snapshot::SuspectMarks::caption(&v.suspects));
        }
        run
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
    pub(crate) follow: Option<crate::follow::Follow>,
    /// Whether the page was told that this file is shown (see `web::announce`).
    #[cfg(target_arch = "wasm32")]
    pub(crate) announced: bool,
}

impl OpenRun {
    pub(crate) fn new(name: String, run: Result<Run, String>) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_too_big_for_a_tab_is_named_with_its_size_and_where_to_open_it() {
        assert_eq!(too_big_for_a_tab("a.pickle", WEB_MAX_SNAPSHOT, true), None);
        let why = too_big_for_a_tab("big.pickle", 2 << 30, true).unwrap_or_default();
        assert!(
            why.starts_with("big.pickle: this 2.00 GiB snapshot"),
            "{why}"
        );
        assert!(
            why.contains("up to 1.00 GiB") && why.contains("desktop viewer"),
            "{why}"
        );
        assert_eq!(too_big_for_a_tab("r.msgpack", 100 << 20, false), None);
        let why = too_big_for_a_tab("r.msgpack", 300 << 20, false).unwrap_or_default();
        assert!(
            why.contains("recording") && why.contains("up to 256 MiB"),
            "{why}"
        );
    }
}
