//! What the diagnosis is made of: the memory a step series measures (`Basis`), the series, the
//! kinds of finding and a finding with its evidence, the projection to an out-of-memory error,
//! and the whole `Analysis`; the sentence that leads and the caption under a timeline.

use serde::Serialize;

use super::{
    CategoryStats, Ending, HolderGrowth, Occurrence, OomVerdict, PhaseStats, RankSummary,
    StepStart, Trend,
};
use crate::format::{format_bytes, format_duration};
use crate::recording::{Phase, Recording};

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
    /// How the report names it; `imported`: the file of PyTorch's own the recording was made
    /// from, whose events gave the numbers (no probe ran).
    pub fn describe(self, basis: Basis, imported: Option<crate::recording::Imported>) -> String {
        match self {
            Self::Allocator => match imported {
                Some(file) => format!("PyTorch's allocated bytes at every phase edge, from {}'s own memory events", file.name()),
                None => "PyTorch's allocated bytes, read by the probe at every phase edge".to_owned(),
            },
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
    /// No step ended for far longer than steps took, and the job ended so (a hang).
    Stalled,
    /// Memory at the same point of every step rises and never falls back.
    Leak,
    /// A notebook's cell keeps memory every time it runs.
    CellKeeps,
    /// The job's device memory outside PyTorch's cache (NVML's count less what PyTorch
    /// reserved) rises from step to step.
    NonPytorchGrowth,
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
            Self::Stalled => "stalled",
            Self::Leak => "leak",
            Self::CellKeeps => "cell_keeps",
            Self::NonPytorchGrowth => "non_pytorch_growth",
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
                | Self::Stalled
                | Self::Leak
                | Self::CellKeeps
                | Self::NonPytorchGrowth
                | Self::Fragmentation
                | Self::PeakCreep
                | Self::CapacityPressure
                | Self::StateGrowth
        )
    }
}

/// Every finding kind.
pub const ALL_KINDS: [FindingKind; 17] = [
    FindingKind::Oom,
    FindingKind::Failed,
    FindingKind::Stalled,
    FindingKind::Leak,
    FindingKind::CellKeeps,
    FindingKind::NonPytorchGrowth,
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
    /// A notebook's cells: what each run kept, and the cells that add memory each time they run
    /// (left out of the JSON where no cell was marked).
    #[serde(skip_serializing_if = "super::CellRuns::is_empty")]
    pub cells: super::CellRuns,
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
    /// What a point of the step series is, as a word: "step", or "window" without steps.
    pub fn unit(&self) -> &'static str {
        if self.by_step { "step" } else { "window" }
    }

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
    if let Some(f) = analysis.finding(FindingKind::Cache) {
        // It rises and falls back: not "does not rise".
        return (format!("No leak: {}", lower_first(&f.title)), Some(false));
    }
    let what = if analysis.by_step {
        "memory at the same point of every step"
    } else {
        "the lowest memory of each time window"
    };
    (format!("No leak: {what} does not rise"), Some(false))
}

/// `text` with its first letter in lower case ("A sawtooth…" after "No leak: ").
fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}
