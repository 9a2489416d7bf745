//! Per-phase attribution: what each phase leaves behind, what it needs transiently, and what of
//! the step's growth it retains — with the frees credited to the phase that caused them
//! (gradients freed between steps, saved tensors freed by backward, optimizer temporaries).

use std::collections::BTreeMap;

use serde::Serialize;

use super::categories::GradientsRead;
use super::phases::{AllocatorIndex, Occurrence, StepStart};
use super::trend::{Trend, trend};
use super::{value_at, value_exactly_at};
use crate::recording::{Phase, Recording, Series};

/// Per-phase attribution: what each phase leaves behind (net Δ = end − start), what it needs
/// transiently (watermark Δ = peak − start), and what of the step's growth it retains.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseStats {
    /// Which phase.
    pub phase: Phase,
    /// Occurrences measured: the memory read at both of their edges.
    pub occurrences: usize,
    /// Occurrences the probe observed, measured or not (pieces of one occurrence count once):
    /// more than `occurrences` where the memory was read at only some edges (a host job's C heap
    /// after its first steps, over its share of the job's time).
    pub observed: usize,
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

impl PhaseStats {
    /// The count as tables show it: "40", or "4 of 8" when only some of the occurrences observed
    /// were measured.
    pub fn count_text(&self) -> String {
        if self.observed > self.occurrences {
            format!("{} of {}", self.occurrences, self.observed)
        } else {
            self.occurrences.to_string()
        }
    }
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
    cursors: &mut (usize, usize),
    fallback: Option<Attributed<'_>>,
) -> Option<Levels> {
    let begin = allocator.find(o.begin_ns, &mut cursors.0);
    let end = allocator.find(o.end_ns, &mut cursors.1);
    if let (Some(begin), Some(end)) = (begin, end) {
        let readings = allocator.readings();
        let end_allocated = readings.allocated(end);
        return Some(Levels {
            begin: readings.allocated(begin) as f64,
            end: end_allocated as f64,
            peak: readings.peak(end).max(end_allocated) as f64,
        });
    }
    let Attributed { series, at_edges } = fallback?;
    let (begin, end) = if at_edges {
        // Read at the edges themselves: an edge without its reading leaves the occurrence out
        // (the next edge's reading would move its change to the next phase).
        (
            value_exactly_at(series, o.begin_ns)? as f64,
            value_exactly_at(series, o.end_ns)? as f64,
        )
    } else {
        (
            value_at(series, o.begin_ns)? as f64,
            value_at(series, o.end_ns)? as f64,
        )
    };
    let lo = series.times_ns.partition_point(|&t| t < o.begin_ns);
    let hi = series.times_ns.partition_point(|&t| t <= o.end_ns);
    let peak = series
        .values
        .range(lo.min(hi)..hi)
        .max()
        .map_or(end, |p| (p as f64).max(end));
    Some(Levels { begin, end, peak })
}

/// The steps of `occurrences` (sorted by begin): for each, the range of its occurrences and its
/// index in `starts`.
fn steps_of(
    occurrences: &[Occurrence],
    starts: &[StepStart],
) -> Vec<(usize, std::ops::Range<usize>)> {
    let step_of = |t: u64| starts.partition_point(|s| s.t_ns <= t).saturating_sub(1);
    let mut out = Vec::new();
    let mut i = 0;
    while i < occurrences.len() {
        let step = step_of(occurrences[i].begin_ns);
        let mut j = i;
        while j < occurrences.len() && step_of(occurrences[j].begin_ns) == step {
            j += 1;
        }
        out.push((step, i..j));
        i = j;
    }
    out
}

/// `freed_gradients` says, by step number where it was measured, how many bytes of gradients
/// were freed by the time the categories were read (the step's first training forward): before
/// the step began (`zero_grad(set_to_none=True)` at the top of the loop, or at its end), or
/// inside it before that forward. Those freed before it began were made by the step before's
/// backward: they count as given back at that backward's end (the levels from there to the
/// step's end are read as if they were freed then), not as giving back what a later phase (an
/// eval after the optimizer step, a list the loop appends to before clearing them) kept.
///
/// What a step frees itself before its first backward (`credited_before_backward`, by step
/// index) was credited to that backward by [`credit_frees_to_backward`]. In a job whose steps
/// usually begin with the gradients already freed (cleared at the top of the loop or at its
/// end), the gradients a step still had at its start and freed itself are taken off every level
/// of that step up to the backward's begin, and given back at the end of the step before, so
/// that it begins as the others do: an evaluation after the optimizer step opens the next step
/// with the gradients alive, and read as it was, the step before each evaluation keeps the
/// gradients and the evaluation gives them back in place of what it kept. The last step gives
/// them back as the one before it did.
fn credit_gradients_freed_between_steps(
    occurrences: &[Occurrence],
    starts: &[StepStart],
    original: &[Option<Levels>],
    levels: &mut [Option<Levels>],
    freed_gradients: &BTreeMap<u64, GradientsRead>,
    credited_before_backward: &Credits,
) {
    let steps = steps_of(occurrences, starts);
    // For each step: what of the gradients alive at the end of the step before was freed before
    // it began, and what of them it freed itself before its first backward.
    let freed: Vec<(f64, f64)> = steps
        .iter()
        .enumerate()
        .map(|(i, (step, range))| {
            let credited = credited_before_backward
                .get(step)
                .map_or(0.0, |&(_, first)| first);
            // Where the categories were not read at that step (after the first steps they are
            // read within a share of the time), the last reading before it: a loop frees the
            // same gradients at every step.
            let Some(read) = starts
                .get(*step)
                .and_then(|s| freed_gradients.range(..=s.step).next_back())
                .map(|(_, read)| *read)
            else {
                return (0.0, 0.0);
            };
            // A reading after the step's own frees (its first training forward, after a
            // closure or an evaluation) counts them too: they are the step's, not twice; but
            // what fell between the steps (from the last level of the step before to this
            // one's first) was freed before it began, whatever the step freed besides.
            let between = i.checked_sub(1).and_then(|before| {
                let (_, previous) = &steps[before];
                let last = previous
                    .clone()
                    .filter_map(|k| Some((occurrences[k].end_ns, original[k]?.end)))
                    .max_by_key(|&(t, _)| t)?;
                let first = range.clone().find_map(|k| original[k])?;
                Some((last.1 - first.begin).max(0.0))
            });
            let before = (read.freed - credited)
                .max(read.freed.min(between.unwrap_or(0.0)))
                .max(0.0);
            let inside = (read.at_last_end - before).max(0.0).min(credited);
            (before, inside)
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        let mid = v.len() / 2;
        (!v.is_empty()).then(|| *v.select_nth_unstable_by(mid, f64::total_cmp).1)
    };
    // Whether the job's steps usually begin with the gradients already freed (cleared at the top
    // of the loop, or at its end): then a step that frees them itself is brought to the same
    // start. Where its steps usually begin with them (cleared between forward and backward, in a
    // closure), each is credited to the backward it is freed for, as it is.
    let made = median(freed_gradients.values().map(|r| r.at_last_end).collect());
    let begin_without = median(freed.iter().map(|&(before, _)| before).collect())
        .zip(made)
        .is_some_and(|(before, made)| made > 0.0 && before >= 0.5 * made);
    let inside_of = |i: usize| if begin_without { freed[i].1 } else { 0.0 };
    for (i, (step, range)) in steps.iter().enumerate() {
        // This step, up to its first backward's begin, without the gradients it freed there.
        let inside = inside_of(i);
        if inside > 0.0 {
            for k in range.clone() {
                let backward = occurrences[k].phase == Phase::Backward;
                if let Some(l) = levels[k].as_mut() {
                    l.begin -= inside;
                    if !backward {
                        l.end -= inside;
                    }
                }
                if backward {
                    break;
                }
            }
        }
        // From its last backward on, without the gradients the next step frees before its
        // own (the last step: as this one did).
        let next = steps
            .get(i + 1)
            .filter(|(next, _)| *next == step + 1)
            .map_or(i, |_| i + 1);
        let given_back = freed[next].0 + inside_of(next);
        let Some(b) = range
            .clone()
            .rev()
            .find(|&k| occurrences[k].phase == Phase::Backward)
            .filter(|_| given_back > 0.0)
        else {
            continue;
        };
        for (k, l) in levels[b..range.end].iter_mut().enumerate() {
            if let Some(l) = l.as_mut() {
                if k > 0 {
                    l.begin -= given_back;
                }
                l.end -= given_back;
            }
        }
    }
}

/// What each occurrence retains of its step's growth. Within a step, with `floor(x)` the lowest
/// level from point x to the start of the next step, an occurrence retains
/// `floor(end) − floor(begin)`: the rise that nothing later in the step gives back.
fn retained(
    occurrences: &[Occurrence],
    starts: &[StepStart],
    levels: &[Option<Levels>],
) -> Vec<Option<f64>> {
    let mut out = vec![None; occurrences.len()];
    for (_, range) in steps_of(occurrences, starts) {
        // The level where the next step starts closes this one.
        let next_start = levels.get(range.end).copied().flatten().map(|l| l.begin);
        let mut floor = next_start.unwrap_or(f64::INFINITY);
        for k in range.rev() {
            let Some(l) = levels[k] else { continue };
            let floor_end = floor.min(l.end);
            let floor_begin = floor_end.min(l.begin);
            if floor_end.is_finite() {
                out[k] = Some(floor_end - floor_begin);
            }
            floor = floor_begin;
        }
    }
    out
}

/// By step index: what was credited to the step's backwards, and what of that to its first.
type Credits = BTreeMap<usize, (f64, f64)>;

/// Memory freed before a backward and after its step began (or after the backward before it),
/// outside the forward and eval phases: between phases (`optimizer.zero_grad()` between forward
/// and backward, the most common loop order; a `p.grad = None` loop) or inside an optimizer's
/// closure (LBFGS, Lightning) or a phase of the job's own. What is freed there is, in a training
/// loop, the gradients the backward is about to make again; counted where it happens, it hides
/// what the phases before kept behind the gradients freed, and charges the backward with making
/// them. It is credited back: the levels from where it was freed until that backward begins
/// are read as if it were still there, so the backward gives it back and the phases before it
/// keep what they kept. A step's first level (its start) is never moved.
///
/// Also returns, for each step with a backward (by its index in `starts`), what was credited in
/// it, and what of that before its first backward.
fn credit_frees_to_backward(
    occurrences: &[Occurrence],
    starts: &[StepStart],
    levels: &[Option<Levels>],
) -> (Vec<Option<Levels>>, Credits) {
    let mut out = levels.to_vec();
    let mut per_step = Credits::new();
    let step_of = |t: u64| starts.partition_point(|s| s.t_ns <= t).saturating_sub(1);
    let frees_outside = |phase: &Phase| matches!(phase, Phase::Custom(_));
    // The occurrences with levels since the last backward (or the step's start), and how much
    // had been freed outside the phases before each of their edges: (index, freed before its
    // begin, freed before its end). Moving a free later raises every level after it.
    let mut pending: Vec<(usize, f64, f64)> = Vec::new();
    let mut freed = 0.0;
    let mut last: Option<(usize, f64)> = None; // (step, end level)
    for (k, o) in occurrences.iter().enumerate() {
        let Some(l) = levels[k] else { continue };
        let step = step_of(o.begin_ns);
        match last {
            Some((s, end)) if s == step => freed += (end - l.begin).max(0.0),
            _ => {
                pending.clear();
                freed = 0.0;
            }
        }
        let freed_at_begin = freed;
        if frees_outside(&o.phase) {
            freed += (l.begin - l.end).max(0.0);
        }
        if o.phase == Phase::Backward {
            per_step
                .entry(step)
                .and_modify(|(all, _)| *all += freed)
                .or_insert((freed, freed));
            if freed > 0.0 {
                for &(i, at_begin, at_end) in &pending {
                    if let Some(p) = out[i].as_mut() {
                        p.begin += at_begin;
                        p.end += at_end;
                    }
                }
                if let Some(b) = out[k].as_mut() {
                    b.begin += freed;
                }
            }
            pending.clear();
            freed = 0.0;
        } else {
            pending.push((k, freed_at_begin, freed));
        }
        last = Some((step, l.end));
    }
    (out, per_step)
}

/// What each backward occurrence freed of what the forwards before it saved for it (the probe's
/// `saved_freed`, measured on a sample of steps), in the order of the occurrences; `None` for
/// the other phases and before the first measurement. A backward without its own measurement
/// takes the last one before it: a training step saves the same graph each time. The device
/// side is the one the attribution reads: `device` (the allocator's), else the host; on the
/// allocator's path with no measurement on its device (the model is on the CPU while the
/// allocator's numbers come from elsewhere), the host's.
pub fn saved_freed(
    recording: &Recording,
    occurrences: &[Occurrence],
    device: Option<u32>,
) -> Vec<Option<f64>> {
    let Some(pid) = occurrences.first().map(|o| o.pid) else {
        return Vec::new();
    };
    let of = |side: Option<u32>| {
        let mut v: Vec<(u64, u64)> = recording
            .saved_freed
            .iter()
            .filter(|r| r.origin.pid == pid && r.device == side)
            .map(|r| (r.t_ns, r.bytes))
            .collect();
        v.sort_unstable();
        v
    };
    let mut records = of(device);
    if records.is_empty() && device.is_some() {
        records = of(None);
    }
    let mut last = None;
    let mut next = 0;
    occurrences
        .iter()
        .map(|o| {
            if o.phase != Phase::Backward {
                return None;
            }
            // Sent just before the backward's end edge: within it.
            let mut own = None;
            while next < records.len() && records[next].0 <= o.end_ns {
                if records[next].0 >= o.begin_ns {
                    own = Some(own.unwrap_or(0) + records[next].1);
                }
                next += 1;
            }
            if let Some(own) = own {
                last = Some(own as f64);
            }
            last
        })
        .collect()
}

/// The spans (from, to; sorted) of the steps whose phases the probe did not observe, in the
/// process of `occurrences`: a loop of short steps is observed on a sample of its steps.
pub fn unobserved(recording: &Recording, occurrences: &[Occurrence]) -> Vec<(u64, u64)> {
    let Some(pid) = occurrences.first().map(|o| o.pid) else {
        return Vec::new();
    };
    let mut spans: Vec<(u64, u64)> = recording
        .unobserved
        .iter()
        .filter(|u| u.origin.pid == pid)
        .map(|u| (u.since_ns, u.t_ns))
        .collect();
    spans.sort_unstable();
    spans
}

/// A backward frees what the forwards before it saved for it (their activations) while it
/// makes the gradients. Counted where it happens, that free hides what the backward made and
/// kept (a hook's list of gradients) behind the forward's activations it gave back, and the
/// forward seems to keep it. With what the backward freed measured (`freed`, by occurrence),
/// it is credited to the forwards since the last backward, the latest first, up to what each
/// rose: the levels from that forward's end to the backward's begin are read as if it had been
/// freed at the forward's end (its transient), so the backward keeps what it made.
fn credit_saved_to_forwards(
    occurrences: &[Occurrence],
    levels: &mut [Option<Levels>],
    freed: &[Option<f64>],
) {
    let mut forwards: Vec<usize> = Vec::new();
    for (k, o) in occurrences.iter().enumerate() {
        match o.phase {
            Phase::Forward => forwards.push(k),
            Phase::Backward => {
                let mut left = freed.get(k).copied().flatten().unwrap_or(0.0);
                if levels[k].is_some() {
                    for &f in forwards.iter().rev() {
                        if left <= 0.0 {
                            break;
                        }
                        let Some(l) = levels[f] else { continue };
                        let take = (l.end - l.begin).max(0.0).min(left);
                        if take <= 0.0 {
                            continue;
                        }
                        left -= take;
                        if let Some(l) = levels[f].as_mut() {
                            l.end -= take;
                        }
                        for between in levels[f + 1..k].iter_mut().flatten() {
                            between.begin -= take;
                            between.end -= take;
                        }
                        if let Some(b) = levels[k].as_mut() {
                            b.begin -= take;
                        }
                    }
                }
                forwards.clear();
            }
            _ => {}
        }
    }
}

/// An optimizer step that runs a closure (LBFGS; Lightning's `training_step`) makes its own
/// temporaries in the closure's gaps (a flat copy of the gradients, a search direction) and frees
/// them when it returns, after the closure's forward and backward ran. Counted where they
/// happen, that free lowers the floor under the forward and backward, which then seem to keep
/// nothing. It is credited back to the pieces of the same optimizer step that rose, the latest
/// first, up to what each rose: the levels from that piece's end to the last piece's begin are
/// read as if it had been freed there.
fn credit_optimizer_temporaries(occurrences: &[Occurrence], levels: &mut [Option<Levels>]) {
    for last in 0..occurrences.len() {
        let o = &occurrences[last];
        let (Some(whole), Phase::Optimizer) = (o.piece_of, &o.phase) else {
            continue;
        };
        let Some(l) = levels[last] else { continue };
        let mut freed = (l.begin - l.end).max(0.0);
        let mut k = last;
        while freed > 0.0 && k > 0 {
            k -= 1;
            let piece = &occurrences[k];
            if piece.begin_ns < whole {
                break;
            }
            if piece.piece_of != Some(whole) {
                continue;
            }
            let Some(p) = levels[k] else { continue };
            let take = (p.end - p.begin).max(0.0).min(freed);
            if take <= 0.0 {
                continue;
            }
            freed -= take;
            if let Some(p) = levels[k].as_mut() {
                p.end -= take;
            }
            for between in levels[k + 1..last].iter_mut().flatten() {
                between.begin -= take;
                between.end -= take;
            }
            if let Some(l) = levels[last].as_mut() {
                l.begin -= take;
            }
        }
    }
}

/// Of the growth over the steps read whole, the share that happened between phases (from one
/// phase's end to the next one's begin); `None` without growth. A step counts when every one of
/// its occurrences was read and so was the next step's first (the last step: up to its last
/// occurrence's end), with no steps the probe did not observe (`unobserved`: sorted spans, from –
/// to) in between: its growth, from its first begin to the next step's, is then exactly what its
/// phases and its gaps made. Where only some steps are read (the C heap after the first steps,
/// a sample of steps observed), what a phase made and a gap outside the steps read gave back (the
/// gradients a backward made, freed at the next step's top) would otherwise count once, on one
/// side only.
fn between_share(
    occurrences: &[Occurrence],
    starts: &[StepStart],
    levels: &[Option<Levels>],
    unobserved: &[(u64, u64)],
) -> Option<f64> {
    let across_unobserved = |from_ns: u64, to_ns: u64| {
        let first = unobserved.partition_point(|&(_, to)| to < from_ns);
        unobserved
            .get(first)
            .is_some_and(|&(from, _)| from <= to_ns)
    };
    let (mut between, mut total) = (0.0, 0.0);
    for (_, range) in steps_of(occurrences, starts) {
        let Some(read) = levels[range.clone()]
            .iter()
            .copied()
            .collect::<Option<Vec<Levels>>>()
        else {
            continue;
        };
        let (Some(first), Some(last)) = (read.first(), read.last()) else {
            continue;
        };
        let (end_level, end_ns) = match occurrences.get(range.end) {
            Some(next) => match levels[range.end] {
                Some(l) => (l.begin, next.begin_ns),
                None => continue,
            },
            None => (last.end, occurrences[range.end - 1].end_ns),
        };
        if across_unobserved(occurrences[range.start].begin_ns, end_ns) {
            continue;
        }
        let growth = end_level - first.begin;
        let inside: f64 = read.iter().map(|l| l.end - l.begin).sum();
        total += growth;
        between += growth - inside;
    }
    (total > 0.0).then(|| between / total)
}

/// The memory phases are attributed with when the allocator's numbers do not cover them.
#[derive(Clone, Copy)]
pub struct Attributed<'a> {
    /// The series, sorted by time.
    pub series: &'a Series,
    /// Whether its samples were read at the phase edges themselves (the probe's host numbers),
    /// so that an occurrence needs a reading at both of its edges.
    pub at_edges: bool,
}

/// What [`stats`] finds.
pub struct Accounts {
    /// Per phase.
    pub stats: Vec<PhaseStats>,
    /// What each occurrence retained, in the order of the occurrences.
    pub retained: Vec<Option<f64>>,
    /// Each occurrence's net Δ and watermark Δ, in the order of the occurrences.
    pub changes: Vec<Option<(f64, f64)>>,
    /// The share of the growth that came between the phases.
    pub between: Option<f64>,
    /// The median, over the steps with a backward, of what was freed in the step before it
    /// outside the forward and eval phases (gradients freed after the forward); `None` without
    /// a backward.
    pub freed_before_backward: Option<f64>,
}

/// Attribution per phase, from the allocator numbers at the edges when there are any, else from
/// `fallback` (a sorted series: host or device memory sampled at the edges). `unobserved`: the
/// spans of steps whose phases the probe did not observe (from [`unobserved`]).
pub fn stats(
    occurrences: &[Occurrence],
    starts: &[StepStart],
    allocator: &AllocatorIndex<'_>,
    fallback: Option<Attributed<'_>>,
    freed_gradients: &BTreeMap<u64, GradientsRead>,
    saved_freed: &[Option<f64>],
    unobserved: &[(u64, u64)],
) -> Accounts {
    let mut cursors = (0, 0);
    let levels: Vec<Option<Levels>> = occurrences
        .iter()
        .map(|o| levels(o, allocator, &mut cursors, fallback))
        .collect();
    // Retained and the share between phases from the levels with frees outside the phases
    // credited back; net and watermark from the levels as they were (what the curves show).
    let (mut credited, freed_in_steps) = credit_frees_to_backward(occurrences, starts, &levels);
    credit_saved_to_forwards(occurrences, &mut credited, saved_freed);
    credit_optimizer_temporaries(occurrences, &mut credited);
    credit_gradients_freed_between_steps(
        occurrences,
        starts,
        &levels,
        &mut credited,
        freed_gradients,
        &freed_in_steps,
    );
    let retained = retained(occurrences, starts, &credited);
    let between = between_share(occurrences, starts, &credited, unobserved);
    #[derive(Default)]
    struct Acc {
        net: Vec<f64>,
        watermark: Vec<f64>,
        retained: Vec<f64>,
        /// The whole occurrence the last entries came from, when they were pieces of one.
        last_piece_of: Option<u64>,
        /// Occurrences observed, measured or not (pieces of one whole count once) …
        observed: usize,
        /// … and the whole the last one observed was a piece of.
        last_observed_piece_of: Option<u64>,
    }
    // A handful of phases: a short list, with the last one used checked first.
    let mut per_phase: Vec<(&Phase, Acc)> = Vec::new();
    let mut last = 0;
    for ((o, l), r) in occurrences.iter().zip(&levels).zip(&retained) {
        if per_phase.get(last).is_none_or(|(p, _)| *p != &o.phase) {
            last = match per_phase.iter().position(|(p, _)| *p == &o.phase) {
                Some(i) => i,
                None => {
                    per_phase.push((&o.phase, Acc::default()));
                    per_phase.len() - 1
                }
            };
        }
        let acc = &mut per_phase[last].1;
        if o.piece_of.is_none() || o.piece_of != acc.last_observed_piece_of {
            acc.observed += 1;
        }
        acc.last_observed_piece_of = o.piece_of;
        let Some(l) = l else { continue };
        let same_whole = o.piece_of.is_some() && o.piece_of == acc.last_piece_of;
        acc.last_piece_of = o.piece_of;
        match (same_whole, acc.net.last_mut(), acc.watermark.last_mut()) {
            // Another piece of the same occurrence: one occurrence in the statistics.
            (true, Some(net), Some(watermark)) => {
                *net += l.end - l.begin;
                *watermark = watermark.max(l.peak - l.begin);
                if let (Some(r), Some(sum)) = (r, acc.retained.last_mut()) {
                    *sum += *r;
                }
            }
            _ => {
                acc.net.push(l.end - l.begin);
                acc.watermark.push(l.peak - l.begin);
                if let Some(r) = r {
                    acc.retained.push(*r);
                }
            }
        }
    }
    // A phase none of whose occurrences was measured has no row.
    per_phase.retain(|(_, acc)| !acc.net.is_empty());
    let estimate = |acc: &Acc| acc.retained.iter().sum::<f64>().max(0.0);
    per_phase.sort_by(|a, b| a.0.cmp(b.0));
    let total: f64 = per_phase.iter().map(|(_, acc)| estimate(acc)).sum();
    let stats = per_phase
        .into_iter()
        .map(|(phase, acc)| {
            let (net_mean, net_std) = mean_std(&acc.net);
            let (watermark_mean, watermark_std) = mean_std(&acc.watermark);
            let order: Vec<f64> = (0..acc.net.len()).map(|i| i as f64).collect();
            PhaseStats {
                phase: phase.clone(),
                occurrences: acc.net.len(),
                observed: acc.observed,
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
        .collect();
    let mut freed: Vec<f64> = freed_in_steps.values().map(|&(all, _)| all).collect();
    let freed_before_backward = (!freed.is_empty()).then(|| {
        let mid = freed.len() / 2;
        *freed.select_nth_unstable_by(mid, f64::total_cmp).1
    });
    let changes = levels
        .iter()
        .map(|l| l.map(|l| (l.end - l.begin, l.peak - l.begin)))
        .collect();
    Accounts {
        stats,
        retained,
        changes,
        between,
        freed_before_backward,
    }
}
