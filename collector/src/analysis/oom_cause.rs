//! Why one out-of-memory error happened: the memory the failed request needed, and what took
//! it — a leak's growth, a peak of the step's own, fragmentation, the caching allocator's
//! reserve, another process — each part measured against the shortfall, the cause the part that
//! covers it ([`judge_oom`]); with the sentences and hints that say so.

use serde::Serialize;

use super::ending::{OomCause, OomVerdict};
use super::{Analysis, Basis, FindingKind};
use crate::format::format_bytes;
use crate::recording::{Oom, Phase, Recording};

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
pub(super) fn judge_oom(recording: &Recording, analysis: &Analysis, oom: &Oom) -> OomVerdict {
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
        private_pools_bytes: oom.private_pools_bytes,
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
        let pools = oom
            .private_pools_bytes
            .filter(|&p| p > 0)
            .map_or(String::new(), |p| {
                format!(
                    " ({} of it in private pools: CUDA graphs' or `torch.cuda.MemPool`s, which only their own graphs or pool contexts can use)",
                    mb(p)
                )
            });
        numbers.push(format!("{} held by PyTorch's tensors{pools}", mb(a)));
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
            match crate::oom::OomSource::of(&oom.message) {
                Some(crate::oom::OomSource::Runtime) => "the message carries no numbers (\"CUDA error: out of memory\" comes from the CUDA runtime, not PyTorch's allocator)",
                _ => "the message carries no numbers",
            }
            .to_owned(),
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
        } else if recording.allocator.is_empty() {
            v.evidence.push(
                "the recording has neither a rising baseline nor the allocator's numbers to tell a leak from a peak".to_owned(),
            );
        } else {
            v.evidence.push(
                "without the message's numbers (what was asked, what was free) and with no rising baseline, a leak cannot be told from a peak".to_owned(),
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
            // What the driver counted before the error: a leak outside the cache led to it.
            if let Some(growth) = analysis.finding(FindingKind::NonPytorchGrowth)
                && let (Some(rate), Some(counts)) =
                    (growth.growth_per_step_bytes, growth.evidence.first())
            {
                v.evidence.push(format!(
                    "it had grown step by step before the error, {}/step: {counts}",
                    format_bytes(rate)
                ));
            }
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
    let leak = analysis.finding(FindingKind::Leak);
    let rate = leak
        .and_then(|l| l.growth_per_step_bytes)
        .map_or(String::new(), |g| format!(" by {}/step", format_bytes(g)));
    // The phase that keeps it, where the leak names one.
    let rate = match leak.and_then(|l| l.phase.as_ref()) {
        Some(phase) => format!("{rate} in {phase}"),
        None => rate,
    };
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

pub(super) fn hints(cause: OomCause) -> Vec<String> {
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

#[cfg(test)]
mod tests;
