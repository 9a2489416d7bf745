//! Two recordings side by side: phases, step baseline, devices, categories, holders, OOMs
//! ([`compare_recordings`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::Pair;
use crate::analysis::Analysis;
use crate::recording::{Recording, SeriesKind};

/// One phase in two recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseChange {
    /// The phase's name.
    pub phase: String,
    /// Occurrences measured.
    pub occurrences: Pair,
    /// Mean net Δ per occurrence (what it leaves behind), bytes.
    pub net: Pair,
    /// Mean watermark Δ per occurrence (what it needs transiently above its start), bytes.
    pub watermark: Pair,
    /// Mean retained per occurrence: what no later phase of the step gives back, bytes.
    pub retained: Pair,
}

/// One device in two recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceChange {
    /// The device (`cuda:N` as the job numbers it).
    pub device: u32,
    /// Its product name in A and in B, where the header names it.
    pub name_a: Option<String>,
    /// See `name_a`.
    pub name_b: Option<String>,
    /// The most PyTorch allocated on it (the probe's peak), bytes.
    pub allocated_peak: Pair,
    /// The most device memory in use (NVML), bytes.
    pub device_used_peak: Pair,
}

/// One category of memory (at the step starts, the median) in two recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CategoryChange {
    /// The device (`None`: host memory).
    pub device: Option<u32>,
    /// The parameters.
    pub parameters: Pair,
    /// The gradients.
    pub gradients: Pair,
    /// The optimizer's state.
    pub optimizer_state: Pair,
    /// The rest: activations and whatever the job keeps.
    pub rest: Pair,
}

/// A holder that grew between the censuses of either recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HolderChange {
    /// Its name (`__main__.kept`).
    pub name: String,
    /// What it is.
    pub what: String,
    /// Its device (`None`: host).
    pub device: Option<u32>,
    /// Its growth between the first and the last census, bytes.
    pub growth: Pair,
}

/// Two recordings compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecordingDiff {
    /// What memory the step series measure, in A and in B.
    pub basis: [&'static str; 2],
    /// Points in the step series (steps, or time windows without steps).
    pub steps: Pair,
    /// The step baseline: the median of the memory at the same point of every step, bytes
    /// (`None` on both sides when A and B measure different memory).
    pub baseline: Pair,
    /// Its trend: Theil–Sen slope, bytes per step.
    pub slope: Pair,
    /// Per phase, in A's order, then B's new ones.
    pub phases: Vec<PhaseChange>,
    /// Per device.
    pub devices: Vec<DeviceChange>,
    /// The most resident host memory of the job's process tree, bytes.
    pub host_peak: Pair,
    /// Memory by category at the step starts.
    pub categories: Vec<CategoryChange>,
    /// The holders that grew, in either.
    pub holders: Vec<HolderChange>,
    /// Out-of-memory errors.
    pub ooms: Pair,
    /// Their causes, in A and in B.
    pub oom_causes: [Vec<String>; 2],
    /// What a reader must know: devices that differ, series measured differently.
    pub notes: Vec<String>,
}

impl RecordingDiff {
    /// Why nothing can be compared, or `None` when something can.
    pub fn nothing_comparable(&self) -> Option<String> {
        let any = self.baseline.both()
            || self.phases.iter().any(|p| p.watermark.both())
            || self
                .devices
                .iter()
                .any(|d| d.allocated_peak.both() || d.device_used_peak.both())
            || self.host_peak.both();
        (!any).then(|| {
            let mut why = "no phase, step series, device or host memory in common".to_owned();
            if let Some(note) = self.notes.first() {
                why.push_str(&format!(" ({note})"));
            }
            why
        })
    }
}

fn median(values: &[u64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    Some(if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    })
}

/// Per device, the most allocated (the probe's peaks included).
fn allocated_peaks(recording: &Recording) -> BTreeMap<u32, u64> {
    let mut peaks: BTreeMap<u32, u64> = BTreeMap::new();
    for s in recording.allocator.iter() {
        let p = peaks.entry(s.device).or_default();
        *p = (*p).max(s.allocated).max(s.peak);
    }
    peaks
}

/// Per device, the most of a sampled kind (`None` key: without a device).
fn series_peaks(recording: &Recording, kind: &SeriesKind) -> BTreeMap<Option<u32>, u64> {
    let mut peaks: BTreeMap<Option<u32>, u64> = BTreeMap::new();
    for s in recording.series.iter().filter(|s| &s.key.kind == kind) {
        if kind == &SeriesKind::HostRss && s.key.pid.is_some() {
            continue;
        }
        if let Some(max) = s.values.iter().max() {
            let p = peaks.entry(s.key.device).or_default();
            *p = (*p).max(max);
        }
    }
    peaks
}

fn category_medians(analysis: &Analysis) -> BTreeMap<Option<u32>, [Option<f64>; 4]> {
    analysis
        .categories
        .iter()
        .map(|c| {
            (
                c.device,
                [
                    Some(c.parameters.median_bytes as f64),
                    Some(c.gradients.median_bytes as f64),
                    Some(c.optimizer_state.median_bytes as f64),
                    c.rest.as_ref().map(|r| r.median_bytes as f64),
                ],
            )
        })
        .collect()
}

/// Compares two recordings with their analyses (`collector::analysis::analyze`).
pub fn compare_recordings(
    a: &Recording,
    analysis_a: &Analysis,
    b: &Recording,
    analysis_b: &Analysis,
) -> RecordingDiff {
    let mut notes = Vec::new();
    let same_basis = analysis_a.basis == analysis_b.basis;
    if !same_basis {
        notes.push(format!(
            "A's steps are measured in {}, B's in {}: their step baselines are not compared",
            analysis_a.basis.name(),
            analysis_b.basis.name()
        ));
    }
    if analysis_a.by_step != analysis_b.by_step {
        notes.push(
            "one recording has steps and the other only time windows: the step series differ in kind"
                .to_owned(),
        );
    }
    let series = |x: &Analysis| median(&x.step_series.values);
    let baseline = if same_basis {
        Pair::new(series(analysis_a), series(analysis_b))
    } else {
        Pair::new(None, None)
    };
    let slope = |x: &Analysis| x.trend.as_ref().map(|t| t.slope_per_step);
    let slope = if same_basis {
        Pair::new(slope(analysis_a), slope(analysis_b))
    } else {
        Pair::new(None, None)
    };

    // Phases: A's order, then B's new ones.
    let mut names: Vec<String> = Vec::new();
    for p in analysis_a.phases.iter().chain(&analysis_b.phases) {
        let name = p.phase.as_str().to_owned();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let phase_of =
        |x: &'_ Analysis, name: &str| x.phases.iter().find(|p| p.phase.as_str() == name).cloned();
    let phases = names
        .into_iter()
        .map(|name| {
            let (pa, pb) = (phase_of(analysis_a, &name), phase_of(analysis_b, &name));
            let pick = |f: fn(&crate::analysis::PhaseStats) -> f64| {
                Pair::new(pa.as_ref().map(f), pb.as_ref().map(f))
            };
            PhaseChange {
                occurrences: pick(|p| p.occurrences as f64),
                net: pick(|p| p.net_mean_bytes),
                watermark: pick(|p| p.watermark_mean_bytes),
                retained: pick(|p| p.retained_mean_bytes),
                phase: name,
            }
        })
        .collect();

    // Devices.
    let (pa, pb) = (allocated_peaks(a), allocated_peaks(b));
    let (ua, ub) = (
        series_peaks(a, &SeriesKind::DeviceUsed),
        series_peaks(b, &SeriesKind::DeviceUsed),
    );
    let name = |r: &Recording, d: u32| {
        r.header
            .devices
            .iter()
            .find(|x| x.index == d)
            .map(|x| x.name.clone())
    };
    let in_a: BTreeSet<u32> = pa
        .keys()
        .copied()
        .chain(ua.keys().filter_map(|d| *d))
        .chain(a.header.devices.iter().map(|d| d.index))
        .collect();
    let in_b: BTreeSet<u32> = pb
        .keys()
        .copied()
        .chain(ub.keys().filter_map(|d| *d))
        .chain(b.header.devices.iter().map(|d| d.index))
        .collect();
    let devices: Vec<DeviceChange> = in_a
        .union(&in_b)
        .map(|&d| DeviceChange {
            device: d,
            name_a: name(a, d),
            name_b: name(b, d),
            allocated_peak: Pair::new(pa.get(&d).map(|&v| v as f64), pb.get(&d).map(|&v| v as f64)),
            device_used_peak: Pair::new(
                ua.get(&Some(d)).map(|&v| v as f64),
                ub.get(&Some(d)).map(|&v| v as f64),
            ),
        })
        .collect();
    for d in &devices {
        match (&d.name_a, &d.name_b) {
            (Some(x), Some(y)) if x != y => notes.push(format!(
                "cuda:{} is a {x} in A and a {y} in B: its numbers differ for that alone",
                d.device
            )),
            _ => {}
        }
    }
    super::devices_in_one(&in_a, &in_b, &mut notes);
    let host = |r: &Recording| {
        series_peaks(r, &SeriesKind::HostRss)
            .get(&None)
            .map(|&v| v as f64)
    };

    // Categories and holders.
    let (ca, cb) = (category_medians(analysis_a), category_medians(analysis_b));
    let keys: BTreeSet<Option<u32>> = ca.keys().chain(cb.keys()).copied().collect();
    let categories = keys
        .into_iter()
        .map(|device| {
            let (x, y) = (ca.get(&device), cb.get(&device));
            let pick = |i: usize| Pair::new(x.and_then(|v| v[i]), y.and_then(|v| v[i]));
            CategoryChange {
                device,
                parameters: pick(0),
                gradients: pick(1),
                optimizer_state: pick(2),
                rest: pick(3),
            }
        })
        .collect();
    let mut holders: Vec<HolderChange> = Vec::new();
    for (side, x) in [(0, analysis_a), (1, analysis_b)] {
        for h in &x.holders {
            let at = match holders
                .iter()
                .position(|c| c.name == h.name && c.device == h.device)
            {
                Some(at) => at,
                None => {
                    holders.push(HolderChange {
                        name: h.name.clone(),
                        what: h.what.clone(),
                        device: h.device,
                        growth: Pair::default(),
                    });
                    holders.len() - 1
                }
            };
            let g = &mut holders[at].growth;
            let (ga, gb) = if side == 0 {
                (Some(h.growth_bytes()), g.b)
            } else {
                (g.a, Some(h.growth_bytes()))
            };
            *g = Pair::new(ga, gb);
        }
    }
    let causes = |x: &Analysis| {
        x.ooms
            .iter()
            .map(|o| o.cause_name().to_owned())
            .collect::<Vec<_>>()
    };
    RecordingDiff {
        basis: [analysis_a.basis.name(), analysis_b.basis.name()],
        steps: Pair::new(
            Some(analysis_a.step_series.values.len() as f64),
            Some(analysis_b.step_series.values.len() as f64),
        ),
        baseline,
        slope,
        phases,
        devices,
        host_peak: Pair::new(host(a), host(b)),
        categories,
        holders,
        ooms: Pair::new(
            Some(analysis_a.ooms.len() as f64),
            Some(analysis_b.ooms.len() as f64),
        ),
        oom_causes: [causes(analysis_a), causes(analysis_b)],
        notes,
    }
}
