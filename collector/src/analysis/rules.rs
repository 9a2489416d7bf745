//! The finding rules: each looks at the step series, the phases and the allocator numbers and
//! adds the finding of its kind with the numbers that fired it ([`judge`] runs them in order).

use super::attribution::PhaseStats;
use super::device_rules::devices_rules;
use super::phases;
use super::trend::{self, Shape, Trend};
use super::{
    ALPHA, Analysis, Basis, Finding, FindingKind, GIB, GROWTH_FLOOR_BYTES, KEEPS_PACE, MIB,
    MIN_STEPS, Projection, StepSeries,
};
use crate::format::{format_bytes, format_duration};
use crate::recording::{Phase, Recording, Series, SeriesKind};

/// Resident memory of a Python process (and a device's, its caches filling) can settle for tens of
/// steps, slowly enough to look like a slow leak until it stops: a DDP rank's resident memory
/// crept 6 to 14 MiB over 30 healthy steps, then stayed flat for the next 170. A run of fewer steps
/// than this cannot show that shape, so there only a rise of [`SHORT_RUN_RATE`] or more is a leak.
pub(super) const SHORT_RUN_STEPS: usize = 100;

/// In a run too short to show its shape, the least pace of a host or device leak: twice the
/// fastest settling seen (520 KiB/step over those 30 steps).
const SHORT_RUN_RATE: f64 = MIB;

/// The least growth over the run that is called a leak. Allocated bytes are exact: a steady rise
/// of a MiB is real, and slower ones cost a GiB only after a thousand runs as long. Host and device
/// memory move by pages, arenas and other processes: a few MiB either way mean nothing.
fn growth_floor(basis: Basis) -> f64 {
    match basis {
        Basis::Allocated => MIB,
        Basis::DeviceUsed | Basis::HostRss => GROWTH_FLOOR_BYTES,
    }
}

/// Whether a rise falls back: its end (the median of its last tenth) is no further above its
/// start than its noise, or an eighth of the floor.
fn falls_back(t: &Trend, basis: Basis) -> bool {
    t.end_bytes <= t.start_bytes + t.noise_bytes.max(growth_floor(basis) / 8.0)
}

/// Whether memory read at some step starts (`values[i]` at step `steps[i]`, `None` where not
/// read) leaks on its own, after the first `warmup` points: it rises, keeps its pace, grows past
/// the floor and its noise, fast enough for a short run (`short`), and never falls back; its
/// trend and shape if so.
pub(super) fn leaks_on_its_own(
    steps: &[f64],
    values: &[Option<f64>],
    warmup: usize,
    basis: Basis,
    short: bool,
) -> Option<(Trend, Shape)> {
    let (x, y): (Vec<f64>, Vec<f64>) = steps
        .iter()
        .zip(values)
        .skip(warmup)
        .filter_map(|(&step, value)| Some((step, (*value)?)))
        .unzip();
    if x.len() < MIN_STEPS {
        return None;
    }
    let t = trend::trend(&x, &y)?;
    let shape = trend::shape(&x, &y)?;
    (t.rises(ALPHA)
        && shape.keeps_pace(t.slope_per_step, KEEPS_PACE)
        && t.growth_bytes >= growth_floor(basis).max(3.0 * t.noise_bytes)
        && (!short || t.slope_per_step >= SHORT_RUN_RATE)
        && !falls_back(&t, basis)
        && gives_back(&y, growth_floor(basis)).is_none())
    .then_some((t, shape))
}

/// Where memory read at some step starts (`values`, in order) gave back at once at least half of
/// a rise past `floor`, and stayed down (at two points in a row): the rise's top, and what it
/// gave back, in bytes, with the index of the point where it was down. Memory freed in one go
/// is not leaked, however steadily it rose before: figures closed but kept in reference cycles
/// until Python's cycle collector frees them (every 60 steps or so of an evaluation that draws
/// one every third step), a cache emptied. The top is a level held at two points in a row, so
/// that one step's transient (a start that caught a buffer not yet freed) is not a rise.
pub(super) fn gives_back(values: &[f64], floor: f64) -> Option<(f64, f64, usize)> {
    let mut lowest = f64::INFINITY; // the lowest point before the pair looked at
    let (mut base, mut top) = (f64::INFINITY, f64::NEG_INFINITY); // the highest level held, and
    // the lowest point before it
    for i in 1..values.len() {
        let (a, b) = (values[i - 1], values[i]);
        let rise = top - base;
        if rise >= floor && a.max(b) <= top - rise / 2.0 {
            return Some((top, top - a, i - 1));
        }
        if a.min(b) > top {
            top = a.min(b);
            base = lowest.min(top);
        }
        lowest = lowest.min(a);
    }
    None
}

/// `fallback` is the sorted device or host series `analyze` found (none with allocator numbers);
/// `heap_at_steps` the C heap in use at each point of the step series, where the probe read it
/// there; `outside_malloc_leaks` whether resident memory beyond that heap, read by the probe at
/// the step starts, leaks on its own.
pub(super) fn judge(
    recording: &Recording,
    allocator: &phases::AllocatorIndex<'_>,
    fallback: Option<&Series>,
    heap_at_steps: Option<&[Option<f64>]>,
    outside_malloc_leaks: bool,
    analysis: &mut Analysis,
) {
    let basis = analysis.basis;
    let unit = analysis.unit();
    let n = analysis.step_series.values.len();
    if n < MIN_STEPS {
        analysis.findings.push(Finding {
            kind: FindingKind::NotEnoughData,
            title: format!(
                "not enough data: {} recorded, at least {MIN_STEPS} are needed to judge a trend ({} more)",
                crate::format::count(n, unit),
                MIN_STEPS - n
            ),
            phase: None,
            basis,
            growth_per_step_bytes: None,
            evidence: Vec::new(),
            hints: vec!["record a longer run: a leak shows as a rise over many steps".to_owned()],
        });
        devices_rules(recording, allocator, analysis);
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
    let shape = trend::shape(&steps[warmup..], &values[warmup..]);
    if let Some(t) = &trend {
        // A leak keeps its pace; memory that settles (arenas, buffers and caches filling in a
        // Python process, a DDP rank's buckets) grows ever slower to a plateau, at any size.
        let floor = growth_floor(basis).max(3.0 * t.noise_bytes);
        let short = analysis.by_step && basis != Basis::Allocated && n < SHORT_RUN_STEPS;
        let fast_enough = !short || t.slope_per_step >= SHORT_RUN_RATE;
        // Resident memory can slow while a leak keeps its pace (the process settles around what
        // the job keeps), and its samples scatter with when they fall in a step: the C heap,
        // read by the probe at the step starts, shows the leak without either. It is exact
        // (what `malloc` handed out and not yet freed, read at the edge itself), where resident
        // memory is sampled by the collector, late on a busy machine: a leak the heap shows is
        // one whatever load the machine was under. Nor does it settle around pages, so a short
        // run is judged on it as a long one: a steady rise past the floor that keeps its pace
        // (an evaluation that keeps a figure every third step, 620 KiB a step over 90 steps, was
        // a leak or nothing with whether resident memory crossed `SHORT_RUN_RATE`).
        let heap_at_steps = heap_at_steps.filter(|h| h.len() == n);
        let heap = heap_at_steps.and_then(|h| leaks_on_its_own(&steps, h, warmup, basis, false));
        // Where the heap gave its rise back in one go, what rose was freed: resident memory,
        // which does not fall when memory is freed, does not make it a leak.
        let given_back = heap_at_steps.and_then(|h| {
            let read: Vec<(f64, f64)> = steps
                .iter()
                .zip(h)
                .skip(warmup)
                .filter_map(|(&step, v)| Some((step, (*v)?)))
                .collect();
            let values: Vec<f64> = read.iter().map(|&(_, v)| v).collect();
            gives_back(&values, growth_floor(basis)).map(|(top, back, i)| (top, back, read[i].0))
        });
        let steady = shape
            .as_ref()
            .filter(|s| s.keeps_pace(t.slope_per_step, KEEPS_PACE));
        let rises =
            steady.is_some() && t.rises(ALPHA) && t.growth_bytes >= floor && given_back.is_none();
        if let Some((top, back, step)) = given_back {
            analysis.findings.push(Finding {
                kind: FindingKind::Cache,
                title: format!(
                    "A sawtooth that falls back: the C heap rose to {} and gave {} back at once at step {step}",
                    format_bytes(top),
                    format_bytes(back)
                ),
                phase: None,
                basis,
                growth_per_step_bytes: None,
                evidence: vec![format!(
                    "the C heap in use at each step's start, read by the probe (exact): memory freed in one go was not leaked, however steadily it rose before; {} rose {}/step over the run, by the pages the process keeps around what it freed",
                    basis.name(),
                    format_bytes(t.slope_per_step)
                )],
                hints: vec![
                    "objects in reference cycles (figures closed with `plt.close`, models, graphs that refer to themselves) are freed only when Python's cycle collector runs: `gc.collect()` after the evaluation frees them at once".to_owned(),
                    "a cache or a buffer emptied now and then: not a leak".to_owned(),
                ],
            });
        }
        if (rises && fast_enough && !falls_back(t, basis)) || heap.is_some() {
            analysis.projection = projection(recording, allocator, analysis, t);
            let rise = Rise {
                resident: t,
                steady: steady.filter(|_| rises),
                heap: heap.as_ref(),
                outside_malloc_leaks,
            };
            analysis.findings.push(leak_finding(
                basis,
                unit,
                &rise,
                &analysis.step_series,
                &analysis.phases,
                analysis.between_phases,
                analysis.projection.as_ref(),
            ));
            if analysis.projection.is_none() && basis != Basis::HostRss {
                analysis.lacks.push(super::LACKS_CAPACITY.to_owned());
            }
        } else if rises && !fast_enough && !falls_back(t, basis) && heap_at_steps.is_some() {
            // The C heap, exact, does not leak: what rose is outside it, at a pace a short run
            // cannot tell from settling.
            analysis.lacks.push(format!(
                "enough steps to tell a slow rise from settling: {} rose {}/step without slowing over {}, and settles for tens of steps, so a rise this slow is called a leak over {SHORT_RUN_STEPS} steps or more",
                basis.name(),
                format_bytes(t.slope_per_step),
                crate::format::count(n, unit)
            ));
        } else if rises && !fast_enough && !falls_back(t, basis) {
            // Not "no leak": it rose, at a pace a short run cannot tell from settling, and no
            // exact number says what the job keeps.
            analysis.findings.push(Finding {
                kind: FindingKind::NotEnoughData,
                title: format!(
                    "not enough data: {} rose {}/step without slowing over {}, and memory that settles rises like this for tens of steps: a rise this slow is called a leak over {SHORT_RUN_STEPS} {unit}s or more ({} more)",
                    basis.name(),
                    format_bytes(t.slope_per_step),
                    crate::format::count(n, unit),
                    SHORT_RUN_STEPS - n
                ),
                phase: None,
                basis,
                growth_per_step_bytes: Some(t.slope_per_step),
                evidence: vec![format!(
                    "trend {}/step (Theil–Sen), Mann–Kendall p = {}, noise ±{}",
                    format_bytes(t.slope_per_step),
                    crate::format::format_p(t.p_value),
                    format_bytes(t.noise_bytes)
                )],
                hints: vec![format!(
                    "record a longer run ({SHORT_RUN_STEPS} {unit}s or more): a leak keeps its pace, memory that settles slows to a plateau"
                )],
            });
        }
    }
    analysis.trend = trend;
    if basis == Basis::Allocated {
        if !fragmentation(allocator, analysis) {
            cache(allocator, analysis);
        }
    } else if analysis.finding(FindingKind::Leak).is_none()
        && let Some(series) = fallback
    {
        sawtooth(recording, series, analysis);
    }
    peak_creep(analysis);
    devices_rules(recording, allocator, analysis);
}

/// What a leak is judged on: the step series' trend, its shape where it keeps its pace, and the
/// C heap's trend and shape where the heap leaks on its own (a host job's).
struct Rise<'a> {
    resident: &'a Trend,
    steady: Option<&'a Shape>,
    heap: Option<&'a (Trend, Shape)>,
    /// Whether resident memory beyond the heap, read by the probe at the step starts, leaks on
    /// its own.
    outside_malloc_leaks: bool,
}

impl Rise<'_> {
    /// The rate the finding states: the C heap's, which is exact, where it shows the leak —
    /// unless memory beyond it leaks on its own too, read by the probe at the step starts, and
    /// resident memory rises more than twice as fast (then most of the leak is outside
    /// `malloc`, and the heap's is only its part). Not on the collector's samples of resident
    /// memory alone: they fall late in a step on a busy machine, and an evaluation keeping a
    /// figure every third step was stated at 626 KiB/step in four runs and 1.42 MiB/step in one.
    fn stated(&self) -> f64 {
        match self.heap {
            Some((heap, _))
                if self.steady.is_none()
                    || !self.outside_malloc_leaks
                    || self.resident.slope_per_step <= 2.0 * heap.slope_per_step =>
            {
                heap.slope_per_step
            }
            _ => self.resident.slope_per_step,
        }
    }
}

fn leak_finding(
    basis: Basis,
    unit: &str,
    rise: &Rise<'_>,
    series: &StepSeries,
    phases: &[PhaseStats],
    between_phases: Option<f64>,
    projection: Option<&Projection>,
) -> Finding {
    let t = rise.resident;
    let stated = rise.stated();
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
            "trend {}/{unit} (Theil–Sen), Mann–Kendall p = {}, noise ±{}",
            format_bytes(t.slope_per_step),
            crate::format::format_p(t.p_value),
            format_bytes(t.noise_bytes)
        ),
    ];
    if let Some((heap, _)) = rise.heap {
        let role = if stated == heap.slope_per_step {
            "the rate stated: exact, where resident memory is sampled by the collector (late on a busy machine) and moves by the pages the process settles around what it keeps"
        } else {
            "the part of the leak made through malloc; the rest grows outside it (Python's own arenas, mmap)"
        };
        evidence.push(format!(
            "the C heap in use at each {unit}'s start, read by the probe: {}/{unit} (Theil–Sen over {} {unit}s), Mann–Kendall p = {}, noise ±{}: {role}",
            format_bytes(heap.slope_per_step),
            heap.points,
            crate::format::format_p(heap.p_value),
            format_bytes(heap.noise_bytes)
        ));
    }
    if let Some(shape) = rise.steady {
        evidence.push(format!(
            "it does not slow: {}/{unit} over the second half of the {unit}s, {}/{unit} over the first (memory that settles slows to a plateau), and it never falls back",
            format_bytes(shape.second_per_step),
            format_bytes(shape.first_per_step)
        ));
    } else if let Some((_, shape)) = rise.heap {
        evidence.push(format!(
            "the C heap in use does not slow: {}/{unit} over the second half of the {unit}s, {}/{unit} over the first, and it never falls back (resident memory does not show the pace: the process settles around what is kept, and its samples scatter with where they fall in a step)",
            format_bytes(shape.second_per_step),
            format_bytes(shape.first_per_step)
        ));
    }
    evidence.push(cost(unit, stated, series, projection));
    let culprit = phases
        .iter()
        .filter(|p| p.share_of_growth.is_some_and(|s| s >= 0.3))
        .max_by(|a, b| {
            a.share_of_growth
                .partial_cmp(&b.share_of_growth)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    let mut phase = culprit.map(|p| p.phase.clone());
    if let Some(p) = culprit {
        evidence.push(format!(
            "{} retains {} per occurrence (mean over {} occurrences): {:.0}% of what the phases keep",
            p.phase,
            format_bytes(p.retained_mean_bytes),
            p.occurrences,
            100.0 * p.share_of_growth.unwrap_or(0.0)
        ));
    }
    // Most of the growth from one phase's end to the next one's begin: the memory grows between
    // the phases, in the loop's own code.
    let between = unit == "step" && between_phases.is_some_and(|s| s > 0.5);
    if between {
        phase = None;
        evidence.push(format!(
            "{:.0}% of the growth came between the phases (from one phase's end to the next one's begin), in the loop's own code",
            100.0 * between_phases.unwrap_or(0.0)
        ));
    }
    let title = match &phase {
        Some(phase) => format!(
            "{} leak in {phase}: +{}/{unit}",
            capitalize(basis.name()),
            format_bytes(stated)
        ),
        None if between => format!(
            "{} leak between phases: +{}/{unit}",
            capitalize(basis.name()),
            format_bytes(stated)
        ),
        None => format!(
            "{} leak: +{}/{unit}",
            capitalize(basis.name()),
            format_bytes(stated)
        ),
    };
    let mut hints = leak_hints(basis, phase.as_ref());
    if between {
        hints.insert(0, "code that runs between the phases keeps what it makes: a callback or logger that stores tensors (`on_step_end`, metrics kept as tensors), a list appended to after `optimizer.step()`".to_owned());
    }
    Finding {
        kind: FindingKind::Leak,
        title,
        phase: phase.clone(),
        basis,
        growth_per_step_bytes: Some(stated),
        evidence,
        hints,
    }
}

/// What the leak costs at its pace: a GiB every so many steps (and how long that takes at the
/// recorded pace), and the step at which the device is full when its capacity is known.
fn cost(
    unit: &str,
    slope_per_step: f64,
    series: &StepSeries,
    projection: Option<&Projection>,
) -> String {
    let per_gib = (GIB / slope_per_step).ceil();
    let span_steps = match (series.steps.first(), series.steps.last()) {
        (Some(first), Some(last)) => last.saturating_sub(*first) as f64,
        _ => 0.0,
    };
    let span_ns = match (series.times_ns.first(), series.times_ns.last()) {
        (Some(first), Some(last)) => last.saturating_sub(*first) as f64,
        _ => 0.0,
    };
    let mut text = format!(
        "at this pace it costs 1 GiB every {}",
        crate::format::count(per_gib.min(usize::MAX as f64) as usize, unit)
    );
    if span_steps > 0.0 && span_ns > 0.0 {
        text.push_str(&format!(
            " (about {} at the recorded pace)",
            format_duration(per_gib * span_ns / span_steps / 1e9)
        ));
    }
    if let Some(p) = projection {
        text.push_str(&format!(
            "; the device ({}) is full at {unit} {}, {} after the last recorded",
            format_bytes(p.capacity_bytes as f64),
            p.oom_step,
            crate::format::count(p.oom_step.saturating_sub(p.last_step) as usize, unit)
        ));
    }
    text
}

pub(super) fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The usual causes for growth in this phase (from the patterns users hit most).
pub(super) fn leak_hints(basis: Basis, phase: Option<&Phase>) -> Vec<String> {
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
    if phase.is_some_and(|p| p.as_str() == super::phases::CLOSURE) {
        // Lightning's `training_step` (and any `optimizer.step(closure)`) runs here.
        hints.insert(
            0,
            "the code around forward in `training_step` (Lightning) or the optimizer's closure keeps what it makes: outputs or losses appended to `self`, metrics logged as tensors with their graph (log `loss.detach()` or `.item()`)",
        );
    }
    hints.into_iter().map(str::to_owned).collect()
}

/// Reserved − allocated grows while allocated stays flat, with allocator retries or growing
/// inactive split blocks. Returns whether it found it.
fn fragmentation(allocator: &phases::AllocatorIndex<'_>, analysis: &mut Analysis) -> bool {
    let Some(at) = allocator.at_step_indices(&analysis.step_series) else {
        return false;
    };
    let readings = allocator.readings();
    let steps = analysis.step_series.steps_f64();
    let gap: Vec<f64> = at
        .iter()
        .map(|&i| readings.reserved(i) as f64 - readings.allocated(i) as f64)
        .collect();
    let n = gap.len();
    let warmup = (n / 10).max(1);
    let leaking = analysis.finding(FindingKind::Leak).is_some();
    let (Some(first), Some(last)) = (at.first(), at.last()) else {
        return false;
    };
    let (first, last) = (readings.get(*first), readings.get(*last));
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
                        "reserved − allocated went from {} to {} (Mann–Kendall p = {})",
                        format_bytes(gap[0]),
                        format_bytes(gap[n - 1]),
                        crate::format::format_p(t.p_value)
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
            return true;
        }
    }
    false
}

/// Reserved well above allocated at the last step, but flat: the caching allocator doing its job.
fn cache(allocator: &phases::AllocatorIndex<'_>, analysis: &mut Analysis) {
    let Some(last) = allocator
        .at_step_indices(&analysis.step_series)
        .and_then(|at| at.last().map(|&i| allocator.readings().get(i)))
    else {
        return;
    };
    let leaking = analysis.finding(FindingKind::Leak).is_some();
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

/// Where a sawtooth's samples begin: at the probe's first record (a phase edge or an allocator
/// reading), or without the probe after the warm-up's tenth of the samples. The samples before it
/// were taken while the job started (the first, before its interpreter ran, holds a few hundred
/// KiB): they are no swing of the running job.
fn running_from(recording: &Recording, series: &Series) -> usize {
    let readings = &recording.allocator;
    let probe = recording
        .phases
        .iter()
        .map(|e| e.t_ns)
        .chain((0..readings.len()).map(|i| readings.t_ns(i)))
        .min();
    match probe {
        Some(t_ns) => series.times_ns.partition_point(|&s| s < t_ns),
        None => series.values.len() / 10,
    }
}

/// Without allocator numbers: a series that rises within steps and falls back is the cache.
fn sawtooth(recording: &Recording, series: &Series, analysis: &mut Analysis) {
    let from = running_from(recording, series);
    let running = series.values.range(from..series.values.len());
    let (Some(min), Some(max)) = (running.clone().min(), running.max()) else {
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
                analysis.unit()
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
                    "watermark (peak − start) of {} went from {} to {} over {} occurrences (Mann–Kendall p = {})",
                    stats.phase,
                    format_bytes(t.start_bytes),
                    format_bytes(t.end_bytes),
                    stats.occurrences,
                    crate::format::format_p(t.p_value)
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
pub(super) fn median_u64(values: impl ExactSizeIterator<Item = u64>) -> Option<u64> {
    let stride = values.len().div_ceil(100_000).max(1);
    let mut picked: Vec<u64> = values.step_by(stride).collect();
    if picked.is_empty() {
        return None;
    }
    let mid = picked.len() / 2;
    Some(*picked.select_nth_unstable(mid).1)
}
