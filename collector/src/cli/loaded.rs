//! What a command reads and judges from a path: a recording's analysis, a snapshot's verdict, a
//! folder of nodes' recordings as one run — for `report`, `check` and `serve`'s reports.

use std::path::{Path, PathBuf};

use collector::analysis::{Analysis, analyze};
use collector::open::{Input, Kind, open_path};
use collector::recording::Recording;
use collector::snapshot::{Judged, Snapshot, SnapshotVerdict};

use super::failure::Failure;

/// An input read and judged: what it is, its recording (a snapshot's trace, nodes merged) and
/// that recording's analysis, the snapshot with its verdict, and where a snapshot dumped next to
/// the recording would be (beside this file).
pub struct Loaded {
    pub kind: Kind,
    pub recording: Recording,
    pub analysis: Analysis,
    pub judged: Option<(Snapshot, SnapshotVerdict)>,
    pub beside: PathBuf,
}

/// Analyses what was opened; a snapshot is judged ([`collector::snapshot::Judged::new`]).
pub fn judge(path: &Path, input: Input) -> Loaded {
    let kind = input.kind();
    let (recording, beside, snapshot) = match input {
        Input::Snapshot(snapshot) => {
            let collector::snapshot::Judged {
                snapshot,
                recording,
                analysis,
                verdict,
                ..
            } = collector::snapshot::Judged::new(*snapshot);
            return Loaded {
                kind,
                recording,
                analysis,
                judged: Some((snapshot, verdict)),
                beside: path.to_owned(),
            };
        }
        Input::Recording(recording) => (*recording, path.to_owned(), None),
        Input::NodeRecordings { recording, files } => {
            let first = files.first().cloned().unwrap_or_else(|| path.to_owned());
            (*recording, first, None)
        }
        // A folder of per-rank snapshots is reported by `report_folder` before this; here only
        // when the path became one after it was looked at: its traces.
        Input::RankSnapshots(mut folder) => {
            let recording = folder.recording.take().unwrap_or_else(|| {
                Recording::new(collector::recording::Header::new(
                    0,
                    String::new(),
                    Vec::new(),
                ))
            });
            (recording, path.to_owned(), None)
        }
    };
    let analysis = analyze(&recording);
    Loaded {
        kind,
        recording,
        analysis,
        judged: snapshot,
        beside,
    }
}

/// Several nodes' recordings as one run (see [`collector::open::read_one_run`]).
pub fn load_nodes(first: &Path, more: &[PathBuf]) -> Result<Recording, Failure> {
    let files: Vec<&Path> = std::iter::once(first)
        .chain(more.iter().map(PathBuf::as_path))
        .collect();
    collector::open::read_one_run(&files).map_err(Failure::Inputs)
}

/// Reads what is at `path` ([`open_path`]) and judges it: a recording's analysis; a snapshot's
/// ([`Judged`]: its trace's analysis, and its verdict); a folder of nodes' recordings as one
/// run; a folder of per-rank snapshots as their traces on one timeline.
pub fn load(path: &Path) -> Result<(Analysis, Option<SnapshotVerdict>), Failure> {
    match open_path(path)? {
        Input::Recording(recording) => Ok((analyze(&recording), None)),
        Input::Snapshot(snapshot) => {
            let judged = Judged::new(*snapshot);
            Ok((judged.analysis, Some(judged.verdict)))
        }
        Input::NodeRecordings { recording, .. } => Ok((analyze(&recording), None)),
        Input::RankSnapshots(folder) => folder.recording.map(|r| (analyze(&r), None)).ok_or_else(|| {
            Failure::Cannot(format!(
                "no snapshot in the folder has a trace: there is nothing on a timeline to judge (`collector report` compares the ranks): {}",
                path.display()
            ))
        }),
    }
}
