//! `collector diff SNAPSHOT --at T1 --at T2`: two moments of one snapshot's trace (a recording's:
//! `run_moments`) — what was
//! allocated between them and is still alive at the later one, by allocation site, per device
//! (the "what grew" question), with what was alive at each and what of the first was freed.
//!
//! A moment is a step of the trace as the memory timeline counts it (`1200`: the state after the
//! device's first 1200 entries), a share of the trace (`50%`), a time after the trace's first
//! entry (`2.5s`, `800ms`), or `peak`: the first step at which the most bytes were alive.

use std::fmt::Write as _;
use std::path::Path;

use collector::format::format_bytes;
use collector::open::{Opened, read_any_file};
use collector::snapshot::Snapshot;
use collector::snapshot::timeline::{DeviceTimeline, MemoryTimeline};
use serde::Serialize;

/// A moment of the trace, as the user wrote it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Moment {
    /// A step: the state after that many of the device's entries.
    Step(u32),
    /// A share of the device's trace, in percent.
    Share(f64),
    /// Seconds after the trace's first entry (of any device).
    Seconds(f64),
    /// The first step at which the most bytes were alive.
    Peak,
}

impl Moment {
    /// `1200`, `50%`, `2.5s`, `800ms`, `peak`.
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t == "peak" {
            return Ok(Moment::Peak);
        }
        let number = |s: &str| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let bad = || {
            format!(
                "--at {text:?}: expected a step of the trace (1200), a share of it (50%), a time after its first entry (2.5s, 800ms) or `peak`"
            )
        };
        if let Some(p) = t.strip_suffix('%') {
            return number(p)
                .filter(|p| *p <= 100.0)
                .map(Moment::Share)
                .ok_or_else(bad);
        }
        if let Some(ms) = t.strip_suffix("ms") {
            return number(ms).map(|v| Moment::Seconds(v / 1e3)).ok_or_else(bad);
        }
        if let Some(s) = t.strip_suffix('s') {
            return number(s).map(Moment::Seconds).ok_or_else(bad);
        }
        t.parse::<u32>().map(Moment::Step).map_err(|_| bad())
    }
}

/// One device's change between the two moments.
#[derive(Debug, Serialize)]
pub(super) struct DeviceMoments {
    /// The device (its index in the snapshot).
    pub device: u32,
    /// Its name: `cuda:N`, or `pinned host`.
    pub name: String,
    /// The earlier step, and the later one.
    pub steps: [u32; 2],
    /// The device's trace entries (its last step).
    pub trace_steps: u32,
    /// Seconds after the trace's first entry at each step, where the entries have times.
    pub seconds: [Option<f64>; 2],
    /// Bytes alive at each step.
    pub alive: [u64; 2],
    /// Of what was alive at the earlier step, the bytes freed by the later one.
    pub freed: u64,
    /// The bytes allocated between them and alive at the later step.
    pub kept: u64,
    /// Those blocks, by site, most bytes first.
    pub sites: Vec<KeptSite>,
    /// What the trace lacks for the whole story (a history that started late).
    pub lacks: Vec<String>,
}

/// One site's blocks allocated between the moments and still alive.
#[derive(Debug, Serialize)]
pub(super) struct KeptSite {
    /// The site: the first frame of the user's code.
    pub site: String,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: usize,
}

/// Two moments of one snapshot's trace.
#[derive(Debug, Serialize)]
pub(super) struct Moments {
    /// The snapshot's path.
    pub file: String,
    /// The moments as given.
    pub at: [String; 2],
    /// Per device with a trace.
    pub devices: Vec<DeviceMoments>,
}

/// What grew between the two moments of `snapshot`'s trace (read from `path`).
pub(super) fn between(path: &Path, snapshot: &Snapshot, at: &[String]) -> Result<Moments, String> {
    let [first, second] = at else {
        return Err(format!(
            "--at is given {} time(s): give it twice, for the two moments of the trace",
            at.len()
        ));
    };
    let moments = [Moment::parse(first)?, Moment::parse(second)?];
    let devices = of_snapshot(snapshot, moments);
    if devices.is_empty() {
        return Err(no_trace(path));
    }
    Ok(Moments {
        file: path.display().to_string(),
        at: [first.clone(), second.clone()],
        devices,
    })
}

/// The snapshot at `path`; a recording there is refused with `refusal`.
pub(super) fn read_snapshot(path: &Path, refusal: &str) -> Result<Box<Snapshot>, String> {
    match read_any_file(path).map_err(|e| e.to_string())? {
        Opened::Snapshot(s) => Ok(s),
        Opened::Recording(_) => Err(format!("{}: {refusal}", path.display())),
    }
}

/// What is said of a snapshot without a trace.
pub(super) fn no_trace(path: &Path) -> String {
    format!(
        "{}: the snapshot has no trace (record it with `torch.cuda.memory._record_memory_history()` on)",
        path.display()
    )
}

/// When the trace's first entry (of any device) was made, µs since the epoch.
pub(super) fn trace_start(snapshot: &Snapshot) -> Option<i64> {
    snapshot
        .entries
        .iter()
        .map(|e| e.time_us)
        .filter(|&t| t > 0)
        .min()
}

impl Moment {
    /// The step of `device`'s timeline this moment is (`start_us`: [`trace_start`]).
    pub(super) fn step(
        self,
        snapshot: &Snapshot,
        device: &DeviceTimeline,
        start_us: Option<i64>,
    ) -> u32 {
        match self {
            Moment::Step(s) => s.min(device.steps()),
            Moment::Share(p) => (p / 100.0 * f64::from(device.steps())).round() as u32,
            Moment::Seconds(s) => start_us.map_or(0, |t0| {
                device.step_at_time(snapshot, t0.saturating_add((s * 1e6).round() as i64))
            }),
            Moment::Peak => device.peak_step,
        }
    }
}

/// Per device with trace entries: the change between the two moments.
fn of_snapshot(snapshot: &Snapshot, moments: [Moment; 2]) -> Vec<DeviceMoments> {
    let timeline = MemoryTimeline::new(snapshot);
    let start_us = trace_start(snapshot);
    timeline
        .devices
        .iter()
        .filter(|d| d.steps() > 0)
        .map(|d| {
            let step = |m: Moment| m.step(snapshot, d, start_us);
            let between = d.between(step(moments[0]), step(moments[1]));
            let seconds = |s: u32| {
                (s > 0)
                    .then(|| d.time_at(snapshot, s))
                    .flatten()
                    .zip(start_us)
                    .map(|(t, t0)| (t - t0) as f64 / 1e6)
            };
            DeviceMoments {
                device: d.device,
                name: snapshot.device_name(d.device),
                steps: [between.from, between.to],
                trace_steps: d.steps(),
                seconds: [seconds(between.from), seconds(between.to)],
                alive: [between.alive_from, between.alive_to],
                freed: between.freed,
                kept: between.kept_bytes(),
                sites: between
                    .kept
                    .iter()
                    .map(|s| KeptSite {
                        // By the one site rule the memory timeline and the report use.
                        site: timeline.site_name(snapshot, s.site),
                        bytes: s.bytes,
                        blocks: s.blocks,
                    })
                    .collect(),
                lacks: d.lacks.describe(),
            }
        })
        .collect()
}

/// The answer as text or Markdown, the largest `max_sites` sites of each device.
pub(super) fn render(m: &Moments, markdown: bool, max_sites: usize) -> String {
    let mut out = String::new();
    let when = |d: &DeviceMoments, i: usize| match d.seconds[i] {
        Some(s) => format!("step {} ({s:.3} s into the trace)", d.steps[i]),
        None => format!("step {}", d.steps[i]),
    };
    if markdown {
        let _ = writeln!(
            out,
            "### tidemark: what grew between two moments\n\n`{}`, `--at {}` and `--at {}`.\n",
            m.file, m.at[0], m.at[1]
        );
    } else {
        let _ = writeln!(
            out,
            "collector diff: {} between --at {} and --at {}: what was allocated between them and is still alive at the later one\n",
            m.file, m.at[0], m.at[1]
        );
    }
    for d in &m.devices {
        let change = d.alive[1] as f64 - d.alive[0] as f64;
        let head = format!("{} from {} to {}", d.name, when(d, 0), when(d, 1));
        let _ = if markdown {
            writeln!(out, "**{head}**\n")
        } else {
            writeln!(out, "{head}:")
        };
        let indent = if markdown { "- " } else { "  " };
        let _ = writeln!(
            out,
            "{indent}alive: {} → {} ({})",
            format_bytes(d.alive[0] as f64),
            format_bytes(d.alive[1] as f64),
            collector::compare::signed_bytes(change)
        );
        let blocks: usize = d.sites.iter().map(|s| s.blocks).sum();
        let _ = writeln!(
            out,
            "{indent}allocated between and still alive: {} in {blocks} block{}; of what was alive at step {}, {} freed since",
            format_bytes(d.kept as f64),
            if blocks == 1 { "" } else { "s" },
            d.steps[0],
            format_bytes(d.freed as f64)
        );
        if d.steps[0] == d.steps[1] {
            let _ = writeln!(
                out,
                "{indent}note: both moments fall at step {} of the device's {} (a time past the trace's end lands on its last step)",
                d.steps[0], d.trace_steps
            );
        }
        for lack in &d.lacks {
            let _ = writeln!(out, "{indent}note: {lack}");
        }
        if d.sites.is_empty() {
            out.push('\n');
            continue;
        }
        if markdown {
            let _ = writeln!(out, "\n| kept | blocks | site |\n|---:|---:|---|");
        } else {
            let _ = writeln!(out, "  by site:");
        }
        for s in d.sites.iter().take(max_sites) {
            let bytes = format_bytes(s.bytes as f64);
            let _ = if markdown {
                writeln!(
                    out,
                    "| {bytes} | {} | {} |",
                    s.blocks,
                    s.site.replace('|', "\\|")
                )
            } else {
                writeln!(out, "    {bytes:>11} {:>7}  {}", s.blocks, s.site)
            };
        }
        if d.sites.len() > max_sites {
            let _ = writeln!(
                out,
                "{}… and {} more sites (--sites N lists more, --json all)",
                if markdown { "\n" } else { "    " },
                d.sites.len() - max_sites
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_are_steps_shares_and_times() {
        assert_eq!(Moment::parse("1200"), Ok(Moment::Step(1200)));
        assert_eq!(Moment::parse("50%"), Ok(Moment::Share(50.0)));
        assert_eq!(Moment::parse("2.5s"), Ok(Moment::Seconds(2.5)));
        assert_eq!(Moment::parse("800ms"), Ok(Moment::Seconds(0.8)));
        assert_eq!(Moment::parse("peak"), Ok(Moment::Peak));
        for bad in ["", "-3", "120%", "abc", "1.5", "nans", "-1s"] {
            let err = Moment::parse(bad).unwrap_err();
            assert!(err.contains("expected a step of the trace"), "{bad}: {err}");
        }
    }
}
