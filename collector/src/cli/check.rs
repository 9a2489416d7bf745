//! `collector check FILE`: a CI gate on the analysis' findings.

use std::path::PathBuf;
use std::process::ExitCode;

use collector::analysis::{FindingKind, analyze};

use super::load;

/// Arguments of `collector check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The recording (or PyTorch memory snapshot) to check.
    pub file: PathBuf,
    /// Findings that fail the check, comma-separated: oom, failed, leak, fragmentation,
    /// peak_creep, capacity_pressure, non_pytorch_memory, other_processes, state_growth,
    /// imbalance, cache, gradients_kept, resident_growth, not_enough_data. By default a job that
    /// failed (exit status other than 0, or killed by a signal) fails the check too, and so does
    /// resident memory that rises steadily while nothing allocated does (the report asks why; the
    /// job dies of it all the same).
    #[arg(long, value_name = "KINDS", value_delimiter = ',', default_value = "oom,failed,leak,fragmentation,peak_creep,state_growth,resident_growth", value_parser = parse_kind)]
    pub fail_on: Vec<FindingKind>,
    /// Tolerated growth per step, e.g. `1MiB/step` or `512KiB`: a finding that grows less passes.
    /// Default: any finding of the kinds above fails.
    #[arg(long, value_name = "SIZE/step", value_parser = parse_growth)]
    pub max_growth: Option<f64>,
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
pub fn check(args: &CheckArgs) -> ExitCode {
    let recording = match load(&args.file) {
        Ok((recording, _)) => recording,
        Err(code) => return code,
    };
    let analysis = analyze(&recording);
    let failing: Vec<_> = analysis
        .findings
        .iter()
        .filter(|f| args.fail_on.contains(&f.kind))
        .filter(|f| match (args.max_growth, f.growth_per_step_bytes) {
            (Some(max), Some(growth)) => growth > max,
            _ => true,
        })
        .collect();
    if failing.is_empty() {
        super::out(format_args!(
            "collector check: ok ({} {}s, no {})\n",
            analysis.step_series.values.len(),
            if analysis.by_step { "step" } else { "window" },
            args.fail_on
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return ExitCode::SUCCESS;
    }
    for finding in failing {
        super::out(format_args!("collector check: FAILED: {}\n", finding.title));
        for line in &finding.evidence {
            super::out(format_args!("    {line}\n"));
        }
    }
    ExitCode::from(1)
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
            FindingKind::Oom,
            FindingKind::Leak,
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
