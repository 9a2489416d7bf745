//! Many ranks in one recording (torchrun, `accelerate launch`, DeepSpeed, `mpirun`,
//! `multiprocessing`): each rank is judged on its own numbers — its phases, its allocator
//! readings, its own host memory read by the probe at its edges, its processes' device memory —
//! and the findings say which rank they are about. One rank's growth is no longer drowned by the
//! launcher's and the other ranks' memory, and a rank that holds much more than the others is a
//! finding of its own (imbalance).

use serde::Serialize;

use super::rules::median_u64;
use super::{Analysis, Basis, Finding, FindingKind, MIB, StepSeries, headline};
use crate::format::format_bytes;
use crate::recording::{Chunk, Column, Origin, Record, Recording, Series, SeriesKey, SeriesKind};

/// One rank's verdict, for the report, the JSON and the viewer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankSummary {
    /// The rank.
    pub rank: u32,
    /// Its training process.
    pub pid: u32,
    /// The memory its verdict is about.
    pub basis: Basis,
    /// Its verdict in one line.
    pub headline: String,
    /// Whether that is a problem (`None`: cannot tell).
    pub problem: Option<bool>,
    /// Its memory at the start of a step, the median over the run.
    pub baseline_bytes: Option<u64>,
    /// Its growth per step (the trend's slope), when it has a trend.
    pub growth_per_step_bytes: Option<f64>,
    /// Its memory at the start of every step.
    pub step_series: StepSeries,
}

/// The ranks that sent phase edges, each with its busiest process: `(rank, pid)`, by rank. A
/// rank without any phase edge counts by its allocator readings (per-rank snapshots without
/// phases).
pub(super) fn ranks_of(recording: &Recording) -> Vec<(u32, u32)> {
    let mut counts: std::collections::BTreeMap<(u32, u32), usize> = Default::default();
    let (phases, readings) = (&recording.phases, &recording.allocator);
    for origin in (0..phases.len()).map(|i| phases.kind(i).origin) {
        if let Some(rank) = origin.rank {
            *counts.entry((rank, origin.pid)).or_default() += 1;
        }
    }
    let phased: std::collections::BTreeSet<u32> = counts.keys().map(|k| k.0).collect();
    for (origin, _) in (0..readings.len()).map(|i| readings.source(i)) {
        if let Some(rank) = origin.rank.filter(|r| !phased.contains(r)) {
            *counts.entry((rank, origin.pid)).or_default() += 1;
        }
    }
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (&(rank, pid), &n) in &counts {
        match out.last_mut() {
            Some(last) if last.0 == rank => {
                if n > counts[&(rank, last.1)] {
                    last.1 = pid;
                }
            }
            _ => out.push((rank, pid)),
        }
    }
    out
}

/// Where each process' phase edges and allocator readings are, by index, found in one pass
/// (a rank's projection then reads only its own, not the whole run's once per rank).
pub(super) type ByOrigin = std::collections::HashMap<Origin, (Vec<u32>, Vec<u32>)>;

/// Indexes `recording`'s phase edges and allocator readings by their origin.
pub(super) fn by_origin(recording: &Recording) -> ByOrigin {
    let mut index = ByOrigin::new();
    let (phases, readings) = (&recording.phases, &recording.allocator);
    for i in 0..phases.len() {
        index
            .entry(phases.kind(i).origin)
            .or_default()
            .0
            .push(i as u32);
    }
    for i in 0..readings.len() {
        index
            .entry(readings.source(i).0)
            .or_default()
            .1
            .push(i as u32);
    }
    index
}

/// The recording as one rank sees it: its process' phases and allocator readings, its own host
/// memory at its edges (the tree's sum would hold every rank), its processes' device memory, the
/// devices; the job's end stays with the whole run.
pub(super) fn project(
    recording: &Recording,
    by_origin: &ByOrigin,
    rank: u32,
    pid: u32,
) -> Recording {
    // A pid is only unique on its node: the rank tells processes of several nodes apart.
    let origin = Origin {
        pid,
        rank: Some(rank),
    };
    let mine = |o: &Origin| *o == origin;
    let (phase_at, allocator_at) = by_origin
        .get(&origin)
        .map_or((&[][..], &[][..]), |(p, a)| (p.as_slice(), a.as_slice()));
    let mut one = Recording::new(recording.header.clone());
    // The rank's own GPUs, as its allocator readings name them: the other ranks' device series
    // are theirs (copying all of them for every rank made eight ranks cost 8× the samples).
    let mut devices: Vec<u32> = allocator_at
        .iter()
        .map(|&i| recording.allocator.device(i as usize))
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let keep = |s: &Series| match s.key.kind {
        SeriesKind::HostRss => false,
        SeriesKind::ProcessDevice => s.key.pid == Some(pid),
        SeriesKind::DeviceUsed | SeriesKind::DeviceReserved if !devices.is_empty() => {
            s.key.device.is_some_and(|d| devices.contains(&d))
        }
        _ => true,
    };
    // Shared, not copied: a rank's GPU series is millions of samples.
    for series in recording.series.iter().filter(|s| keep(s)) {
        one.share_series(series.clone());
    }
    let edges: Vec<_> = phase_at
        .iter()
        .map(|&i| recording.phases.get(i as usize))
        .collect();
    // The rank's resident memory at the edges the probe read it (every edge of the first steps,
    // then the steps within its share of the job's time).
    let (times_ns, rss): (Vec<u64>, Vec<u64>) = edges
        .iter()
        .filter_map(|e| e.host_rss.map(|rss| (e.t_ns, rss)))
        .unzip();
    if !rss.is_empty() {
        one.push(Record::Chunk(Chunk {
            times_ns,
            columns: vec![Column {
                series: SeriesKey::new(SeriesKind::HostRss),
                values: rss,
                valid: None,
            }],
        }));
    }
    one.phases = edges.into();
    one.allocator = allocator_at
        .iter()
        .map(|&i| recording.allocator.get(i as usize))
        .collect();
    one.categories = recording
        .categories
        .iter()
        .filter(|c| mine(&c.origin))
        .cloned()
        .collect();
    one.censuses = recording
        .censuses
        .iter()
        .filter(|c| mine(&c.origin))
        .cloned()
        .collect();
    one.end = recording.end.clone();
    one
}

/// The summary of one rank's analysis.
pub(super) fn summary(rank: u32, pid: u32, analysis: &Analysis) -> RankSummary {
    let (headline, problem) = headline(analysis);
    RankSummary {
        rank,
        pid,
        basis: analysis.basis,
        headline,
        problem,
        baseline_bytes: median_u64(analysis.step_series.values.iter().copied()),
        growth_per_step_bytes: analysis.trend.as_ref().map(|t| t.slope_per_step),
        step_series: analysis.step_series.clone(),
    }
}

/// The run's findings from its ranks': each rank's problems, named by rank, with the other
/// ranks' baselines as evidence; and an imbalance when one rank holds much more than the rest.
pub(super) fn findings(recording: &Recording, ranks: &[(RankSummary, Analysis)]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (summary, analysis) in ranks {
        for finding in analysis.findings.iter().filter(|f| f.kind.is_problem()) {
            let mut finding = finding.clone();
            finding.title = format!("Rank {}: {}", summary.rank, lower_first(&finding.title));
            if finding.kind == FindingKind::Leak {
                for (other, _) in ranks.iter().filter(|(o, _)| o.rank != summary.rank) {
                    let growth = other
                        .growth_per_step_bytes
                        .map_or("no trend".to_owned(), |g| {
                            format!("{}/step", format_bytes(g))
                        });
                    let state = if other.problem == Some(true) {
                        "also grows"
                    } else {
                        "does not"
                    };
                    finding.evidence.push(format!(
                        "rank {} {state}: {} at the start of a step ({growth})",
                        other.rank,
                        other
                            .baseline_bytes
                            .map_or("unknown".to_owned(), |b| format_bytes(b as f64)),
                    ));
                }
            }
            out.push(finding);
        }
    }
    if let Some(imbalance) = imbalance(ranks) {
        out.push(imbalance);
    }
    out.extend(contexts_elsewhere(recording, ranks));
    out
}

/// Ranks holding device memory on another rank's GPU (per-process NVML numbers): usually their
/// CUDA contexts, made there before `torch.cuda.set_device(local_rank)`.
fn contexts_elsewhere(recording: &Recording, ranks: &[(RankSummary, Analysis)]) -> Option<Finding> {
    // Each rank's own device: the one its allocator readings are about.
    let own: Vec<(u32, u32, u32)> = ranks
        .iter()
        .filter_map(|(s, _)| {
            let device = recording
                .allocator
                .iter()
                .find(|a| a.origin.pid == s.pid && a.origin.rank == Some(s.rank))?
                .device;
            Some((s.rank, s.pid, device))
        })
        .collect();
    let mut lines = Vec::new();
    let mut total = 0u64;
    let mut devices = std::collections::BTreeSet::new();
    for series in recording
        .series
        .iter()
        .filter(|s| s.key.kind == SeriesKind::ProcessDevice)
    {
        let (Some(device), Some(pid)) = (series.key.device, series.key.pid) else {
            continue;
        };
        let Some(&(rank, _, home)) = own.iter().find(|(_, p, _)| *p == pid) else {
            continue;
        };
        if home == device {
            continue;
        }
        let bytes = median_u64(series.values.iter()).unwrap_or(0);
        if bytes == 0 {
            continue;
        }
        let owner = own
            .iter()
            .find(|(_, _, d)| *d == device)
            .map_or(String::new(), |(r, _, _)| format!(" (rank {r}'s)"));
        lines.push(format!(
            "rank {rank} (pid {pid}, on GPU {home}) holds {} on GPU {device}{owner}",
            format_bytes(bytes as f64)
        ));
        total += bytes;
        devices.insert(device);
    }
    if lines.is_empty() {
        return None;
    }
    let on: Vec<String> = devices.iter().map(|d| format!("GPU {d}")).collect();
    Some(Finding {
        kind: FindingKind::Imbalance,
        title: format!(
            "Imbalance: other ranks hold {} on {}",
            format_bytes(total as f64),
            on.join(", ")
        ),
        phase: None,
        basis: Basis::DeviceUsed,
        growth_per_step_bytes: None,
        evidence: lines,
        hints: vec![
            "CUDA contexts made on the wrong GPU: call `torch.cuda.set_device(local_rank)` (or use `device=f\"cuda:{local_rank}\"`) before the first CUDA call, and pass `device_ids=[local_rank]` to DDP".to_owned(),
        ],
    })
}

/// One rank whose baseline is well above the median of the others'.
fn imbalance(ranks: &[(RankSummary, Analysis)]) -> Option<Finding> {
    let baselines: Vec<(u32, u64, Basis)> = ranks
        .iter()
        .filter_map(|(s, _)| s.baseline_bytes.map(|b| (s.rank, b, s.basis)))
        .collect();
    if baselines.len() < 2 {
        return None;
    }
    let &(rank, top, basis) = baselines.iter().max_by_key(|(_, b, _)| *b)?;
    let others: Vec<u64> = baselines
        .iter()
        .filter(|(r, _, _)| *r != rank)
        .map(|(_, b, _)| *b)
        .collect();
    let rest = median_u64(others.iter().copied())?;
    let excess = top.saturating_sub(rest) as f64;
    if excess < (64.0 * MIB).max(0.25 * rest as f64) {
        return None;
    }
    let list: Vec<String> = baselines
        .iter()
        .map(|(r, b, _)| format!("rank {r} {}", format_bytes(*b as f64)))
        .collect();
    Some(Finding {
        kind: FindingKind::Imbalance,
        title: format!(
            "Imbalance: rank {rank} holds {} more than the other ranks",
            format_bytes(excess)
        ),
        phase: None,
        basis,
        growth_per_step_bytes: None,
        evidence: vec![format!(
            "{} at the start of a step (the median over the run): {}",
            basis.name(),
            list.join(", ")
        )],
        hints: vec![
            "the other ranks' CUDA contexts on this rank's GPU (a `torch.cuda.set_device(local_rank)` missing before the first CUDA call): per-process device memory shows their pids there".to_owned(),
            "uneven shapes or batches across ranks, or a rank that keeps extra state (rank 0 gathering metrics, logging, checkpoints)".to_owned(),
        ],
    })
}

fn lower_first(title: &str) -> String {
    let mut chars = title.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
