//! Phase occurrences (nested phases unnested), step starts, and the allocator's readings indexed
//! by process and device; what each phase did is `attribution`.

use serde::Serialize;

use super::StepSeries;
use crate::recording::{AllocatorReadings, Edge, Phase, Recording};

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
    /// For a piece of a phase that had phases inside it: where the whole one began (its
    /// pieces count as one occurrence in the statistics).
    pub piece_of: Option<u64>,
}

/// The most frequent key (the smallest among equals). Jobs have a handful of processes, so a
/// short list beats a hash map here.
fn busiest<K: Copy + Ord>(keys: impl Iterator<Item = K>) -> Option<K> {
    most_counted(keys.map(|key| (key, 1)))
}

/// The key with the most counted (the smallest among equals), from keys and counts that may
/// name a key more than once.
fn most_counted<K: Copy + Ord>(counted: impl Iterator<Item = (K, usize)>) -> Option<K> {
    let mut counts: Vec<(K, usize)> = Vec::new();
    let mut last: Option<usize> = None;
    for (key, count) in counted {
        let i = match last.filter(|&i| counts[i].0 == key) {
            Some(i) => i,
            None => match counts.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    counts.push((key, 0));
                    counts.len() - 1
                }
            },
        };
        counts[i].1 += count;
        last = Some(i);
    }
    counts
        .into_iter()
        .max_by_key(|&(key, count)| (count, std::cmp::Reverse(key)))
        .map(|(key, _)| key)
}

/// The occurrences of the process that sent the most phase edges (the training process; with
/// several ranks, the busiest one), sorted by begin time. Unmatched edges are ignored.
pub fn occurrences(recording: &Recording) -> Vec<Occurrence> {
    let phases = &recording.phases;
    let Some(pid) = busiest((0..phases.len()).map(|i| phases.kind(i).origin.pid)) else {
        return Vec::new();
    };
    let mut edges: Vec<usize> = (0..phases.len())
        .filter(|&i| phases.kind(i).origin.pid == pid)
        .collect();
    if !edges
        .windows(2)
        .all(|w| phases.t_ns(w[0]) <= phases.t_ns(w[1]))
    {
        edges.sort_by_key(|&i| phases.t_ns(i));
    }
    let mut open: Vec<(&Phase, Option<u64>, u64)> = Vec::new();
    // At most one per two edges; reserved, not grown by doubling (a week is millions).
    let mut out = Vec::with_capacity(edges.len() / 2);
    for i in edges {
        let (kind, t_ns) = (phases.kind(i), phases.t_ns(i));
        match kind.edge {
            Edge::Begin => open.push((&kind.phase, phases.step(i), t_ns)),
            Edge::End => {
                if let Some(j) = open.iter().rposition(|(phase, _, _)| **phase == kind.phase) {
                    let (phase, step, begin_ns) = open.remove(j);
                    out.push(Occurrence {
                        phase: phase.clone(),
                        step: step.or(phases.step(i)),
                        pid,
                        begin_ns,
                        end_ns: t_ns.max(begin_ns),
                        piece_of: None,
                    });
                }
            }
        }
    }
    if !out.windows(2).all(|w| w[0].begin_ns <= w[1].begin_ns) {
        out.sort_by_key(|o| o.begin_ns);
    }
    unnest(out)
}

/// The name of the part of an optimizer step that runs before its last nested phase ends: the
/// closure `optimizer.step(closure)` calls (Lightning's `training_step`, LBFGS), where the job's
/// own code between forward and backward runs.
pub const CLOSURE: &str = "optimizer closure";

/// Phases inside phases (Lightning runs forward and backward inside `optimizer.step`'s closure)
/// become a sequence: an outer occurrence keeps only the time its inner ones do not cover, so
/// that every moment belongs to the innermost phase open then. The pieces of an optimizer step
/// before its last inner phase ends are its closure ([`CLOSURE`]). Sorted by begin.
fn unnest(occurrences: Vec<Occurrence>) -> Vec<Occurrence> {
    let nested = occurrences
        .windows(2)
        .any(|w| w[1].begin_ns < w[0].end_ns && w[1].end_ns <= w[0].end_ns);
    if !nested {
        return occurrences;
    }
    // (the outer occurrence, where its uncovered time resumes, whether it had inner ones)
    let mut open: Vec<(Occurrence, u64, bool)> = Vec::new();
    let mut out = Vec::with_capacity(occurrences.len() * 2);
    let piece = |o: &Occurrence, begin_ns: u64, end_ns: u64, closure: bool| Occurrence {
        phase: if closure && o.phase == Phase::Optimizer {
            Phase::Custom(CLOSURE.to_owned())
        } else {
            o.phase.clone()
        },
        begin_ns,
        end_ns,
        piece_of: Some(o.begin_ns),
        ..o.clone()
    };
    let close = |(o, from, split): (Occurrence, u64, bool), out: &mut Vec<Occurrence>| {
        if !split {
            out.push(o);
        } else if from < o.end_ns {
            out.push(piece(&o, from, o.end_ns, false));
        }
    };
    for o in occurrences {
        while open
            .last()
            .is_some_and(|(top, _, _)| top.end_ns <= o.begin_ns)
        {
            if let Some(top) = open.pop() {
                close(top, &mut out);
            }
        }
        if let Some((top, from, split)) = open.last_mut()
            && o.end_ns <= top.end_ns
        {
            if *from < o.begin_ns {
                out.push(piece(top, *from, o.begin_ns, true));
            }
            *from = o.end_ns;
            *split = true;
        }
        let begin = o.begin_ns;
        open.push((o, begin, false));
    }
    while let Some(top) = open.pop() {
        close(top, &mut out);
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
/// starts a step; so too when every occurrence has the same number while the first phase came
/// more than once (a loop without an optimizer, whose step the probe never advances: it updates
/// the weights itself).
pub fn step_starts(occurrences: &[Occurrence]) -> Vec<StepStart> {
    let first_step = occurrences.iter().find_map(|o| o.step);
    let one_number = occurrences
        .iter()
        .all(|o| o.step.is_none() || o.step == first_step);
    let repeated = occurrences.first().is_some_and(|f| {
        occurrences
            .iter()
            .filter(|o| o.phase == f.phase)
            .nth(1)
            .is_some()
    });
    let numbered = first_step.is_some() && !(one_number && repeated);
    let mut starts: Vec<StepStart> = if numbered {
        occurrences
            .iter()
            .filter_map(|o| {
                o.step.map(|step| StepStart {
                    step,
                    t_ns: o.begin_ns,
                })
            })
            .collect()
    } else {
        let Some(first) = occurrences.first() else {
            return Vec::new();
        };
        occurrences
            .iter()
            .filter(|o| o.phase == first.phase)
            .enumerate()
            .map(|(i, o)| StepStart {
                step: i as u64,
                t_ns: o.begin_ns,
            })
            .collect()
    };
    // Occurrences are sorted by time, so a step's first entry is its earliest unless the steps
    // go backwards; sort by (step, time) only then.
    if !starts
        .windows(2)
        .all(|w| (w[0].step, w[0].t_ns) <= (w[1].step, w[1].t_ns))
    {
        starts.sort_unstable_by_key(|s| (s.step, s.t_ns));
    }
    starts.dedup_by_key(|s| s.step);
    starts
}

/// The allocator samples of the training process, looked up by the phase edge they came with.
pub struct AllocatorIndex<'a> {
    readings: &'a AllocatorReadings,
    /// Their times and places, sorted by time.
    by_time: Vec<(u64, u32)>,
    device: Option<u32>,
    pid: Option<u32>,
}

impl<'a> AllocatorIndex<'a> {
    /// Indexes the samples of the busiest (pid, device).
    pub fn new(recording: &'a Recording) -> Self {
        let readings = &recording.allocator;
        // Counted by (sender, device) pairs, a handful: not reading by reading.
        let counted = readings.source_counts().into_iter();
        let Some(busiest) =
            most_counted(counted.map(|((origin, device), count)| ((origin.pid, device), count)))
        else {
            return Self {
                readings,
                by_time: Vec::new(),
                device: None,
                pid: None,
            };
        };
        let times = readings.times_ns();
        let mut by_time: Vec<(u64, u32)> = readings
            .indices_of(|&(origin, device)| (origin.pid, device) == busiest)
            .map(|i| (times[i], i as u32))
            .collect();
        if !by_time.windows(2).all(|w| w[0].0 <= w[1].0) {
            by_time.sort_by_key(|&(t, _)| t);
        }
        Self {
            readings,
            by_time,
            device: Some(busiest.1),
            pid: Some(busiest.0),
        }
    }

    /// The process the samples are from.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The device the samples are about.
    pub fn device(&self) -> Option<u32> {
        self.device
    }

    /// Where the sample sent with the edge at `t_ns` is in the recording's readings. Lookups
    /// mostly move forward in time: this starts at `cursor`, walks a few entries, and falls back
    /// to a binary search.
    pub(super) fn find(&self, t_ns: u64, cursor: &mut usize) -> Option<usize> {
        let by_time = &self.by_time;
        let start = (*cursor).min(by_time.len());
        let ahead = by_time[start..]
            .iter()
            .take(8)
            .position(|&(t, _)| t >= t_ns);
        let i = match ahead {
            Some(k) if start == 0 || by_time[start - 1].0 < t_ns => start + k,
            _ => by_time.partition_point(|&(t, _)| t < t_ns),
        };
        *cursor = i;
        by_time
            .get(i)
            .filter(|&&(t, _)| t == t_ns)
            .map(|&(_, i)| i as usize)
    }

    /// Whether most step starts have allocator numbers.
    pub fn covers(&self, starts: &[StepStart]) -> bool {
        let mut cursor = 0;
        let found = starts
            .iter()
            .filter(|s| self.find(s.t_ns, &mut cursor).is_some())
            .count();
        found > 0 && found * 10 >= starts.len() * 9
    }

    /// Allocated bytes at each step start that has a sample.
    pub fn at_steps(&self, starts: &[StepStart]) -> StepSeries {
        let mut out = StepSeries::default();
        let mut cursor = 0;
        for start in starts {
            if let Some(i) = self.find(start.t_ns, &mut cursor) {
                out.steps.push(start.step);
                out.times_ns.push(start.t_ns);
                out.values.push(self.readings.allocated(i));
            }
        }
        out
    }

    /// Where the samples behind a step series made by [`AllocatorIndex::at_steps`] are in the
    /// recording's readings; `None` when one is missing.
    pub fn at_step_indices(&self, series: &StepSeries) -> Option<Vec<usize>> {
        let mut cursor = 0;
        series
            .times_ns
            .iter()
            .map(|&t| self.find(t, &mut cursor))
            .collect()
    }

    /// The readings the index is into.
    pub fn readings(&self) -> &'a AllocatorReadings {
        self.readings
    }

    /// Median reserved bytes on `device`.
    pub fn median_reserved(&self, device: u32) -> Option<u64> {
        if self.device != Some(device) {
            return None;
        }
        let by_time = &self.by_time;
        let stride = by_time.len().div_ceil(100_000).max(1);
        let mut reserved: Vec<u64> = by_time
            .iter()
            .step_by(stride)
            .map(|&(_, i)| self.readings.get(i as usize).reserved)
            .collect();
        if reserved.is_empty() {
            return None;
        }
        let mid = reserved.len() / 2;
        Some(*reserved.select_nth_unstable(mid).1)
    }
}
