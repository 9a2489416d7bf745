//! The diagnosis of a recording, rank by rank, and the thresholds every rule shares.

use super::{
    Analysis, Attribution, Basis, Ending, FindingKind, Occurrence, RankSummary, StepSeries,
    attribution, categories, device_rules, ending, holders, phases, ranks, rules,
};
use crate::format::format_bytes;
use crate::recording::{Imported, Phase, Recording, Series, SeriesKey, SeriesKind};

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

pub(crate) const MIB: f64 = 1024.0 * 1024.0;
pub(crate) const GIB: f64 = 1024.0 * MIB;

/// The first device's used memory, or the job's host memory, or (with neither, as in an imported
/// PyTorch snapshot) the allocator's allocated bytes on the first device. A profiler trace's host
/// memory is what PyTorch allocated on the CPU: where the trace also has a device's, that is the
/// one judged.
fn fallback_series(recording: &Recording) -> Option<(Basis, std::borrow::Cow<'_, Series>)> {
    let device = recording
        .series
        .iter()
        .filter(|s| s.key.kind == SeriesKind::DeviceUsed && !s.values.is_empty())
        .min_by_key(|s| s.key.device);
    if let Some(series) = device {
        return Some((Basis::DeviceUsed, series.sorted()));
    }
    let trace_with_device =
        recording.header.imported() == Some(Imported::Trace) && !recording.allocator.is_empty();
    if let Some(host) = recording
        .series(&SeriesKey::new(SeriesKind::HostRss))
        .filter(|s| !s.values.is_empty() && !trace_with_device)
    {
        return Some((Basis::HostRss, host.sorted()));
    }
    let readings = &recording.allocator;
    let sources = readings.source_counts();
    let device = sources.iter().map(|&((_, device), _)| device).min()?;
    let series = if sources.iter().all(|&((_, d), _)| d == device) {
        // All on one device (a snapshot of one GPU): the columns as they are.
        Series {
            key: SeriesKey::device(SeriesKind::Other("allocated".to_owned()), device),
            times_ns: std::sync::Arc::new(readings.times_ns().to_vec()),
            values: readings.allocated_values().clone(),
        }
    } else {
        let mine = || readings.indices_of(|&(_, d)| d == device);
        Series {
            key: SeriesKey::device(SeriesKind::Other("allocated".to_owned()), device),
            times_ns: std::sync::Arc::new(mine().map(|i| readings.t_ns(i)).collect()),
            values: mine().map(|i| readings.allocated(i)).collect(),
        }
    };
    // Sorted only when it is not (a copy otherwise: millions of readings for a snapshot).
    let sorted = match series.sorted() {
        std::borrow::Cow::Owned(sorted) => Some(sorted),
        std::borrow::Cow::Borrowed(_) => None,
    };
    Some((
        Basis::Allocated,
        std::borrow::Cow::Owned(sorted.unwrap_or(series)),
    ))
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

/// [`value_at`] `t_ns`, from a sample taken no later than `until_ns` where there is one (else
/// the last sample before `t_ns`, else the first after it).
fn value_within(series: &Series, t_ns: u64, until_ns: u64) -> Option<u64> {
    let i = series.times_ns.partition_point(|&s| s < t_ns);
    match series.times_ns.get(i) {
        Some(&at) if at > until_ns && i > 0 => Some(series.values.at(i - 1)),
        _ => value_at(series, t_ns),
    }
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
    if let Some(imported @ (Imported::Trace | Imported::MemoryTimeline)) =
        recording.header.imported()
    {
        as_profiler_file(&mut analysis, imported);
    }
    analysis
        .findings
        .sort_by_key(|f| (!f.kind.is_problem(), f.kind));
    analysis
}

/// An analysis of a PyTorch profiler trace or memory timeline says what the file lacks, not what
/// a recording made by the collector would: the file never has device samples or the job's end,
/// and its allocator numbers and phases come from its own events, not from a probe.
fn as_profiler_file(analysis: &mut Analysis, imported: Imported) {
    let file = imported.name();
    analysis
        .lacks
        .retain(|l| l != LACKS_DEVICE_SAMPLES && l != LACKS_END);
    for lack in &mut analysis.lacks {
        if lack == LACKS_PHASES || lack == LACKS_ALLOCATOR_AND_PHASES {
            *lack = match imported {
                Imported::MemoryTimeline => "no phases: a memory timeline marks none (its rows are allocations by category, at instants)".to_owned(),
                _ => format!("no phases: {file} marks none (its ProfilerStep spans and record_function ranges are its phases)"),
            };
        } else if lack == LACKS_ALLOCATOR {
            *lack = format!(
                "no allocator numbers: {file} has no memory events on a GPU, so allocated and reserved memory are unknown"
            );
        } else if lack == LACKS_CAPACITY {
            *lack = format!(
                "no device capacity: {file} does not give the device's total memory, so there is no projection to an out-of-memory error"
            );
        }
    }
}

/// What a snapshot whose trace has no steps says instead of a trend.
pub const STEPLESS_SNAPSHOT: &str = "not enough data: the snapshot's trace has no steps (no phase that repeats), so what one step holds (activations saved for backward) cannot be told from a leak";

/// A profiler trace without `ProfilerStep` spans, or a snapshot's trace without steps: no trend to
/// judge, and the peak of each device (PyTorch's allocated bytes, else what it allocated on the
/// CPU), when.
fn stepless_trace_finding(recording: &Recording) -> super::Finding {
    let peaks = recording.allocator.peak_per_device();
    let mut evidence: Vec<String> = peaks
        .iter()
        .map(|(&device, &(bytes, t_ns))| {
            format!(
                "{} allocated at most {}, {} into the trace",
                recording.header.device_name(device),
                format_bytes(bytes as f64),
                crate::format::format_duration(t_ns as f64 / 1e9)
            )
        })
        .collect();
    if let Some(host) = recording
        .series(&SeriesKey::new(SeriesKind::HostRss))
        .and_then(|s| s.values.iter().max())
    {
        evidence.push(format!(
            "PyTorch allocated at most {} on the CPU",
            format_bytes(host as f64)
        ));
    }
    super::Finding {
        kind: FindingKind::NotEnoughData,
        title: if recording.header.imported() == Some(Imported::Snapshot) {
            STEPLESS_SNAPSHOT
        } else {
            "not enough data: the trace holds no ProfilerStep spans, so a rise within one step cannot be told from a leak"
        }
        .to_owned(),
        phase: None,
        basis: if recording.allocator.is_empty() {
            Basis::HostRss
        } else {
            Basis::Allocated
        },
        growth_per_step_bytes: None,
        evidence,
        hints: vec![if recording.header.imported() == Some(Imported::Snapshot) {
            "record the history over several steps, with their phases marked (`record_function`), before the snapshot: a leak shows as what each occurrence of a phase leaves alive"
        } else {
            "call `prof.step()` every training step (with `torch.profiler.schedule`) and profile several steps: a leak shows as a rise from one step to the next"
        }
        .to_owned()],
    }
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
            // A sample taken after the last phase ended (the loop over: what it kept may be
            // freed already) does not stand for a step that started before it; the one before
            // the step does.
            let loop_end_ns = occurrences
                .iter()
                .map(|o| o.end_ns)
                .max()
                .unwrap_or(u64::MAX);
            let mut out = StepSeries::default();
            for start in &step_starts {
                if let Some(value) = value_within(series, start.t_ns, loop_end_ns) {
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
    // A profiler trace or a snapshot's trace without steps is a stretch of allocations (often one
    // forward pass, or one step): a rise within a step cannot be told from a leak.
    let stepless_trace = matches!(
        recording.header.imported(),
        Some(Imported::Trace | Imported::Snapshot)
    ) && !by_step;
    if !by_step && !step_series.values.is_empty() && !stepless_trace {
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
    let freed_gradients = categories::freed_gradients(
        recording,
        occurrences.first().map(|o| o.pid),
        attribution == Attribution::Allocator,
    );
    let attribution::Accounts {
        stats: phase_stats,
        retained,
        changes,
        between: between_phases,
        freed_before_backward,
    } = attribution::stats(
        &occurrences,
        &step_starts,
        &allocator,
        attribution_series
            .as_ref()
            .map(|(series, at_edges)| attribution::Attributed {
                series,
                at_edges: *at_edges,
            }),
        &freed_gradients,
        &attribution::saved_freed(
            recording,
            &occurrences,
            if attribution == Attribution::Allocator {
                allocator.device()
            } else {
                None
            },
        ),
        &attribution::unobserved(recording, &occurrences),
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
        cells: super::cells(recording),
        occurrences: Default::default(),
        step_starts: Vec::new(),
        retained: Vec::new(),
        changes: Vec::new(),
        freed_before_backward,
    };
    // The C heap at each step start where the probe read it (every step start of a host job's
    // first steps, then within its share): what the job's tensors hold, without the pages the
    // process settles around them.
    let heap_at_steps: Option<Vec<Option<f64>>> = match (attribution, &attribution_series) {
        (Attribution::HostHeap, Some((heap, true))) => Some(
            analysis
                .step_series
                .times_ns
                .iter()
                .map(|&t| value_exactly_at(heap, t).map(|v| v as f64))
                .collect(),
        ),
        _ => None,
    };
    // Whether memory beyond the heap leaks on its own, read by the probe at the step starts.
    let outside_malloc_leaks = heap_at_steps.is_some()
        && occurrences.first().is_some_and(|o| {
            let edges: Vec<_> = recording
                .phases
                .iter()
                .filter(|e| e.origin.pid == o.pid)
                .collect();
            grows_outside_malloc(&edges)
        });
    if stepless_trace {
        // No trend to judge: its peaks say what it holds.
        analysis.findings.push(stepless_trace_finding(recording));
    } else {
        rules::judge(
            recording,
            &allocator,
            fallback.as_ref().map(|(_, s)| s.as_ref()),
            heap_at_steps.as_deref(),
            outside_malloc_leaks,
            &mut analysis,
        );
    }
    holders::judge(recording, occurrences.first().map(|o| o.pid), &mut analysis);
    super::cells::judge(&mut analysis);
    device_rules::outside_pytorch_growth(recording, &allocator, &step_starts, &mut analysis);
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

/// Whether resident memory beyond the C heap, at the step starts where the probe read both,
/// leaks on its own (as the verdict's rule has it: rises, keeps its pace, past the floor and its
/// noise, fast enough for a short run): memory outside malloc that the job keeps. Resident memory
/// also creeps up for tens of steps with nothing kept (the heap's holes filling with pages, the
/// interpreter settling: 24–54 MiB over a 60-step loop that keeps nothing, at random), and that
/// is no reason to attribute the phases with it, where frees do not show.
fn grows_outside_malloc(edges: &[crate::recording::PhaseEdge]) -> bool {
    let mut outside: Vec<(f64, f64)> = Vec::new();
    for e in edges {
        let (Some(step), Some(heap), Some(rss)) = (e.step, e.host_heap, e.host_rss) else {
            continue;
        };
        // A step's first edge read (edges come in time order).
        if outside.last().is_none_or(|&(s, _)| s < step as f64) {
            outside.push((step as f64, rss as f64 - heap as f64));
        }
    }
    let (steps, values): (Vec<f64>, Vec<Option<f64>>) =
        outside.into_iter().map(|(s, v)| (s, Some(v))).unzip();
    let warmup = (steps.len() / 10).max(1);
    let short = steps.len() < rules::SHORT_RUN_STEPS;
    rules::leaks_on_its_own(&steps, &values, warmup, Basis::HostRss, short).is_some()
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
    // The probe reads resident memory and the C heap at every edge of a job's first steps, then
    // each within a small share of the job's time (whole steps: both edges of a phase or
    // neither), and says so in a note; the steps it read attribute the phases (see
    // `attribution::levels`), so forty edges read (or every edge of a shorter job) is enough —
    // and for the heap, which is preferred, a hundredth of the edges as well (its share lets a
    // loop of short steps read it every few dozen steps; read at fewer, it attributes less than
    // resident memory would).
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
        let read = series.values.len();
        (read > 0 && read >= edges.len().min(40) && read * 100 >= edges.len() * percent)
            .then(|| series.sorted().into_owned())
    };
    let rss = series_of(|e| e.host_rss, 0);
    let heap = series_of(|e| e.host_heap, 1);
    // The two grow compared over the same span, the edges where both were read: each is read
    // within its own share, so past the first steps one may be read over fewer of them than the
    // other (a loop of short steps: the C heap over its first 100 steps, resident memory over
    // all), and a growth over more steps is not a growth outside malloc.
    let both = || {
        edges
            .iter()
            .filter_map(|e| Some((e.t_ns, e.host_heap?, e.host_rss?)))
    };
    let (heap_growth, rss_growth) = match (
        both().min_by_key(|&(t, _, _)| t),
        both().max_by_key(|&(t, _, _)| t),
    ) {
        (Some((_, heap_a, rss_a)), Some((_, heap_b, rss_b))) => {
            (heap_b as f64 - heap_a as f64, rss_b as f64 - rss_a as f64)
        }
        _ => (0.0, 0.0),
    };
    // Where a reading was taken at fewer than 95 % of the edges, the attribution says so.
    let partial = |what: &str, series: &Series| {
        (series.values.len() * 100 < edges.len() * 95).then(|| {
            format!(
                "the probe read {what} at {} of {} phase edges (within its share of the job's time): the phases whose edges lack it are left out of the attribution",
                series.values.len(),
                edges.len()
            )
        })
    };
    match (heap, rss) {
        (Some(_), Some(rss))
            if rss_growth > 16.0 * MIB
                && heap_growth < rss_growth / 4.0
                && grows_outside_malloc(&edges) =>
        {
            Some(HostAtEdges {
                attribution: Attribution::HostRssAtEdges,
                note: Some(joined(
                    format!(
                        "the C heap grew {} while resident memory grew {}: the growth is outside malloc (mmap, or Python's small-object arenas), so phases are attributed with resident memory",
                        format_bytes(heap_growth),
                        format_bytes(rss_growth)
                    ),
                    partial("resident memory", &rss),
                )),
                series: rss,
            })
        }
        (Some(heap), _) => Some(HostAtEdges {
            attribution: Attribution::HostHeap,
            note: partial("the C heap", &heap),
            series: heap,
        }),
        (None, Some(rss)) => {
            let stopped = recording
                .notes
                .iter()
                .find(|n| n.text.contains("read the C heap at"));
            Some(HostAtEdges {
                attribution: Attribution::HostRssAtEdges,
                note: Some(joined(
                    match stopped {
                        Some(n) => format!("{}, so phases are attributed with resident memory", n.text),
                        None => "the probe could not read the C heap (not glibc), so phases are attributed with resident memory".to_owned(),
                    },
                    partial("resident memory", &rss),
                )),
                series: rss,
            })
        }
        (None, None) => None,
    }
}

/// A note and what follows it, if anything.
fn joined(note: String, more: Option<String>) -> String {
    match more {
        Some(more) => format!("{note}; {more}"),
        None => note,
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
