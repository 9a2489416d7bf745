//! How the job ended: each out-of-memory error with its cause and the numbers that decided it,
//! and a job that failed or was killed for another reason. These findings come first in the
//! verdict: a job that died answers "of what, and why" before anything else.

use serde::Serialize;

use super::{Analysis, Basis, Finding, FindingKind, GIB};
use crate::format::{format_bytes, format_duration};
use crate::recording::{Oom, Phase, Recording};

/// Why the device ran out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// Memory at the same point of every step rose until it reached the device's capacity.
    Leak,
    /// A flat baseline, but one phase's peak needs more than the device has.
    Peak,
    /// The cache held enough memory for the request, but in pieces too small.
    Fragmentation,
    /// Memory that is not this job's tensors (other processes, CUDA contexts, NCCL) took the room.
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
    /// Why.
    pub cause: OomCause,
    /// The numbers that decided it, one sentence each.
    pub evidence: Vec<String>,
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

/// The verdict of one OOM: the cause is decided in this order, each needing its own numbers,
/// and "not determined" when none has them.
fn judge_oom(recording: &Recording, analysis: &Analysis, oom: &Oom) -> OomVerdict {
    let (step, phase) = where_in_the_run(analysis, oom.t_ns);
    let outside = oom
        .process_bytes
        .zip(oom.allocated_bytes)
        .map(|(process, allocated)| {
            process.saturating_sub(allocated + oom.reserved_unallocated_bytes.unwrap_or(0))
        });
    let others = oom
        .other_processes_bytes
        .or_else(|| others_from_nvml(recording, oom.device, oom.t_ns));
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
        outside_pytorch_bytes: outside,
        other_processes_bytes: others,
        cause: OomCause::Unknown,
        evidence: Vec::new(),
    };
    let mut numbers = Vec::new();
    if let Some(t) = oom.tried_bytes {
        numbers.push(format!("asked for {}", mb(t)));
    }
    if let (Some(c), Some(f)) = (oom.capacity_bytes, oom.free_bytes) {
        numbers.push(format!("{} free of {}", mb(f), mb(c)));
    }
    if let Some(a) = oom.allocated_bytes {
        numbers.push(format!("{} held by PyTorch's tensors", mb(a)));
    }
    if let Some(r) = oom.reserved_unallocated_bytes {
        numbers.push(format!("{} cached by PyTorch but unallocated", mb(r)));
    }
    if let Some(o) = outside {
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

    let leak = analysis.finding(FindingKind::Leak);
    let first_steps = step.is_some_and(|s| {
        let first = analysis.step_starts.first().map_or(0, |f| f.step);
        s <= first + 1
    });
    let tried = oom.tried_bytes;
    let capacity = oom
        .capacity_bytes
        .or_else(|| device_capacity(recording, oom.device));
    if first_steps && leak.is_none() {
        v.cause = OomCause::TooBigFromTheStart;
        v.evidence.push(format!(
            "it happened in step {} of the run: the model and one step's memory do not fit",
            step.unwrap_or(0)
        ));
    } else if let (Some(t), Some(r)) = (tried, oom.reserved_unallocated_bytes)
        && r >= t
    {
        v.cause = OomCause::Fragmentation;
        v.evidence.push(format!(
            "PyTorch's cache held {} unallocated, more than the {} asked for, but in pieces too small for it",
            mb(r),
            mb(t)
        ));
    } else if let (Some(t), Some(f), Some(c)) = (tried, oom.free_bytes, capacity) {
        let elsewhere = others.unwrap_or(0) + outside.unwrap_or(0);
        if elsewhere as f64 >= (0.1 * c as f64).max(GIB / 2.0) && f + elsewhere >= t {
            v.cause = OomCause::OtherMemory;
            v.evidence.push(format!(
                "{} of the device was not this job's tensors; without it the {} asked for would have fit",
                mb(elsewhere),
                mb(t)
            ));
        }
    }
    if v.cause == OomCause::Unknown
        && let Some(leak) = leak
    {
        v.cause = OomCause::Leak;
        let rate = leak
            .growth_per_step_bytes
            .map_or(String::new(), |g| format!(" by {}/step", format_bytes(g)));
        let projected = analysis.projection.as_ref().map_or(String::new(), |p| {
            format!(
                "; the trend reaches the device's capacity at step {}",
                p.oom_step
            )
        });
        v.evidence.push(format!(
            "{} at the start of each step rose{rate} and never fell back{projected}",
            leak.basis.name()
        ));
    }
    if v.cause == OomCause::Unknown && analysis.trend.is_some() && !analysis.occurrences.is_empty()
    {
        // A flat baseline: the room went to one phase's peak.
        let peak = analysis
            .phases
            .iter()
            .max_by(|a, b| a.watermark_mean_bytes.total_cmp(&b.watermark_mean_bytes));
        let name = v.phase.clone().or_else(|| peak.map(|p| p.phase.clone()));
        if let Some(name) = name {
            v.cause = OomCause::Peak;
            let over = tried.zip(oom.free_bytes).map_or(String::new(), |(t, f)| {
                format!(": {} short", mb(t.saturating_sub(f)))
            });
            let watermark =
                analysis
                    .phases
                    .iter()
                    .find(|p| p.phase == name)
                    .map_or(String::new(), |p| {
                        format!(
                            " ({} rises {} within a step on average)",
                            name,
                            format_bytes(p.watermark_mean_bytes)
                        )
                    });
            v.evidence.push(format!(
                "memory at the start of each step is flat; the peak of {name} does not fit{over}{watermark}"
            ));
        }
    }
    if v.cause == OomCause::Unknown {
        v.evidence.push(
            "the recording has neither a rising baseline nor the allocator's numbers to tell a leak from a peak".to_owned(),
        );
    }
    v
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
            title: format!(
                "Out of memory ({}) {}",
                v.cause.describe(),
                place.join(", ")
            ),
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
        analysis.lacks.push("the end of the job: the recording stops early (the collector was killed, or the file was cut), so how the job ended is not known".to_owned());
    }
    analysis.ooms = verdicts;
}
