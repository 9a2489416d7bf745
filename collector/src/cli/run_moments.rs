//! `collector diff RECORDING --at T1 --at T2`: two moments of one recording — each curve at both,
//! what each phase did between them, who came to hold more ([`collector::compare::compare_moments`],
//! what the viewer shows for two right-clicks on its timeline).
//!
//! A moment is a training step (`120`: when that step began), a share of the run (`50%`), a time
//! after its start (`2.5s`, `800ms`), or `peak`: when the memory the verdict judges was highest.

use std::fmt::Write as _;
use std::path::Path;

use collector::analysis::{Analysis, Basis, analyze};
use collector::compare::{Moments, compare_moments};
use collector::format::format_seconds;
use collector::recording::{Recording, SeriesKind};
use serde::Serialize;

use super::diff::{Form, Table, Unit};
use super::moments::Moment;

/// Two moments of a recording, as the user named them, compared.
#[derive(Debug, Serialize)]
pub(super) struct RunMoments {
    /// The recording's path.
    pub file: String,
    /// The moments as given.
    pub at: [String; 2],
    /// The comparison.
    #[serde(flatten)]
    pub moments: Moments,
}

/// When the memory the verdict judges was highest, nanoseconds after the start.
fn peak_ns(recording: &Recording, analysis: &Analysis) -> Option<u64> {
    if analysis.basis == Basis::Allocated {
        let readings = &recording.allocator;
        return (0..readings.len())
            .max_by_key(|&i| (readings.allocated(i), std::cmp::Reverse(i)))
            .map(|i| readings.t_ns(i));
    }
    let kind = match analysis.basis {
        Basis::DeviceUsed => SeriesKind::DeviceUsed,
        _ => SeriesKind::HostRss,
    };
    let series = recording
        .series
        .iter()
        .find(|s| s.key.kind == kind && s.key.pid.is_none())?;
    (0..series.values.len())
        .max_by_key(|&i| (series.values.at(i), std::cmp::Reverse(i)))
        .map(|i| series.times_ns[i])
}

impl Moment {
    /// The time after the recording's start this moment is.
    fn time_ns(
        self,
        path: &Path,
        recording: &Recording,
        analysis: &Analysis,
    ) -> Result<u64, String> {
        let end = recording.duration_ns();
        match self {
            Moment::Step(step) => analysis
                .step_starts
                .iter()
                .find(|s| s.step == u64::from(step))
                .map(|s| s.t_ns)
                .ok_or_else(|| match (analysis.step_starts.first(), analysis.step_starts.last()) {
                    (Some(a), Some(b)) => format!(
                        "{}: no step {step} in the recording (its steps run {} to {})",
                        path.display(),
                        a.step,
                        b.step
                    ),
                    _ => format!(
                        "{}: the recording has no steps; name a moment by a share (50%) or a time (2.5s)",
                        path.display()
                    ),
                }),
            Moment::Share(p) => Ok((p / 100.0 * end as f64).round() as u64),
            Moment::Seconds(s) => Ok(((s * 1e9).round() as u64).min(end)),
            Moment::Peak => peak_ns(recording, analysis).ok_or_else(|| {
                format!("{}: the recording has no memory readings", path.display())
            }),
        }
    }
}

/// Compares two moments of the recording read from `path`.
pub(super) fn between(
    path: &Path,
    recording: &Recording,
    at: &[String],
) -> Result<RunMoments, String> {
    let [first, second] = at else {
        return Err(format!(
            "--at is given {} time(s): give it twice, for the two moments of the recording",
            at.len()
        ));
    };
    let moments = [Moment::parse(first)?, Moment::parse(second)?];
    let analysis = analyze(recording);
    let a = moments[0].time_ns(path, recording, &analysis)?;
    let b = moments[1].time_ns(path, recording, &analysis)?;
    Ok(RunMoments {
        file: path.display().to_string(),
        at: [first.clone(), second.clone()],
        moments: compare_moments(recording, &analysis, a, b),
    })
}

/// The comparison as text, Markdown or HTML tables.
pub(super) fn render(r: &RunMoments, form: Form) -> String {
    let m = &r.moments;
    let mut out = String::new();
    let when = |i: usize, t: u64| match m.steps[i] {
        Some(step) => format!("step {step}, {}", format_seconds(t as f64 / 1e9)),
        None => format_seconds(t as f64 / 1e9),
    };
    let head = format!(
        "{} between --at {} and --at {}: from {} to {}",
        r.file,
        r.at[0],
        r.at[1],
        when(0, m.from_ns),
        when(1, m.to_ns)
    );
    match form {
        Form::Markdown => {
            let _ = writeln!(out, "### tidemark: two moments of a run\n\n`{head}`\n");
        }
        Form::Text => {
            let _ = writeln!(out, "collector diff: {head}\n");
        }
        Form::Html => {}
    }
    let mut curves = Table::new("each curve", vec!["", "at A", "at B", "change"]);
    for s in &m.series {
        curves.quantity(s.label(), &s.value, Unit::Bytes);
    }
    curves.write(&mut out, form);
    let mut phases = Table::new(
        "per phase, its occurrences wholly between the moments",
        vec!["phase", "times", "net", "largest watermark", "retained"],
    );
    for p in &m.phases {
        phases.rows.push(vec![
            p.phase.clone(),
            p.occurrences.to_string(),
            collector::compare::signed_bytes(p.net_bytes),
            collector::format::format_bytes(p.watermark_bytes),
            p.retained_bytes
                .map_or("—".to_owned(), collector::compare::signed_bytes),
        ]);
    }
    if let Some(between) = m.between_phases_bytes {
        phases.rows.push(vec![
            "between phases".to_owned(),
            String::new(),
            collector::compare::signed_bytes(between),
            String::new(),
            String::new(),
        ]);
    }
    phases.write(&mut out, form);
    let [x, y] = m.census_steps;
    let mut holders = Table::new(
        format!(
            "holders that came to hold more (censuses at steps {} and {})",
            x.map_or("?".to_owned(), |s| s.to_string()),
            y.map_or("?".to_owned(), |s| s.to_string())
        ),
        vec!["", "at A", "at B", "change"],
    );
    for h in &m.holders {
        holders.quantity(format!("{} ({})", h.name, h.what), &h.held, Unit::Bytes);
    }
    holders.write(&mut out, form);
    for note in &m.notes {
        super::diff::write_note(&mut out, form, note);
    }
    out
}
