//! The one sentence that leads: whatever was opened, `collector report` (text and JSON), its
//! pictures and the viewer (its headline and the caption under the timeline) lead with the
//! sentence [`leading`] chooses, and nothing else chooses it.

use crate::analysis::Analysis;
use crate::snapshot::SnapshotVerdict;
use crate::snapshot::ranks::RankFolder;

/// The sentence that leads, and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headline {
    /// One sentence.
    pub text: String,
    /// Whether it names a problem (`Some(true)`), says all is well (`Some(false)`) or cannot
    /// tell yet (`None`).
    pub problem: Option<bool>,
    /// Whether it is a snapshot's verdict: a problem, or a statement of what the snapshot holds
    /// (`problem` is then `Some(false)`), never an all-clear.
    pub snapshot: bool,
}

/// What leads, for what was opened: an opened snapshot's own verdict (`snapshot`: the verdict
/// of the snapshot that is the input, not of one dumped next to a `--history` recording, which
/// is evidence under the recording's verdict); a folder of per-rank snapshots' (`folder`, with
/// `analysis` the analysis of the traces on its timeline, if any): the rank that stands out;
/// else the analysis' of the recording.
pub fn leading(
    analysis: Option<&Analysis>,
    snapshot: Option<&SnapshotVerdict>,
    folder: Option<&RankFolder>,
) -> Headline {
    if let Some(verdict) = snapshot {
        return Headline {
            text: verdict.headline.clone(),
            problem: Some(verdict.problem),
            snapshot: true,
        };
    }
    let (text, problem) = match (folder, analysis) {
        // The traces' analysis speaks for the folder only when a trace is on its timeline.
        (Some(folder), traces) => {
            folder.headline(traces.filter(|_| folder.rows.iter().any(|r| r.on_timeline)))
        }
        (None, Some(analysis)) => crate::analysis::headline(analysis),
        (None, None) => ("Cannot tell — there is nothing to judge".to_owned(), None),
    };
    Headline {
        text,
        problem,
        snapshot: false,
    }
}
