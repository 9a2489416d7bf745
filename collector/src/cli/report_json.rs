//! `collector report --json`: the JSON report of a recording, a snapshot or a folder run, made
//! in one place for `collector report` and `collector serve` (which answers it for a run).

use std::path::Path;

use collector::analysis::Analysis;
use collector::open::{Input, Kind, open_path};
use collector::recording::Recording;
use collector::snapshot::{Snapshot, SnapshotVerdict};
use serde::Serialize;

use super::loaded::{Loaded, judge};

/// Version of the JSON report's schema; bumped only when a field changes meaning or goes away.
pub const REPORT_SCHEMA: u32 = 1;

/// The JSON report.
#[derive(Serialize)]
struct JsonReport<'a> {
    schema: u32,
    file: String,
    /// What the input is: `recording`, `snapshot`, `trace`, `memory_timeline`, `node_recordings`,
    /// `rank_snapshots`, `rank_traces`.
    input: Kind,
    /// The verdict in one line, as the text report and the viewer lead with it.
    headline: String,
    command: &'a [String],
    host: &'a str,
    duration_s: f64,
    complete: bool,
    warnings: &'a [String],
    /// What the text report's evidence says as `note:` lines: how the input was read (a trace's
    /// memory events per device, its peaks, what it lacks).
    notes: Vec<&'a str>,
    dropped_probe_messages: u64,
    ooms: usize,
    analysis: &'a Analysis,
    /// Present for PyTorch memory snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot: Option<SnapshotJson>,
    /// The snapshot dumped next to the recording (`collector --history`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    paired_snapshot: Option<PairedJson>,
}

/// A snapshot dumped next to the recording.
#[derive(Serialize)]
struct PairedJson {
    file: String,
    /// `oom` or `end`.
    reason: String,
    /// Why it cannot be read (then `snapshot` is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot: Option<SnapshotJson>,
}

/// What a snapshot adds to the JSON report.
#[derive(Serialize)]
struct SnapshotJson {
    /// What the snapshot answers first: out of memory, what is held and by whom, fragmentation.
    verdict: SnapshotVerdict,
    trace_entries: usize,
    entries_by_action: std::collections::BTreeMap<String, usize>,
    live_blocks_at_end: usize,
    live_bytes_at_end: u64,
    leak_suspects: Vec<SuspectJson>,
    segments: Vec<SegmentJson>,
}

#[derive(Serialize)]
struct SuspectJson {
    device: u32,
    /// The allocation site: the first frame of the user's code.
    site: String,
    phase: Option<String>,
    occurrences: usize,
    of: usize,
    blocks: usize,
    bytes: u64,
    frames: Vec<String>,
}

#[derive(Serialize)]
struct SegmentJson {
    device: u32,
    segments: usize,
    reserved: u64,
    allocated: u64,
    pending_free: u64,
    free: u64,
    free_pieces: usize,
    largest_free: u64,
    /// The private pools (CUDA graphs', `torch.cuda.MemPool`s); `free` and `largest_free` above
    /// are outside them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pools: Vec<collector::snapshot::PoolSummary>,
}

impl SnapshotJson {
    fn new(s: &Snapshot, verdict: SnapshotVerdict) -> Self {
        Self {
            trace_entries: s.entries.len(),
            entries_by_action: s.action_counts(),
            live_blocks_at_end: verdict.live.len(),
            live_bytes_at_end: verdict.live.iter().map(|b| b.size).sum(),
            leak_suspects: verdict
                .suspects
                .iter()
                .cloned()
                .map(|x| SuspectJson {
                    site: s.site_name(s.site(x.stack)),
                    frames: s
                        .user_frames(x.stack)
                        .iter()
                        .map(|f| s.frame_text(f))
                        .collect(),
                    device: x.device,
                    phase: x.phase,
                    occurrences: x.occurrences,
                    of: x.of,
                    blocks: x.blocks,
                    bytes: x.bytes,
                })
                .collect(),
            segments: verdict
                .held
                .iter()
                .map(|g| SegmentJson {
                    device: g.device,
                    segments: g.segments,
                    reserved: g.reserved,
                    allocated: g.allocated,
                    pending_free: g.pending_free,
                    free: g.free,
                    free_pieces: g.free_pieces,
                    largest_free: g.largest_free,
                    pools: g.pools.clone(),
                })
                .collect(),
            verdict,
        }
    }
}

/// The snapshot a recording made with `--history` names (the one at the OOM says what was alive
/// when the job died), judged ([`collector::snapshot::Judged::new`]); none for a snapshot
/// (`snapshot_read`).
pub(super) fn paired(snapshot_read: bool, beside: &Path, recording: &Recording) -> Option<Paired> {
    (!snapshot_read)
        .then(|| collector::open::paired_snapshot(beside, recording))
        .flatten()
        .map(|paired| Paired {
            path: paired.path,
            reason: paired.reason,
            judged: paired.snapshot.map(|s| {
                let judged = collector::snapshot::Judged::new(s);
                (judged.snapshot, judged.verdict)
            }),
        })
}

/// A snapshot dumped next to a recording, judged, or why it cannot be read.
pub(super) struct Paired {
    pub(super) path: std::path::PathBuf,
    pub(super) reason: String,
    pub(super) judged: Result<(Snapshot, SnapshotVerdict), collector::open::OpenError>,
}

/// What the JSON report is made of: an input read and judged.
pub(super) struct Judged<'a> {
    pub(super) kind: Kind,
    pub(super) recording: &'a Recording,
    pub(super) analysis: &'a Analysis,
    pub(super) snapshot: Option<&'a Snapshot>,
    pub(super) verdict: Option<SnapshotVerdict>,
    pub(super) paired: Option<Paired>,
}

impl Judged<'_> {
    /// The verdict in one line, as the text report and the viewer lead with it.
    pub(super) fn headline(&self) -> String {
        collector::headline::leading(Some(self.analysis), self.verdict.as_ref(), None).text
    }

    /// The JSON report of `file` (`collector report --json`).
    pub(super) fn json(self, file: &Path) -> Result<String, serde_json::Error> {
        let headline = self.headline();
        let Self {
            kind,
            recording,
            analysis,
            snapshot,
            verdict,
            paired,
        } = self;
        let report = JsonReport {
            schema: REPORT_SCHEMA,
            file: file.display().to_string(),
            input: kind,
            headline,
            command: &recording.header.command,
            host: &recording.header.host,
            duration_s: recording.duration_ns() as f64 / 1e9,
            complete: recording.end.is_some(),
            warnings: &recording.warnings,
            notes: recording.notes.iter().map(|n| n.text.as_str()).collect(),
            dropped_probe_messages: recording.dropped_total(),
            ooms: recording.ooms.len(),
            analysis,
            snapshot: snapshot.zip(verdict).map(|(s, v)| SnapshotJson::new(s, v)),
            paired_snapshot: paired.map(|paired| PairedJson {
                file: paired.path.display().to_string(),
                reason: paired.reason,
                error: paired.judged.as_ref().err().map(ToString::to_string),
                snapshot: paired.judged.ok().map(|(s, v)| SnapshotJson::new(&s, v)),
            }),
        };
        serde_json::to_string_pretty(&report)
    }
}

/// A report as `collector report PATH --json` prints it, and its headline: what `collector
/// serve` answers for a run (a file, a folder of nodes' recordings or of per-rank snapshots).
/// The error names the path.
pub fn json_report(path: &Path) -> Result<(String, String), String> {
    let input = open_path(path).map_err(|err| err.to_string())?;
    let cannot = |err: serde_json::Error| {
        format!(
            "cannot write the report as JSON ({err}): {}",
            path.display()
        )
    };
    if let Input::RankSnapshots(folder) = &input {
        return super::ranks::folder_json(path, folder).map_err(cannot);
    }
    let Loaded {
        kind,
        recording,
        analysis,
        judged,
        beside,
    } = judge(path, input);
    let (snapshot, verdict) = judged.unzip();
    let judged = Judged {
        kind,
        recording: &recording,
        analysis: &analysis,
        snapshot: snapshot.as_ref(),
        paired: paired(snapshot.is_some(), &beside, &recording),
        verdict,
    };
    let headline = judged.headline();
    judged
        .json(path)
        .map(|json| (headline, json))
        .map_err(cannot)
}
