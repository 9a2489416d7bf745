//! How the job ended: each out-of-memory error with its cause and the numbers that decided it,
//! and a job that failed or was killed for another reason. These findings come first in the
//! verdict: a job that died answers "of what, and why" before anything else.

use serde::Serialize;

pub use super::killed::Killer;
use super::oom_cause::{Contribution, hints, judge_oom};
use super::{Analysis, Basis, Finding, FindingKind};
use crate::format::{format_bytes, format_duration};
use crate::recording::{KernelMemory, Phase, Recording};

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
    /// The part of the allocated bytes in private pools (CUDA graphs', `torch.cuda.MemPool`s),
    /// where the message says it (PyTorch ≥ 2.4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_pools_bytes: Option<u64>,
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
    /// Who killed it, when the kernel's numbers tell (a SIGKILL, or a process of its tree
    /// OOM-killed).
    pub killed_by: Option<Killer>,
    /// What the kernel said of its memory after it ended (cgroups, OOM kills), when recorded.
    pub kernel: Option<KernelMemory>,
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
        killed_by: None,
        kernel: exit.and_then(|e| e.kernel.clone()),
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
    for (v, oom) in verdicts.iter().zip(&recording.ooms) {
        let source = crate::oom::OomSource::of(&oom.message);
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
        let mut evidence = Vec::new();
        let mut source_hints = Vec::new();
        let mut who = String::new();
        if let Some(source) = source.filter(|s| *s != crate::oom::OomSource::Allocator) {
            who = source
                .name()
                .map(|n| format!(" in {n}"))
                .unwrap_or_default();
            evidence.extend(source.what_failed().map(str::to_owned));
            evidence.extend(cache_at(recording, oom));
            source_hints = source.hints();
        }
        evidence.extend(v.evidence.iter().cloned());
        if let Some(how) = &how_it_ended {
            evidence.push(how.clone());
        }
        source_hints.extend(hints(v.cause));
        analysis.findings.push(Finding {
            kind: FindingKind::Oom,
            title: format!(
                "Out of memory{who} ({}) {}",
                v.cause_name(),
                place.join(", ")
            ),
            phase: v.phase.clone(),
            basis: Basis::Allocated,
            growth_per_step_bytes: None,
            evidence,
            hints: source_hints,
        });
    }
    // A job that hung ended in its stall, whatever then stopped it: the stall leads, and says
    // how the job ended; the kernel's word on a kill still follows it.
    let hang = verdicts
        .is_empty()
        .then(|| super::stalled::judge(recording, analysis.basis))
        .flatten();
    let hung = hang.is_some();
    analysis.findings.extend(hang);
    if verdicts.is_empty()
        && let Some(e) = exit
        && e.code != Some(0)
    {
        let finding = match super::killed::judge(recording, analysis, e) {
            Some(death) => {
                analysis.ending.killed_by = Some(death.killer);
                let mut evidence = death.evidence;
                evidence.extend(stderr_lines(&e.stderr_tail));
                Some(Finding {
                    kind: FindingKind::Failed,
                    title: death.title,
                    phase: None,
                    basis: analysis.basis,
                    growth_per_step_bytes: None,
                    evidence,
                    hints: death.hints,
                })
            }
            None if hung => None,
            None => Some(failed(analysis, e)),
        };
        analysis.findings.extend(finding);
    }
    if recording.end.is_none() && exit.is_none() {
        analysis.lacks.push(super::LACKS_END.to_owned());
    }
    analysis.ooms = verdicts;
}

/// What PyTorch's cache held on the error's device (its rank's, else the first) at the probe's
/// last reading before an error the cache did not raise itself (its message carries no numbers),
/// against the device's memory.
fn cache_at(recording: &Recording, oom: &crate::recording::Oom) -> Option<String> {
    let readings = &recording.allocator;
    let device = oom
        .device
        .or_else(|| readings.source_counts().first().map(|&((_, d), _)| d))?;
    let last = (0..readings.len())
        .filter(|&i| {
            readings.device(i) == device
                && readings.t_ns(i) <= oom.t_ns
                && oom
                    .rank
                    .is_none_or(|r| readings.source(i).0.rank == Some(r))
        })
        .max_by_key(|&i| readings.t_ns(i))?;
    let capacity = recording
        .header
        .devices
        .iter()
        .find(|d| d.index == device && d.total_bytes > 0)
        .map(|d| format!(" of the device's {}", format_bytes(d.total_bytes as f64)))
        .unwrap_or_default();
    Some(format!(
        "at the probe's last reading, {:.1} s before, PyTorch's cache on cuda:{device} held {} reserved{capacity}, {} of it allocated to tensors",
        (oom.t_ns - readings.t_ns(last)) as f64 / 1e9,
        format_bytes(readings.reserved(last) as f64),
        format_bytes(readings.allocated(last) as f64)
    ))
}

/// A job that failed with no OOM error and no kernel's word on it: its status and last lines.
fn failed(analysis: &Analysis, e: &crate::recording::Exit) -> Finding {
    let title = match (e.code, e.signal) {
        (Some(code), _) => format!("The job failed: exit status {code}"),
        (None, Some(9)) => "The job was killed (signal 9, SIGKILL)".to_owned(),
        (None, Some(signal)) => format!("The job was killed by signal {signal}"),
        (None, None) => "The job ended abnormally".to_owned(),
    };
    let mut evidence = vec!["no CUDA out-of-memory error was printed".to_owned()];
    evidence.extend(stderr_lines(&e.stderr_tail));
    let mut hints = Vec::new();
    if e.signal == Some(9) {
        hints.push("SIGKILL with no one sending it is often the kernel's OOM killer: host memory ran out (check `dmesg`, and the host memory curve)".to_owned());
    }
    Finding {
        kind: FindingKind::Failed,
        title,
        phase: None,
        basis: analysis.basis,
        growth_per_step_bytes: None,
        evidence,
        hints,
    }
}

/// The last lines on stderr, as evidence.
fn stderr_lines(tail: &[String]) -> Vec<String> {
    if tail.is_empty() {
        return Vec::new();
    }
    let from = tail.len().saturating_sub(8);
    std::iter::once("its last lines on stderr:".to_owned())
        .chain(tail[from..].iter().map(|l| format!("  {l}")))
        .collect()
}
