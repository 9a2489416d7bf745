//! A death that printed nothing, told from what the kernel said after it (the exit's
//! [`KernelMemory`]): the OOM killer of the job's memory cgroup (a container's, a pod's, a
//! SLURM job's limit), the host's OOM killer, or a kill from outside (a scheduler's preemption,
//! `kill -9`, a time limit) — with the limit, the job's peak against it, which of its processes
//! held most, and the host-memory trend that led there.

use serde::Serialize;

use super::trend::{Trend, trend};
use super::{ALPHA, Analysis, GROWTH_FLOOR_BYTES, MIB, value_at};
use crate::format::format_bytes;
use crate::recording::{
    CgroupMemory, Exit, KernelKill, Recording, SeriesKey, SeriesKind, TreeProcess,
};

/// Who killed the job (or a process of its tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Killer {
    /// The OOM killer of a memory cgroup the job ran in: its limit was reached.
    CgroupOom,
    /// The host's OOM killer: the machine ran out of memory (no limit was reached).
    HostOom,
    /// A SIGKILL no OOM killer sent: a scheduler, a person, a time limit.
    Outside,
}

/// What the kernel's numbers say of a death.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Death {
    pub killer: Killer,
    pub title: String,
    pub evidence: Vec<String>,
    pub hints: Vec<String>,
}

/// Judges a job that died by SIGKILL, or failed while a process of its tree was OOM-killed.
/// `None` when the kernel's numbers say nothing of it (a job that failed on its own, or an old
/// recording without them).
pub(super) fn judge(recording: &Recording, analysis: &Analysis, exit: &Exit) -> Option<Death> {
    let kernel = exit.kernel.as_ref()?;
    let sigkill = exit.signal == Some(9);
    let cgroup = kernel
        .cgroups
        .iter()
        .filter(|c| c.kills_during().is_some_and(|k| k > 0))
        .min_by_key(|c| c.limit_bytes.unwrap_or(u64::MAX));
    let job_kills: Vec<&KernelKill> = kernel.kills.iter().filter(|k| k.in_job).collect();
    let memcg_kill = job_kills.iter().find(|k| k.memcg.is_some()).copied();
    let host_moved = match (kernel.host_oom_kills_before, kernel.host_oom_kills_after) {
        (Some(before), Some(after)) => Some(after > before),
        _ => None,
    };
    let killer = if cgroup.is_some() || memcg_kill.is_some() {
        Killer::CgroupOom
    } else if job_kills.iter().any(|k| k.memcg.is_none())
        || (sigkill && host_moved == Some(true) && !kernel.log_read)
    {
        Killer::HostOom
    } else if sigkill && host_moved == Some(false) {
        Killer::Outside
    } else {
        return None;
    };
    // The process the kernel killed: the log names it; else the job's own process, when it was
    // the one killed; else the largest (the OOM killer picks the largest).
    let victim = job_kills.first().copied();
    let victim_process = victim
        .and_then(|k| kernel.processes.iter().find(|p| p.pid == k.pid))
        .or_else(|| {
            sigkill
                .then(|| kernel.processes.iter().find(|p| p.root))
                .flatten()
        });
    let victim_name = match (victim_process, victim) {
        (Some(p), _) => p.describe(),
        (None, Some(k)) => format!("process {} ({})", k.pid, k.name),
        (None, None) if sigkill => "the job's process".to_owned(),
        (None, None) => "a process of the job".to_owned(),
    };
    let the_job = victim_process.is_some_and(|p| p.root) || (victim.is_none() && sigkill);
    let who = if the_job {
        String::new()
    } else {
        format!("{}: ", capitalize(&victim_name))
    };
    let cgroup = cgroup.or_else(|| {
        let memcg = memcg_kill?.memcg.as_deref()?;
        kernel
            .cgroups
            .iter()
            .find(|c| c.path == memcg || memcg.is_empty())
    });
    let mut evidence = Vec::new();
    let mut hints = Vec::new();
    let title = match killer {
        Killer::CgroupOom => {
            let limit = cgroup.and_then(|c| c.limit_bytes);
            let path = cgroup
                .map(|c| c.path.clone())
                .or_else(|| memcg_kill.and_then(|k| k.memcg.clone()))
                .unwrap_or_default();
            let reached = match limit {
                Some(limit) => format!(" reached its {} limit", format_bytes(limit as f64)),
                None => " reached its limit".to_owned(),
            };
            if let Some(c) = cgroup {
                evidence.extend(cgroup_evidence(c));
            }
            hints.push("a memory cgroup is how a container's memory is limited: Docker's `--memory`, a Kubernetes pod's `resources.limits.memory`, SLURM's `--mem`; raise the limit, or lower what the job holds on the host".to_owned());
            format!(
                "{who}Killed by the kernel's OOM killer: the memory cgroup {}{reached}",
                if path.is_empty() { "of the job" } else { &path }
            )
        }
        Killer::HostOom => {
            if host_moved == Some(true) {
                evidence.push(format!(
                    "the host's OOM kills (/proc/vmstat oom_kill) went from {} to {} while the job ran",
                    kernel.host_oom_kills_before.unwrap_or(0),
                    kernel.host_oom_kills_after.unwrap_or(0)
                ));
            }
            if !kernel.log_read {
                evidence.push("the kernel log could not be read to name the process killed: `dmesg` on the host names it (`Out of memory: Killed process …`)".to_owned());
            }
            hints.push("no memory limit was reached: the whole machine ran out (other jobs on it count too); lower what the job holds on the host, or run it where more is free".to_owned());
            format!("{who}Killed by the host's OOM killer: the machine ran out of memory")
        }
        Killer::Outside => {
            evidence.push(format!(
                "no OOM killer killed it: the host's OOM kills (/proc/vmstat oom_kill) stayed at {}{}",
                kernel.host_oom_kills_after.unwrap_or(0),
                if kernel.cgroups.iter().any(|c| c.kills_during() == Some(0)) {
                    ", and so did its memory cgroup's"
                } else {
                    ""
                }
            ));
            for c in &kernel.cgroups {
                if let (Some(peak), Some(limit)) = (c.peak_bytes, c.limit_bytes) {
                    evidence.push(format!(
                        "its memory cgroup {} peaked at {}, {:.0} % of its {} limit",
                        c.path,
                        format_bytes(peak as f64),
                        percent(peak, limit),
                        format_bytes(limit as f64)
                    ));
                }
            }
            hints.push("a SIGKILL from outside the job: a scheduler's preemption or time limit (SLURM sends SIGTERM, then SIGKILL after KillWait), `kill -9`, a container stopped; the scheduler's log or `sacct` says which".to_owned());
            format!("{who}Killed from outside (SIGKILL): not by an OOM killer")
        }
    };
    if let Some(kill) = victim {
        let rss = kill
            .rss_bytes
            .map(|b| format!(", holding {} when killed", format_bytes(b as f64)))
            .unwrap_or_default();
        evidence.push(format!(
            "the kernel log names {victim_name} as the process killed{rss}: `{}`",
            kill.line
        ));
    } else if killer == Killer::CgroupOom && !kernel.log_read {
        evidence.push(
            "the kernel log could not be read to name the process killed (the kernel kills the largest)".to_owned(),
        );
    }
    if !the_job && let Some(code) = exit.code {
        evidence.push(format!(
            "the job then ended with exit status {code} (PyTorch raises \"DataLoader worker … exited unexpectedly\" when a worker is killed)"
        ));
    }
    if killer != Killer::Outside {
        evidence.extend(largest(&kernel.processes));
        if let Some(leak) = host_leak(recording, analysis, cgroup.and_then(|c| c.limit_bytes)) {
            evidence.push(leak);
        }
        if kernel.processes.iter().any(|p| p.name == "pt_data_worker") {
            hints.push("DataLoader workers copy what they touch of a dataset held as Python objects (reference counts write to every page): keep it in NumPy arrays or tensors, or use fewer workers".to_owned());
        }
    }
    evidence.extend(
        kernel
            .unreadable
            .iter()
            .map(|u| format!("could not be read: {u}")),
    );
    Some(Death {
        killer,
        title,
        evidence,
        hints,
    })
}

/// A cgroup's kill count, limit and peak, one sentence each.
fn cgroup_evidence(c: &CgroupMemory) -> Vec<String> {
    let mut out = Vec::new();
    let (file, key) = if c.version == 1 {
        ("memory.oom_control", "oom_kill")
    } else {
        ("memory.events", "oom_kill")
    };
    if let (Some(before), Some(after)) = (c.oom_kills_before, c.oom_kills_after) {
        out.push(format!(
            "the memory cgroup {} (cgroup v{}) counted {} OOM kill{} while the job ran ({file} {key} {before} → {after})",
            c.path,
            c.version,
            after - before,
            if after - before == 1 { "" } else { "s" }
        ));
    }
    if c.group_kills_after.is_some_and(|g| g > 0) {
        out.push(
            "the whole group was killed (memory.oom.group): every process of the cgroup died with it"
                .to_owned(),
        );
    }
    match (c.limit_bytes, c.peak_bytes) {
        (Some(limit), Some(peak)) => out.push(format!(
            "its limit is {}{}; the most it held was {}, {:.0} % of it",
            format_bytes(limit as f64),
            c.limit_from
                .as_ref()
                .map(|f| format!(" (set on {f})"))
                .unwrap_or_default(),
            format_bytes(peak as f64),
            percent(peak, limit)
        )),
        (Some(limit), None) => out.push(format!("its limit is {}", format_bytes(limit as f64))),
        _ => {}
    }
    out
}

/// The largest processes of the job's tree, at their most.
fn largest(processes: &[TreeProcess]) -> Option<String> {
    let first = processes.first()?;
    let mut text = format!(
        "the job's largest process was {}, at {} resident",
        first.describe(),
        format_bytes(first.peak_rss_bytes as f64)
    );
    let others: Vec<String> = processes
        .iter()
        .skip(1)
        .take(3)
        .filter(|p| p.peak_rss_bytes as f64 >= MIB)
        .map(|p| format!("{} {}", p.describe(), format_bytes(p.peak_rss_bytes as f64)))
        .collect();
    if !others.is_empty() {
        text.push_str(&format!("; then {}", others.join(", ")));
    }
    Some(text)
}

/// The job's host memory at the same point of every step (or window), when it rose steadily
/// enough to be the cause: "host memory rose 8.0 MiB a step …".
fn host_leak(recording: &Recording, analysis: &Analysis, limit: Option<u64>) -> Option<String> {
    let host = recording
        .series(&SeriesKey::new(SeriesKind::HostRss))?
        .sorted();
    let points = &analysis.step_series;
    let values: Vec<f64> = points
        .times_ns
        .iter()
        .filter_map(|&t| value_at(&host, t).map(|v| v as f64))
        .collect();
    if values.len() != points.steps.len() {
        return None;
    }
    let t: Trend = trend(&points.steps_f64(), &values)?;
    if !t.rises(ALPHA) || t.growth_bytes < GROWTH_FLOOR_BYTES {
        return None;
    }
    let unit = analysis.unit();
    let first = points.steps.first()?;
    let last = points.steps.last()?;
    let reach = limit
        .map(|l| {
            format!(
                ", {:.0} % of the limit by the last",
                percent(t.end_bytes as u64, l)
            )
        })
        .unwrap_or_default();
    Some(format!(
        "the cause: the job's host memory rose {} a {unit} from {unit} {first} to {unit} {last} (p = {}), from {} to {}{reach}: a host-memory leak that reached the limit",
        format_bytes(t.slope_per_step),
        crate::format::format_p(t.p_value),
        format_bytes(t.start_bytes),
        format_bytes(t.end_bytes)
    ))
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
