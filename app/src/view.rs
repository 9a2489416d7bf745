//! What the views draw, computed once when a recording is opened: the curves with their levels
//! of detail, the phase bands, the step axis, the events, and the attribution's per-step numbers.

use collector::analysis::{Analysis, Basis, Occurrence};
use collector::recording::{Phase, Recording};

pub use collector::plot::{Event, EventKind, Trace, TraceKind};

/// Maps time to a fractional step number (and back), through the step starts.
#[derive(Clone, Debug, Default)]
pub struct StepAxis {
    times_ns: Vec<f64>,
    steps: Vec<f64>,
}

impl StepAxis {
    fn new(analysis: &Analysis) -> Self {
        let mut axis = Self::default();
        for start in &analysis.step_starts {
            let (t, s) = (start.t_ns as f64, start.step as f64);
            if axis.times_ns.last().is_none_or(|&last| t > last)
                && axis.steps.last().is_none_or(|&last| s > last)
            {
                axis.times_ns.push(t);
                axis.steps.push(s);
            }
        }
        if axis.times_ns.len() < 2 {
            return Self::default();
        }
        axis
    }

    /// Whether the recording has steps to put on the x axis.
    pub fn is_available(&self) -> bool {
        self.times_ns.len() >= 2
    }

    /// The fractional step at `t_ns`: linear between step starts, extended beyond them at the
    /// pace of the nearest step.
    pub fn step_at(&self, t_ns: f64) -> f64 {
        interpolate(&self.times_ns, &self.steps, t_ns)
    }

    /// The time at a fractional step.
    pub fn time_at(&self, step: f64) -> f64 {
        interpolate(&self.steps, &self.times_ns, step)
    }

    /// Where the steps axis ends: the end of the last step (its start plus the pace of the one
    /// before), never past `duration_ns`. The time after it is not steps, so it is left out.
    pub fn end_ns(&self, duration_ns: u64) -> u64 {
        match self.steps.last() {
            Some(&last) => (self.time_at(last + 1.0).max(0.0) as u64).min(duration_ns),
            None => duration_ns,
        }
    }
}

/// Piecewise-linear `y(x)` through `(xs, ys)` (both increasing, at least two points).
fn interpolate(xs: &[f64], ys: &[f64], x: f64) -> f64 {
    let n = xs.len();
    if n < 2 {
        return x;
    }
    let i = xs.partition_point(|&v| v <= x).clamp(1, n - 1);
    let (x0, x1, y0, y1) = (xs[i - 1], xs[i], ys[i - 1], ys[i]);
    y0 + (x - x0) * (y1 - y0) / (x1 - x0)
}

/// Retained memory per step, by phase, over a range of steps (averaged).
#[derive(Clone, Debug, PartialEq)]
pub struct RetainedBin {
    /// First step of the range.
    pub first_step: u64,
    /// Last step of the range.
    pub last_step: u64,
    /// Mean bytes retained per step, by phase (in `RunView::phases` order).
    pub by_phase: Vec<f64>,
}

/// The average shape of a step: memory relative to the step's start at its phases' edges, each
/// phase's high-water mark, and where the phases lie in the step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepShape {
    /// The step's phases in order, each `(phase, begin, end)` as fractions of the step (the
    /// early steps' mean): the bands behind the lines.
    pub phases: Vec<(Phase, f64, f64)>,
    /// Early in the run (after the warm-up).
    pub early: ShapeLine,
    /// Late in the run.
    pub late: ShapeLine,
    /// The steps averaged, early (the first and the last, and how many).
    pub early_steps: (u64, u64, usize),
    /// The steps averaged, late.
    pub late_steps: (u64, u64, usize),
}

/// The mean of the steps of a range, relative to each step's start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShapeLine {
    /// `[fraction of the step, bytes]` at each phase's begin and end, in order, then the step's
    /// end (the next step's start).
    pub points: Vec<[f64; 2]>,
    /// Per phase, the most it held: its begin plus its watermark Δ.
    pub peaks: Vec<f64>,
}

/// How many steps of a range are averaged at most (evenly spread).
const SHAPE_STEPS: usize = 200;

/// Everything the views draw for one recording.
#[derive(Clone, Debug, Default)]
pub struct RunView {
    /// The curves.
    pub traces: Vec<Trace>,
    /// The curve the verdict is about (the analysis' basis), if drawn.
    pub basis_trace: Option<usize>,
    /// The phases seen, in the order used for colours and stacks.
    pub phases: Vec<Phase>,
    /// Phase occurrences, by begin time (the analysis' own).
    pub occurrences: std::sync::Arc<Vec<Occurrence>>,
    /// The spans of steps whose phases the probe did not observe (a long loop of short steps is
    /// observed on a sample), sorted: drawn so that a stretch without bands is not read as time
    /// outside the phases.
    pub unobserved: Vec<(u64, u64)>,
    /// Time ↔ step.
    pub steps: StepAxis,
    /// OOMs, exit, lost messages.
    pub events: Vec<Event>,
    /// Retained memory per step by phase, in at most [`RETAINED_BINS`] bins.
    pub retained: Vec<RetainedBin>,
    /// The average step early and late.
    pub shape: Option<StepShape>,
    /// Last time anything was recorded, nanoseconds.
    pub duration_ns: u64,
    /// The devices drawn.
    pub devices: Vec<u32>,
    /// Their names, in the same order (`cuda:N`, or pinned host memory).
    pub device_names: Vec<String>,
    /// The processes drawn, when several sent allocator numbers.
    pub origins: Vec<String>,
    /// The training process' memory by category at each step start, per device (host: `None`).
    pub categories: Vec<collector::analysis::CategoryStats>,
    /// What the verdict judged, drawn on the timeline.
    pub verdict: VerdictDrawing,
    /// A notebook's cells, each run as it ran (a lane along the timeline's top).
    pub cells: Vec<collector::analysis::CellRun>,
}

impl RunView {
    /// The cell running at `t_ns`, if any.
    pub fn cell_at(&self, t_ns: u64) -> Option<&collector::analysis::CellRun> {
        self.cells
            .iter()
            .find(|c| c.begin_ns <= t_ns && c.end_ns.is_none_or(|end| t_ns <= end))
    }
}

/// The verdict on the timeline: the points the analysis judged, their trend, the leaking phase,
/// the capacity the trend heads for, and a caption that says what the picture shows.
#[derive(Clone, Debug, Default)]
pub struct VerdictDrawing {
    /// The step baseline: (time, bytes) at each step's start (at most 2,000, evenly thinned).
    pub baseline: Vec<(u64, f64)>,
    /// The trend after warm-up, two points.
    pub trend: Option<[(u64, f64); 2]>,
    /// The phase of the leading problem: its bands are emphasised, the others dimmed.
    pub problem_phase: Option<Phase>,
    /// The device's capacity, when the trend is projected to reach it.
    pub capacity: Option<f64>,
    /// The trend extended to the capacity, when that comes soon enough to draw.
    pub projected: Option<collector::analysis::ProjectedOom>,
    /// A snapshot's leak suspects: where their blocks still alive at the end were allocated.
    pub suspects: Vec<collector::snapshot::SuspectMarks>,
    /// One line under the plot.
    pub caption: String,
}

impl VerdictDrawing {
    /// `lead`: the sentence the run's headline says ([`collector::headline::leading`]), which
    /// the caption starts with.
    fn new(recording: &Recording, analysis: &Analysis, lead: &str) -> Self {
        let s = &analysis.step_series;
        let points: Vec<(u64, f64)> = (0..s.values.len())
            .map(|i| (s.times_ns[i], s.values[i] as f64))
            .collect();
        Self {
            baseline: collector::plot::thin_min_max(&points),
            trend: analysis.trend_line(),
            problem_phase: analysis.problem_phase().cloned(),
            capacity: analysis
                .projection
                .as_ref()
                .map(|p| p.capacity_bytes as f64),
            projected: analysis.projected_oom().filter(|o| o.near),
            suspects: Vec::new(),
            caption: collector::analysis::caption(lead, recording, analysis),
        }
    }
}

/// The most bins of the retained-per-step chart.
pub const RETAINED_BINS: usize = 120;

impl RunView {
    /// Computes the view of a recording and its analysis.
    pub fn new(recording: &Recording, analysis: &Analysis) -> Self {
        let lead = collector::headline::leading(Some(analysis), None, None);
        Self::with_traces(recording, analysis, Self::traces(recording), &lead.text)
    }

    /// The curves of a recording with their levels of detail ([`collector::plot::traces`]).
    pub fn traces(recording: &Recording) -> Vec<Trace> {
        collector::plot::traces(recording)
    }

    /// The curves of a recording that grew from the one `old` was drawn from
    /// ([`collector::plot::grow`]).
    pub fn grow_traces(old: Vec<Trace>, recording: &Recording) -> Vec<Trace> {
        collector::plot::grow(old, recording)
    }

    /// Completes the view from its curves and the analysis; `lead` is the run's headline, which
    /// the caption under the timeline starts with.
    pub fn with_traces(
        recording: &Recording,
        analysis: &Analysis,
        traces: Vec<Trace>,
        lead: &str,
    ) -> Self {
        let basis_kind = match analysis.basis {
            Basis::Allocated => TraceKind::Allocated,
            Basis::DeviceUsed => TraceKind::DeviceUsed,
            Basis::HostRss => TraceKind::Host,
        };
        let basis_trace = traces.iter().position(|t| t.kind == basis_kind);

        // A handful of phases over millions of occurrences.
        let mut phases: Vec<Phase> = Vec::new();
        for o in analysis.occurrences.iter() {
            if phases.last() != Some(&o.phase) && !phases.contains(&o.phase) {
                phases.push(o.phase.clone());
            }
        }
        phases.sort();

        let mut devices: Vec<u32> = traces.iter().filter_map(|t| t.device).collect();
        devices.sort_unstable();
        devices.dedup();
        let device_names = devices
            .iter()
            .map(|&d| recording.header.device_name(d))
            .collect();
        let mut origins: Vec<String> = traces.iter().filter_map(|t| t.origin.clone()).collect();
        origins.sort();
        origins.dedup();

        let mut view = Self {
            basis_trace,
            phases,
            occurrences: std::sync::Arc::clone(&analysis.occurrences),
            unobserved: collector::analysis::unobserved(recording, &analysis.occurrences),
            steps: StepAxis::new(analysis),
            events: collector::plot::events(recording, analysis),
            retained: Vec::new(),
            shape: None,
            duration_ns: recording.duration_ns(),
            devices,
            device_names,
            origins,
            categories: analysis.categories.clone(),
            cells: analysis.cells.runs.clone(),
            verdict: VerdictDrawing::new(recording, analysis, lead),
            traces,
        };
        view.retained = view.retained_bins(analysis);
        view.shape = view.step_shape(analysis);
        view
    }

    /// The phase at `t_ns`, with its step.
    pub fn phase_at(&self, t_ns: u64) -> Option<&Occurrence> {
        collector::plot::running_at(&self.occurrences, t_ns)
    }

    /// The index of a phase in [`Self::phases`], for its colour.
    pub fn phase_index(&self, phase: &Phase) -> usize {
        self.phases.iter().position(|p| p == phase).unwrap_or(0)
    }

    fn retained_bins(&self, analysis: &Analysis) -> Vec<RetainedBin> {
        let starts = &analysis.step_starts;
        if starts.is_empty() || analysis.retained.iter().all(Option::is_none) {
            return Vec::new();
        }
        // Per step, per phase: bytes retained. Occurrences come by time, so a step's come
        // together (gathered by step when they do not): one row per step, one column per phase.
        let mut retained: Vec<(u64, usize, f64)> = analysis
            .occurrences
            .iter()
            .zip(&analysis.retained)
            .filter_map(|(o, r)| {
                let step = o.step.unwrap_or_else(|| {
                    let i = starts.partition_point(|s| s.t_ns <= o.begin_ns);
                    starts[i.saturating_sub(1)].step
                });
                Some((step, self.phase_index(&o.phase), (*r)?))
            })
            .collect();
        if !retained.is_sorted_by_key(|&(step, _, _)| step) {
            retained.sort_by_key(|&(step, _, _)| step);
        }
        let width = self.phases.len();
        let mut sums: Vec<f64> = Vec::new();
        let mut step_of_row: Vec<u64> = Vec::new();
        for (step, phase, r) in retained {
            if step_of_row.last() != Some(&step) {
                step_of_row.push(step);
                sums.resize(sums.len() + width, 0.0);
            }
            let row = sums.len() - width;
            sums[row + phase] += r;
        }
        let steps: Vec<(u64, &[f64])> = step_of_row
            .iter()
            .copied()
            .zip(sums.chunks(width.max(1)))
            .collect();
        let bins = steps.len().min(RETAINED_BINS);
        (0..bins)
            .filter_map(|b| {
                let chunk = &steps[b * steps.len() / bins..(b + 1) * steps.len() / bins];
                let (first, last) = (chunk.first()?, chunk.last()?);
                let mut by_phase = vec![0.0; self.phases.len()];
                for (_, row) in chunk {
                    for (sum, v) in by_phase.iter_mut().zip(row.iter()) {
                        *sum += v / chunk.len() as f64;
                    }
                }
                Some(RetainedBin {
                    first_step: first.0,
                    last_step: last.0,
                    by_phase,
                })
            })
            .collect()
    }

    /// The average step early and late, from the analysis' own numbers (those of the Phases
    /// table and the verdict): the steps whose phases the probe observed, in the order most steps
    /// have them; each phase's net Δ chained from the step's start, its watermark above its
    /// begin, and the step's whole change (the step baseline's) at its end: what came between the
    /// phases shows after the last.
    fn step_shape(&self, analysis: &Analysis) -> Option<StepShape> {
        let starts = &analysis.step_starts;
        let n = starts.len().checked_sub(1)?; // the last step has no end
        if n < 10 {
            return None;
        }
        let occurrences = &analysis.occurrences;
        // A step's phases: the range of the occurrences that begin in it.
        let phases_of = |i: usize| -> std::ops::Range<usize> {
            let (t0, t1) = (starts[i].t_ns, starts[i + 1].t_ns);
            occurrences.partition_point(|o| o.begin_ns < t0)
                ..occurrences.partition_point(|o| o.begin_ns < t1)
        };
        let series = &analysis.step_series;
        let baseline = |step: u64| {
            let k = series.steps.binary_search(&step).ok()?;
            series.values.get(k).map(|&v| v as f64)
        };
        let warmup = n / 10;
        let group = ((n - warmup) / 4).max(1);
        let (early_range, late_range) = (warmup..warmup + group, n - group..n);
        // The orders of phases of the early steps (a step the probe did not observe has none).
        let mut orders: Vec<(Vec<Phase>, usize)> = Vec::new();
        for i in early_range.clone() {
            let order: Vec<Phase> = occurrences[phases_of(i)]
                .iter()
                .map(|o| o.phase.clone())
                .collect();
            if order.is_empty() {
                continue;
            }
            match orders.iter_mut().find(|(o, _)| *o == order) {
                Some((_, count)) => *count += 1,
                None => orders.push((order, 1)),
            }
        }
        // The fullest order that a fifth of the steps have (an evaluation every third step is
        // in the average step), else the most common.
        let counted: usize = orders.iter().map(|(_, count)| count).sum();
        let order = orders
            .into_iter()
            .max_by_key(|(order, count)| {
                (if 5 * count >= counted { order.len() } else { 0 }, *count)
            })?
            .0;
        let average = |range: std::ops::Range<usize>| {
            let stride = (range.len() / SHAPE_STEPS).max(1);
            let edges = 2 * order.len() + 1;
            let (mut sums, mut peaks) = (vec![[0.0; 2]; edges], vec![0.0; order.len()]);
            let mut count = 0usize;
            let (mut first, mut last) = (u64::MAX, 0);
            'steps: for i in range.step_by(stride) {
                let phases = phases_of(i);
                let (t0, t1) = (starts[i].t_ns, starts[i + 1].t_ns);
                // One whole step (the next one starts after it: no unobserved step between),
                // with the usual phases, measured.
                if starts[i + 1].step != starts[i].step + 1
                    || t1 <= t0
                    || !occurrences[phases.clone()]
                        .iter()
                        .map(|o| &o.phase)
                        .eq(order.iter())
                {
                    continue;
                }
                let (Some(from), Some(to)) =
                    (baseline(starts[i].step), baseline(starts[i + 1].step))
                else {
                    continue;
                };
                let mut edge = Vec::with_capacity(edges);
                let mut level = 0.0;
                let mut highs = Vec::with_capacity(order.len());
                for k in phases {
                    let Some(Some((net, watermark))) = analysis.changes.get(k) else {
                        continue 'steps;
                    };
                    let o = &occurrences[k];
                    let at = |t: u64| (t.clamp(t0, t1) - t0) as f64 / (t1 - t0) as f64;
                    edge.push([at(o.begin_ns), level]);
                    highs.push(level + watermark);
                    level += net;
                    edge.push([at(o.end_ns), level]);
                }
                edge.push([1.0, to - from]);
                for (sum, e) in sums.iter_mut().zip(&edge) {
                    sum[0] += e[0];
                    sum[1] += e[1];
                }
                for (sum, h) in peaks.iter_mut().zip(&highs) {
                    *sum += h;
                }
                count += 1;
                first = first.min(starts[i].step);
                last = last.max(starts[i].step);
            }
            (count > 0).then(|| {
                let points: Vec<[f64; 2]> = sums
                    .iter()
                    .map(|s| [s[0] / count as f64, s[1] / count as f64])
                    .collect();
                let spans: Vec<(f64, f64)> = (0..order.len())
                    .map(|k| (points[2 * k][0], points[2 * k + 1][0]))
                    .collect();
                let peaks = peaks.iter().map(|h| h / count as f64).collect();
                (ShapeLine { points, peaks }, spans, (first, last, count))
            })
        };
        let (early, spans, early_steps) = average(early_range)?;
        let (late, _, late_steps) = average(late_range)?;
        Some(StepShape {
            phases: order
                .into_iter()
                .zip(spans)
                .map(|(p, (b, e))| (p, b, e))
                .collect(),
            early,
            late,
            early_steps,
            late_steps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::recording::{AllocatorSample, Edge, Origin, PhaseEdge, Record};

    const MIB: u64 = 1 << 20;

    /// `steps` steps of forward then backward, with the allocator's numbers at every edge:
    /// forward allocates 10 MiB and keeps `kept(step)` of it past backward.
    fn run(steps: u64, kept: impl Fn(u64) -> u64) -> (Recording, Analysis) {
        let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
        let origin = Origin { pid: 7, rank: None };
        let mut level = 100 * MIB;
        let mut records = Vec::new();
        for step in 0..steps {
            let t = step * 1_000_000;
            for (k, phase, edge, after) in [
                (0, Phase::Forward, Edge::Begin, level),
                (1, Phase::Forward, Edge::End, level + 10 * MIB),
                (2, Phase::Backward, Edge::Begin, level + 10 * MIB),
                (3, Phase::Backward, Edge::End, level + kept(step)),
            ] {
                let t_ns = t + k * 200_000;
                records.push(Record::Phase(PhaseEdge {
                    t_ns,
                    edge,
                    phase,
                    step: Some(step),
                    origin,
                    host_heap: None,
                    host_rss: None,
                }));
                records.push(Record::Allocator(AllocatorSample {
                    t_ns,
                    origin,
                    allocated: after,
                    reserved: 2 * after,
                    peak: after,
                    ..Default::default()
                }));
            }
            level += kept(step);
        }
        records.into_iter().for_each(|r| recording.push(r));
        let analysis = collector::analysis::analyze(&recording);
        (recording, analysis)
    }

    /// The average step is read at its phases' edges: forward's rise and backward's fall (the
    /// sawtooth), where the phases lie, the most forward held; and a leak of the same size every
    /// step retains as much late as early.
    #[test]
    fn the_average_step_is_its_phases_edges_early_and_late() {
        let (recording, analysis) = run(200, |_| MIB);
        let view = RunView::new(&recording, &analysis);
        let shape = view.shape.as_ref().expect("a shape");
        let phases: Vec<&Phase> = shape.phases.iter().map(|p| &p.0).collect();
        assert_eq!(phases, [&Phase::Forward, &Phase::Backward]);
        for (got, want) in shape.phases.iter().zip([(0.0, 0.2), (0.4, 0.6)]) {
            assert!(
                (got.1 - want.0).abs() < 1e-9 && (got.2 - want.1).abs() < 1e-9,
                "{:?}",
                shape.phases
            );
        }
        let mib = MIB as f64;
        for line in [&shape.early, &shape.late] {
            let expected = [
                [0.0, 0.0],
                [0.2, 10.0 * mib],
                [0.4, 10.0 * mib],
                [0.6, mib],
                [1.0, mib],
            ];
            assert_eq!(line.points.len(), expected.len());
            for (got, want) in line.points.iter().zip(expected) {
                assert!(
                    (got[0] - want[0]).abs() < 1e-9 && (got[1] - want[1]).abs() < 1.0,
                    "{:?}",
                    line.points
                );
            }
            // Forward's high-water mark: its end (the run's peak reading there).
            assert_eq!(line.peaks[0], 10.0 * mib);
        }
        assert!(
            shape.early_steps.2 > 10 && shape.late_steps.2 > 10,
            "{shape:?}"
        );
    }

    #[test]
    fn retained_memory_is_binned_by_step_and_phase() {
        // 1,200 steps: ten steps a bin; forward keeps 1 MiB a step for the first half, 3 after.
        let kept = |step: u64| if step < 600 { MIB } else { 3 * MIB };
        let (recording, analysis) = run(1200, kept);
        let view = RunView::new(&recording, &analysis);
        assert_eq!(view.retained.len(), RETAINED_BINS);
        let forward = view.phase_index(&Phase::Forward);
        let backward = view.phase_index(&Phase::Backward);
        let (first, last) = (&view.retained[1], &view.retained[RETAINED_BINS - 2]);
        assert_eq!((first.first_step, first.last_step), (10, 19));
        assert!(
            (first.by_phase[forward] - MIB as f64).abs() < 1.0,
            "{first:?}"
        );
        assert!(
            (last.by_phase[forward] - 3.0 * MIB as f64).abs() < 1.0,
            "{last:?}"
        );
        assert!(first.by_phase[backward].abs() < 1.0, "{first:?}");
    }
}
