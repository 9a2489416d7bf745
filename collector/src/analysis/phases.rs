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

/// Per-phase attribution: what each phase leaves behind (net Δ = end − start), what it needs
/// transiently (watermark Δ = peak − start), and what of the step's growth it retains.
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
    /// Mean memory retained per occurrence: the part of its net Δ that no later phase of the
    /// step gives back (activations made in forward and freed in backward are not retained).
    pub retained_mean_bytes: f64,
    /// This phase's share of what all phases retain; `None` when nothing is retained.
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

/// Memory levels around one occurrence: at its begin, at its end, and its peak.
#[derive(Clone, Copy)]
struct Levels {
    begin: f64,
    end: f64,
    peak: f64,
}

fn levels(
    o: &Occurrence,
    allocator: &AllocatorIndex<'_>,
    fallback: Option<&Series>,
) -> Option<Levels> {
    if let (Some(begin), Some(end)) = (allocator.at(o.begin_ns), allocator.at(o.end_ns)) {
        return Some(Levels {
            begin: begin.allocated as f64,
            end: end.allocated as f64,
            peak: end.peak.max(end.allocated) as f64,
        });
    }
    let series = fallback?;
    let begin = value_at(series, o.begin_ns)? as f64;
    let end = value_at(series, o.end_ns)? as f64;
    let lo = series.times_ns.partition_point(|&t| t < o.begin_ns);
    let hi = series.times_ns.partition_point(|&t| t <= o.end_ns);
    let peak = series.values[lo.min(hi)..hi]
        .iter()
        .copied()
        .max()
        .map_or(end, |p| (p as f64).max(end));
    Some(Levels { begin, end, peak })
}

/// What each occurrence retains of its step's growth. Within a step, with `floor(x)` the lowest
/// level from point x to the start of the next step, an occurrence retains
/// `floor(end) − floor(begin)`: the rise that nothing later in the step gives back.
fn retained(occurrences: &[Occurrence], levels: &[Option<Levels>]) -> Vec<Option<f64>> {
    let mut out = vec![None; occurrences.len()];
    let starts = step_starts(occurrences);
    let step_of = |t: u64| starts.partition_point(|s| s.t_ns <= t).saturating_sub(1);
    let mut i = 0;
    while i < occurrences.len() {
        let step = step_of(occurrences[i].begin_ns);
        let mut j = i;
        while j < occurrences.len() && step_of(occurrences[j].begin_ns) == step {
            j += 1;
        }
        // The level where the next step starts closes this one.
        let next_start = levels.get(j).copied().flatten().map(|l| l.begin);
        let mut floor = next_start.unwrap_or(f64::INFINITY);
        for k in (i..j).rev() {
            let Some(l) = levels[k] else { continue };
            let floor_end = floor.min(l.end);
            let floor_begin = floor_end.min(l.begin);
            if floor_end.is_finite() {
                out[k] = Some(floor_end - floor_begin);
            }
            floor = floor_begin;
        }
        i = j;
    }
    out
}

/// Attribution per phase, from the allocator numbers at the edges when there are any, else from
/// `fallback` (a sorted series: host or device memory sampled at the edges).
pub fn stats(
    occurrences: &[Occurrence],
    allocator: &AllocatorIndex<'_>,
    fallback: Option<&Series>,
) -> Vec<PhaseStats> {
    let levels: Vec<Option<Levels>> = occurrences
        .iter()
        .map(|o| levels(o, allocator, fallback))
        .collect();
    let retained = retained(occurrences, &levels);
    #[derive(Default)]
    struct Acc {
        net: Vec<f64>,
        watermark: Vec<f64>,
        retained: Vec<f64>,
    }
    let mut per_phase: BTreeMap<&Phase, Acc> = BTreeMap::new();
    for ((o, l), r) in occurrences.iter().zip(&levels).zip(&retained) {
        if let Some(l) = l {
            let acc = per_phase.entry(&o.phase).or_default();
            acc.net.push(l.end - l.begin);
            acc.watermark.push(l.peak - l.begin);
            if let Some(r) = r {
                acc.retained.push(*r);
            }
        }
    }
    let estimate = |acc: &Acc| acc.retained.iter().sum::<f64>().max(0.0);
    let total: f64 = per_phase.values().map(estimate).sum();
    per_phase
        .into_iter()
        .map(|(phase, acc)| {
            let (net_mean, net_std) = mean_std(&acc.net);
            let (watermark_mean, watermark_std) = mean_std(&acc.watermark);
            let order: Vec<f64> = (0..acc.net.len()).map(|i| i as f64).collect();
            PhaseStats {
                phase: phase.clone(),
                occurrences: acc.net.len(),
                net_mean_bytes: net_mean,
                net_std_bytes: net_std,
                net_total_bytes: acc.net.iter().sum(),
                watermark_mean_bytes: watermark_mean,
                watermark_std_bytes: watermark_std,
                retained_mean_bytes: mean_std(&acc.retained).0,
                share_of_growth: (total > 0.0).then(|| estimate(&acc) / total),
                net_trend: trend(&order, &acc.net),
                watermark_trend: trend(&order, &acc.watermark),
            }
        })
        .collect()
}
