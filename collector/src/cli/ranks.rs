//! `collector report DIR`: a folder of per-rank PyTorch memory snapshots
//! (`rank{r}_memory_snapshot.pickle` as torchtitan writes them, `memory_trace_{r}.pickle`,
//! anything with `rank{N}` in its name) as one multi-rank run: each rank's memory at its
//! snapshot and its peak in the trace, side by side, and the rank that stands out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use collector::analysis::analyze;
use collector::format::format_bytes;
use collector::open::{Opened, read_any_file};
use collector::snapshot::{Snapshot, SnapshotVerdict};
use serde::Serialize;

/// One rank's snapshot, read or not.
#[derive(Serialize)]
struct RankSnapshot {
    rank: u32,
    file: String,
    /// Why it cannot be read (the other fields are then absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Another file claims the same rank.
    duplicate: bool,
    reserved_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
    /// The most allocated at any time in the trace (or at the snapshot without one).
    peak_allocated_bytes: Option<u64>,
    headline: Option<String>,
    /// The allocation site holding the most, with its first frame.
    top_site: Option<String>,
}

/// The rank in a snapshot's file name: `rank3`, `rank_3`, `rank-3`, or a trailing `_3`.
fn rank_of(name: &str) -> Option<u32> {
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

/// The snapshots in `dir` that name a rank, by rank then name.
fn rank_files(dir: &Path) -> std::io::Result<Vec<(u32, PathBuf)>> {
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pickle" || e == "pkl"))
        .filter_map(|p| {
            let rank = rank_of(&p.file_name()?.to_string_lossy())?;
            Some((rank, p))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn read(rank: u32, path: &Path) -> RankSnapshot {
    let mut row = RankSnapshot {
        rank,
        file: path.display().to_string(),
        error: None,
        duplicate: false,
        reserved_bytes: None,
        allocated_bytes: None,
        peak_allocated_bytes: None,
        headline: None,
        top_site: None,
    };
    let snapshot: Snapshot = match read_any_file(path) {
        Ok(Opened::Snapshot(s)) => *s,
        Ok(Opened::Recording(_)) => {
            row.error = Some("a tidemark recording, not a snapshot".to_owned());
            return row;
        }
        Err(err) => {
            row.error = Some(err.to_string());
            return row;
        }
    };
    let recording = snapshot.to_recording();
    let verdict = SnapshotVerdict::new(&snapshot, &analyze(&recording));
    let held = snapshot.segment_summary();
    let reserved: u64 = held.iter().map(|h| h.reserved).sum();
    let allocated: u64 = held.iter().map(|h| h.allocated).sum();
    row.reserved_bytes = Some(reserved);
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
        let frame = s
            .frames
            .first()
            .cloned()
            .unwrap_or_else(|| "(no frames recorded)".to_owned());
        format!(
            "{} in {} blocks from {frame}",
            format_bytes(s.bytes as f64),
            s.blocks
        )
    });
    row.headline = Some(verdict.headline);
    row
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

/// `collector report DIR [--json]`.
pub fn report_folder(dir: &Path, json: bool) -> ExitCode {
    let files = match rank_files(dir) {
        Ok(files) => files,
        Err(err) => {
            eprintln!(
                "collector: cannot read the folder ({err}): {}",
                dir.display()
            );
            return ExitCode::from(2);
        }
    };
    if files.is_empty() {
        eprintln!(
            "collector: no per-rank snapshots in {} (files named like rank0_memory_snapshot.pickle or memory_trace_0.pickle)",
            dir.display()
        );
        return ExitCode::from(2);
    }
    let mut rows: Vec<RankSnapshot> = files.iter().map(|(rank, path)| read(*rank, path)).collect();
    let ranks: Vec<u32> = rows.iter().map(|r| r.rank).collect();
    for row in &mut rows {
        row.duplicate = ranks.iter().filter(|&&r| r == row.rank).count() > 1;
    }
    let standout = standout(&rows);
    if json {
        #[derive(Serialize)]
        struct Folder<'a> {
            schema: u32,
            folder: String,
            ranks: &'a [RankSnapshot],
            standout: Option<String>,
        }
        let folder = Folder {
            schema: super::report::REPORT_SCHEMA,
            folder: dir.display().to_string(),
            ranks: &rows,
            standout,
        };
        match serde_json::to_string_pretty(&folder) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                eprintln!("collector: cannot write the report as JSON: {err}");
                return ExitCode::from(2);
            }
        }
        return ExitCode::SUCCESS;
    }
    let mut out = String::new();
    let read = rows.iter().filter(|r| r.error.is_none()).count();
    let _ = writeln!(
        out,
        "{} — {} per-rank snapshots ({read} read)\n\nVERDICT",
        dir.display(),
        rows.len()
    );
    match &standout {
        Some(line) => {
            let _ = writeln!(out, "  ✗ Imbalance: {line}");
        }
        None => {
            let _ = writeln!(
                out,
                "  • No rank stands out: the peaks are within a fifth of each other"
            );
        }
    }
    let _ = writeln!(
        out,
        "\nRANK  {:>10}  {:>10}  {:>14}  file, and what holds the most",
        "reserved", "allocated", "peak allocated"
    );
    let mb = |b: Option<u64>| b.map_or("—".to_owned(), |b| format_bytes(b as f64));
    for r in &rows {
        let name = Path::new(&r.file)
            .file_name()
            .map_or(r.file.clone(), |n| n.to_string_lossy().into_owned());
        let mark = if r.duplicate {
            " (rank claimed twice)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<3} {:>10}  {:>10}  {:>14}  {name}{mark}",
            r.rank,
            mb(r.reserved_bytes),
            mb(r.allocated_bytes),
            mb(r.peak_allocated_bytes)
        );
        match (&r.error, &r.top_site) {
            (Some(err), _) => {
                let _ = writeln!(out, "        cannot be read: {err}");
            }
            (None, Some(site)) => {
                let _ = writeln!(out, "        {site}");
            }
            _ => {}
        }
    }
    print!("{out}");
    ExitCode::SUCCESS
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
