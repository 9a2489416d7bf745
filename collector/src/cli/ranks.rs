//! `collector report DIR`: a folder of per-rank PyTorch memory snapshots
//! (`rank{r}_memory_snapshot.pickle` as torchtitan writes them, `memory_trace_{r}.pickle`,
//! anything with `rank{N}` in its name) as one multi-rank run: each rank's memory at its
//! snapshot and its peak in the trace, side by side, and the rank that stands out.

use std::fmt::Write as _;
use std::path::Path;

use collector::analysis::analyze;
use collector::format::format_bytes;
use collector::open::Kind;
use collector::snapshot::ranks::{RankFolder, RankSnapshot, short};
use serde::Serialize;

use super::failure::{Answer, Failure};

/// The JSON report of a folder of per-rank snapshots (`collector report DIR --json`), and its
/// headline.
pub fn folder_json(dir: &Path, folder: &RankFolder) -> Result<(String, String), serde_json::Error> {
    #[derive(Serialize)]
    struct Folder<'a> {
        schema: u32,
        folder: String,
        /// `rank_snapshots`.
        input: Kind,
        /// The verdict in one line, as the text report and the viewer lead with it.
        headline: &'a str,
        ranks: &'a [RankSnapshot],
        standout: Option<String>,
        /// Ranks below the highest without a file.
        missing: &'a [u32],
        /// The traces merged by wall clock and judged rank by rank (absent without traces).
        #[serde(skip_serializing_if = "Option::is_none")]
        analysis: Option<&'a collector::analysis::Analysis>,
    }
    // The traces on one timeline: each rank judged on its own.
    let analysis = folder.recording.as_ref().map(analyze);
    let headline = collector::headline::leading(analysis.as_ref(), None, Some(folder)).text;
    let json = serde_json::to_string_pretty(&Folder {
        schema: super::report_json::REPORT_SCHEMA,
        folder: dir.display().to_string(),
        input: Kind::RankSnapshots,
        headline: &headline,
        ranks: &folder.rows,
        standout: folder.standout.clone(),
        missing: &folder.missing,
        analysis: analysis.as_ref(),
    })?;
    Ok((headline, json))
}

/// `collector report DIR [--json]`: the folder as [`collector::open::open_path`] read it.
pub fn report_folder(dir: &Path, folder: &RankFolder, json: bool) -> Result<Answer, Failure> {
    if json {
        let (_, text) = folder_json(dir, folder)
            .map_err(|err| Failure::Cannot(format!("cannot write the report as JSON: {err}")))?;
        super::out(format_args!("{text}\n"));
        return Ok(Answer::Done);
    }
    let analysis = folder.recording.as_ref().map(analyze);
    let rows = &folder.rows;
    let collector::headline::Headline {
        text: headline,
        problem,
        ..
    } = collector::headline::leading(analysis.as_ref(), None, Some(folder));
    let mut out = String::new();
    let read = rows.iter().filter(|r| r.error.is_none()).count();
    let _ = writeln!(
        out,
        "{} — {} per-rank snapshots ({read} read)\n\nVERDICT",
        dir.display(),
        rows.len()
    );
    let mark = if problem == Some(true) { '✗' } else { '•' };
    let _ = writeln!(out, "  {mark} {headline}");
    if !folder.missing.is_empty() {
        let list: Vec<String> = folder.missing.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "  • No snapshot for rank {}: its file is missing from the folder",
            list.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nRANK  {:>10}  {:>10}  {:>14}  file, and what holds the most",
        "reserved", "allocated", "peak allocated"
    );
    let mb = |b: Option<u64>| b.map_or("—".to_owned(), |b| format_bytes(b as f64));
    for r in rows {
        let name = short(&r.file);
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
    if let (Some(recording), Some(analysis)) = (&folder.recording, &analysis) {
        let _ = writeln!(
            out,
            "\nTRACES ON ONE TIMELINE (aligned by wall clock, each rank judged on its own)"
        );
        for r in &analysis.ranks {
            let mark = match r.problem {
                Some(true) => '✗',
                Some(false) => '✓',
                None => '•',
            };
            let _ = writeln!(out, "  {mark} rank {}: {}", r.rank, r.headline);
        }
        if analysis.ranks.is_empty() {
            let (headline, _) = collector::analysis::headline(analysis);
            let _ = writeln!(out, "  • {headline}");
        }
        for w in &recording.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    super::out(format_args!("{out}"));
    Ok(Answer::Done)
}
