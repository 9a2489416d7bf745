//! The diagnosis: is it a leak, the allocator's cache, fragmentation or growing peaks — and in
//! which phase? Every finding carries the numbers that fired it.
//!
//! Series are taken at the same point of every step (the step's first phase begin), so that the
//! allocator's sawtooth within a step neither hides nor fakes a trend. The memory the verdict is
//! about is, in order of preference: PyTorch's allocated bytes (from the probe), the device's used
//! memory (NVML), the job's host memory (`/proc`). No I/O here: the viewer uses it too.

mod phases;
mod trend;

use serde::Serialize;

use crate::format::{format_bytes, format_duration};

pub use self::phases::{Occurrence, PhaseStats, StepStart};
pub use self::trend::{Trend, trend};
use crate::recording::{Phase, Recording, Series, SeriesKey, SeriesKind};

/// Fewer steps than this cannot be judged.
pub const MIN_STEPS: usize = 10;
/// A trend must be this significant (Mann–Kendall p-value).
pub const ALPHA: f64 = 0.01;
/// Growth below this over the run is not reported as a leak, whatever its significance.
pub const GROWTH_FLOOR_BYTES: f64 = 8.0 * MIB;

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
    /// The allocator's cache: high but flat, falling back every step.
    Cache,
    /// Too few steps to judge.
    NotEnoughData,
}

impl FindingKind {
    /// The stable name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leak => "leak",
            Self::Fragmentation => "fragmentation",
            Self::PeakCreep => "peak_creep",
            Self::CapacityPressure => "capacity_pressure",
            Self::NonPytorchMemory => "non_pytorch_memory",
            Self::OtherProcesses => "other_processes",
            Self::Cache => "cache",
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
            Self::Leak | Self::Fragmentation | Self::PeakCreep | Self::CapacityPressure
        )
    }
}

/// Every finding kind.
pub const ALL_KINDS: [FindingKind; 8] = [
    FindingKind::Leak,
    FindingKind::Fragmentation,
    FindingKind::PeakCreep,
    FindingKind::CapacityPressure,
    FindingKind::NonPytorchMemory,
    FindingKind::OtherProcesses,
    FindingKind::Cache,
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
    /// The phase occurrences of the training process, by begin time (for views; not reported).
    #[serde(skip)]
    pub occurrences: Vec<Occurrence>,
    /// Where each step starts, by step (for views; not reported).
    #[serde(skip)]
    pub step_starts: Vec<StepStart>,
    /// What each occurrence retained of its step's growth, bytes, in the order of `occurrences`
    /// (`None` where unknown).
    #[serde(skip)]
    pub retained: Vec<Option<f64>>,
}

impl Analysis {
    /// The first finding of this kind.
    pub fn finding(&self, kind: FindingKind) -> Option<&Finding> {
        self.findings.iter().find(|f| f.kind == kind)
    }
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
    let device = recording.allocator.iter().map(|a| a.device).min()?;
    let mut series = Series {
        key: SeriesKey::device(SeriesKind::Other("allocated".to_owned()), device),
        times_ns: Vec::new(),
        values: Vec::new(),
    };
    for a in recording.allocator.iter().filter(|a| a.device == device) {
        series.times_ns.push(a.t_ns);
        series.values.push(a.allocated);
    }
    let series = series.sorted().into_owned();
    Some((Basis::Allocated, std::borrow::Cow::Owned(series)))
}

/// The value of a sorted series at `t`: the first sample at or after it, else the last.
pub(crate) fn value_at(series: &Series, t_ns: u64) -> Option<u64> {
    let i = series.times_ns.partition_point(|&s| s < t_ns);
    series
        .values
        .get(i)
        .or_else(|| series.values.last())
        .copied()
}

/// Diagnoses a recording.
pub fn analyze(recording: &Recording) -> Analysis {
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
            "no allocator numbers and no phases: run the job under the collector with the probe (a Python job that uses CUDA) to see allocated vs. reserved memory and the phase of the step".to_owned()
        } else {
            "no allocator numbers: the job did not use CUDA through PyTorch (or the probe was off), so allocated and reserved memory are unknown".to_owned()
        });
    }
    if recording.phases.is_empty() && !recording.allocator.is_empty() {
        lacks.push(
            "no phases: mark them with tidemark.phase(…) or leave automatic phases on".to_owned(),
        );
    }
    if !recording
        .series
        .iter()
        .any(|s| s.key.kind == SeriesKind::DeviceUsed)
    {
        lacks.push("no device samples: NVML was not available where the job ran".to_owned());
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
            Some(std::borrow::Cow::Owned(edges.series)),
        ),
        _ => (
            Attribution::Sampled,
            None,
            fallback
                .as_ref()
                .map(|(_, s)| std::borrow::Cow::Borrowed(s.as_ref())),
        ),
    };
    let (phase_stats, retained) = phases::stats(
        &occurrences,
        &step_starts,
        &allocator,
        attribution_series.as_deref(),
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
        occurrences: Vec::new(),
        step_starts: Vec::new(),
        retained: Vec::new(),
    };
    judge(
        recording,
        &allocator,
        fallback.as_ref().map(|(_, s)| s.as_ref()),
        &mut analysis,
    );
    analysis
        .findings
        .sort_by_key(|f| (!f.kind.is_problem(), f.kind));
    analysis.occurrences = occurrences;
    analysis.step_starts = step_starts;
    analysis.retained = retained;
    analysis
}

/// The training process' host memory at its own phase edges, as the probe read it there.
struct HostAtEdges {
    attribution: Attribution,
    note: Option<String>,
    series: Series,
}

/// The C heap when the probe read it at every edge of the training process and it holds at least
/// half of the resident growth; else the resident memory at the edges (the growth is then outside
/// `malloc`: `mmap`, or Python's small-object arenas), saying so. `None` without such numbers.
fn host_at_edges(recording: &Recording, occurrences: &[Occurrence]) -> Option<HostAtEdges> {
    let pid = occurrences.first()?.pid;
    let edges: Vec<_> = recording
        .phases
        .iter()
        .filter(|e| e.origin.pid == pid)
        .collect();
    let series_of = |pick: fn(&crate::recording::PhaseEdge) -> Option<u64>| {
        let mut series = Series {
            key: SeriesKey::new(SeriesKind::HostRss),
            times_ns: Vec::with_capacity(edges.len()),
            values: Vec::with_capacity(edges.len()),
        };
        for e in &edges {
            series.times_ns.push(e.t_ns);
            series.values.push(pick(e)?);
        }
        Some(series.sorted().into_owned())
    };
    let rss = series_of(|e| e.host_rss);
    let heap = series_of(|e| e.host_heap);
    let growth = |s: &Series| match (s.values.first(), s.values.last()) {
        (Some(&a), Some(&b)) => b as f64 - a as f64,
        _ => 0.0,
    };
    match (heap, rss) {
        (Some(heap), Some(rss)) if growth(&rss) > 16.0 * MIB && growth(&heap) < growth(&rss) / 2.0 => {
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
            note: None,
            series: heap,
        }),
        (None, Some(rss)) => Some(HostAtEdges {
            attribution: Attribution::HostRssAtEdges,
            note: Some(
                "the probe could not read the C heap (not glibc), so phases are attributed with resident memory".to_owned(),
            ),
            series: rss,
        }),
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
        let Some((i, &value)) = series.values[range.clone()]
            .iter()
            .enumerate()
            .min_by_key(|(_, v)| **v)
        else {
            continue;
        };
        out.steps.push(w as u64);
        out.times_ns.push(series.times_ns[range.start + i]);
        out.values.push(value);
    }
    out
}

/// `fallback` is the sorted device or host series `analyze` found (none with allocator numbers).
fn judge(
    recording: &Recording,
    allocator: &phases::AllocatorIndex<'_>,
    fallback: Option<&Series>,
    analysis: &mut Analysis,
) {
    let basis = analysis.basis;
    let unit = if analysis.by_step { "step" } else { "window" };
    let n = analysis.step_series.values.len();
    if n < MIN_STEPS {
        analysis.findings.push(Finding {
            kind: FindingKind::NotEnoughData,
            title: format!(
                "not enough data: {n} {unit}s recorded, at least {MIN_STEPS} are needed to judge a trend ({} more)",
                MIN_STEPS - n
            ),
            phase: None,
            basis,
            growth_per_step_bytes: None,
            evidence: Vec::new(),
            hints: vec!["record a longer run: a leak shows as a rise over many steps".to_owned()],
        });
        capacity_and_devices(recording, allocator, analysis);
        return;
    }
    let steps = analysis.step_series.steps_f64();
    let values: Vec<f64> = analysis
        .step_series
        .values
        .iter()
        .map(|&v| v as f64)
        .collect();
    // Skip the warm-up: the first tenth of the steps (caches filling, lazy initialisation).
    let warmup = (n / 10).max(1);
    let trend = trend::trend(&steps[warmup..], &values[warmup..]);
    // A plateau after warm-up: the last third sits no higher than the middle third, where a
    // sustained leak puts it a third of the run's growth higher.
    let third = n / 3;
    let middle = median_u64(&analysis.step_series.values[third..2 * third]).unwrap_or(0) as f64;
    let last = median_u64(&analysis.step_series.values[n - third..]).unwrap_or(0) as f64;
    if let Some(t) = &trend {
        let floor = GROWTH_FLOOR_BYTES.max(3.0 * t.noise_bytes);
        let plateau = last - middle < 0.35 * t.slope_per_step * third as f64;
        let falls_back = t.end_bytes <= t.start_bytes + t.noise_bytes.max(MIB);
        if t.rises(ALPHA) && t.growth_bytes >= floor && !plateau && !falls_back {
            analysis.findings.push(leak_finding(
                basis,
                unit,
                t,
                &analysis.step_series,
                &analysis.phases,
            ));
            analysis.projection = projection(recording, allocator, analysis, t);
            if analysis.projection.is_none() && basis != Basis::HostRss {
                analysis.lacks.push("no device capacity: the device's total memory was not recorded (NVML), so there is no projection to an out-of-memory error".to_owned());
            }
        }
    }
    analysis.trend = trend;
    if basis == Basis::Allocated {
        fragmentation_and_cache(allocator, analysis);
    } else if analysis.finding(FindingKind::Leak).is_none()
        && let Some(series) = fallback
    {
        sawtooth(series, analysis);
    }
    peak_creep(analysis);
    capacity_and_devices(recording, allocator, analysis);
}

fn leak_finding(
    basis: Basis,
    unit: &str,
    t: &Trend,
    series: &StepSeries,
    phases: &[PhaseStats],
) -> Finding {
    let first = series.values.first().copied().unwrap_or(0) as f64;
    let last = series.values.last().copied().unwrap_or(0) as f64;
    let mut evidence = vec![
        format!(
            "{} at the start of each {unit} rose from {} to {} over {} {unit}s",
            basis.name(),
            format_bytes(first),
            format_bytes(last),
            series.values.len()
        ),
        format!(
            "trend {}/{unit} (Theil–Sen), Mann–Kendall p = {:.2e}, noise ±{}",
            format_bytes(t.slope_per_step),
            t.p_value,
            format_bytes(t.noise_bytes)
        ),
        "it never falls back: a staircase, not the allocator's sawtooth".to_owned(),
    ];
    let culprit = phases
        .iter()
        .filter(|p| p.share_of_growth.is_some_and(|s| s >= 0.3))
        .max_by(|a, b| {
            a.share_of_growth
                .partial_cmp(&b.share_of_growth)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    let phase = culprit.map(|p| p.phase.clone());
    if let Some(p) = culprit {
        evidence.push(format!(
            "{} retains {} per occurrence (mean over {} occurrences): {:.0}% of what the phases keep",
            p.phase,
            format_bytes(p.retained_mean_bytes),
            p.occurrences,
            100.0 * p.share_of_growth.unwrap_or(0.0)
        ));
    }
    let title = match &phase {
        Some(phase) => format!(
            "{} leak in {phase}: +{}/{unit}",
            capitalize(basis.name()),
            format_bytes(t.slope_per_step)
        ),
        None => format!(
            "{} leak: +{}/{unit}",
            capitalize(basis.name()),
            format_bytes(t.slope_per_step)
        ),
    };
    Finding {
        kind: FindingKind::Leak,
        title,
        phase: phase.clone(),
        basis,
        growth_per_step_bytes: Some(t.slope_per_step),
        evidence,
        hints: leak_hints(basis, phase.as_ref()),
    }
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The usual causes for growth in this phase (from the patterns users hit most).
pub fn leak_hints(basis: Basis, phase: Option<&Phase>) -> Vec<String> {
    let mut hints: Vec<&str> = match phase {
        Some(Phase::Eval) => vec![
            "predictions or logits kept on the GPU across batches (`preds.append(out)`): keep `out.detach().cpu()` or the metric's number instead",
            "evaluation without `torch.no_grad()` keeps every batch's graph alive",
        ],
        Some(Phase::Forward) | Some(Phase::Backward) => vec![
            "a loss kept with its graph (`losses.append(loss)`): keep `loss.item()`",
            "activations stored on the module (`self.attn = attn`) or by forward hooks that keep outputs: store `.detach().clone()` on the CPU, or remove the hook after use",
            "`x.detach()` still holds the memory: `.detach()` cuts the graph, not the storage",
            "with gradient accumulation, a loss stored before `backward()` (`self.last_loss = loss`) chains the graphs of several steps",
        ],
        Some(Phase::Optimizer) => vec![
            "parameter groups or parameters added to the optimizer every step (its state grows with them)",
            "tensors kept in the optimizer's state or a scheduler by custom code",
        ],
        _ => vec![
            "a loss kept with its graph (`losses.append(loss)`): keep `loss.item()`",
            "outputs or predictions kept on the GPU in a list, or on `self` in a trainer (`self.current_batch = batch`)",
            "tensors made on the GPU in a DataLoader's `collate_fn` or `__getitem__`: move data to the device in the training loop",
        ],
    };
    if basis == Basis::HostRss {
        hints = vec![
            "tensors moved to the CPU (`.cpu()`, `.item()` lists) and kept for the whole run",
            "DataLoader workers touching Python objects of a large Dataset (copy-on-access of lists and dicts): use numpy arrays or tensors",
            "a cache or a log that grows every step",
        ];
    }
    hints.into_iter().map(str::to_owned).collect()
}

fn fragmentation_and_cache(allocator: &phases::AllocatorIndex<'_>, analysis: &mut Analysis) {
    let Some(samples) = allocator.at_step_samples(&analysis.step_series) else {
        return;
    };
    let steps = analysis.step_series.steps_f64();
    let gap: Vec<f64> = samples
        .iter()
        .map(|s| s.reserved as f64 - s.allocated as f64)
        .collect();
    let n = gap.len();
    let warmup = (n / 10).max(1);
    let leaking = analysis.finding(FindingKind::Leak).is_some();
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return;
    };
    if let Some(t) = trend::trend(&steps[warmup..], &gap[warmup..]) {
        let floor = GROWTH_FLOOR_BYTES.max(3.0 * t.noise_bytes);
        let retries = last.retries.saturating_sub(first.retries);
        let split_rises = last.inactive_split > first.inactive_split + (MIB as u64);
        if !leaking && t.rises(ALPHA) && t.growth_bytes >= floor && (retries > 0 || split_rises) {
            analysis.findings.push(Finding {
                kind: FindingKind::Fragmentation,
                title: format!(
                    "Fragmentation: reserved − allocated grows {}/step while allocated stays flat",
                    format_bytes(t.slope_per_step)
                ),
                phase: None,
                basis: Basis::Allocated,
                growth_per_step_bytes: Some(t.slope_per_step),
                evidence: vec![
                    format!(
                        "reserved − allocated went from {} to {} (Mann–Kendall p = {:.2e})",
                        format_bytes(gap[0]),
                        format_bytes(gap[n - 1]),
                        t.p_value
                    ),
                    format!(
                        "allocator retries +{retries}, inactive split blocks went from {} to {}",
                        format_bytes(first.inactive_split as f64),
                        format_bytes(last.inactive_split as f64)
                    ),
                ],
                hints: vec![
                    "try `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`".to_owned(),
                    "varying tensor sizes (dynamic shapes, variable sequence lengths) split the cache: pad to a few fixed sizes".to_owned(),
                    "`max_split_size_mb` stops large blocks from being split".to_owned(),
                ],
            });
            return;
        }
    }
    let reserved = last.reserved as f64;
    let allocated = last.allocated as f64;
    if !leaking && reserved >= 1.3 * allocated && reserved - allocated >= 64.0 * MIB {
        analysis.findings.push(Finding {
            kind: FindingKind::Cache,
            title: "The allocator's cache: reserved is well above allocated, but flat".to_owned(),
            phase: None,
            basis: Basis::Allocated,
            growth_per_step_bytes: None,
            evidence: vec![format!(
                "at the last step PyTorch reserved {} for {} allocated; nvidia-smi shows the reserved amount",
                format_bytes(reserved),
                format_bytes(allocated)
            )],
            hints: vec![
                "this is healthy: freed blocks are kept for reuse, and `torch.cuda.empty_cache()` would only slow the job down".to_owned(),
            ],
        });
    }
}

/// Without allocator numbers: a series that rises within steps and falls back is the cache.
fn sawtooth(series: &Series, analysis: &mut Analysis) {
    let (Some(&min), Some(&max)) = (series.values.iter().min(), series.values.iter().max()) else {
        return;
    };
    let swing = (max - min) as f64;
    let growth = analysis
        .trend
        .as_ref()
        .map_or(0.0, |t| t.growth_bytes.abs());
    if swing >= 64.0 * MIB && swing >= 4.0 * growth {
        analysis.findings.push(Finding {
            kind: FindingKind::Cache,
            title: format!(
                "A sawtooth that falls back: {} swings by {} but returns to the same level",
                analysis.basis.name(),
                format_bytes(swing)
            ),
            phase: None,
            basis: analysis.basis,
            growth_per_step_bytes: None,
            evidence: vec![format!(
                "between {} and {}; the lowest point of each {} does not rise",
                format_bytes(min as f64),
                format_bytes(max as f64),
                if analysis.by_step { "step" } else { "window" }
            )],
            hints: vec!["memory used transiently and given back: not a leak".to_owned()],
        });
    }
}

fn peak_creep(analysis: &mut Analysis) {
    let mut found = Vec::new();
    for stats in &analysis.phases {
        let Some(t) = &stats.watermark_trend else {
            continue;
        };
        let floor = GROWTH_FLOOR_BYTES.max(3.0 * t.noise_bytes);
        if stats.occurrences >= MIN_STEPS && t.rises(ALPHA) && t.growth_bytes >= floor {
            found.push(Finding {
                kind: FindingKind::PeakCreep,
                title: format!(
                    "Peak creep in {}: its transient peak grows {}/occurrence",
                    stats.phase,
                    format_bytes(t.slope_per_step)
                ),
                phase: Some(stats.phase.clone()),
                basis: analysis.basis,
                growth_per_step_bytes: Some(t.slope_per_step),
                evidence: vec![format!(
                    "watermark (peak − start) of {} went from {} to {} over {} occurrences (Mann–Kendall p = {:.2e})",
                    stats.phase,
                    format_bytes(t.start_bytes),
                    format_bytes(t.end_bytes),
                    stats.occurrences,
                    t.p_value
                )],
                hints: vec![
                    "ever larger temporaries: growing sequence lengths or batch sizes, a buffer expanded every call (`pos_emb.expand(…)` on a growing size)".to_owned(),
                    "the next larger batch may be the one that runs out of memory, even without a leak".to_owned(),
                ],
            });
        }
    }
    analysis.findings.extend(found);
}

fn projection(
    recording: &Recording,
    allocator: &phases::AllocatorIndex<'_>,
    analysis: &Analysis,
    t: &Trend,
) -> Option<Projection> {
    if analysis.basis == Basis::HostRss || t.slope_per_step <= 0.0 {
        return None;
    }
    let device = match analysis.basis {
        Basis::Allocated => allocator.device(),
        _ => recording
            .series
            .iter()
            .filter(|s| s.key.kind == SeriesKind::DeviceUsed)
            .filter_map(|s| s.key.device)
            .min(),
    }?;
    let capacity = recording
        .header
        .devices
        .iter()
        .find(|d| d.index == device)?
        .total_bytes;
    if capacity == 0 {
        return None; // unknown: said in `lacks`
    }
    let series = &analysis.step_series;
    let level = *series.values.last()?;
    let last_step = *series.steps.last()?;
    let steps_left = (capacity.saturating_sub(level) as f64 / t.slope_per_step).ceil();
    let oom_step = last_step + steps_left as u64;
    let span_steps = last_step.saturating_sub(*series.steps.first()?) as f64;
    let span_ns = series
        .times_ns
        .last()?
        .saturating_sub(*series.times_ns.first()?) as f64;
    let oom_after_s = (span_steps > 0.0).then(|| {
        (*series.times_ns.last().unwrap_or(&0) as f64 + steps_left * span_ns / span_steps) / 1e9
    });
    Some(Projection {
        capacity_bytes: capacity,
        level_bytes: level,
        last_step,
        oom_step,
        oom_after_s,
    })
}

/// The median, estimated from at most 100,000 evenly spaced values.
fn median_u64(values: &[u64]) -> Option<u64> {
    let stride = values.len().div_ceil(100_000).max(1);
    let mut picked: Vec<u64> = values.iter().step_by(stride).copied().collect();
    if picked.is_empty() {
        return None;
    }
    let mid = picked.len() / 2;
    Some(*picked.select_nth_unstable(mid).1)
}

fn capacity_and_devices(
    recording: &Recording,
    allocator: &phases::AllocatorIndex<'_>,
    analysis: &mut Analysis,
) {
    if let Some(p) = analysis.projection.clone() {
        let when = p
            .oom_after_s
            .map(|s| format!(", about {} after the start", format_duration(s)))
            .unwrap_or_default();
        analysis.findings.push(Finding {
            kind: FindingKind::CapacityPressure,
            title: format!(
                "Projected out-of-memory at step {}{when}",
                p.oom_step
            ),
            phase: None,
            basis: analysis.basis,
            growth_per_step_bytes: None,
            evidence: vec![format!(
                "{} of {} in use at step {}; at the current trend the device is full after {} more steps",
                format_bytes(p.level_bytes as f64),
                format_bytes(p.capacity_bytes as f64),
                p.last_step,
                p.oom_step - p.last_step
            )],
            hints: vec!["fix the leak first; a smaller batch only moves the crash later".to_owned()],
        });
    }
    for device in &recording.header.devices {
        let Some(used) = recording
            .series(&SeriesKey::device(SeriesKind::DeviceUsed, device.index))
            .filter(|s| !s.values.is_empty())
        else {
            continue;
        };
        let peak = used.values.iter().copied().max().unwrap_or(0);
        if analysis.projection.is_none()
            && device.total_bytes > 0
            && peak as f64 >= 0.9 * device.total_bytes as f64
        {
            analysis.findings.push(Finding {
                kind: FindingKind::CapacityPressure,
                title: format!(
                    "GPU {} ran at {:.0}% of its memory",
                    device.index,
                    100.0 * peak as f64 / device.total_bytes as f64
                ),
                phase: None,
                basis: Basis::DeviceUsed,
                growth_per_step_bytes: None,
                evidence: vec![format!(
                    "peak {} of {}",
                    format_bytes(peak as f64),
                    format_bytes(device.total_bytes as f64)
                )],
                hints: vec!["a slightly larger batch or a longer sequence will not fit".to_owned()],
            });
        }
        let used_median = median_u64(&used.values).unwrap_or(0) as f64;
        let own: Vec<&Series> = recording
            .series
            .iter()
            .filter(|s| {
                s.key.kind == SeriesKind::ProcessDevice && s.key.device == Some(device.index)
            })
            .filter(|s| !s.values.is_empty())
            .collect();
        let own_total: f64 = own
            .iter()
            .map(|s| median_u64(&s.values).unwrap_or(0) as f64)
            .sum();
        if !own.is_empty() && used_median - own_total >= GIB.max(0.2 * used_median) {
            analysis.findings.push(Finding {
                kind: FindingKind::OtherProcesses,
                title: format!(
                    "Other processes use {} on GPU {}",
                    format_bytes(used_median - own_total),
                    device.index
                ),
                phase: None,
                basis: Basis::DeviceUsed,
                growth_per_step_bytes: None,
                evidence: vec![format!(
                    "the device had {} in use, the job's processes {}",
                    format_bytes(used_median),
                    format_bytes(own_total)
                )],
                hints: vec!["a shared GPU: what fits when alone may not fit here; check `nvidia-smi` for the other processes".to_owned()],
            });
        }
        let reserved = allocator.median_reserved(device.index);
        let own_or_used = if own.is_empty() {
            used_median
        } else {
            own_total
        };
        if let Some(reserved) = reserved
            && own_or_used - reserved as f64 >= GIB.max(0.25 * own_or_used)
        {
            let whose = if own.is_empty() {
                "the device's used memory (per-process numbers unavailable, so other processes are included)"
            } else {
                "the job's own device memory"
            };
            analysis.findings.push(Finding {
                kind: FindingKind::NonPytorchMemory,
                title: format!(
                    "{} on GPU {} is not PyTorch's",
                    format_bytes(own_or_used - reserved as f64),
                    device.index
                ),
                phase: None,
                basis: Basis::DeviceUsed,
                growth_per_step_bytes: None,
                evidence: vec![format!(
                    "{whose}: {}; PyTorch reserved {}",
                    format_bytes(own_or_used),
                    format_bytes(reserved as f64)
                )],
                hints: vec!["the CUDA context, NCCL buffers, cuDNN/cuBLAS workspaces and other libraries: PyTorch's numbers do not show them".to_owned()],
            });
        }
    }
}
