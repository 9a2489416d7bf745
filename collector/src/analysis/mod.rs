//! The diagnosis: is it a leak, the allocator's cache, fragmentation or growing peaks — and in
//! which phase? Every finding carries the numbers that fired it.
//!
//! Series are taken at the same point of every step (the step's first phase begin), so that the
//! allocator's sawtooth within a step neither hides nor fakes a trend. The memory the verdict is
//! about is, in order of preference: PyTorch's allocated bytes (from the probe), the device's used
//! memory (NVML), the job's host memory (`/proc`). No I/O here: the viewer uses it too.

mod ending;
mod holders;
mod oom_cause;
mod phases;
mod ranks;
mod rules;
mod trend;

use serde::Serialize;

use crate::format::{format_bytes, format_duration};

pub use self::ending::{Ending, OomCause, OomVerdict};
pub use self::holders::{CategoryStats, CategoryTrend, HolderGrowth, census_pair, holders_between};
pub use self::oom_cause::{CONTEXT_ALLOWANCE_BYTES, Contribution};
pub use self::phases::{Occurrence, PhaseStats, StepStart};
pub use self::ranks::RankSummary;
pub use self::trend::{Trend, trend};
use crate::recording::{Phase, Recording, Series, SeriesKey, SeriesKind};

/// Fewer steps than this cannot be judged.
pub const MIN_STEPS: usize = 10;
/// A trend must be this significant (Mann–Kendall p-value).
pub const ALPHA: f64 = 0.01;
/// Growth below this over the run is not reported as a leak, whatever its significance.
pub const GROWTH_FLOOR_BYTES: f64 = 8.0 * MIB;

/// A leak's slope over the second half of the steps after warm-up is at least this share of its
/// slope over the first half (and of the trend): a steady leak keeps all of it, noise moves it by a
/// few tenths; settling keeps a small fraction (a rise that decays with a time constant of a tenth
/// of the run keeps 1 %, one of a fifth 11 %, one of a third 26 %).
pub(crate) const KEEPS_PACE: f64 = 0.35;

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;

/// What memory a step series measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// PyTorch's allocated bytes, from the probe.
    Allocated,
    /// The device's used memory, from NVML.
    DeviceUsed,
    /// The job's resident host memory.
    HostRss,
}

impl Basis {
    /// How the verdict names this memory.
    pub fn name(self) -> &'static str {
        match self {
            Self::Allocated => "allocated GPU memory",
            Self::DeviceUsed => "device memory",
            Self::HostRss => "host memory",
        }
    }
}

/// Which numbers the per-phase attribution comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attribution {
    /// PyTorch's allocated bytes at every edge, from the probe.
    Allocator,
    /// The training process' C heap in use at every edge (glibc `mallinfo2`), from the probe.
    HostHeap,
    /// The training process' resident memory at every edge, from the probe.
    HostRssAtEdges,
    /// The memory the verdict is about, sampled by the collector near the edges.
    Sampled,
}

impl Attribution {
    /// How the report names it.
    pub fn describe(self, basis: Basis) -> String {
        match self {
            Self::Allocator => "PyTorch's allocated bytes, read by the probe at every phase edge"
                .to_owned(),
            Self::HostHeap => "the training process' C heap in use (glibc mallinfo2), read by the probe at every phase edge: exact, and it falls when memory is freed".to_owned(),
            Self::HostRssAtEdges => "the training process' resident memory, read by the probe at every phase edge (freed memory may stay resident, so a phase can be blamed for what an earlier one kept)".to_owned(),
            Self::Sampled => format!(
                "{}, sampled by the collector near each phase edge (a busy machine samples late)",
                basis.name()
            ),
        }
    }
}

/// A series taken at the same point of every step.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StepSeries {
    /// The step numbers (or window numbers, when the recording has no steps).
    pub steps: Vec<u64>,
    /// When each point was taken, nanoseconds after the start.
    pub times_ns: Vec<u64>,
    /// The values, bytes.
    pub values: Vec<u64>,
}

impl StepSeries {
    /// The step numbers as floating point, for the trend statistics.
    pub fn steps_f64(&self) -> Vec<f64> {
        self.steps.iter().map(|&s| s as f64).collect()
    }
}

/// What kind of finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// The job ran out of device memory (with the cause).
    Oom,
    /// The job failed or was killed for another reason.
    Failed,
    /// Memory at the same point of every step rises and never falls back.
    Leak,
    /// Fragmentation: reserved minus allocated grows while allocated is flat.
    Fragmentation,
    /// The transient peak of a phase grows.
    PeakCreep,
    /// The trend reaches the device's capacity, or the peak is close to it.
    CapacityPressure,
    /// Device memory well above what PyTorch reserved.
    NonPytorchMemory,
    /// Other processes use the GPU too.
    OtherProcesses,
    /// Parameters, gradients or optimizer state grow from step to step.
    StateGrowth,
    /// One rank holds much more memory than the others.
    Imbalance,
    /// The allocator's cache: high but flat, falling back every step.
    Cache,
    /// Gradients stay allocated between steps (zeroed in place, not freed): flat, not a leak.
    GradientsKept,
    /// Resident memory rises while what the job allocates (the C heap, the census' holders)
    /// does not: a question, not a verdict (Python objects outside malloc, or memory kept
    /// resident after it was freed).
    ResidentGrowth,
    /// Too few steps to judge.
    NotEnoughData,
}

impl FindingKind {
    /// The stable name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oom => "oom",
            Self::Failed => "failed",
            Self::Leak => "leak",
            Self::Fragmentation => "fragmentation",
            Self::PeakCreep => "peak_creep",
            Self::CapacityPressure => "capacity_pressure",
            Self::NonPytorchMemory => "non_pytorch_memory",
            Self::OtherProcesses => "other_processes",
            Self::StateGrowth => "state_growth",
            Self::Imbalance => "imbalance",
            Self::Cache => "cache",
            Self::GradientsKept => "gradients_kept",
            Self::ResidentGrowth => "resident_growth",
            Self::NotEnoughData => "not_enough_data",
        }
    }

    /// Parses [`FindingKind::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        ALL_KINDS.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether the finding is a problem (as opposed to an explanation or a caveat).
    pub fn is_problem(self) -> bool {
        matches!(
            self,
            Self::Oom
                | Self::Failed
                | Self::Leak
                | Self::Fragmentation
                | Self::PeakCreep
                | Self::CapacityPressure
                | Self::StateGrowth
        )
    }
}

/// Every finding kind.
pub const ALL_KINDS: [FindingKind; 14] = [
    FindingKind::Oom,
    FindingKind::Failed,
    FindingKind::Leak,
    FindingKind::Fragmentation,
    FindingKind::PeakCreep,
    FindingKind::CapacityPressure,
    FindingKind::NonPytorchMemory,
    FindingKind::OtherProcesses,
    FindingKind::StateGrowth,
    FindingKind::Imbalance,
    FindingKind::Cache,
    FindingKind::GradientsKept,
    FindingKind::ResidentGrowth,
    FindingKind::NotEnoughData,
];

/// One finding, with the numbers that fired it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// What kind.
    pub kind: FindingKind,
    /// One line: what it is.
    pub title: String,
    /// The phase it happens in, when one can be named.
    pub phase: Option<Phase>,
    /// The memory it is about.
    pub basis: Basis,
    /// Growth per step, bytes, when the finding is a trend.
    pub growth_per_step_bytes: Option<f64>,
    /// The numbers, one sentence each.
    pub evidence: Vec<String>,
    /// The usual causes, and what to try.
    pub hints: Vec<String>,
}

/// When the trend reaches the device's capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Projection {
    /// Device memory, bytes.
    pub capacity_bytes: u64,
    /// The level at the last step, bytes.
    pub level_bytes: u64,
    /// The last step recorded.
    pub last_step: u64,
    /// The step at which the trend reaches capacity.
    pub oom_step: u64,
    /// Seconds after the start at which that step is reached, at the recorded pace.
    pub oom_after_s: Option<f64>,
}

/// The trend extended to the device's capacity, as a picture draws it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProjectedOom {
    /// The trend's last point: nanoseconds after the start, bytes.
    pub from: (u64, f64),
    /// Its step.
    pub from_step: u64,
    /// When the trend reaches the capacity, nanoseconds after the start, at the recorded pace.
    pub at_ns: u64,
    /// The step at which it does.
    pub step: u64,
    /// The capacity, bytes.
    pub capacity: f64,
    /// Whether it comes within half the recorded span after the last step: close enough to draw
    /// without squeezing the recording into a corner (otherwise the caption says where it is).
    pub near: bool,
}

/// The whole diagnosis of a recording.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    /// The memory the verdict is about.
    pub basis: Basis,
    /// Whether the points are real steps (false: time windows, for recordings without steps).
    pub by_step: bool,
    /// The series at the same point of every step.
    pub step_series: StepSeries,
    /// Its trend, after the warm-up steps.
    pub trend: Option<Trend>,
    /// Findings, problems first.
    pub findings: Vec<Finding>,
    /// Per-phase attribution.
    pub phases: Vec<PhaseStats>,
    /// When the leak would exhaust the device.
    pub projection: Option<Projection>,
    /// What the recording lacks, and what would add it.
    pub lacks: Vec<String>,
    /// Which numbers the per-phase attribution comes from (`None`: no phases).
    pub attribution: Option<Attribution>,
    /// Why the attribution is not from the C heap when the probe read it (`None` otherwise).
    pub attribution_note: Option<String>,
    /// Each out-of-memory error: when, where, the numbers, and the cause.
    pub ooms: Vec<OomVerdict>,
    /// How the job ended.
    pub ending: Ending,
    /// Each rank's verdict, when the recording holds several ranks (then the findings say which
    /// rank they are about, and the rest of this analysis is that of the rank the verdict leads
    /// with).
    pub ranks: Vec<RankSummary>,
    /// Of the growth over the run, the share that came between the phases (in the loop's own
    /// code) rather than inside them; `None` without phases or growth.
    pub between_phases: Option<f64>,
    /// The training process' memory by category at each step's start, per device.
    pub categories: Vec<CategoryStats>,
    /// The holders that grew between the first and the last census, most growth first.
    pub holders: Vec<HolderGrowth>,
    /// The phase occurrences of the training process, by begin time (for views; not reported).
    /// Shared with the views that draw them: a week of steps is millions.
    #[serde(skip)]
    pub occurrences: std::sync::Arc<Vec<Occurrence>>,
    /// Where each step starts, by step (for views; not reported).
    #[serde(skip)]
    pub step_starts: Vec<StepStart>,
    /// What each occurrence retained of its step's growth, bytes, in the order of `occurrences`
    /// (`None` where unknown).
    #[serde(skip)]
    pub retained: Vec<Option<f64>>,
    /// Each occurrence's net Δ and watermark Δ, bytes, in the order of `occurrences` (`None`
    /// where unknown).
    #[serde(skip)]
    pub changes: Vec<Option<(f64, f64)>>,
    /// The median over the steps of what was freed before the backward inside the step, outside
    /// the forward and eval phases (gradients freed after the forward; not reported).
    #[serde(skip)]
    pub freed_before_backward: Option<f64>,
}

impl Analysis {
    /// The first finding of this kind.
    pub fn finding(&self, kind: FindingKind) -> Option<&Finding> {
        self.findings.iter().find(|f| f.kind == kind)
    }

    /// The trend line after warm-up as two points (nanoseconds after the start, bytes): the
    /// Theil–Sen slope through the median intercept of the points it was computed on.
    pub fn trend_line(&self) -> Option<[(u64, f64); 2]> {
        let t = self.trend.as_ref()?;
        let s = &self.step_series;
        let n = s.values.len();
        let warmup = (n / 10).max(1);
        if n <= warmup + 1 {
            return None;
        }
        let mut intercepts: Vec<f64> = (warmup..n)
            .map(|i| s.values[i] as f64 - t.slope_per_step * s.steps[i] as f64)
            .collect();
        intercepts.sort_by(f64::total_cmp);
        let b = intercepts[intercepts.len() / 2];
        let at = |i: usize| (s.times_ns[i], b + t.slope_per_step * s.steps[i] as f64);
        Some([at(warmup), at(n - 1)])
    }

    /// The trend extended from its last point to where it reaches the device's capacity, for a
    /// picture (`None` without a projection, or when the pace of the steps is unknown).
    pub fn projected_oom(&self) -> Option<ProjectedOom> {
        let p = self.projection.as_ref()?;
        let [_, from] = self.trend_line()?;
        let at_ns = p.oom_after_s.filter(|s| s.is_finite())? * 1e9;
        let s = &self.step_series;
        let (first, last) = (*s.times_ns.first()?, *s.times_ns.last()?);
        let span = last.saturating_sub(first) as f64;
        Some(ProjectedOom {
            from,
            from_step: p.last_step,
            at_ns: at_ns.min(u64::MAX as f64) as u64,
            step: p.oom_step,
            capacity: p.capacity_bytes as f64,
            near: at_ns <= last as f64 + span / 2.0,
        })
    }

    /// The phase the leading problem is in, when it names one (the picture emphasises it).
    pub fn problem_phase(&self) -> Option<&Phase> {
        self.findings
            .iter()
            .find(|f| f.kind.is_problem())
            .and_then(|f| f.phase.as_ref())
    }
}

/// One line that says what a picture of the run shows: the verdict that leads (`lead`, the
/// [`crate::headline::leading`] sentence, so that the caption says what the headline above it
/// says), what the dots and the line are, where the trend meets the capacity, the out-of-memory
/// errors marked.
pub fn caption(lead: &str, recording: &Recording, analysis: &Analysis) -> String {
    let mut caption = lead.to_owned();
    if !analysis.step_series.values.is_empty() {
        caption.push_str(&format!(
            " — dots: {} at the start of each {}{}",
            analysis.basis.name(),
            if analysis.by_step {
                "step"
            } else {
                "time window"
            },
            if analysis.trend.is_some() {
                ", line: its trend after warm-up"
            } else {
                ""
            }
        ));
    }
    if !analysis.by_step && !analysis.step_series.values.is_empty() {
        caption.push_str(" (no steps were recorded: each dot is a time window's lowest point)");
    }
    if let Some(p) = &analysis.projection {
        caption.push_str(&format!(
            "; the trend reaches the capacity ({}) at step {}",
            format_bytes(p.capacity_bytes as f64),
            p.oom_step
        ));
        match analysis.projected_oom() {
            Some(o) if o.near => caption.push_str(" (marked)"),
            Some(o) => caption.push_str(&format!(
                ", {} after the last step: beyond the picture",
                format_duration(o.at_ns.saturating_sub(o.from.0) as f64 / 1e9)
            )),
            None => {}
        }
    }
    if !recording.ooms.is_empty() {
        caption.push_str(&format!(
            "; {} out-of-memory error{} marked",
            recording.ooms.len(),
            if recording.ooms.len() == 1 { "" } else { "s" }
        ));
    }
    caption
}

/// The verdict in one sentence, as the report and the viewer lead with it, and whether it names
/// a problem (`Some(true)`), says all is well (`Some(false)`) or cannot tell yet (`None`).
pub fn headline(analysis: &Analysis) -> (String, Option<bool>) {
    if let Some(finding) = analysis.findings.iter().find(|f| f.kind.is_problem()) {
        return (finding.title.clone(), Some(true));
    }
    if let Some(f) = analysis.finding(FindingKind::NotEnoughData) {
        return (format!("Cannot tell yet — {}", f.title), None);
    }
    if let Some(f) = analysis.finding(FindingKind::ResidentGrowth) {
        return (f.title.clone(), None);
    }
    (
        "No leak: memory at the same point of every step does not rise".to_owned(),
        Some(false),
    )
}

/// The first device's used memory, or the job's host memory, or (with neither, as in an imported
/// PyTorch snapshot) the allocator's allocated bytes on the first device.
fn fallback_series(recording: &Recording) -> Option<(Basis, std::borrow::Cow<'_, Series>)> {
    let device = recording
        .series
        .iter()
        .filter(|s| s.key.kind == SeriesKind::DeviceUsed && !s.values.is_empty())
        .min_by_key(|s| s.key.device);
    if let Some(series) = device {
        return Some((Basis::DeviceUsed, series.sorted()));
    }
    if let Some(host) = recording
        .series(&SeriesKey::new(SeriesKind::HostRss))
        .filter(|s| !s.values.is_empty())
    {
        return Some((Basis::HostRss, host.sorted()));
    }
    let readings = &recording.allocator;
    let device = (0..readings.len()).map(|i| readings.device(i)).min()?;
    let mine: Vec<usize> = (0..readings.len())
        .filter(|&i| readings.device(i) == device)
        .collect();
    let series = Series {
        key: SeriesKey::device(SeriesKind::Other("allocated".to_owned()), device),
        times_ns: std::sync::Arc::new(mine.iter().map(|&i| readings.t_ns(i)).collect()),
        values: mine.iter().map(|&i| readings.allocated(i)).collect(),
    };
    let series = series.sorted().into_owned();
    Some((Basis::Allocated, std::borrow::Cow::Owned(series)))
}

/// The value read exactly at `t_ns`, if one was (a series sampled at the phase edges).
pub(crate) fn value_exactly_at(series: &Series, t_ns: u64) -> Option<u64> {
    let i = series.times_ns.partition_point(|&t| t < t_ns);
    (series.times_ns.get(i) == Some(&t_ns)).then(|| series.values.at(i))
}

/// The value of a sorted series at `t`: the first sample at or after it, else the last.
pub(crate) fn value_at(series: &Series, t_ns: u64) -> Option<u64> {
    let i = series.times_ns.partition_point(|&s| s < t_ns);
    series.values.get(i).or_else(|| series.values.last())
}

/// Diagnoses a recording: each rank on its own when it holds several, then how the job ended.
pub fn analyze(recording: &Recording) -> Analysis {
    let ranks = ranks::ranks_of(recording);
    let mut analysis = if ranks.len() < 2 {
        let mut analysis = analyze_one(recording);
        ending::judge_ending(recording, &mut analysis, &[]);
        analysis
    } else {
        let by_origin = ranks::by_origin(recording);
        let per: Vec<(RankSummary, Analysis)> = ranks
            .iter()
            .map(|&(rank, pid)| {
                let analysis = analyze_one(&ranks::project(recording, &by_origin, rank, pid));
                (ranks::summary(rank, pid, &analysis), analysis)
            })
            .collect();
        // The run's own curves and phases are those of the rank the verdict leads with: the
        // first with a problem, else the lowest.
        let lead = per
            .iter()
            .position(|(s, _)| s.problem == Some(true))
            .unwrap_or(0);
        let mut analysis = per[lead].1.clone();
        analysis
            .findings
            .retain(|f| !f.kind.is_problem() && f.kind != FindingKind::NotEnoughData);
        analysis.findings.extend(ranks::findings(recording, &per));
        if per
            .iter()
            .all(|(_, a)| a.finding(FindingKind::NotEnoughData).is_some())
        {
            analysis
                .findings
                .extend(per[lead].1.finding(FindingKind::NotEnoughData).cloned());
        }
        let by_rank: Vec<(u32, &Analysis)> = per.iter().map(|(s, a)| (s.rank, a)).collect();
        ending::judge_ending(recording, &mut analysis, &by_rank);
        analysis.ranks = per.iter().map(|(s, _)| s.clone()).collect();
        analysis
    };
    analysis
        .findings
        .sort_by_key(|f| (!f.kind.is_problem(), f.kind));
    analysis
}

/// What a recording lacks without allocator numbers and phases.
const LACKS_ALLOCATOR_AND_PHASES: &str = "no allocator numbers and no phases: run the job under the collector with the probe (a Python job that uses CUDA) to see allocated vs. reserved memory and the phase of the step";
/// What a recording with phases lacks without allocator numbers.
const LACKS_ALLOCATOR: &str = "no allocator numbers: the job did not use CUDA through PyTorch (or the probe was off), so allocated and reserved memory are unknown";
/// What a recording with allocator numbers lacks without phases.
const LACKS_PHASES: &str =
    "no phases: mark them with tidemark.phase(…) or leave automatic phases on";
/// What a recording lacks without NVML.
const LACKS_DEVICE_SAMPLES: &str = "no device samples: NVML was not available where the job ran";
/// What a recording lacks without its end.
pub(crate) const LACKS_END: &str = "the end of the job: the recording stops early (the collector was killed, or the file was cut), so how the job ended is not known";
/// What a leak's recording lacks without the device's capacity.
pub(crate) const LACKS_CAPACITY: &str = "no device capacity: the device's total memory was not recorded (NVML), so there is no projection to an out-of-memory error";

/// An analysis of a PyTorch memory snapshot's trace ([`crate::snapshot::Judged`]) says what the
/// snapshot lacks, not what a recording made by the collector would: a snapshot never has
/// device samples, NVML's capacity or the job's end, and its allocator numbers and phases come
/// from the trace, not from a probe. (Its verdict says when it has no trace.)
pub(crate) fn as_snapshot_trace(analysis: &mut Analysis) {
    let recording_only = [
        LACKS_ALLOCATOR_AND_PHASES,
        LACKS_ALLOCATOR,
        LACKS_DEVICE_SAMPLES,
        LACKS_END,
        LACKS_CAPACITY,
    ];
    analysis
        .lacks
        .retain(|l| !recording_only.contains(&l.as_str()));
    for lack in &mut analysis.lacks {
        if lack == LACKS_PHASES {
            *lack = "no phases: the snapshot marks none (`record_function` ranges recorded with the history, or `torch.cuda.memory._set_memory_metadata`, would)".to_owned();
        }
    }
}

/// Diagnoses one process' view of a run (the whole recording when it has one rank).
fn analyze_one(recording: &Recording) -> Analysis {
    let occurrences = phases::occurrences(recording);
    let allocator = phases::AllocatorIndex::new(recording);
    let step_starts = phases::step_starts(&occurrences);
    let fallback = if !step_starts.is_empty() && allocator.covers(&step_starts) {
        None
    } else {
        fallback_series(recording)
    };
    let mut lacks = Vec::new();
    if recording.allocator.is_empty() {
        lacks.push(if recording.phases.is_empty() {
            LACKS_ALLOCATOR_AND_PHASES.to_owned()
        } else {
            LACKS_ALLOCATOR.to_owned()
        });
    }
    if recording.phases.is_empty() && !recording.allocator.is_empty() {
        lacks.push(LACKS_PHASES.to_owned());
    }
    lacks.extend(phases_not_told_apart(&occurrences));
    if !recording
        .series
        .iter()
        .any(|s| s.key.kind == SeriesKind::DeviceUsed)
    {
        lacks.push(LACKS_DEVICE_SAMPLES.to_owned());
    }

    // The series at the same point of every step.
    let (basis, by_step, step_series) = if !step_starts.is_empty() && allocator.covers(&step_starts)
    {
        (Basis::Allocated, true, allocator.at_steps(&step_starts))
    } else if let Some((basis, series)) = &fallback {
        if step_starts.is_empty() {
            (*basis, false, windows(series))
        } else {
            let mut out = StepSeries::default();
            for start in &step_starts {
                if let Some(value) = value_at(series, start.t_ns) {
                    out.steps.push(start.step);
                    out.times_ns.push(start.t_ns);
                    out.values.push(value);
                }
            }
            (*basis, true, out)
        }
    } else {
        (Basis::HostRss, false, StepSeries::default())
    };
    if !by_step && !step_series.values.is_empty() {
        lacks.push("no steps: the trend is taken over time windows (the lowest value of each), which is coarser than per step".to_owned());
    }

    // With allocator numbers at the edges, the attribution needs no other series; for host
    // memory, the probe's own numbers at the edges beat samples taken after them.
    let at_edges = match basis {
        Basis::HostRss => host_at_edges(recording, &occurrences),
        _ => None,
    };
    let (attribution, attribution_note, attribution_series) = match (basis, at_edges) {
        (Basis::Allocated, _) => (Attribution::Allocator, None, None),
        (_, Some(edges)) => (
            edges.attribution,
            edges.note,
            Some((std::borrow::Cow::Owned(edges.series), true)),
        ),
        _ => (
            Attribution::Sampled,
            None,
            fallback
                .as_ref()
                .map(|(_, s)| (std::borrow::Cow::Borrowed(s.as_ref()), false)),
        ),
    };
    let freed_gradients = holders::freed_gradients(
        recording,
        occurrences.first().map(|o| o.pid),
        attribution == Attribution::Allocator,
    );
    let phases::Accounts {
        stats: phase_stats,
        retained,
        changes,
        between: between_phases,
        freed_before_backward,
    } = phases::stats(
        &occurrences,
        &step_starts,
        &allocator,
        attribution_series
            .as_ref()
            .map(|(series, at_edges)| phases::Attributed {
                series,
                at_edges: *at_edges,
            }),
        &freed_gradients,
        &phases::saved_freed(
            recording,
            &occurrences,
            if attribution == Attribution::Allocator {
                allocator.device()
            } else {
                None
            },
        ),
    );
    let has_phases = !phase_stats.is_empty();
    let mut analysis = Analysis {
        basis,
        by_step,
        step_series,
        trend: None,
        findings: Vec::new(),
        phases: phase_stats,
        projection: None,
        lacks,
        attribution: has_phases.then_some(attribution),
        attribution_note: attribution_note.filter(|_| has_phases),
        ooms: Vec::new(),
        ending: Ending::default(),
        ranks: Vec::new(),
        between_phases,
        categories: Vec::new(),
        holders: Vec::new(),
        occurrences: Default::default(),
        step_starts: Vec::new(),
        retained: Vec::new(),
        changes: Vec::new(),
        freed_before_backward,
    };
    // The C heap at each step start, where the probe read it at every one (a host job's first
    // steps): what the job's tensors hold, without the pages the process settles around them.
    let heap_at_steps: Option<Vec<f64>> = match (attribution, &attribution_series) {
        (Attribution::HostHeap, Some((heap, true))) => analysis
            .step_series
            .times_ns
            .iter()
            .map(|&t| value_exactly_at(heap, t).map(|v| v as f64))
            .collect(),
        _ => None,
    };
    rules::judge(
        recording,
        &allocator,
        fallback.as_ref().map(|(_, s)| s.as_ref()),
        heap_at_steps.as_deref(),
        &mut analysis,
    );
    holders::judge(recording, occurrences.first().map(|o| o.pid), &mut analysis);
    let mut occurrences = occurrences;
    // Kept while the run is shown: a week of steps is millions of entries, each vector's
    // reserve for growth given back.
    occurrences.shrink_to_fit();
    analysis.occurrences = std::sync::Arc::new(occurrences);
    analysis.step_starts = step_starts;
    analysis.retained = retained;
    analysis.changes = changes;
    analysis.step_starts.shrink_to_fit();
    analysis.retained.shrink_to_fit();
    analysis.changes.shrink_to_fit();
    analysis.step_series.steps.shrink_to_fit();
    analysis.step_series.times_ns.shrink_to_fit();
    analysis.step_series.values.shrink_to_fit();
    analysis
}

/// The phases a training loop has that the recording could not tell apart, said so that no
/// phase is named for what it did not measure: a loop without an optimizer step (it updates the
/// weights itself), or without a backward the probe sees.
fn phases_not_told_apart(occurrences: &[Occurrence]) -> Vec<String> {
    let has = |phase: Phase| occurrences.iter().any(|o| o.phase == phase);
    let (forward, backward, optimizer) = (
        has(Phase::Forward),
        has(Phase::Backward),
        has(Phase::Optimizer),
    );
    let mut out = Vec::new();
    if backward && !optimizer {
        out.push("no optimizer step seen (the job updates its weights itself): each training forward starts a step, and the update's memory is counted between the phases, not as an optimizer's".to_owned());
    }
    if forward && optimizer && !backward {
        out.push("no backward seen (gradients made where the probe does not see a backward: inside a model's forward, or by C++ or a compiled graph): the gradients' memory is counted between forward and the optimizer, not as a backward's".to_owned());
    }
    out
}

/// The training process' host memory at its own phase edges, as the probe read it there.
struct HostAtEdges {
    attribution: Attribution,
    note: Option<String>,
    series: Series,
}

/// The C heap when the probe read it at every edge of the training process and it holds at least
/// a quarter of the resident growth (what malloc holds is exact, where resident memory also grows
/// by the holes freed chunks leave in the heap: an LBFGS job's heap grows half as much as its
/// resident memory, and the heap names the phase that kept it); else the resident memory at the edges (the growth is then outside
/// `malloc`: `mmap`, or Python's small-object arenas), saying so. `None` without such numbers.
fn host_at_edges(recording: &Recording, occurrences: &[Occurrence]) -> Option<HostAtEdges> {
    let pid = occurrences.first()?.pid;
    let edges: Vec<_> = recording
        .phases
        .iter()
        .filter(|e| e.origin.pid == pid)
        .collect();
    // Resident memory is read at (nearly) every edge. The probe may skip the C heap at some when
    // reading it grows costly (a fragmented heap), and says so in a note: with most edges read,
    // the heap still attributes the occurrences whose two edges have it (see `phases::levels`).
    let series_of = |pick: fn(&crate::recording::PhaseEdge) -> Option<u64>, percent: usize| {
        let (times, values) = edges
            .iter()
            .filter_map(|e| pick(e).map(|value| (e.t_ns, value)))
            .unzip();
        let series = Series {
            key: SeriesKey::new(SeriesKind::HostRss),
            times_ns: std::sync::Arc::new(times),
            values,
        };
        (series.values.len() * 100 >= edges.len() * percent && !series.values.is_empty())
            .then(|| series.sorted().into_owned())
    };
    let rss = series_of(|e| e.host_rss, 95);
    // The probe reads the heap at every edge of a host job's first steps, then within a small
    // share of the job's time (whole steps: both edges of a phase or neither); the steps it read
    // attribute the phases, so a twentieth of the edges (and forty at least) is enough.
    let heap = series_of(|e| e.host_heap, 5).filter(|h| h.values.len() >= 40);
    let heap_read = heap.as_ref().map_or(0, |h| h.values.len());
    let growth = |s: &Series| match (s.values.first(), s.values.last()) {
        (Some(a), Some(b)) => b as f64 - a as f64,
        _ => 0.0,
    };
    match (heap, rss) {
        (Some(heap), Some(rss))
            if growth(&rss) > 16.0 * MIB && growth(&heap) < growth(&rss) / 4.0 =>
        {
            Some(HostAtEdges {
                attribution: Attribution::HostRssAtEdges,
                note: Some(format!(
                    "the C heap grew {} while resident memory grew {}: the growth is outside malloc (mmap, or Python's small-object arenas), so phases are attributed with resident memory",
                    format_bytes(growth(&heap)),
                    format_bytes(growth(&rss))
                )),
                series: rss,
            })
        }
        (Some(heap), _) => Some(HostAtEdges {
            attribution: Attribution::HostHeap,
            note: (heap_read * 100 < edges.len() * 95).then(|| {
                format!(
                    "the probe read the C heap at {heap_read} of {} phase edges (within its share of the job's time): the phases whose edges lack it are left out of the attribution",
                    edges.len()
                )
            }),
            series: heap,
        }),
        (None, Some(rss)) => {
            let stopped = recording
                .notes
                .iter()
                .find(|n| n.text.contains("read the C heap at"));
            Some(HostAtEdges {
                attribution: Attribution::HostRssAtEdges,
                note: Some(match stopped {
                    Some(n) => format!("{}, so phases are attributed with resident memory", n.text),
                    None => "the probe could not read the C heap (not glibc), so phases are attributed with resident memory".to_owned(),
                }),
                series: rss,
            })
        }
        (None, None) => None,
    }
}

/// For recordings without steps: the lowest value in each of up to 100 time windows (the trough
/// of the sawtooth), numbered as steps.
fn windows(series: &Series) -> StepSeries {
    let n = series.values.len();
    let count = (n / 10).clamp(1, 100);
    let mut out = StepSeries::default();
    for w in 0..count {
        let range = w * n / count..((w + 1) * n / count).max(w * n / count + 1).min(n);
        let Some((i, value)) = series
            .values
            .range(range.clone())
            .enumerate()
            .min_by_key(|&(_, v)| v)
        else {
            continue;
        };
        out.steps.push(w as u64);
        out.times_ns.push(series.times_ns[range.start + i]);
        out.values.push(value);
    }
    out
}
