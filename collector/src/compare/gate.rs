//! The baseline gate: `collector check RUN --baseline BASE` judged on a comparison.

use serde::Serialize;

use super::{MIB, RecordingDiff, SnapshotDiff};
use crate::format::format_bytes;

/// How much growth a quantity may show over the baseline: a share of it, or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Threshold {
    /// Percent of the baseline's value. Growth under [`PERCENT_FLOOR_BYTES`] never exceeds it.
    Percent(f64),
    /// Bytes.
    Bytes(f64),
}

/// Growth this small never exceeds a percentage: the allocator's rounding and caching move
/// small numbers by that much from one run of a job to the next.
pub const PERCENT_FLOOR_BYTES: f64 = MIB;

impl Threshold {
    /// Parses `5%`, `64MiB`, `512 KiB`, `1MiB/step`, `2GB`, `4096`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let body = text.trim().trim_end_matches("/step").trim();
        if let Some(percent) = body.strip_suffix('%') {
            let value: f64 = percent
                .trim()
                .parse()
                .map_err(|_| format!("{text:?} is not a percentage: expected e.g. 5%"))?;
            return if value.is_finite() && value >= 0.0 {
                Ok(Self::Percent(value))
            } else {
                Err(format!("{text:?}: a percentage is 0 or more"))
            };
        }
        let split = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, unit) = body.split_at(split);
        let number: f64 = number.parse().map_err(|_| {
            format!("{text:?} is neither a size nor a percentage: expected e.g. 64MiB or 5%")
        })?;
        let factor = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kib" => 1024.0,
            "m" | "mib" => MIB,
            "g" | "gib" => 1024.0 * MIB,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {text:?}: use B, KiB, MiB, GiB or %"
                ));
            }
        };
        Ok(Self::Bytes(number * factor))
    }

    /// The most `run` may be, given `base`.
    pub fn limit(&self, base: f64) -> f64 {
        match *self {
            Self::Percent(p) => base + (base.abs() * p / 100.0).max(PERCENT_FLOOR_BYTES),
            Self::Bytes(b) => base + b,
        }
    }

    /// `+5%` or `+64 MiB`.
    pub fn describe(&self) -> String {
        match *self {
            Self::Percent(p) => format!("+{p}%"),
            Self::Bytes(b) => format!("+{}", format_bytes(b)),
        }
    }
}

/// The thresholds of `collector check RUN --baseline BASE`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Gate {
    /// The peak per device (allocated; device memory in use without allocator numbers; a
    /// snapshot's peak in its trace).
    pub peak: Threshold,
    /// A phase's watermark (mean per occurrence).
    pub watermark: Threshold,
    /// The step baseline (a snapshot: what is alive at its end).
    pub baseline: Threshold,
    /// A phase's retained bytes per occurrence: what no later phase of the step gives back.
    pub retained: Threshold,
}

impl Default for Gate {
    /// Defaults that a rerun of the same job does not trip.
    fn default() -> Self {
        Self {
            peak: Threshold::Percent(5.0),
            watermark: Threshold::Percent(10.0),
            baseline: Threshold::Bytes(64.0 * MIB),
            retained: Threshold::Bytes(MIB),
        }
    }
}

/// One quantity the gate compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateRow {
    /// What: `peak allocated on cuda:0`, `forward's watermark`, `step baseline`.
    pub what: String,
    /// The phase it belongs to, if any.
    pub phase: Option<String>,
    /// In the baseline, bytes.
    pub base: f64,
    /// In the run, bytes.
    pub run: f64,
    /// The threshold, as the user gave it.
    pub threshold: String,
    /// The most the run may be, bytes.
    pub limit: f64,
    /// Whether the run is over it.
    pub failed: bool,
}

impl GateRow {
    fn new(what: String, phase: Option<String>, base: f64, run: f64, t: Threshold) -> Self {
        let limit = t.limit(base);
        Self {
            what,
            phase,
            base,
            run,
            threshold: t.describe(),
            limit,
            failed: run > limit,
        }
    }

    /// One line: `forward's watermark grew 12.0 MiB → 24.0 MiB (+12.0 MiB, +100%), over +10%`.
    pub fn sentence(&self) -> String {
        let change = self.run - self.base;
        let percent = if self.base.abs() > 0.0 {
            format!(", {:+.1}%", 100.0 * change / self.base.abs())
        } else {
            String::new()
        };
        format!(
            "{} {} {} → {} ({}{percent}), {} {}",
            self.what,
            if change > 0.0 { "grew" } else { "went" },
            format_bytes(self.base),
            format_bytes(self.run),
            signed_bytes(change),
            if self.failed { "over" } else { "within" },
            self.threshold
        )
    }
}

/// Bytes with their sign: `+12.0 MiB`, `-3.00 MiB`, `0 B`.
pub fn signed_bytes(bytes: f64) -> String {
    if bytes > 0.0 {
        format!("+{}", format_bytes(bytes))
    } else {
        format_bytes(bytes)
    }
}

impl Gate {
    /// Every quantity of two recordings (A the baseline, B the run) against its threshold.
    pub fn judge_recordings(&self, diff: &RecordingDiff) -> Vec<GateRow> {
        let mut rows = Vec::new();
        for d in &diff.devices {
            let (what, pair) = if d.allocated_peak.both() {
                ("peak allocated", d.allocated_peak)
            } else {
                ("peak device memory in use", d.device_used_peak)
            };
            if let (Some(a), Some(b)) = (pair.a, pair.b) {
                rows.push(GateRow::new(
                    format!("{what} on {}", super::device_name(d.device)),
                    None,
                    a,
                    b,
                    self.peak,
                ));
            }
        }
        for p in &diff.phases {
            if let (Some(a), Some(b)) = (p.watermark.a, p.watermark.b) {
                rows.push(GateRow::new(
                    format!("{}'s watermark", p.phase),
                    Some(p.phase.clone()),
                    a,
                    b,
                    self.watermark,
                ));
            }
            if let (Some(a), Some(b)) = (p.retained.a, p.retained.b) {
                rows.push(GateRow::new(
                    format!("{}'s retained per step", p.phase),
                    Some(p.phase.clone()),
                    a,
                    b,
                    self.retained,
                ));
            }
        }
        if let (Some(a), Some(b)) = (diff.baseline.a, diff.baseline.b) {
            rows.push(GateRow::new(
                format!("step baseline ({})", diff.basis[1]),
                None,
                a,
                b,
                self.baseline,
            ));
        }
        rows
    }

    /// Every quantity of two snapshots (A the baseline, B the run): the peak in the trace and
    /// what is alive at the end, per device.
    pub fn judge_snapshots(&self, diff: &SnapshotDiff) -> Vec<GateRow> {
        let mut rows = Vec::new();
        for d in &diff.devices {
            if let (Some(a), Some(b)) = (d.trace_peak.a, d.trace_peak.b) {
                rows.push(GateRow::new(
                    format!(
                        "peak allocated in the trace on {}",
                        super::device_name(d.device)
                    ),
                    None,
                    a,
                    b,
                    self.peak,
                ));
            }
            if let (Some(a), Some(b)) = (d.live_bytes.a, d.live_bytes.b) {
                rows.push(GateRow::new(
                    format!("alive at the end on {}", super::device_name(d.device)),
                    None,
                    a,
                    b,
                    self.baseline,
                ));
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_limit() {
        assert_eq!(Threshold::parse("5%"), Ok(Threshold::Percent(5.0)));
        assert_eq!(Threshold::parse("64MiB"), Ok(Threshold::Bytes(64.0 * MIB)));
        assert_eq!(Threshold::parse("1MiB/step"), Ok(Threshold::Bytes(MIB)));
        assert_eq!(Threshold::parse("2GB"), Ok(Threshold::Bytes(2e9)));
        assert!(Threshold::parse("lots").is_err());
        assert!(Threshold::parse("-5%").is_err());
        assert!(Threshold::parse("3 parsecs").is_err());
        // 5% of 1 GiB, and the floor for small numbers.
        assert_eq!(Threshold::Percent(5.0).limit(1024.0 * MIB), 1075.2 * MIB);
        assert_eq!(Threshold::Percent(5.0).limit(MIB), 2.0 * MIB);
        assert_eq!(Threshold::Bytes(MIB).limit(0.0), MIB);
    }

    #[test]
    fn a_row_fails_only_over_its_limit() {
        let t = Threshold::Percent(10.0);
        let within = GateRow::new("x".into(), None, 100.0 * MIB, 110.0 * MIB, t);
        assert!(!within.failed, "{}", within.sentence());
        let over = GateRow::new(
            "forward's watermark".into(),
            None,
            100.0 * MIB,
            111.0 * MIB,
            t,
        );
        assert!(over.failed);
        assert!(
            over.sentence().contains("100 MiB → 111 MiB") && over.sentence().contains("over +10%"),
            "{}",
            over.sentence()
        );
        let shrank = GateRow::new("x".into(), None, 100.0 * MIB, 50.0 * MIB, t);
        assert!(!shrank.failed);
    }
}
