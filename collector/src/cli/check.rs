//! `collector check FILE`: a CI gate on the analysis' findings.

use std::path::{Path, PathBuf};

use collector::analysis::{Analysis, Finding, FindingKind};
use collector::compare::{Gate, GateRow, Threshold};
use collector::snapshot::SnapshotVerdict;

use super::failure::{Answer, Failure};
use super::loaded::load;

/// Arguments of `collector check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The recording (or PyTorch memory snapshot) to check. A snapshot also fails on its own
    /// verdict when that names a problem of the kinds below (taken at an out-of-memory error:
    /// oom; a leak or a leak suspect behind most occurrences of a phase: leak; a request that
    /// fits in the free memory but in no free piece: fragmentation).
    pub file: PathBuf,
    /// Findings that fail the check, comma-separated: oom, failed, stalled, leak,
    /// non_pytorch_growth, fragmentation, peak_creep, capacity_pressure, non_pytorch_memory,
    /// other_processes, state_growth,
    /// imbalance, cache, gradients_kept, resident_growth, not_enough_data. By default a job that
    /// failed (exit status other than 0, or killed by a signal) or hung (`stalled`: it ended in a
    /// stall, see `--stall-after`) fails the check too, and so does
    /// resident memory that rises steadily while nothing allocated does (the report asks why; the
    /// job dies of it all the same).
    #[arg(long, value_name = "KINDS", value_delimiter = ',', default_value = "oom,failed,stalled,leak,non_pytorch_growth,fragmentation,peak_creep,state_growth,resident_growth", value_parser = parse_kind)]
    pub fail_on: Vec<FindingKind>,
    /// Tolerated growth per step, e.g. `1MiB/step` or `512KiB`: a finding that grows less passes.
    /// Default: any finding of the kinds above fails.
    #[arg(long, value_name = "SIZE/step", value_parser = parse_growth)]
    pub max_growth: Option<f64>,
    /// A recording (or snapshot) of the same job to compare with, e.g. one kept from the main
    /// branch: the check also fails when FILE's peak per device, a phase's watermark or what it
    /// retains per step, or the step baseline grew beyond the thresholds below (for snapshots:
    /// the peak in the trace, and what is alive at the end against --max-baseline-increase).
    /// Exit 2 when the two cannot be compared (a snapshot and a recording, no device, phase or
    /// step series in common).
    #[arg(long, value_name = "BASE")]
    pub baseline: Option<PathBuf>,
    /// How much the peak per device may grow over the baseline: a percentage or a size.
    /// Percentages ignore growth under 1 MiB.
    #[arg(long, value_name = "LIMIT", default_value = "5%", value_parser = Threshold::parse, requires = "baseline")]
    pub max_peak_increase: Threshold,
    /// How much a phase's watermark (what it needs above its start, mean per occurrence) may
    /// grow over the baseline's.
    #[arg(long, value_name = "LIMIT", default_value = "10%", value_parser = Threshold::parse, requires = "baseline")]
    pub max_watermark_increase: Threshold,
    /// How much the step baseline (the median memory at the same point of every step) may grow
    /// over the baseline's.
    #[arg(long, value_name = "LIMIT", default_value = "64MiB", value_parser = Threshold::parse, requires = "baseline")]
    pub max_baseline_increase: Threshold,
    /// How much a phase's retained bytes per step (what no later phase of the step gives back:
    /// a leak's rate) may grow over the baseline's.
    #[arg(long, value_name = "LIMIT", default_value = "1MiB/step", value_parser = Threshold::parse, requires = "baseline")]
    pub max_retained_increase: Threshold,
    /// With --baseline: print the verdict as Markdown, a table of every quantity compared (for
    /// `>> "$GITHUB_STEP_SUMMARY"`), instead of text.
    #[arg(long, requires = "baseline")]
    pub markdown: bool,
}

fn parse_kind(name: &str) -> Result<FindingKind, String> {
    FindingKind::parse(name).ok_or_else(|| {
        let known: Vec<&str> = collector::analysis::ALL_KINDS
            .iter()
            .map(|k| k.as_str())
            .collect();
        format!("unknown finding {name:?}; known: {}", known.join(", "))
    })
}

/// Parses `1MiB/step`, `512 KiB`, `2GB`, `4096`.
pub fn parse_growth(text: &str) -> Result<f64, String> {
    let body = text.trim().trim_end_matches("/step").trim();
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, unit) = body.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: expected e.g. 1MiB/step"))?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use B, KiB, MiB or GiB"
            ));
        }
    };
    Ok(number * factor)
}

/// `collector check FILE`: 0 when fine, 1 with the failing findings printed, 2 when unreadable.
pub fn check(args: &CheckArgs) -> Result<Answer, Failure> {
    if let Some(base) = &args.baseline {
        return check_against(args, base);
    }
    let (analysis, snapshot_verdict) = load(&args.file)?;
    let failing = failing_findings(args, &analysis);
    let verdict = failing_verdict(args, &analysis, snapshot_verdict.as_ref());
    if failing.is_empty() && verdict.is_none() {
        let n = analysis.step_series.values.len();
        let over = match (n, analysis.by_step, snapshot_verdict.is_some()) {
            (0, _, true) => {
                "the snapshot's own verdict: it has no trace to judge over time".to_owned()
            }
            (0, _, false) => "no steps or time windows to judge over".to_owned(),
            (n, true, _) => format!("judged over {}", collector::format::count(n, "step")),
            (n, false, _) => format!(
                "judged over {}, the lowest memory of each, as no steps are marked",
                collector::format::count(n, "time window")
            ),
        };
        super::out(format_args!(
            "collector check: ok ({over}; none of: {})\n",
            args.fail_on
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return Ok(Answer::Done);
    }
    if let Some(verdict) = verdict {
        super::out(format_args!(
            "collector check: FAILED: {}\n",
            verdict.headline
        ));
        for line in &verdict.evidence {
            super::out(format_args!("    {line}\n"));
        }
    }
    for finding in failing {
        super::out(format_args!("collector check: FAILED: {}\n", finding.title));
        for line in &finding.evidence {
            super::out(format_args!("    {line}\n"));
        }
    }
    Ok(Answer::Fails)
}

/// The findings of `analysis` that fail the check under `args`.
fn failing_findings<'a>(args: &CheckArgs, analysis: &'a Analysis) -> Vec<&'a Finding> {
    analysis
        .findings
        .iter()
        .filter(|f| args.fail_on.contains(&f.kind))
        .filter(|f| match (args.max_growth, f.growth_per_step_bytes) {
            (Some(max), Some(growth)) => growth > max,
            _ => true,
        })
        .collect()
}

/// A snapshot's verdict when it fails the check under `args`: it names a problem of a kind that
/// fails. A verdict that is one of the analysis' findings (a leak in the trace) is left to that
/// finding, which `--max-growth` also judges.
fn failing_verdict<'a>(
    args: &CheckArgs,
    analysis: &Analysis,
    verdict: Option<&'a SnapshotVerdict>,
) -> Option<&'a SnapshotVerdict> {
    verdict.filter(|v| {
        v.problem_kind.is_some_and(|k| args.fail_on.contains(&k))
            && !analysis.findings.iter().any(|f| f.title == v.headline)
    })
}

/// `collector check FILE --baseline BASE`: FILE's own findings, and every quantity of FILE
/// against BASE's; 0 when all pass, 1 when any fails, 2 when either file cannot be read or the
/// two cannot be compared.
fn check_against(args: &CheckArgs, base: &Path) -> Result<Answer, Failure> {
    let (compared, analysis, verdict) = super::diff::compare_files_judged(base, &args.file)?;
    let gate = Gate {
        peak: args.max_peak_increase,
        watermark: args.max_watermark_increase,
        baseline: args.max_baseline_increase,
        retained: args.max_retained_increase,
    };
    let (rows, notes) = match &compared {
        super::diff::Compared::Recordings { diff, .. } => {
            (gate.judge_recordings(diff), diff.notes.clone())
        }
        super::diff::Compared::Snapshots { diff, .. } => {
            (gate.judge_snapshots(diff), diff.notes.clone())
        }
    };
    if rows.is_empty() {
        return Err(Failure::Cannot(format!(
            "nothing to compare between {} and {}: no peak, phase or step series in both{}",
            base.display(),
            args.file.display(),
            notes.first().map_or(String::new(), |n| format!(" ({n})"))
        )));
    }
    let mut findings: Vec<Failing<'_>> = failing_verdict(args, &analysis, verdict.as_ref())
        .map(|v| Failing {
            title: &v.headline,
            evidence: &v.evidence,
        })
        .into_iter()
        .collect();
    findings.extend(
        failing_findings(args, &analysis)
            .into_iter()
            .map(|f: &Finding| Failing {
                title: &f.title,
                evidence: &f.evidence,
            }),
    );
    let failed = !findings.is_empty() || rows.iter().any(|r| r.failed);
    let text = if args.markdown {
        baseline_markdown(base, &args.file, &rows, &findings, &notes)
    } else {
        baseline_text(base, &rows, &findings, &notes)
    };
    super::out(format_args!("{text}"));
    Ok(if failed { Answer::Fails } else { Answer::Done })
}

/// What fails a check besides the quantities: a finding, or a snapshot's verdict.
struct Failing<'a> {
    title: &'a str,
    evidence: &'a [String],
}

/// The verdict against a baseline as text: what failed, with its numbers, then the count.
fn baseline_text(
    base: &Path,
    rows: &[GateRow],
    findings: &[Failing<'_>],
    notes: &[String],
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for row in rows.iter().filter(|r| r.failed) {
        let _ = writeln!(out, "collector check: FAILED: {}", row.sentence());
    }
    for finding in findings {
        let _ = writeln!(out, "collector check: FAILED: {}", finding.title);
        for line in finding.evidence {
            let _ = writeln!(out, "    {line}");
        }
    }
    let over = rows.iter().filter(|r| r.failed).count();
    let _ = writeln!(
        out,
        "collector check: {} against the baseline {}: {} of {} quantities within their thresholds{}",
        if over == 0 && findings.is_empty() {
            "ok"
        } else {
            "FAILED"
        },
        base.display(),
        rows.len() - over,
        rows.len(),
        if findings.is_empty() {
            String::new()
        } else {
            format!(", {} failing finding(s)", findings.len())
        }
    );
    for note in notes {
        let _ = writeln!(out, "    note: {note}");
    }
    out
}

/// The verdict against a baseline as Markdown, for `$GITHUB_STEP_SUMMARY`: every quantity
/// compared in one table, the failing findings, the notes.
fn baseline_markdown(
    base: &Path,
    run: &Path,
    rows: &[GateRow],
    findings: &[Failing<'_>],
    notes: &[String],
) -> String {
    use collector::compare::signed_bytes;
    use collector::format::format_bytes;
    use std::fmt::Write as _;
    let failed = !findings.is_empty() || rows.iter().any(|r| r.failed);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### tidemark check: {}\n\n`{}` against the baseline `{}`.\n",
        if failed { "FAILED" } else { "passed" },
        run.display(),
        base.display()
    );
    let _ = writeln!(out, "| | baseline | this run | change | allowed | |");
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---|");
    for row in rows {
        let change = row.run - row.base;
        let percent = if row.base.abs() > 0.0 {
            format!(" ({:+.1}%)", 100.0 * change / row.base.abs())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}{percent} | {} | {} |",
            row.what,
            format_bytes(row.base),
            format_bytes(row.run),
            signed_bytes(change),
            row.threshold,
            if row.failed { "**FAILED**" } else { "ok" }
        );
    }
    if !findings.is_empty() {
        let _ = writeln!(out, "\nFindings that fail the check:\n");
        for finding in findings {
            let _ = writeln!(out, "- **{}**", finding.title.replace('|', "\\|"));
            for line in finding.evidence {
                let _ = writeln!(out, "  - {line}");
            }
        }
    }
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            let _ = writeln!(out, "- note: {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Check {
        #[command(flatten)]
        args: CheckArgs,
    }

    #[test]
    fn a_failed_job_fails_the_check_by_default() {
        use clap::Parser;
        let check = Check::try_parse_from(["check", "run.msgpack"]).unwrap();
        for kind in [
            FindingKind::Failed,
            FindingKind::Stalled,
            FindingKind::Oom,
            FindingKind::Leak,
            FindingKind::NonPytorchGrowth,
            FindingKind::ResidentGrowth,
        ] {
            assert!(check.args.fail_on.contains(&kind), "{kind:?}");
        }
        assert!(!check.args.fail_on.contains(&FindingKind::Cache));
        let chosen = Check::try_parse_from(["check", "run.msgpack", "--fail-on", "leak"]).unwrap();
        assert_eq!(chosen.args.fail_on, vec![FindingKind::Leak]);
    }

    #[test]
    fn growth_thresholds_parse() {
        assert_eq!(parse_growth("1MiB/step"), Ok(1048576.0));
        assert_eq!(parse_growth("512 KiB"), Ok(524288.0));
        assert_eq!(parse_growth("2GB"), Ok(2e9));
        assert_eq!(parse_growth("4096"), Ok(4096.0));
        assert!(parse_growth("lots").is_err());
        assert!(parse_growth("3 parsecs").is_err());
    }
}
