//! A folder of per-rank PyTorch memory snapshots (`rank{r}_memory_snapshot.pickle` as torchtitan
//! writes them, `memory_trace_{r}.pickle`, anything with `rank{N}` in its name) as one
//! multi-rank run: each rank's memory at its snapshot and its peak in the trace, side by side,
//! the rank that stands out, and the traces merged into one recording whose ranks the analysis
//! judges one by one (the report and the viewer share it). The folder is read by
//! `open::open_path`.

use std::path::PathBuf;

use serde::Serialize;

use super::{Judged, Snapshot};
use crate::format::format_bytes;
use crate::recording::{Note, Origin, Recording};

/// One rank's snapshot, read or not.
#[derive(Clone, Debug, Serialize)]
pub struct RankSnapshot {
    /// The rank its name gives.
    pub rank: u32,
    /// The file.
    pub file: String,
    /// Why it cannot be read (the other fields are then absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Another file claims the same rank.
    pub duplicate: bool,
    /// Bytes reserved at the snapshot, all devices.
    pub reserved_bytes: Option<u64>,
    /// Bytes allocated at the snapshot, all devices.
    pub allocated_bytes: Option<u64>,
    /// The most allocated at any time in the trace (or at the snapshot without one).
    pub peak_allocated_bytes: Option<u64>,
    /// The snapshot's own verdict in one line.
    pub headline: Option<String>,
    /// The allocation site holding the most, with its first frame.
    pub top_site: Option<String>,
    /// Whether its trace is on the merged timeline (a snapshot without a trace has no times).
    #[serde(skip)]
    pub on_timeline: bool,
}

/// The ranks of a folder: one row per file, the rank that stands out, and the traces as one
/// recording.
#[derive(Debug)]
pub struct RankFolder {
    /// The folder.
    pub folder: PathBuf,
    /// By rank, then file name.
    pub rows: Vec<RankSnapshot>,
    /// The rank whose peak is well above the others', in words.
    pub standout: Option<String>,
    /// Ranks below the highest that no file names (a rank whose snapshot is missing).
    pub missing: Vec<u32>,
    /// The traces with times, each as its rank, merged by wall clock (`None` when no snapshot
    /// has one).
    pub recording: Option<Recording>,
}

/// The rank in a snapshot's file name: `rank3`, `rank_3`, `rank-3`, or a trailing `_3`.
pub fn rank_of(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    if let Some(at) = lower.find("rank") {
        let rest = lower[at + 4..].trim_start_matches(['_', '-']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(rank) = digits.parse() {
            return Some(rank);
        }
    }
    let stem = lower.rsplit_once('.').map_or(lower.as_str(), |(s, _)| s);
    let (_, last) = stem.rsplit_once('_')?;
    last.parse().ok()
}

impl Snapshot {
    /// The trace as [`Snapshot::to_recording`] makes it, every reading and phase from process
    /// `pid` of `rank`, so that several ranks' snapshots merge into one run (two files claiming
    /// one rank stay two processes).
    pub fn to_rank_recording(&self, rank: u32, pid: u32) -> Recording {
        as_rank(self.to_recording(), rank, pid)
    }
}

/// A snapshot's trace as a recording ([`Snapshot::to_recording`]) made `rank`'s, from process
/// `pid` ([`Snapshot::to_rank_recording`]).
fn as_rank(mut recording: Recording, rank: u32, pid: u32) -> Recording {
    let origin = Origin {
        pid,
        rank: Some(rank),
    };
    recording.allocator.map_origins(|o| *o = origin);
    recording.phases.map_origins(|o| *o = origin);
    for o in &mut recording.ooms {
        o.rank = Some(rank);
    }
    recording
}

/// One rank's row; `read` is its snapshot judged ([`Judged`]), or why it is missing.
fn row(rank: u32, file: &str, read: Result<&Judged, String>) -> RankSnapshot {
    let mut row = RankSnapshot {
        rank,
        file: file.to_owned(),
        error: None,
        duplicate: false,
        reserved_bytes: None,
        allocated_bytes: None,
        peak_allocated_bytes: None,
        headline: None,
        top_site: None,
        on_timeline: false,
    };
    let Judged {
        recording, verdict, ..
    } = match read {
        Ok(judged) => judged,
        Err(err) => {
            row.error = Some(err);
            return row;
        }
    };
    let held = &verdict.held;
    let allocated: u64 = held.iter().map(|h| h.allocated).sum();
    row.reserved_bytes = Some(held.iter().map(|h| h.reserved).sum());
    row.allocated_bytes = Some(allocated);
    row.peak_allocated_bytes = Some(
        recording
            .allocator
            .iter()
            .map(|a| a.allocated)
            .max()
            .unwrap_or(0)
            .max(allocated),
    );
    row.top_site = verdict.top_sites.first().map(|s| {
        format!(
            "{} in {} blocks from {}",
            format_bytes(s.bytes as f64),
            s.blocks,
            s.site
        )
    });
    row.headline = Some(verdict.headline.clone());
    row
}

impl RankFolder {
    /// The ranks from snapshots already read: `(rank, file, the snapshot or why not)`, in any
    /// order.
    pub fn new(
        folder: PathBuf,
        mut snapshots: Vec<(u32, String, Result<Snapshot, String>)>,
    ) -> Self {
        snapshots.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut rows: Vec<RankSnapshot> = Vec::with_capacity(snapshots.len());
        let mut traces = Vec::new();
        for (rank, file, snapshot) in snapshots {
            let judged = match snapshot {
                Ok(s) => Judged::new(s),
                Err(err) => {
                    rows.push(row(rank, &file, Err(err)));
                    continue;
                }
            };
            let mut r = row(rank, &file, Ok(&judged));
            if judged.snapshot.time_range_us().is_some_and(|(a, b)| b > a) {
                // One process per file, so that two files claiming one rank stay apart.
                let pid = u32::try_from(rows.len()).unwrap_or(u32::MAX);
                traces.push((rows.len(), as_rank(judged.recording, rank, pid)));
                r.on_timeline = true;
            }
            rows.push(r);
        }
        let ranks: Vec<u32> = rows.iter().map(|r| r.rank).collect();
        for r in &mut rows {
            r.duplicate = ranks.iter().filter(|&&x| x == r.rank).count() > 1;
        }
        let recording = (!traces.is_empty()).then(|| {
            let (indices, recordings): (Vec<usize>, Vec<Recording>) = traces.into_iter().unzip();
            let merged = crate::recording::merge(recordings);
            let mut recording = merged.recording;
            for (i, why) in merged.left_out {
                let r = &mut rows[indices[i]];
                r.on_timeline = false;
                recording
                    .warnings
                    .push(format!("{} is not on the timeline: {why}", r.file));
            }
            for r in rows.iter().filter(|r| r.duplicate && r.on_timeline) {
                recording.warnings.push(format!(
                    "rank {} is claimed by more than one file; {} is on the timeline as one of them",
                    r.rank,
                    short(&r.file)
                ));
            }
            recording.notes.push(Note {
                t_ns: 0,
                text: format!(
                    "one run from the per-rank snapshots in {}: {}",
                    folder.display(),
                    rows.iter()
                        .filter(|r| r.on_timeline)
                        .map(|r| format!("rank {} ({})", r.rank, short(&r.file)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
            recording
        });
        let standout = standout(&rows);
        let top = rows.iter().map(|r| r.rank).max().unwrap_or(0);
        let missing = (0..top).filter(|r| !ranks.contains(r)).collect();
        Self {
            folder,
            rows,
            standout,
            missing,
            recording,
        }
    }

    /// The folder's verdict in one line, as the report and the viewer lead with it, and whether
    /// it names a problem: the rank that stands out, else what the traces' analysis (`traces`,
    /// of [`RankFolder::recording`]) finds wrong, else that no rank stands out.
    pub fn headline(&self, traces: Option<&crate::analysis::Analysis>) -> (String, Option<bool>) {
        if let Some(line) = &self.standout {
            return (format!("Imbalance: {line}"), Some(true));
        }
        if let Some((line, Some(true))) = traces.map(crate::analysis::headline) {
            return (line, Some(true));
        }
        (
            "No rank stands out: the peaks are within a fifth of each other".to_owned(),
            Some(false),
        )
    }
}

/// The file's name without its folder.
pub fn short(file: &str) -> &str {
    file.rsplit(['/', '\\']).next().unwrap_or(file)
}

/// The rank whose peak is well above the median of the others', in words.
fn standout(rows: &[RankSnapshot]) -> Option<String> {
    let peaks: Vec<(u32, u64)> = rows
        .iter()
        .filter_map(|r| r.peak_allocated_bytes.map(|p| (r.rank, p)))
        .collect();
    if peaks.len() < 2 {
        return None;
    }
    let &(rank, top) = peaks.iter().max_by_key(|(_, p)| *p)?;
    let mut others: Vec<u64> = peaks
        .iter()
        .filter(|(r, _)| *r != rank)
        .map(|(_, p)| *p)
        .collect();
    others.sort_unstable();
    let median = others[others.len() / 2];
    (top as f64 >= 1.2 * median as f64 && top - median >= 64 << 20).then(|| {
        format!(
            "rank {rank} peaks at {}, {:.0}% above the other ranks' median ({})",
            format_bytes(top as f64),
            100.0 * (top as f64 / median.max(1) as f64 - 1.0),
            format_bytes(median as f64)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::rank_of;

    #[test]
    fn ranks_from_the_names_people_give_snapshots() {
        assert_eq!(rank_of("rank3_memory_snapshot.pickle"), Some(3));
        assert_eq!(rank_of("memory_trace_12.pickle"), Some(12));
        assert_eq!(rank_of("snap-rank_7.pkl"), Some(7));
        assert_eq!(rank_of("RANK-2.pickle"), Some(2));
        assert_eq!(rank_of("memory_snapshot.pickle"), None);
    }
}
