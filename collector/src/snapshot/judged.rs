//! A snapshot judged once, for everyone: its trace as a recording, that recording's analysis,
//! the blocks' lives swept into an index, and the verdict. `collector report`, `collector check`,
//! the viewer (an opened snapshot, or one dumped next to a `--history` recording) and a folder
//! of per-rank snapshots all take a [`Judged`], built by [`Judged::new`] and nowhere else.

use super::{LiveIndex, Snapshot, SnapshotVerdict};
use crate::analysis::Analysis;
use crate::recording::Recording;

/// A snapshot with everything the report and the viewer show of it.
#[derive(Clone, Debug)]
pub struct Judged {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Its trace as a recording ([`Snapshot::to_recording`]).
    pub recording: Recording,
    /// That recording's analysis, saying what the snapshot lacks (not what a recording made by
    /// the collector would).
    pub analysis: Analysis,
    /// Every block's life, swept once: the blocks alive at any time are read off it.
    pub index: LiveIndex,
    /// The verdict.
    pub verdict: SnapshotVerdict,
}

impl Judged {
    /// Judges a snapshot whole. Natively the blocks' lives are swept on a second thread while
    /// the trace becomes a recording and is analyzed (a tenth of a big snapshot's report).
    pub fn new(snapshot: Snapshot) -> Self {
        let trace = |snapshot: &Snapshot| {
            let recording = snapshot.to_recording();
            let mut analysis = crate::analysis::analyze(&recording);
            crate::analysis::as_snapshot_trace(&mut analysis);
            (recording, analysis)
        };
        #[cfg(not(target_arch = "wasm32"))]
        let ((recording, analysis), index) = std::thread::scope(|scope| {
            let index = scope.spawn(|| LiveIndex::new(&snapshot));
            let trace = trace(&snapshot);
            let index = index
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (trace, index)
        });
        #[cfg(target_arch = "wasm32")]
        let ((recording, analysis), index) = (trace(&snapshot), LiveIndex::new(&snapshot));
        let verdict = SnapshotVerdict::with_index(&snapshot, &recording, &analysis, &index);
        Self {
            snapshot,
            recording,
            analysis,
            index,
            verdict,
        }
    }
}
