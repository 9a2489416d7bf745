//! Phase occurrences, step starts, and per-phase attribution.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::trend::{Trend, trend};
use super::{StepSeries, value_at};
use crate::recording::{AllocatorSample, Edge, Phase, Recording, Series};

/// One run of one phase, from its begin edge to its end edge, in one process.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Occurrence {
    /// Which phase.
    pub phase: Phase,
    /// The step it belongs to.
    pub step: Option<u64>,
    /// The process.
    pub pid: u32,
    /// Begin, nanoseconds after the start.
    pub begin_ns: u64,
    /// End, nanoseconds after the start.
    pub end_ns: u64,
}

/// The occurrences of the process that sent the most phase edges (the training process; with
/// several ranks, the busiest one), sorted by begin time. Unmatched edges are ignored.
pub fn occurrences(recording: &Recording) -> Vec<Occurrence> {
    let mut per_pid: HashMap<u32, usize> = HashMap::new();
    for edge in &recording.phases {
        *per_pid.entry(edge.origin.pid).or_default() += 1;
    }
    let Some(pid) = per_pid
        .into_iter()
        .max_by_key(|&(pid, count)| (count, std::cmp::Reverse(pid)))
        .map(|(pid, _)| pid)
    else {
        return Vec::new();
    };
    let mut edges: Vec<_> = recording
        .phases
        .iter()
        .filter(|e| e.origin.pid == pid)
        .collect();
    edges.sort_by_key(|e| e.t_ns);
    let mut open: Vec<(&Phase, Option<u64>, u64)> = Vec::new();
    let mut out = Vec::new();
    for edge in edges {
        match edge.edge {
            Edge::Begin => open.push((&edge.phase, edge.step, edge.t_ns)),
            Edge::End => {
                if let Some(i) = open.iter().rposition(|(phase, _, _)| **phase == edge.phase) {
                    let (phase, step, begin_ns) = open.remove(i);
                    out.push(Occurrence {
                        phase: phase.clone(),
                        step: step.or(edge.step),
                        pid,
                        begin_ns,
                        end_ns: edge.t_ns.max(begin_ns),
                    });
                }
            }
        }
    }
    out.sort_by_key(|o| o.begin_ns);
    out
}

/// Where a step starts: its first phase begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepStart {
    /// The step number.
    pub step: u64,
    /// Its first begin, nanoseconds after the start.
    pub t_ns: u64,
}

/// The start of every step. Without step numbers, every occurrence of the first phase seen
/// starts a step.
pub fn step_starts(occurrences: &[Occurrence]) -> Vec<StepStart> {
    let numbered = occurrences.iter().any(|o| o.step.is_some());
    let mut starts: BTreeMap<u64, u64> = BTreeMap::new();
    if numbered {
        for o in occurrences {
            if let Some(step) = o.step {
                let t = starts.entry(step).or_insert(o.begin_ns);
                *t = (*t).min(o.begin_ns);
            }
        }
    } else if let Some(first) = occurrences.first() {
        for (i, o) in occurrences
            .iter()
            .filter(|o| o.phase == first.phase)
            .enumerate()
        {
            starts.insert(i as u64, o.begin_ns);
        }
    }
    starts
        .into_iter()
        .map(|(step, t_ns)| StepStart { step, t_ns })
        .collect()
}

/// The allocator samples of the training process, looked up by the phase edge they came with.
pub struct AllocatorIndex<'a> {
    by_time: BTreeMap<u64, &'a AllocatorSample>,
    device: Option<u32>,
}

impl<'a> AllocatorIndex<'a> {
    /// Indexes the samples of the busiest (pid, device).
    pub fn new(recording: &'a Recording) -> Self {
        let mut counts: HashMap<(u32, u32), usize> = HashMap::new();
        for s in &recording.allocator {
            *counts.entry((s.origin.pid, s.device)).or_default() += 1;
        }
        let Some((pid, device)) = counts
            .into_iter()
            .max_by_key(|&(key, count)| (count, std::cmp::Reverse(key)))
            .map(|(key, _)| key)
        else {
            return Self {
                by_time: BTreeMap::new(),
                device: None,
            };
        };
        let by_time = recording
            .allocator
            .iter()
            .filter(|s| s.origin.pid == pid && s.device == device)
            .map(|s| (s.t_ns, s))
            .collect();
        Self {
            by_time,
            device: Some(device),
        }
    }

    /// The device the samples are about.
    pub fn device(&self) -> Option<u32> {
        self.device
    }

    /// The sample sent with the edge at `t_ns`.
    pub fn at(&self, t_ns: u64) -> Option<&'a AllocatorSample> {
        self.by_time.get(&t_ns).copied()
    }

    /// Whether most step starts have allocator numbers.
    pub fn covers(&self, starts: &[StepStart]) -> bool {
        let found = starts.iter().filter(|s| self.at(s.t_ns).is_some()).count();
        found > 0 && found * 10 >= starts.len() * 9
    }

    /// Allocated bytes at each step start that has a sample.
    pub fn at_steps(&self, starts: &[StepStart]) -> StepSeries {
        let mut out = StepSeries::default();
        for start in starts {
            if let Some(sample) = self.at(start.t_ns) {
                out.steps.push(start.step);
                out.times_ns.push(start.t_ns);
                out.values.push(sample.allocated);
            }
        }
        out
    }

    /// The samples behind a step series made by [`AllocatorIndex::at_steps`].
    pub fn at_step_samples(&self, series: &StepSeries) -> Option<Vec<&'a AllocatorSample>> {
        series.times_ns.iter().map(|&t| self.at(t)).collect()
    }

    /// Median reserved bytes on `device`.
    pub fn median_reserved(&self, device: u32) -> Option<u64> {
        if self.device != Some(device) {
            return None;
        }
        let mut reserved: Vec<u64> = self.by_time.values().map(|s| s.reserved).collect();
        reserved.sort_unstable();
        reserved.get(reserved.len() / 2).copied()
    }
}

/// Per-phase attribution: what each phase leaves behind (net Δ = end − start) and what it needs
/// transiently (watermark Δ = peak − start).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseStats {
    /// Which phase.
    pub phase: Phase,
    /// Occurrences measured.
    pub occurrences: usize,
    /// Mean net Δ, bytes.
    pub net_mean_bytes: f64,
    /// Standard deviation of net Δ, bytes.
    pub net_std_bytes: f64,
    /// Sum of net Δ over the run, bytes.
    pub net_total_bytes: f64,
    /// Mean watermark Δ, bytes.
    pub watermark_mean_bytes: f64,
    /// Standard deviation of watermark Δ, bytes.
    pub watermark_std_bytes: f64,
    /// This phase's share of the growth of all phases (`None` when nothing grew).
    pub share_of_growth: Option<f64>,
    /// Trend of net Δ over the occurrences.
    pub net_trend: Option<Trend>,
    /// Trend of watermark Δ over the occurrences.
    pub watermark_trend: Option<Trend>,
}

fn mean_std(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

/// Attribution per phase, from the allocator numbers at the edges when there are any, else from
/// `fallback` (a sorted series: host or device memory sampled at the edges).
pub fn stats(
    occurrences: &[Occurrence],
    allocator: &AllocatorIndex<'_>,
    fallback: Option<&Series>,
) -> Vec<PhaseStats> {
    let mut per_phase: BTreeMap<&Phase, (Vec<f64>, Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (i, o) in occurrences.iter().enumerate() {
        let deltas = match (allocator.at(o.begin_ns), allocator.at(o.end_ns)) {
            (Some(begin), Some(end)) => Some((
                end.allocated as f64 - begin.allocated as f64,
                end.peak.max(end.allocated) as f64 - begin.allocated as f64,
            )),
            _ => fallback.and_then(|series| {
                let start = value_at(series, o.begin_ns)? as f64;
                let end = value_at(series, o.end_ns)? as f64;
                let lo = series.times_ns.partition_point(|&t| t < o.begin_ns);
                let hi = series.times_ns.partition_point(|&t| t <= o.end_ns);
                let peak = series.values[lo.min(hi)..hi]
                    .iter()
                    .copied()
                    .max()
                    .map_or(end, |p| (p as f64).max(end));
                Some((end - start, peak - start))
            }),
        };
        if let Some((net, watermark)) = deltas {
            let entry = per_phase.entry(&o.phase).or_default();
            entry.0.push(i as f64);
            entry.1.push(net);
            entry.2.push(watermark);
        }
    }
    let growth: f64 = per_phase
        .values()
        .map(|(_, net, _)| net.iter().sum::<f64>().max(0.0))
        .sum();
    per_phase
        .into_iter()
        .map(|(phase, (index, net, watermark))| {
            let (net_mean, net_std) = mean_std(&net);
            let (watermark_mean, watermark_std) = mean_std(&watermark);
            let net_total: f64 = net.iter().sum();
            let order: Vec<f64> = (0..index.len()).map(|i| i as f64).collect();
            PhaseStats {
                phase: phase.clone(),
                occurrences: net.len(),
                net_mean_bytes: net_mean,
                net_std_bytes: net_std,
                net_total_bytes: net_total,
                watermark_mean_bytes: watermark_mean,
                watermark_std_bytes: watermark_std,
                share_of_growth: (growth > 0.0).then(|| net_total.max(0.0) / growth),
                net_trend: trend(&order, &net),
                watermark_trend: trend(&order, &watermark),
            }
        })
        .collect()
}
