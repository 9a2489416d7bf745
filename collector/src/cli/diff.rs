//! `collector diff A B [--json | --markdown] [--html FILE]`: two PyTorch memory snapshots by
//! allocation site and per device, or two recordings by phase, step baseline, categories, holders, peaks and OOMs —
//! A, B and the change (see [`collector::compare`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use collector::analysis::{Analysis, StepSeries, analyze};
use collector::compare::{
    Pair, RecordingDiff, SiteStatus, SnapshotDiff, SnapshotFacts, compare_recordings,
    compare_snapshots, device_name, signed_bytes,
};
use collector::format::format_bytes;
use collector::open::{Opened, read_any_file};
use collector::snapshot::{Judged, SnapshotVerdict};
use serde::Serialize;

use super::failure::{Answer, Failure};

/// Arguments of `collector diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The baseline: a recording, or a PyTorch memory snapshot.
    pub a: PathBuf,
    /// The file compared with it, of the same kind (not with `--at`).
    #[arg(required_unless_present = "at", conflicts_with = "at")]
    pub b: Option<PathBuf>,
    /// Two moments of A, given twice. A snapshot: what was allocated between them and is still
    /// alive at the later one, by site; a moment is a step of the trace as the memory timeline
    /// counts it (`1200`), a share of it (`50%`), a time after its first entry (`2.5s`,
    /// `800ms`), or `peak` (the first step with the most bytes alive). A recording: each curve
    /// at both, what each phase did between them, who came to hold more; a moment is a
    /// training step (when it began), a share, a time after the start, or `peak`.
    #[arg(long, value_name = "MOMENT", num_args = 1)]
    pub at: Vec<String>,
    /// Print the comparison as JSON.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the comparison as Markdown (for a pull request or `$GITHUB_STEP_SUMMARY`).
    #[arg(long)]
    pub markdown: bool,
    /// Also write the comparison as one self-contained HTML page with its picture (two
    /// recordings' steps on one axis, or the sites that changed most), as `report --html` does.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// How many allocation sites the text and Markdown list (JSON lists all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub sites: usize,
}

/// Two files read and compared.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Compared {
    /// Two snapshots.
    Snapshots {
        /// A's path.
        a: String,
        /// B's path.
        b: String,
        /// The comparison.
        diff: SnapshotDiff,
    },
    /// Two recordings.
    Recordings {
        /// A's path.
        a: String,
        /// B's path.
        b: String,
        /// The comparison.
        diff: Box<RecordingDiff>,
        /// A's and B's memory at the same point of every step, and what it is (for the
        /// picture).
        #[serde(skip)]
        steps: Box<[StepSeries; 2]>,
    },
}

/// What a file is, in words.
fn kind(opened: &Opened) -> &'static str {
    match opened {
        Opened::Recording(_) => "a tidemark recording",
        Opened::Snapshot(_) => "a PyTorch memory snapshot",
    }
}

/// Reads both files and compares them; the error says why they cannot be compared (exit 2).
pub(super) fn compare_files(a: &Path, b: &Path) -> Result<Compared, String> {
    compare(a, b, false).map(|(compared, _)| compared)
}

/// [`compare_files`], with the analysis of B and, for a snapshot, its verdict (both from
/// [`Judged`]), for the check's own findings.
pub(super) fn compare_files_judged(
    a: &Path,
    b: &Path,
) -> Result<(Compared, Analysis, Option<SnapshotVerdict>), String> {
    let (compared, judged) = compare(a, b, true)?;
    // Both kinds are analyzed when asked to.
    let (analysis, verdict) = judged.ok_or_else(|| format!("{} was not analyzed", b.display()))?;
    Ok((compared, analysis, verdict))
}

/// B's analysis and, for a snapshot, its verdict.
type JudgedB = (Analysis, Option<SnapshotVerdict>);

fn compare(a: &Path, b: &Path, judge_b: bool) -> Result<(Compared, Option<JudgedB>), String> {
    let (opened_a, opened_b) = std::thread::scope(|scope| {
        let other = scope.spawn(|| read_any_file(b));
        let first = read_any_file(a);
        let second = other
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (first, second)
    });
    let opened_a = opened_a.map_err(|e| e.to_string())?;
    let opened_b = opened_b.map_err(|e| e.to_string())?;
    let names = (a.display().to_string(), b.display().to_string());
    match (opened_a, opened_b) {
        (Opened::Snapshot(sa), Opened::Snapshot(sb)) => {
            let (fa, fb) = std::thread::scope(|scope| {
                let other = scope.spawn(|| SnapshotFacts::of(&sb));
                let first = SnapshotFacts::of(&sa);
                let second = other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (first, second)
            });
            let diff = compare_snapshots(&fa, &fb);
            if let Some(why) = diff.nothing_comparable() {
                return Err(format!("{} and {}: {why}", names.0, names.1));
            }
            let analysis = judge_b.then(|| {
                let judged = Judged::new(*sb);
                (judged.analysis, Some(judged.verdict))
            });
            Ok((
                Compared::Snapshots {
                    a: names.0,
                    b: names.1,
                    diff,
                },
                analysis,
            ))
        }
        (Opened::Recording(ra), Opened::Recording(rb)) => {
            let (aa, ab) = std::thread::scope(|scope| {
                let other = scope.spawn(|| analyze(&rb));
                let first = analyze(&ra);
                let second = other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (first, second)
            });
            let diff = compare_recordings(&ra, &aa, &rb, &ab);
            if let Some(why) = diff.nothing_comparable() {
                return Err(format!("{} and {}: {why}", names.0, names.1));
            }
            Ok((
                Compared::Recordings {
                    a: names.0,
                    b: names.1,
                    diff: Box::new(diff),
                    steps: Box::new([aa.step_series, ab.step_series.clone()]),
                },
                Some((ab, None)),
            ))
        }
        (x, y) => Err(format!(
            "cannot compare {} ({}) with {} ({}): compare a snapshot with a snapshot, a recording with a recording (`collector import` turns a snapshot into a recording)",
            names.0,
            kind(&x),
            names.1,
            kind(&y)
        )),
    }
}

/// `collector diff A B`: the comparison printed, or why the files cannot be read or compared.
pub fn diff(args: &DiffArgs) -> Result<Answer, Failure> {
    let form = if args.markdown {
        Form::Markdown
    } else {
        Form::Text
    };
    match &args.b {
        Some(b) => {
            let compared = compare_files(&args.a, b)?;
            if let Some(path) = &args.html {
                super::diff_picture::write_html(path, &compared, args.sites)?;
            }
            print(args, &compared, |c| render(c, form, args.sites))
        }
        // `collector diff FILE --at T1 --at T2`: two moments of a snapshot's trace, or of a
        // recording.
        None => match read_any_file(&args.a)? {
            Opened::Snapshot(snapshot) => {
                let moments = super::moments::between(&args.a, &snapshot, &args.at)?;
                if let Some(path) = &args.html {
                    super::diff_picture::write_moments_html(path, &moments, args.sites)?;
                }
                print(args, &moments, |m| {
                    super::moments::render(m, args.markdown, args.sites)
                })
            }
            Opened::Recording(recording) => {
                let moments = super::run_moments::between(&args.a, &recording, &args.at)?;
                if let Some(path) = &args.html {
                    super::diff_picture::write_run_moments_html(path, &moments)?;
                }
                print(args, &moments, |m| super::run_moments::render(m, form))
            }
        },
    }
}

/// Prints what was compared as JSON (`--json`) or as `render` writes it.
fn print<T: Serialize>(
    args: &DiffArgs,
    compared: &T,
    render: impl FnOnce(&T) -> String,
) -> Result<Answer, Failure> {
    let text = if args.json {
        serde_json::to_string_pretty(compared)
            .map_err(|err| Failure::Cannot(format!("cannot write the comparison as JSON: {err}")))?
            + "\n"
    } else {
        render(compared)
    };
    super::out(format_args!("{text}"));
    Ok(Answer::Done)
}

/// How a row's numbers read.
#[derive(Clone, Copy)]
pub(super) enum Unit {
    Bytes,
    PerStep,
    Count,
}

pub(super) fn number(value: Option<f64>, unit: Unit) -> String {
    match (value, unit) {
        (None, _) => "—".to_owned(),
        (Some(v), Unit::Bytes) => format_bytes(v),
        (Some(v), Unit::PerStep) => format!("{}/step", format_bytes(v)),
        (Some(v), Unit::Count) => format!("{v:.0}"),
    }
}

fn change(pair: &Pair, unit: Unit) -> String {
    let Some(c) = pair.change else {
        return "—".to_owned();
    };
    let text = match unit {
        Unit::Bytes => signed_bytes(c),
        Unit::PerStep => format!("{}/step", signed_bytes(c)),
        Unit::Count => format!("{c:+.0}"),
    };
    match (pair.a, unit) {
        (Some(a), Unit::Bytes) if a.abs() > 0.0 && c != 0.0 => {
            format!("{text} ({:+.1}%)", 100.0 * c / a.abs())
        }
        _ => text,
    }
}

/// How a comparison is written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// Aligned columns, for a terminal.
    Text,
    /// Markdown tables, for a pull request.
    Markdown,
    /// HTML tables, for `--html`.
    Html,
}

/// A table: a title, its header and rows of cells, as text (aligned columns) or Markdown.
pub(super) struct Table {
    title: String,
    header: Vec<&'static str>,
    pub(super) rows: Vec<Vec<String>>,
}

impl Table {
    pub(super) fn new(title: impl Into<String>, header: Vec<&'static str>) -> Self {
        Self {
            title: title.into(),
            header,
            rows: Vec::new(),
        }
    }

    /// A row for a quantity (none when neither side has it).
    pub(super) fn quantity(&mut self, label: impl Into<String>, pair: &Pair, unit: Unit) {
        if pair.a.is_none() && pair.b.is_none() {
            return;
        }
        self.rows.push(vec![
            label.into(),
            number(pair.a, unit),
            number(pair.b, unit),
            change(pair, unit),
        ]);
    }

    pub(super) fn write(&self, out: &mut String, form: Form) {
        if self.rows.is_empty() {
            return;
        }
        if form == Form::Html {
            let escape = super::picture::escape;
            let _ = write!(out, "<h2>{}</h2>\n<table><tr>", escape(&self.title));
            for h in &self.header {
                let _ = write!(out, "<th>{}</th>", escape(h));
            }
            out.push_str("</tr>\n");
            for row in &self.rows {
                out.push_str("<tr>");
                for cell in row {
                    let _ = write!(out, "<td>{}</td>", escape(cell));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</table>\n");
            return;
        }
        if form == Form::Markdown {
            let _ = writeln!(out, "**{}**\n", self.title);
            let _ = writeln!(out, "| {} |", self.header.join(" | "));
            let _ = writeln!(
                out,
                "|{}",
                self.header
                    .iter()
                    .enumerate()
                    .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
                    .collect::<String>()
            );
            for row in &self.rows {
                let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
            out.push('\n');
            return;
        }
        let _ = writeln!(out, "{}:", self.title);
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut text = String::from(" ");
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let pad = w.saturating_sub(cell.chars().count());
                if i == 0 || i + 1 == cells.len() && self.header.len() > 4 {
                    text.push_str(&format!(" {cell}{}", " ".repeat(pad)));
                } else {
                    text.push_str(&format!(" {}{cell}", " ".repeat(pad)));
                }
                text.push(' ');
            }
            text.trim_end().to_owned()
        };
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        let _ = writeln!(out, "{}", line(&header));
        for row in &self.rows {
            let _ = writeln!(out, "{}", line(row));
        }
        out.push('\n');
    }
}

/// The comparison as text or Markdown.
pub(super) fn render(compared: &Compared, form: Form, max_sites: usize) -> String {
    let markdown = form == Form::Markdown;
    let html = form == Form::Html;
    let mut out = String::new();
    let (a, b, what) = match compared {
        Compared::Snapshots { a, b, .. } => (a, b, "PyTorch memory snapshots"),
        Compared::Recordings { a, b, .. } => (a, b, "recordings"),
    };
    if html {
        // The page says what is compared.
    } else if markdown {
        let _ = writeln!(
            out,
            "### tidemark: memory compared\n\nA = `{a}`, B = `{b}` ({what}); change = B − A.\n"
        );
    } else {
        let _ = writeln!(
            out,
            "collector diff: A = {a}, B = {b} ({what}); change = B − A\n"
        );
    }
    let header = vec!["", "A", "B", "change"];
    let notes = match compared {
        Compared::Snapshots { diff, .. } => {
            let mut table = Table::new("per device", header.clone());
            for d in &diff.devices {
                let dev = device_name(d.device);
                table.quantity(format!("{dev} reserved"), &d.reserved, Unit::Bytes);
                table.quantity(format!("{dev} allocated"), &d.allocated, Unit::Bytes);
                table.quantity(
                    format!("{dev} cached, free (reserved − allocated)"),
                    &d.cached,
                    Unit::Bytes,
                );
                table.quantity(
                    format!("{dev} peak allocated in the trace"),
                    &d.trace_peak,
                    Unit::Bytes,
                );
                table.quantity(format!("{dev} live blocks"), &d.live_blocks, Unit::Count);
            }
            table.write(&mut out, form);
            let mut sites = Table::new(
                format!(
                    "allocation sites, by the change of their live bytes ({} in all)",
                    diff.sites.len()
                ),
                vec!["change", "A", "B", "blocks A → B", "site"],
            );
            for s in diff.sites.iter().take(max_sites) {
                let tag = match s.status {
                    SiteStatus::Both => "",
                    SiteStatus::New => " [new]",
                    SiteStatus::Gone => " [gone]",
                };
                sites.rows.push(vec![
                    signed_bytes(s.bytes.change.unwrap_or(0.0)),
                    number(s.bytes.a, Unit::Bytes),
                    number(s.bytes.b, Unit::Bytes),
                    format!(
                        "{} → {}",
                        number(s.blocks.a, Unit::Count),
                        number(s.blocks.b, Unit::Count)
                    ),
                    format!("{} {}{tag}", device_name(s.device), s.site),
                ]);
            }
            sites.write(&mut out, form);
            if diff.sites.len() > max_sites {
                let more = format!(
                    "… and {} more sites (--sites N lists more, --json all)",
                    diff.sites.len() - max_sites
                );
                if html {
                    let _ = writeln!(out, "<p>{more}</p>");
                } else {
                    let _ = writeln!(out, "{more}\n");
                }
            }
            &diff.notes
        }
        Compared::Recordings { diff, .. } => {
            let mut steps = Table::new(
                format!(
                    "the memory at the same point of every step ({})",
                    if diff.basis[0] == diff.basis[1] {
                        diff.basis[0].to_owned()
                    } else {
                        format!("A: {}, B: {}", diff.basis[0], diff.basis[1])
                    }
                ),
                header.clone(),
            );
            steps.quantity("steps (or windows)", &diff.steps, Unit::Count);
            steps.quantity("baseline (median)", &diff.baseline, Unit::Bytes);
            steps.quantity("trend (slope)", &diff.slope, Unit::PerStep);
            steps.write(&mut out, form);
            let mut phases = Table::new("per phase, mean per occurrence", header.clone());
            for p in &diff.phases {
                phases.quantity(
                    format!("{} occurrences", p.phase),
                    &p.occurrences,
                    Unit::Count,
                );
                phases.quantity(format!("{} net", p.phase), &p.net, Unit::Bytes);
                phases.quantity(format!("{} watermark", p.phase), &p.watermark, Unit::Bytes);
                phases.quantity(format!("{} retained", p.phase), &p.retained, Unit::Bytes);
            }
            phases.write(&mut out, form);
            let mut peaks = Table::new("peaks", header.clone());
            for d in &diff.devices {
                peaks.quantity(
                    format!("cuda:{} allocated", d.device),
                    &d.allocated_peak,
                    Unit::Bytes,
                );
                peaks.quantity(
                    format!("cuda:{} device memory in use", d.device),
                    &d.device_used_peak,
                    Unit::Bytes,
                );
            }
            peaks.quantity("host resident memory", &diff.host_peak, Unit::Bytes);
            peaks.quantity("out-of-memory errors", &diff.ooms, Unit::Count);
            peaks.write(&mut out, form);
            for (side, causes) in ["A", "B"].iter().zip(&diff.oom_causes) {
                if !causes.is_empty() {
                    let _ = writeln!(out, "{side} ran out of memory: {}", causes.join("; "));
                }
            }
            let mut categories = Table::new(
                "memory by category at the step starts (median)",
                header.clone(),
            );
            for c in &diff.categories {
                let place = c.device.map_or("host".to_owned(), |d| format!("cuda:{d}"));
                categories.quantity(format!("{place} parameters"), &c.parameters, Unit::Bytes);
                categories.quantity(format!("{place} gradients"), &c.gradients, Unit::Bytes);
                categories.quantity(
                    format!("{place} optimizer state"),
                    &c.optimizer_state,
                    Unit::Bytes,
                );
                categories.quantity(format!("{place} the rest"), &c.rest, Unit::Bytes);
            }
            categories.write(&mut out, form);
            let mut holders = Table::new(
                "holders that grew between the first and last census",
                header.clone(),
            );
            for h in &diff.holders {
                holders.quantity(format!("{} ({})", h.name, h.what), &h.growth, Unit::Bytes);
            }
            holders.write(&mut out, form);
            &diff.notes
        }
    };
    for note in notes {
        write_note(&mut out, form, note);
    }
    out
}

/// A note under a comparison, as `form` writes one.
pub(super) fn write_note(out: &mut String, form: Form, note: &str) {
    let _ = match form {
        Form::Html => writeln!(out, "<p>note: {}</p>", super::picture::escape(note)),
        Form::Markdown => writeln!(out, "- note: {note}"),
        Form::Text => writeln!(out, "note: {note}"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_read_with_their_sign_and_share() {
        let pair = Pair::new(Some(100.0 * 1048576.0), Some(150.0 * 1048576.0));
        assert_eq!(change(&pair, Unit::Bytes), "+50.0 MiB (+50.0%)");
        assert_eq!(change(&Pair::new(None, Some(1.0)), Unit::Bytes), "—");
        assert_eq!(change(&Pair::new(Some(3.0), Some(1.0)), Unit::Count), "-2");
    }

    #[test]
    fn tables_align_as_text_and_escape_as_markdown() {
        let mut table = Table::new("t", vec!["", "A", "B", "change"]);
        table.quantity("x|y", &Pair::new(Some(1.0), Some(2.0)), Unit::Count);
        let mut md = String::new();
        table.write(&mut md, Form::Markdown);
        assert!(md.contains("| x\\|y | 1 | 2 | +1 |"), "{md}");
        let mut text = String::new();
        table.write(&mut text, Form::Text);
        assert!(text.contains("x|y  1  2      +1"), "{text}");
    }
}
