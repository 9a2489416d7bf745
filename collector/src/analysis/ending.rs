//! How the job ended: each out-of-memory error with its cause and the numbers that decided it,
//! and a job that failed or was killed for another reason. These findings come first in the
//! verdict: a job that died answers "of what, and why" before anything else.

use serde::Serialize;

use super::{Analysis, Basis, Finding, FindingKind};
use crate::format::{format_bytes, format_duration};
use crate::recording::{Oom, Phase, Recording};

/// Why the device ran out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// Memory at the same point of every step rose: its growth is the largest part of the room
    /// taken.
    Leak,
    /// What the phase held above its step's start (or its request alone) is the largest part.
    Peak,
    /// The cache's unallocated pieces, too small for the request, are the largest part, and at
    /// least half of what was missing.
    Fragmentation,
    /// Memory outside PyTorch's cache (other processes; this process' CUDA context, NCCL and
    /// libraries beyond a context's allowance) is the largest part.
    OtherMemory,
    /// It did not fit from the first steps.
    TooBigFromTheStart,
    /// The numbers at hand do not tell.
    Unknown,
}

impl OomCause {
    /// How the verdict names it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Leak => "leak-driven",
            Self::Peak => "peak-driven",
            Self::Fragmentation => "fragmentation",
            Self::OtherMemory => "someone else's memory",
            Self::TooBigFromTheStart => "too big from the start",
            Self::Unknown => "cause not determined",
        }
    }
}

/// One out-of-memory error: when and where, what was asked and what the device had, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomVerdict {
    /// When, nanoseconds after the start.
    pub t_ns: u64,
    /// The training step it happened in, when the recording has steps.
    pub step: Option<u64>,
    /// The phase it happened in (or the last one that began before it).
    pub phase: Option<Phase>,
    /// The rank, from a `[rankN]:` prefix.
    pub rank: Option<u32>,
    /// The device.
    pub device: Option<u32>,
    /// Bytes asked for.
    pub requested_bytes: Option<u64>,
    /// The device's memory.
    pub capacity_bytes: Option<u64>,
    /// Free on the device.
    pub free_bytes: Option<u64>,
    /// Held by PyTorch's tensors.
    pub allocated_bytes: Option<u64>,
    /// Reserved by PyTorch's cache but not allocated.
    pub reserved_unallocated_bytes: Option<u64>,
    /// This process' device memory outside PyTorch's allocator (CUDA context, NCCL, libraries).
    pub outside_pytorch_bytes: Option<u64>,
    /// Other processes' memory on the device.
    pub other_processes_bytes: Option<u64>,
    /// The device's memory outside PyTorch's cache: capacity − free − reserved (other processes',
    /// and this process' outside PyTorch).
    pub outside_cache_bytes: Option<u64>,
    /// What was missing: asked minus free (or minus what a memory fraction left the cache).
    pub shortfall_bytes: Option<u64>,
    /// The parts of the device that took the room, largest first, each with the cause it stands
    /// for: the first is the cause when it covers at least half of what was missing.
    pub contributions: Vec<Contribution>,
    /// Why.
    pub cause: OomCause,
    /// The numbers that decided it, one sentence each.
    pub evidence: Vec<String>,
}

impl OomVerdict {
    /// How the verdict names its cause: memory outside PyTorch's cache is named by who holds
    /// most of it (this process, or other processes), when the message or NVML tells.
    pub fn cause_name(&self) -> &'static str {
        if self.cause != OomCause::OtherMemory {
            return self.cause.describe();
        }
        match (self.outside_pytorch_bytes, self.outside_cache_bytes) {
            (Some(own), Some(total)) if own.saturating_mul(2) > total => {
                "this process' memory outside PyTorch"
            }
            _ if self.other_processes_bytes.is_some_and(|o| o > 0) => self.cause.describe(),
            _ => "memory outside PyTorch's cache",
        }
    }
}

/// How the job ended, as the recording knows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ending {
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// Its last stderr lines, when it failed.
    pub stderr_tail: Vec<String>,
    /// Whether the recording has its end record (the collector finished it).
    pub recording_complete: bool,
}

/// The step an OOM falls in and the phase it happened in: the last step start and the last
/// phase begin at or before it (PyTorch prints the message after the failing phase has ended).
fn where_in_the_run(analysis: &Analysis, t_ns: u64) -> (Option<u64>, Option<Phase>) {
    let step = analysis
        .step_starts
        .iter()
        .rev()
        .find(|s| s.t_ns <= t_ns)
        .map(|s| s.step);
    let phase = analysis
        .occurrences
        .iter()
        .rev()
        .find(|o| o.begin_ns <= t_ns)
        .map(|o| o.phase.clone());
    (step, phase)
}

fn mb(bytes: u64) -> String {
    format_bytes(bytes as f64)
}

/// A CUDA context and the libraries' workspaces (cuBLAS, cuDNN) take a few hundred MiB in every
/// process that uses a device: this much of this process' memory outside PyTorch's cache is taken
/// as that fixed cost, not counted towards a cause.
pub const CONTEXT_ALLOWANCE_BYTES: u64 = 512 << 20;

/// The message rounds each number to two decimals of its unit (a GiB figure is up to 5 MiB off):
/// a sum of a few of them is trusted to this much.
const ROUNDING_BYTES: u64 = 32 << 20;

/// A device with less than this share of its capacity free beyond the request was full: a new
/// segment needs room of the driver's too, so a request a little smaller than "free" fails.
const NEARLY_FULL: f64 = 0.02;

/// One candidate for what took the room: a separate part of the device at the error.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Contribution {
    /// The cause it stands for.
    pub cause: OomCause,
    /// Its bytes.
    pub bytes: u64,
    /// What it is, with the numbers it comes from.
    pub what: String,
}

/// The cause among the contributions (largest first): the largest, when it covers at least half
/// of what was missing; `None` when none does (or none is known).
fn decide(shortfall: u64, contributions: &[Contribution]) -> Option<&Contribution> {
    contributions
        .iter()
        .max_by_key(|c| c.bytes)
        .filter(|c| c.bytes > 0 && c.bytes.saturating_mul(2) >= shortfall)
}

/// "3.2× the 210 MiB missing", "40% of the 1.00 GiB missing".
fn share(bytes: u64, shortfall: u64) -> String {
    if shortfall == 0 {
        return "with nothing missing beyond the driver's own room".to_owned();
    }
    let ratio = bytes as f64 / shortfall as f64;
    if ratio >= 1.0 {
        format!("{ratio:.1}× the {} missing", mb(shortfall))
    } else {
        format!("{:.0}% of the {} missing", ratio * 100.0, mb(shortfall))
    }
}

/// The numbers of one message that contradict each other, said; `None` when they agree.
fn contradiction(oom: &Oom, capacity: Option<u64>, reserved: Option<u64>) -> Option<String> {
    if let (Some(c), Some(f)) = (capacity, oom.free_bytes) {
        if f > c + ROUNDING_BYTES {
            return Some(format!(
                "the message's numbers contradict each other: {} free of a {} device",
                mb(f),
                mb(c)
            ));
        }
        if let Some(r) = reserved
            && f + r > c + ROUNDING_BYTES
        {
            return Some(format!(
                "the message's numbers contradict each other: {} free and {} reserved by PyTorch on a {} device",
                mb(f),
                mb(r),
                mb(c)
            ));
        }
    }
    if let (Some(p), Some(r)) = (oom.process_bytes, reserved)
        && p + ROUNDING_BYTES < r
    {
        return Some(format!(
            "the message's numbers contradict each other: this process has {} in use, less than the {} PyTorch reserved",
            mb(p),
            mb(r)
        ));
    }
    None
}

/// The step series' point at the start of the step an OOM falls in, by index.
fn step_point(analysis: &Analysis, step: Option<u64>, t_ns: u64) -> Option<usize> {
    let s = &analysis.step_series;
    let i = s.times_ns.partition_point(|&t| t <= t_ns).checked_sub(1)?;
    (analysis.by_step && step == Some(s.steps[i])).then_some(i)
}

/// Where the leak's part is measured: the trend's first point (after warm-up) and the point at
/// the start of the error's step, by index into the step series.
fn leak_span(analysis: &Analysis, at: Option<usize>) -> Option<(usize, usize)> {
    let from = (analysis.step_series.values.len() / 10).max(1);
    at.filter(|&at| at > from).map(|at| (from, at))
}

/// The leak's part: how much the memory at the start of each step rose from the trend's first
/// point to the step of the error.
fn leak_part(analysis: &Analysis, at: Option<usize>) -> Option<Contribution> {
    analysis.finding(FindingKind::Leak)?;
    if analysis.basis == Basis::HostRss {
        return None; // host memory does not fill a device
    }
    let s = &analysis.step_series;
    let (from, at) = leak_span(analysis, at)?;
    let growth = s.values[at].checked_sub(s.values[from])?;
    (growth > 0).then(|| Contribution {
        cause: OomCause::Leak,
        bytes: growth,
        what: format!(
            "the leak, {} ({} at the start of step {}: {}, of step {}: {})",
            mb(growth),
            analysis.basis.name(),
            s.steps[from],
            mb(s.values[from]),
            s.steps[at],
            mb(s.values[at])
        ),
    })
}

/// The phase's transient part: what the step held at the error above its start.
fn transient_part(
    analysis: &Analysis,
    oom: &Oom,
    capacity: Option<u64>,
    phase: Option<&Phase>,
    at: Option<usize>,
) -> Option<Contribution> {
    let at = at?;
    let start = analysis.step_series.values[at];
    let level = match analysis.basis {
        Basis::Allocated => oom.allocated_bytes?,
        Basis::DeviceUsed => capacity?.checked_sub(oom.free_bytes?)?,
        Basis::HostRss => return None,
    };
    let bytes = level.checked_sub(start).filter(|&b| b > 0)?;
    let name = phase.map_or("the step".to_owned(), |p| p.to_string());
    Some(Contribution {
        cause: OomCause::Peak,
        bytes,
        what: format!(
            "the transient of {name}, {} ({} of {} at the error, {} at the start of step {})",
            mb(bytes),
            mb(level),
            analysis.basis.name(),
            mb(start),
            analysis.step_series.steps[at]
        ),
    })
}

/// The verdict of one OOM. The cause comes from the numbers: what was missing (asked minus
/// free), and the separate parts of the device that took the room — the leak's growth since the
/// run's first steps, memory outside PyTorch's cache (capacity − free − reserved, less a CUDA
/// context's allowance), the phase's transient above its step's start, the cache's unallocated
/// pieces. The largest is the cause when it covers at least half of what was missing; the others
/// stay as evidence with their numbers. Numbers that contradict each other decide nothing.
fn judge_oom(recording: &Recording, analysis: &Analysis, oom: &Oom) -> OomVerdict {
    let (step, phase) = where_in_the_run(analysis, oom.t_ns);
    let capacity = oom
        .capacity_bytes
        .or_else(|| device_capacity(recording, oom.device));
    let reserved = oom
        .allocated_bytes
        .zip(oom.reserved_unallocated_bytes)
        .map(|(a, u)| a + u);
    let contradicted = contradiction(oom, capacity, reserved);
    let mut notes = Vec::new();

    // Memory outside PyTorch's cache, from any form of the message; who holds it, when told.
    let outside = capacity
        .zip(oom.free_bytes)
        .zip(reserved)
        .map(|((c, f), r)| c.saturating_sub(f + r))
        .filter(|_| contradicted.is_none());
    let mut own = oom
        .process_bytes
        .zip(reserved)
        .map(|(p, r)| p.saturating_sub(r));
    let mut others = oom.other_processes_bytes;
    if let (Some(o), Some(total)) = (others, outside)
        && o > total + ROUNDING_BYTES
    {
        notes.push(format!(
            "the message lists other processes with {}, more than all the memory outside PyTorch's cache ({}): one of them is this process under another PID (a container's), so none is counted as someone else's",
            mb(o),
            mb(total)
        ));
        others = Some(0);
        own = own.or(Some(total));
    }
    let others = others.or_else(|| {
        others_from_nvml(recording, oom.device, oom.t_ns)
            .map(|o| outside.map_or(o, |total| o.min(total)))
    });
    let own = own.or_else(|| outside.zip(others).map(|(t, o)| t.saturating_sub(o)));

    let mut v = OomVerdict {
        t_ns: oom.t_ns,
        step,
        phase,
        rank: oom.rank,
        device: oom.device,
        requested_bytes: oom.tried_bytes,
        capacity_bytes: oom.capacity_bytes,
        free_bytes: oom.free_bytes,
        allocated_bytes: oom.allocated_bytes,
        reserved_unallocated_bytes: oom.reserved_unallocated_bytes,
        outside_pytorch_bytes: own,
        other_processes_bytes: others,
        outside_cache_bytes: outside,
        shortfall_bytes: None,
        contributions: Vec::new(),
        cause: OomCause::Unknown,
        evidence: Vec::new(),
    };

    // What was missing: asked minus free, or minus the room a memory fraction leaves the cache.
    let allowed = crate::oom::allowed_bytes(&oom.message);
    let limit = allowed
        .zip(reserved)
        .map(|(a, r)| a.saturating_sub(r))
        .filter(|&room| oom.free_bytes.is_none_or(|f| room < f));
    let room = limit.or(oom.free_bytes);
    let shortfall = oom.tried_bytes.zip(room).map(|(t, r)| t.saturating_sub(r));
    let full = match (oom.tried_bytes, room, capacity) {
        (Some(t), Some(r), Some(c)) if limit.is_none() => {
            r.saturating_sub(t) as f64 <= NEARLY_FULL * c as f64
        }
        _ => true,
    };

    let mut numbers = Vec::new();
    if let Some(t) = oom.tried_bytes {
        numbers.push(format!("asked for {}", mb(t)));
    }
    if let (Some(c), Some(f)) = (oom.capacity_bytes, oom.free_bytes) {
        let missing = shortfall
            .filter(|&s| s > 0 && limit.is_none())
            .map_or(String::new(), |s| format!(" ({} missing)", mb(s)));
        numbers.push(format!("{} free of {}{missing}", mb(f), mb(c)));
    }
    if let (Some(a), Some(r)) = (allowed, limit) {
        numbers.push(format!(
            "{} allowed to PyTorch's cache by a memory fraction, {} of it left",
            mb(a),
            mb(r)
        ));
    }
    if let Some(a) = oom.allocated_bytes {
        numbers.push(format!("{} held by PyTorch's tensors", mb(a)));
    }
    if let Some(r) = oom.reserved_unallocated_bytes {
        numbers.push(format!("{} cached by PyTorch but unallocated", mb(r)));
    }
    if let Some(o) = outside {
        numbers.push(format!(
            "{} outside PyTorch's cache (capacity − free − reserved)",
            mb(o)
        ));
    }
    if let Some(o) = own {
        numbers.push(format!("{} of this process outside PyTorch", mb(o)));
    }
    if let Some(o) = others {
        numbers.push(format!("{} used by other processes", mb(o)));
    }
    if numbers.is_empty() {
        v.evidence.push(
            "the message carries no numbers (\"CUDA error: out of memory\" comes from the CUDA runtime, not PyTorch's allocator)".to_owned(),
        );
    } else {
        v.evidence
            .push(format!("at the error: {}", numbers.join(", ")));
    }
    v.evidence.append(&mut notes);

    let leak = analysis.finding(FindingKind::Leak);
    let first_steps = step.is_some_and(|s| {
        let first = analysis.step_starts.first().map_or(0, |f| f.step);
        s <= first + 1
    });
    let at = step_point(analysis, step, oom.t_ns);

    if let Some(why) = contradicted {
        v.evidence.push(why);
        v.evidence
            .push("numbers that contradict each other decide nothing".to_owned());
        return v;
    }
    let Some(shortfall) = shortfall else {
        // No numbers to weigh: only what the recording alone shows.
        if let Some(part) = leak_part(analysis, at) {
            v.cause = OomCause::Leak;
            v.evidence
                .push(leak_sentence(analysis, at, &part, None, oom, capacity));
            v.contributions.push(part);
        } else if first_steps && leak.is_none() {
            v.cause = OomCause::TooBigFromTheStart;
            v.evidence.push(too_big_sentence(step));
        } else {
            v.evidence.push(
                "the recording has neither a rising baseline nor the allocator's numbers to tell a leak from a peak".to_owned(),
            );
        }
        return v;
    };
    v.shortfall_bytes = Some(shortfall);
    if !full {
        v.evidence.push(format!(
            "the device had {} free, more than the {} asked for: not its capacity but a limit of the process' own stopped it (`torch.cuda.set_per_process_memory_fraction`, which the message of PyTorch ≥ 2.1 does not print), or the driver could not map the request",
            mb(room.unwrap_or(0)),
            mb(oom.tried_bytes.unwrap_or(0))
        ));
        return v;
    }

    let mut parts: Vec<Contribution> = Vec::new();
    parts.extend(leak_part(analysis, at));
    if limit.is_none()
        && let Some(total) = outside
    {
        let context = own.unwrap_or(total).min(CONTEXT_ALLOWANCE_BYTES);
        let split = match (others, own) {
            (Some(o), Some(p)) => format!(
                ": {} of other processes, {} of this process outside PyTorch",
                mb(o),
                mb(p)
            ),
            _ => String::new(),
        };
        parts.push(Contribution {
            cause: OomCause::OtherMemory,
            bytes: total - context,
            what: format!(
                "memory outside PyTorch's cache, {} ({} less {} taken as the CUDA context{split})",
                mb(total - context),
                mb(total),
                mb(context)
            ),
        });
    }
    parts.extend(transient_part(
        analysis,
        oom,
        capacity,
        v.phase.as_ref(),
        at,
    ));
    if let Some(u) = oom.reserved_unallocated_bytes {
        parts.push(Contribution {
            cause: OomCause::Fragmentation,
            bytes: u,
            what: format!("the cache's unallocated pieces, {}", mb(u)),
        });
    }
    parts.retain(|p| p.bytes > 0);
    // Largest first; among equals the order above (fragmentation last).
    parts.sort_by_key(|p| std::cmp::Reverse(p.bytes));
    if !parts.is_empty() {
        let listed: Vec<String> = parts
            .iter()
            .map(|p| format!("{} — {}", p.what, share(p.bytes, shortfall)))
            .collect();
        v.evidence.push(format!(
            "what took the room, largest first (separate parts of the device; the cause is the largest if it covers at least half of what was missing): {}",
            listed.join("; ")
        ));
    }
    let chosen = decide(shortfall, &parts).cloned();
    let name = v.phase.as_ref().map(|p| p.to_string());
    match &chosen {
        Some(c) if c.cause == OomCause::Leak => {
            v.cause = OomCause::Leak;
            v.evidence.push(leak_sentence(
                analysis,
                at,
                c,
                Some(shortfall),
                oom,
                capacity,
            ));
        }
        Some(c) if c.cause == OomCause::OtherMemory => {
            v.cause = OomCause::OtherMemory;
            let total = outside.unwrap_or(c.bytes);
            let fits = room.unwrap_or(0) + c.bytes >= oom.tried_bytes.unwrap_or(0);
            v.evidence.push(format!(
                "{} of the device was held outside PyTorch's cache ({}){}; {}",
                mb(total),
                match (others, own) {
                    (Some(o), Some(p)) if o >= p => format!("{} of it by other processes", mb(o)),
                    (Some(_), Some(p)) => format!("{} of it by this process outside PyTorch: CUDA context, NCCL, libraries", mb(p)),
                    _ => "other processes' memory or this process' own outside PyTorch: the message does not tell which".to_owned(),
                },
                if c.bytes < total {
                    format!(", {} beyond a CUDA context", mb(c.bytes))
                } else {
                    String::new()
                },
                if fits {
                    format!("without it the {} asked for would have fit", mb(oom.tried_bytes.unwrap_or(0)))
                } else {
                    format!("it is {}", share(c.bytes, shortfall))
                }
            ));
        }
        Some(c) if c.cause == OomCause::Fragmentation => {
            v.cause = OomCause::Fragmentation;
            let t = oom.tried_bytes.unwrap_or(0);
            v.evidence.push(if c.bytes >= t {
                format!(
                    "PyTorch's cache held {} unallocated, more than the {} asked for, but in pieces too small for it",
                    mb(c.bytes),
                    mb(t)
                )
            } else {
                format!(
                    "PyTorch's cache held {} unallocated ({}), in pieces too small for the {} asked for",
                    mb(c.bytes),
                    share(c.bytes, shortfall),
                    mb(t)
                )
            });
        }
        Some(c) => {
            v.cause = OomCause::Peak;
            let name = name.clone().unwrap_or_else(|| "the step".to_owned());
            v.evidence.push(format!(
                "{}the peak of {name} does not fit: {} short ({name} held {} above the step's start at the error, {}, and asked for {} more){}",
                if leak.is_none() { "memory at the start of each step is flat; " } else { "" },
                mb(shortfall),
                mb(c.bytes),
                share(c.bytes, shortfall),
                mb(oom.tried_bytes.unwrap_or(0)),
                watermark(analysis, v.phase.as_ref())
            ));
        }
        None => {
            if let Some(name) = name.filter(|_| analysis.by_step) {
                v.cause = OomCause::Peak;
                v.evidence.push(format!(
                    "{}the peak of {name} does not fit: {} short, the {} request alone (no part above covers half of what was missing){}",
                    if leak.is_none() { "memory at the start of each step is flat; " } else { "" },
                    mb(shortfall),
                    mb(oom.tried_bytes.unwrap_or(0)),
                    watermark(analysis, v.phase.as_ref())
                ));
            } else {
                v.evidence.push(
                    "no part of the device known here covers half of what was missing, and the recording has no steps to tell a leak from a peak".to_owned(),
                );
            }
        }
    }
    if v.cause == OomCause::Peak && first_steps && leak.is_none() {
        v.cause = OomCause::TooBigFromTheStart;
        v.evidence.push(too_big_sentence(step));
    }
    v.contributions = parts;
    v
}

fn too_big_sentence(step: Option<u64>) -> String {
    format!(
        "it happened in step {} of the run: the model and one step's memory do not fit",
        step.unwrap_or(0)
    )
}

/// " (forward rises 2.00 GiB within a step on average)", when the phase has a watermark.
fn watermark(analysis: &Analysis, phase: Option<&Phase>) -> String {
    phase
        .and_then(|name| analysis.phases.iter().find(|p| &p.phase == name))
        .map_or(String::new(), |p| {
            format!(
                " ({} rises {} within a step on average)",
                p.phase,
                format_bytes(p.watermark_mean_bytes)
            )
        })
}

/// The leak's sentence: its rise, against what was missing, and the tensors that filled the device.
fn leak_sentence(
    analysis: &Analysis,
    at: Option<usize>,
    part: &Contribution,
    shortfall: Option<u64>,
    oom: &Oom,
    capacity: Option<u64>,
) -> String {
    let rate = analysis
        .finding(FindingKind::Leak)
        .and_then(|l| l.growth_per_step_bytes)
        .map_or(String::new(), |g| format!(" by {}/step", format_bytes(g)));
    let against = shortfall.map_or(String::new(), |s| format!(", {}", share(part.bytes, s)));
    let filled = oom
        .allocated_bytes
        .zip(capacity)
        .filter(|&(_, c)| c > 0)
        .map_or(String::new(), |(a, c)| {
            format!(
                "; PyTorch's tensors held {} of the {} device ({:.0}%)",
                mb(a),
                mb(c),
                a as f64 / c as f64 * 100.0
            )
        });
    let projected = analysis.projection.as_ref().map_or(String::new(), |p| {
        format!(
            "; the trend reaches the device's capacity at step {}",
            p.oom_step
        )
    });
    let span = leak_span(analysis, at).map_or(String::new(), |(from, at)| {
        let steps = &analysis.step_series.steps;
        format!(" from step {} to step {}", steps[from], steps[at])
    });
    format!(
        "{} at the start of each step rose{rate} and never fell back: {}{span}{against}{filled}{projected}",
        analysis.basis.name(),
        mb(part.bytes)
    )
}

/// Other processes' memory on `device` at `t_ns` from NVML, when the message does not list them:
/// the device's used memory minus the job's processes' (both sampled by the collector).
fn others_from_nvml(recording: &Recording, device: Option<u32>, t_ns: u64) -> Option<u64> {
    let device = device?;
    let at = |s: &crate::recording::Series| {
        let i = s.times_ns.partition_point(|&t| t <= t_ns).checked_sub(1)?;
        s.values.get(i)
    };
    let used = recording
        .series(&crate::recording::SeriesKey::device(
            crate::recording::SeriesKind::DeviceUsed,
            device,
        ))
        .and_then(at)?;
    let mut own = None;
    for s in recording.series.iter().filter(|s| {
        s.key.kind == crate::recording::SeriesKind::ProcessDevice && s.key.device == Some(device)
    }) {
        if let Some(v) = at(s) {
            *own.get_or_insert(0) += v;
        }
    }
    own.map(|own: u64| used.saturating_sub(own))
}

fn device_capacity(recording: &Recording, device: Option<u32>) -> Option<u64> {
    let device = device?;
    recording
        .header
        .devices
        .iter()
        .find(|d| d.index == device && d.total_bytes > 0)
        .map(|d| d.total_bytes)
}

fn hints(cause: OomCause) -> Vec<String> {
    let hints: &[&str] = match cause {
        OomCause::Leak => &[
            "find what keeps tensors alive from step to step: losses or outputs kept in a list with their graph (keep `loss.item()`), hooks that store outputs, caches on the model",
            "`torch.cuda.empty_cache()` does not cure a leak: it only hands back memory nothing holds",
            "a smaller batch only moves the crash later",
        ],
        OomCause::Peak => &[
            "a smaller batch or sequence length; gradient accumulation keeps the effective batch",
            "mixed precision (`torch.autocast`) roughly halves activations; activation checkpointing trades compute for memory",
            "`optimizer.zero_grad(set_to_none=True)` frees the gradients before the next forward",
        ],
        OomCause::Fragmentation => &[
            "try `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`",
            "varying tensor sizes split the cache: pad to a few fixed shapes; `max_split_size_mb` stops large blocks from being split",
        ],
        OomCause::OtherMemory => &[
            "another process holds memory on this GPU: check `nvidia-smi` for a second job or a stray process",
            "this process' memory outside PyTorch is the CUDA context, NCCL buffers, cuDNN/cuBLAS workspaces",
        ],
        OomCause::TooBigFromTheStart => &[
            "the model, its optimizer state and one step's activations do not fit: a smaller batch, mixed precision, activation checkpointing, or sharding (FSDP, ZeRO)",
        ],
        OomCause::Unknown => &[
            "record with the probe on a PyTorch job (allocator numbers at every phase edge) to tell a leak from a peak",
        ],
    };
    hints.iter().map(|h| (*h).to_owned()).collect()
}

/// Adds the ending's findings: one per OOM (first), or how the job failed otherwise. An OOM of
/// a rank in `by_rank` is judged with that rank's analysis.
pub(super) fn judge_ending(
    recording: &Recording,
    analysis: &mut Analysis,
    by_rank: &[(u32, &Analysis)],
) {
    let exit = recording.exits.last();
    analysis.ending = Ending {
        exit_code: exit.and_then(|e| e.code),
        signal: exit.and_then(|e| e.signal),
        stderr_tail: exit.map(|e| e.stderr_tail.clone()).unwrap_or_default(),
        recording_complete: recording.end.is_some(),
    };
    let verdicts: Vec<OomVerdict> = recording
        .ooms
        .iter()
        .map(|oom| {
            let rank = by_rank
                .iter()
                .find(|(r, _)| Some(*r) == oom.rank)
                .map_or(&*analysis, |(_, a)| *a);
            judge_oom(recording, rank, oom)
        })
        .collect();
    let how_it_ended = match exit {
        Some(e) if e.code == Some(0) => {
            Some("the job still exited with status 0 (it caught the error)".to_owned())
        }
        Some(e) => e
            .code
            .map(|c| format!("the job exited with status {c}"))
            .or_else(|| {
                e.signal
                    .map(|s| format!("the job was killed by signal {s}"))
            }),
        None => None,
    };
    for v in &verdicts {
        let seconds = v.t_ns as f64 / 1e9;
        let when = if seconds < 60.0 {
            format!("{seconds:.1} s")
        } else {
            format_duration(seconds)
        };
        let mut place = vec![format!("at {when}")];
        if let Some(step) = v.step {
            place.push(format!("step {step}"));
        }
        if let Some(phase) = &v.phase {
            place.push(format!("in {phase}"));
        }
        if let Some(rank) = v.rank {
            place.push(format!("rank {rank}"));
        }
        if let Some(device) = v.device {
            place.push(format!("cuda:{device}"));
        }
        let mut evidence = v.evidence.clone();
        if let Some(how) = &how_it_ended {
            evidence.push(how.clone());
        }
        analysis.findings.push(Finding {
            kind: FindingKind::Oom,
            title: format!("Out of memory ({}) {}", v.cause_name(), place.join(", ")),
            phase: v.phase.clone(),
            basis: Basis::Allocated,
            growth_per_step_bytes: None,
            evidence,
            hints: hints(v.cause),
        });
    }
    if verdicts.is_empty()
        && let Some(e) = exit
        && e.code != Some(0)
    {
        let title = match (e.code, e.signal) {
            (Some(code), _) => format!("The job failed: exit status {code}"),
            (None, Some(9)) => "The job was killed (signal 9, SIGKILL)".to_owned(),
            (None, Some(signal)) => format!("The job was killed by signal {signal}"),
            (None, None) => "The job ended abnormally".to_owned(),
        };
        let mut evidence = vec!["no CUDA out-of-memory error was printed".to_owned()];
        if !e.stderr_tail.is_empty() {
            evidence.push("its last lines on stderr:".to_owned());
            let from = e.stderr_tail.len().saturating_sub(8);
            evidence.extend(e.stderr_tail[from..].iter().map(|l| format!("  {l}")));
        }
        let mut hints = Vec::new();
        if e.signal == Some(9) {
            hints.push("SIGKILL with no one sending it is often the kernel's OOM killer: host memory ran out (check `dmesg`, and the host memory curve)".to_owned());
        }
        analysis.findings.push(Finding {
            kind: FindingKind::Failed,
            title,
            phase: None,
            basis: analysis.basis,
            growth_per_step_bytes: None,
            evidence,
            hints,
        });
    }
    if recording.end.is_none() && exit.is_none() {
        analysis.lacks.push(super::LACKS_END.to_owned());
    }
    analysis.ooms = verdicts;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;
    use crate::oom::parse_oom_line;
    use crate::recording::{AllocatorSample, Edge, Header, Origin, PhaseEdge, Record};

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const STEP_NS: u64 = 100_000_000;
    /// Each number of a message is rounded to two decimals of its unit: a GiB figure is up to
    /// 5 MiB off, and a part is computed from up to four of them.
    const PRINTED: u64 = 20 * MIB;

    fn part(cause: OomCause, bytes: u64) -> Contribution {
        Contribution {
            cause,
            bytes,
            what: String::new(),
        }
    }

    #[test]
    fn the_largest_part_that_covers_half_of_what_was_missing_is_the_cause() {
        let parts = [
            part(OomCause::Leak, 10 * GIB),
            part(OomCause::Fragmentation, 96 * MIB),
        ];
        assert_eq!(
            decide(16 * MIB, &parts).map(|c| c.cause),
            Some(OomCause::Leak)
        );
        // Fragmentation larger than the rest, and at least half of what was missing.
        let parts = [
            part(OomCause::Peak, GIB),
            part(OomCause::Fragmentation, 3 * GIB),
        ];
        assert_eq!(
            decide(5 * GIB, &parts).map(|c| c.cause),
            Some(OomCause::Fragmentation)
        );
        // The largest covers less than half: none is the cause.
        assert_eq!(decide(7 * GIB, &parts), None);
        assert_eq!(decide(GIB, &[]), None);
        assert_eq!(decide(0, &[part(OomCause::Peak, 0)]), None);
    }

    /// PyTorch's `format_size`.
    fn size(bytes: u64) -> String {
        let b = bytes as f64;
        if bytes <= 1024 {
            format!("{bytes} bytes")
        } else if bytes <= MIB {
            format!("{:.2} KiB", b / 1024.0)
        } else if bytes <= GIB {
            format!("{:.2} MiB", b / MIB as f64)
        } else {
            format!("{:.2} GiB", b / GIB as f64)
        }
    }

    /// The device at an error, as PyTorch saw it.
    #[derive(Clone, Copy)]
    struct Device {
        tried: u64,
        capacity: u64,
        free: u64,
        allocated: u64,
        unallocated: u64,
        /// This process' memory in use, PyTorch's and not.
        process: u64,
        /// Other processes' memory in use.
        others: [u64; 2],
    }

    /// Every form of the message PyTorch has printed.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Form {
        /// 1.0 to 1.3: "… free; … cached)".
        Cached,
        /// 1.4 to 2.0: "… free; … reserved in total by PyTorch)".
        Reserved,
        /// 2.1: the sentence, "capacty".
        Capacty,
        /// 2.2 and 2.3: the sentence.
        Sentence,
        /// 2.4 on: the sentence with private pools.
        PrivatePools,
        /// ROCm builds: "HIP out of memory", no processes.
        Hip,
    }

    const FORMS: [Form; 6] = [
        Form::Cached,
        Form::Reserved,
        Form::Capacty,
        Form::Sentence,
        Form::PrivatePools,
        Form::Hip,
    ];

    impl Form {
        /// Whether it lists the processes.
        fn lists_processes(self) -> bool {
            matches!(self, Form::Capacty | Form::Sentence | Form::PrivatePools)
        }

        fn message(self, d: &Device) -> String {
            let (t, c, f, a, u) = (
                size(d.tried),
                size(d.capacity),
                size(d.free),
                size(d.allocated),
                size(d.unallocated),
            );
            let mut processes = String::new();
            for (i, &o) in d.others.iter().enumerate().filter(|(_, o)| **o > 0) {
                processes.push_str(&format!(
                    "Process {} has {} memory in use. ",
                    4242 + i,
                    size(o)
                ));
            }
            let this = format!(
                "{processes}Including non-PyTorch memory, this process has {} memory in use. ",
                size(d.process)
            );
            match self {
                Form::Cached => format!(
                    "RuntimeError: CUDA out of memory. Tried to allocate {t} (GPU 0; {c} total capacity; {a} already allocated; {f} free; {u} cached)"
                ),
                Form::Reserved => format!(
                    "RuntimeError: CUDA out of memory. Tried to allocate {t} (GPU 0; {c} total capacity; {a} already allocated; {f} free; {} reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
                    size(d.allocated + d.unallocated)
                ),
                Form::Capacty => format!(
                    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacty of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
                ),
                Form::Sentence => format!(
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                ),
                Form::PrivatePools => format!(
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, with 0 bytes allocated in private pools (e.g., CUDA Graphs), and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                ),
                Form::Hip => format!(
                    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                ),
            }
        }
    }

    /// A training run as the probe records it: each step starts at `base(i)` allocated, forward
    /// peaks `peak` above it and keeps half until backward ends.
    fn run(steps: u64, base: impl Fn(u64) -> u64, peak: u64) -> Recording {
        let mut recording = Recording::new(Header::new(0, "test".to_owned(), vec![]));
        for i in 0..steps {
            let b = base(i);
            step(&mut recording, i, &[(b, b), (b + peak / 2, b + peak)]);
            let t = i * STEP_NS + STEP_NS / 2;
            edge(
                &mut recording,
                t,
                Phase::Backward,
                Edge::Begin,
                i,
                b + peak / 2,
                b + peak,
            );
            edge(
                &mut recording,
                t + STEP_NS / 4,
                Phase::Backward,
                Edge::End,
                i,
                b,
                b + peak,
            );
        }
        recording
    }

    /// Step `i`'s forward: begin and end at (allocated, peak).
    fn step(recording: &mut Recording, i: u64, forward: &[(u64, u64); 2]) {
        let t = i * STEP_NS;
        let [(a0, p0), (a1, p1)] = *forward;
        edge(recording, t, Phase::Forward, Edge::Begin, i, a0, p0);
        edge(
            recording,
            t + STEP_NS / 4,
            Phase::Forward,
            Edge::End,
            i,
            a1,
            p1,
        );
    }

    fn edge(
        recording: &mut Recording,
        t_ns: u64,
        phase: Phase,
        edge: Edge,
        step: u64,
        allocated: u64,
        peak: u64,
    ) {
        let origin = Origin { pid: 7, rank: None };
        recording.push(Record::Phase(PhaseEdge {
            t_ns,
            edge,
            phase,
            step: Some(step),
            origin,
            host_heap: None,
            host_rss: None,
        }));
        recording.push(Record::Allocator(AllocatorSample {
            t_ns,
            origin,
            device: 0,
            allocated,
            reserved: peak + 256 * MIB,
            peak,
            ..AllocatorSample::default()
        }));
    }

    /// The recording with `device` printed in every form after its last edge; their verdicts.
    fn judged(mut recording: Recording, device: &Device) -> Vec<(Form, OomVerdict)> {
        let last = recording.phases.iter().map(|e| e.t_ns).max().unwrap_or(0);
        for (k, form) in FORMS.iter().enumerate() {
            let line = form.message(device);
            let oom = parse_oom_line(&line, last + 1 + k as u64).unwrap();
            recording.push(Record::Oom(oom));
        }
        let analysis = analyze(&recording);
        assert_eq!(analysis.ooms.len(), FORMS.len());
        FORMS.into_iter().zip(analysis.ooms).collect()
    }

    fn bytes_of(v: &OomVerdict, cause: OomCause) -> u64 {
        v.contributions
            .iter()
            .find(|c| c.cause == cause)
            .map_or(0, |c| c.bytes)
    }

    fn near(value: u64, expected: u64) -> bool {
        value.abs_diff(expected) <= PRINTED
    }

    #[test]
    fn a_leak_that_filled_the_device_is_the_cause_in_every_form() {
        // 26 steps of 400 MiB between the trend's first point (step 3) and step 29.
        let recording = run(30, |i| 2 * GIB + i * 400 * MIB, GIB);
        let base = 2 * GIB + 29 * 400 * MIB;
        let device = Device {
            tried: GIB,
            capacity: 15 * GIB + 790 * MIB,
            free: 300 * MIB,
            allocated: 14 * GIB,
            unallocated: 200 * MIB,
            process: 15 * GIB,
            others: [0, 0],
        };
        for (form, v) in judged(recording, &device) {
            assert_eq!(v.cause, OomCause::Leak, "{form:?}: {v:#?}");
            assert_eq!(v.step, Some(29));
            assert_eq!(v.contributions[0].cause, OomCause::Leak, "{form:?}");
            assert_eq!(bytes_of(&v, OomCause::Leak), 26 * 400 * MIB, "{form:?}");
            assert!(
                near(v.shortfall_bytes.unwrap(), 724 * MIB),
                "{form:?}: {v:#?}"
            );
            assert!(
                near(bytes_of(&v, OomCause::Peak), 14 * GIB - base),
                "{form:?}: {v:#?}"
            );
            // capacity − free − reserved, less the context's allowance.
            let outside = device.capacity - device.free - 14 * GIB - 200 * MIB;
            assert!(near(v.outside_cache_bytes.unwrap(), outside), "{form:?}");
            assert!(
                near(
                    bytes_of(&v, OomCause::OtherMemory),
                    outside - CONTEXT_ALLOWANCE_BYTES
                ),
                "{form:?}: {v:#?}"
            );
            assert!(near(bytes_of(&v, OomCause::Fragmentation), 200 * MIB));
            assert!(
                v.evidence
                    .iter()
                    .any(|e| e.contains("never fell back: 10.2 GiB from step 3 to step 29")),
                "{form:?}: {:#?}",
                v.evidence
            );
        }
    }

    #[test]
    fn a_phase_that_spikes_on_a_flat_baseline_is_the_cause_in_every_form() {
        let mut recording = run(20, |_| 4 * GIB, 2 * GIB);
        step(
            &mut recording,
            20,
            &[
                (4 * GIB, 4 * GIB),
                (9 * GIB + 512 * MIB, 9 * GIB + 512 * MIB),
            ],
        );
        let device = Device {
            tried: 6 * GIB,
            capacity: 15 * GIB + 800 * MIB,
            free: 5 * GIB + 205 * MIB,
            allocated: 9 * GIB + 512 * MIB,
            unallocated: 300 * MIB,
            process: 10 * GIB + 512 * MIB,
            others: [0, 0],
        };
        for (form, v) in judged(recording, &device) {
            assert_eq!(v.cause, OomCause::Peak, "{form:?}: {v:#?}");
            assert_eq!(v.phase, Some(Phase::Forward));
            assert_eq!(v.contributions[0].cause, OomCause::Peak);
            assert!(near(bytes_of(&v, OomCause::Peak), 5 * GIB + 512 * MIB));
            assert!(near(v.shortfall_bytes.unwrap(), 819 * MIB), "{form:?}");
            assert_eq!(bytes_of(&v, OomCause::Leak), 0);
            assert!(
                v.evidence
                    .iter()
                    .any(|e| e.contains("the peak of forward does not fit: 819 MiB short")),
                "{form:?}: {:#?}",
                v.evidence
            );
        }
    }

    #[test]
    fn a_cache_of_unusable_pieces_larger_than_the_rest_is_fragmentation_in_every_form() {
        let recording = run(15, |_| 17 * GIB, GIB);
        let device = Device {
            tried: 2 * GIB,
            capacity: 23 * GIB + 655 * MIB,
            free: GIB + 100 * MIB,
            allocated: 18 * GIB + 200 * MIB,
            unallocated: 3 * GIB + 410 * MIB,
            process: 22 * GIB + 400 * MIB,
            others: [0, 0],
        };
        for (form, v) in judged(recording, &device) {
            assert_eq!(v.cause, OomCause::Fragmentation, "{form:?}: {v:#?}");
            assert!(near(
                bytes_of(&v, OomCause::Fragmentation),
                3 * GIB + 410 * MIB
            ));
            assert!(
                near(bytes_of(&v, OomCause::Peak), GIB + 200 * MIB),
                "{v:#?}"
            );
            assert!(near(v.shortfall_bytes.unwrap(), 924 * MIB), "{form:?}");
            assert!(
                v.evidence.iter().any(|e| e.contains(
                    "PyTorch's cache held 3.40 GiB unallocated, more than the 2.00 GiB asked for"
                )),
                "{form:?}: {:#?}",
                v.evidence
            );
        }
    }

    #[test]
    fn memory_outside_the_cache_is_the_cause_in_every_form_named_by_who_holds_it() {
        let recording = run(15, |_| 7 * GIB, GIB);
        let device = Device {
            tried: 2 * GIB,
            capacity: 23 * GIB + 655 * MIB,
            free: GIB,
            allocated: 7 * GIB + 512 * MIB,
            unallocated: 100 * MIB,
            process: 8 * GIB + 100 * MIB,
            others: [12 * GIB, 2 * GIB + 512 * MIB],
        };
        let outside = device.capacity - device.free - device.allocated - device.unallocated;
        for (form, v) in judged(recording, &device) {
            assert_eq!(v.cause, OomCause::OtherMemory, "{form:?}: {v:#?}");
            assert!(near(v.outside_cache_bytes.unwrap(), outside), "{form:?}");
            assert!(
                near(
                    bytes_of(&v, OomCause::OtherMemory),
                    outside - CONTEXT_ALLOWANCE_BYTES
                ),
                "{form:?}: {v:#?}"
            );
            assert!(near(bytes_of(&v, OomCause::Peak), 512 * MIB), "{v:#?}");
            if form.lists_processes() {
                assert_eq!(v.other_processes_bytes, Some(14 * GIB + 512 * MIB));
                assert_eq!(v.cause_name(), "someone else's memory");
            } else {
                // The message does not tell whose, and this machine has no NVML samples.
                assert_eq!(v.other_processes_bytes, None);
                assert_eq!(v.cause_name(), "memory outside PyTorch's cache");
            }
        }
    }

    fn alone(line: &str) -> OomVerdict {
        let mut recording = Recording::new(Header::new(0, "test".to_owned(), vec![]));
        recording.push(Record::Oom(parse_oom_line(line, 1).unwrap()));
        analyze(&recording).ooms.remove(0)
    }

    /// The old form alone proves that 22 GiB of the device were held outside PyTorch's cache.
    #[test]
    fn the_old_form_alone_tells_memory_outside_the_cache() {
        let v = alone(
            "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 23.65 GiB total capacity; 1.20 GiB already allocated; 301.56 MiB free; 1.31 GiB reserved in total by PyTorch)",
        );
        assert_eq!(v.cause, OomCause::OtherMemory, "{v:#?}");
        let outside = (23.65 * GIB as f64 - 301.56 * MIB as f64 - 1.31 * GIB as f64) as u64;
        assert!(near(v.outside_cache_bytes.unwrap(), outside), "{v:#?}");
        assert!(near(v.shortfall_bytes.unwrap(), 210 * MIB + 450 * 1024));
        assert_eq!(v.cause_name(), "memory outside PyTorch's cache");
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("22.0 GiB of the device was held outside PyTorch's cache")),
            "{:#?}",
            v.evidence
        );
    }

    /// 15.3 GiB of tensors on a 15.8 GiB device: with a leak in the run, the leak is the cause,
    /// though the cache's 96.5 MiB unallocated exceed the 20 MiB asked; on a flat baseline, the
    /// same pieces are the cause when they exceed the phase's transient.
    #[test]
    fn tensors_that_fill_the_device_are_the_leak_not_fragmentation() {
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which 4.75 MiB is free. Including non-PyTorch memory, this process has 15.76 GiB memory in use. Of the allocated memory 15.30 GiB is allocated by PyTorch, and 96.50 MiB is reserved by PyTorch but unallocated.";
        let mut leaking = run(30, |i| 3 * GIB + i * 420 * MIB, 256 * MIB);
        leaking.push(Record::Oom(parse_oom_line(line, 30 * STEP_NS).unwrap()));
        let v = analyze(&leaking).ooms.remove(0);
        assert_eq!(v.cause, OomCause::Leak, "{v:#?}");
        assert_eq!(bytes_of(&v, OomCause::Leak), 26 * 420 * MIB);
        assert!(near(
            bytes_of(&v, OomCause::Fragmentation),
            96 * MIB + 512 * 1024
        ));
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("PyTorch's tensors held 15.3 GiB of the 15.8 GiB device (97%)")),
            "{:#?}",
            v.evidence
        );

        let mut flat = run(30, |_| 15 * GIB + 250 * MIB, 256 * MIB);
        flat.push(Record::Oom(parse_oom_line(line, 30 * STEP_NS).unwrap()));
        let v = analyze(&flat).ooms.remove(0);
        assert_eq!(v.cause, OomCause::Fragmentation, "{v:#?}");
        assert!(near(bytes_of(&v, OomCause::Peak), 57 * MIB), "{v:#?}");
    }

    /// In a container PyTorch does not find its own PID among NVML's: the job is listed as
    /// "Process N", with more memory than all that is outside the cache.
    #[test]
    fn a_process_that_is_this_one_under_another_pid_is_not_someone_else() {
        let v = alone(
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a total capacty of 14.75 GiB of which 235.06 MiB is free. Process 20398 has 14.52 GiB memory in use. Of the allocated memory 14.06 GiB is allocated by PyTorch, and 330.42 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(v.other_processes_bytes, Some(0), "{v:#?}");
        assert_ne!(v.cause, OomCause::OtherMemory);
        assert_eq!(v.cause, OomCause::Fragmentation, "{v:#?}");
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("one of them is this process under another PID")),
            "{:#?}",
            v.evidence
        );
    }

    #[test]
    fn a_device_with_room_to_spare_did_not_run_out_of_its_capacity() {
        let v = alone(
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacty of 79.15 GiB of which 38.09 GiB is free. Including non-PyTorch memory, this process has 41.06 GiB memory in use. Of the allocated memory 39.10 GiB is allocated by PyTorch, and 427.46 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(v.cause, OomCause::Unknown, "{v:#?}");
        assert_eq!(v.shortfall_bytes, Some(0));
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("set_per_process_memory_fraction")),
            "{:#?}",
            v.evidence
        );
        // A little more free than asked on a full device: still judged by its parts.
        let v = alone(
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacty of 4.00 GiB of which 41.56 MiB is free. Including non-PyTorch memory, this process has 3.44 GiB memory in use. Of the allocated memory 2.58 GiB is allocated by PyTorch, and 1.90 MiB is reserved by PyTorch but unallocated.",
        );
        assert_eq!(v.cause, OomCause::OtherMemory, "{v:#?}");
        assert_eq!(v.cause_name(), "this process' memory outside PyTorch");
    }

    /// Under a memory fraction the room is what the limit leaves the cache; memory outside the
    /// cache does not count against it.
    #[test]
    fn under_a_memory_fraction_the_room_is_the_limit() {
        let mut recording = run(15, |_| 3 * GIB, 512 * MIB);
        recording.push(Record::Oom(
            parse_oom_line(
                "RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 23.65 GiB total capacity; 3.50 GiB already allocated; 12.00 GiB free; 4.00 GiB allowed; 3.90 GiB reserved in total by PyTorch)",
                15 * STEP_NS,
            )
            .unwrap(),
        ));
        let v = analyze(&recording).ooms.remove(0);
        assert!(
            near(v.shortfall_bytes.unwrap(), 1024 * MIB - 102 * MIB),
            "{v:#?}"
        );
        assert_eq!(bytes_of(&v, OomCause::OtherMemory), 0, "{v:#?}");
        assert!(near(bytes_of(&v, OomCause::Peak), 512 * MIB));
        assert!(near(bytes_of(&v, OomCause::Fragmentation), 410 * MIB));
        assert_eq!(v.cause, OomCause::Peak, "{v:#?}");
    }

    #[test]
    fn numbers_that_contradict_each_other_decide_nothing() {
        let v = alone(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 20.00 GiB is free. Including non-PyTorch memory, this process has 1.00 GiB memory in use. Of the allocated memory 30.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
        );
        assert_eq!(v.cause, OomCause::Unknown);
        assert!(v.contributions.is_empty());
        assert_eq!(v.outside_cache_bytes, None);
        assert!(v.evidence.iter().any(|e| e.contains("contradict")));
    }

    /// No part covers half of what was missing: on a flat baseline the request itself is the
    /// phase's peak; in the first step, the job is too big from the start.
    #[test]
    fn a_request_larger_than_every_part_is_the_peak_or_too_big() {
        let mut recording = run(15, |_| 10 * GIB, 100 * MIB);
        recording.push(Record::Oom(
            parse_oom_line(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 13.50 GiB of which 3.00 GiB is free. Of the allocated memory 10.05 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.",
                15 * STEP_NS,
            )
            .unwrap(),
        ));
        let v = analyze(&recording).ooms.remove(0);
        assert_eq!(v.cause, OomCause::Peak, "{v:#?}");
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("the 4.00 GiB request alone")),
            "{:#?}",
            v.evidence
        );

        let mut first = run(0, |_| 0, 0);
        step(&mut first, 0, &[(0, 0), (70 * GIB, 70 * GIB)]);
        first.push(Record::Oom(
            parse_oom_line(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 8.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.",
                STEP_NS,
            )
            .unwrap(),
        ));
        let v = analyze(&first).ooms.remove(0);
        assert_eq!(v.cause, OomCause::TooBigFromTheStart, "{v:#?}");
        assert_eq!(v.contributions[0].cause, OomCause::Peak);
    }

    #[test]
    fn without_numbers_only_the_recording_speaks() {
        let mut leaking = run(30, |i| 2 * GIB + i * 400 * MIB, GIB);
        leaking.push(Record::Oom(
            parse_oom_line("RuntimeError: CUDA error: out of memory", 30 * STEP_NS).unwrap(),
        ));
        let v = analyze(&leaking).ooms.remove(0);
        assert_eq!(v.cause, OomCause::Leak, "{v:#?}");
        assert_eq!(v.shortfall_bytes, None);
        assert_eq!(bytes_of(&v, OomCause::Leak), 26 * 400 * MIB);

        let v = alone("RuntimeError: CUDA error: out of memory");
        assert_eq!(v.cause, OomCause::Unknown);
    }
}
