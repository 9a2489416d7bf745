//! The rules on the devices as a whole (NVML): memory used near the capacity, other processes on
//! the GPU, and memory this job holds outside PyTorch's cache.

use super::phases::{self, StepStart};
use super::rules::{SHORT_RUN_STEPS, leaks_on_its_own, median_u64};
use super::{Analysis, Basis, Finding, FindingKind, GIB, MIN_STEPS};
use crate::format::{format_bytes, format_duration, format_p};
use crate::recording::{Recording, Series, SeriesKey, SeriesKind};

/// One device's used memory over the run, and its processes' share where the driver has it.
struct DeviceUse {
    index: u32,
    total_bytes: u64,
    peak: u64,
    used_median: f64,
    /// The median device memory of the job's processes, summed (`None`: unavailable).
    own_total: Option<f64>,
}

fn device_use(recording: &Recording) -> Vec<DeviceUse> {
    let mut out = Vec::new();
    for device in &recording.header.devices {
        let Some(used) = recording
            .series(&SeriesKey::device(SeriesKind::DeviceUsed, device.index))
            .filter(|s| !s.values.is_empty())
        else {
            continue;
        };
        let own: Vec<&Series> = recording
            .series
            .iter()
            .map(|s| &**s)
            .filter(|s| {
                s.key.kind == SeriesKind::ProcessDevice && s.key.device == Some(device.index)
            })
            .filter(|s| !s.values.is_empty())
            .collect();
        out.push(DeviceUse {
            index: device.index,
            total_bytes: device.total_bytes,
            peak: used.values.iter().max().unwrap_or(0),
            used_median: median_u64(used.values.iter()).unwrap_or(0) as f64,
            own_total: (!own.is_empty()).then(|| {
                own.iter()
                    .map(|s| median_u64(s.values.iter()).unwrap_or(0) as f64)
                    .sum()
            }),
        });
    }
    out
}

/// The projected out-of-memory error, or a device that ran at 90 % of its memory.
fn capacity_pressure(devices: &[DeviceUse], analysis: &mut Analysis) {
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
        return;
    }
    for d in devices {
        if d.total_bytes > 0 && d.peak as f64 >= 0.9 * d.total_bytes as f64 {
            analysis.findings.push(Finding {
                kind: FindingKind::CapacityPressure,
                title: format!(
                    "GPU {} ran at {:.0}% of its memory",
                    d.index,
                    100.0 * d.peak as f64 / d.total_bytes as f64
                ),
                phase: None,
                basis: Basis::DeviceUsed,
                growth_per_step_bytes: None,
                evidence: vec![format!(
                    "peak {} of {}",
                    format_bytes(d.peak as f64),
                    format_bytes(d.total_bytes as f64)
                )],
                hints: vec!["a slightly larger batch or a longer sequence will not fit".to_owned()],
            });
        }
    }
}

/// The device holds much more than the job's processes: someone else's memory.
fn other_processes(devices: &[DeviceUse], analysis: &mut Analysis) {
    for d in devices {
        let Some(own_total) = d.own_total else {
            continue;
        };
        if d.used_median - own_total >= GIB.max(0.2 * d.used_median) {
            analysis.findings.push(Finding {
                kind: FindingKind::OtherProcesses,
                title: format!(
                    "Other processes use {} on GPU {}",
                    format_bytes(d.used_median - own_total),
                    d.index
                ),
                phase: None,
                basis: Basis::DeviceUsed,
                growth_per_step_bytes: None,
                evidence: vec![format!(
                    "the device had {} in use, the job's processes {}",
                    format_bytes(d.used_median),
                    format_bytes(own_total)
                )],
                hints: vec!["a shared GPU: what fits when alone may not fit here; check `nvidia-smi` for the other processes".to_owned()],
            });
        }
    }
}

/// The job's device memory well above what PyTorch reserved: the CUDA context and libraries.
fn non_pytorch_memory(
    devices: &[DeviceUse],
    allocator: &phases::AllocatorIndex<'_>,
    analysis: &mut Analysis,
) {
    for d in devices {
        let own_or_used = d.own_total.unwrap_or(d.used_median);
        if let Some(reserved) = allocator.median_reserved(d.index)
            && own_or_used - reserved as f64 >= GIB.max(0.25 * own_or_used)
        {
            let whose = if d.own_total.is_none() {
                "the device's used memory (per-process numbers unavailable, so other processes are included)"
            } else {
                "the job's own device memory"
            };
            analysis.findings.push(Finding {
                kind: FindingKind::NonPytorchMemory,
                title: format!(
                    "{} on GPU {} is not PyTorch's",
                    format_bytes(own_or_used - reserved as f64),
                    d.index
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

/// The rules about the devices themselves, run whether or not the trend could be judged.
pub(super) fn devices_rules(
    recording: &Recording,
    allocator: &phases::AllocatorIndex<'_>,
    analysis: &mut Analysis,
) {
    let devices = device_use(recording);
    capacity_pressure(&devices, analysis);
    other_processes(&devices, analysis);
    non_pytorch_memory(&devices, allocator, analysis);
}

/// The training process' device memory outside PyTorch's cache, rising from step to step: the
/// driver's count of the process' memory (NVML) less what PyTorch reserved at the last phase
/// edge before each sample, the lowest of each step (a sample taken after the cache grew, before
/// the next edge said so, reads high), judged as a leak of the step series is. A leak that
/// PyTorch's own numbers cannot show: NCCL communicators made again and again, a library's or
/// an extension's own `cudaMalloc` never freed.
pub(super) fn outside_pytorch_growth(
    recording: &Recording,
    allocator: &phases::AllocatorIndex<'_>,
    starts: &[StepStart],
    analysis: &mut Analysis,
) {
    let (Some(device), Some(pid), Some(last_start)) =
        (allocator.device(), allocator.pid(), starts.last())
    else {
        return;
    };
    // (step, outside, used, reserved) at the lowest reading of each step; the last step, which
    // may not have ended, is left out.
    let mut lowest: Vec<(u64, f64, u64, u64)> = Vec::new();
    let mut k = 0;
    for (t, value, reserved) in recording.driver_and_cache(pid, device) {
        if t < starts[0].t_ns || t >= last_start.t_ns {
            continue;
        }
        while starts.get(k + 1).is_some_and(|s| s.t_ns <= t) {
            k += 1;
        }
        let outside = value as f64 - reserved as f64;
        let step = starts[k].step;
        match lowest.last_mut() {
            Some(last) if last.0 == step => {
                if outside < last.1 {
                    *last = (step, outside, value, reserved);
                }
            }
            _ => lowest.push((step, outside, value, reserved)),
        }
    }
    if lowest.len() < MIN_STEPS {
        return;
    }
    let steps: Vec<f64> = lowest.iter().map(|p| p.0 as f64).collect();
    let values: Vec<Option<f64>> = lowest.iter().map(|p| Some(p.1)).collect();
    let warmup = (lowest.len() / 10).max(1);
    let short = lowest.len() < SHORT_RUN_STEPS;
    let Some((trend, _)) = leaks_on_its_own(&steps, &values, warmup, Basis::DeviceUsed, short)
    else {
        return;
    };
    let (first, last) = (lowest[warmup], lowest[lowest.len() - 1]);
    analysis.findings.push(Finding {
        kind: FindingKind::NonPytorchGrowth,
        title: format!(
            "Device memory outside PyTorch's cache leaks on GPU {device}: +{}/step",
            format_bytes(trend.slope_per_step)
        ),
        phase: None,
        basis: Basis::DeviceUsed,
        growth_per_step_bytes: Some(trend.slope_per_step),
        evidence: vec![
            format!(
                "process {pid} held {} of the device at step {} and {} at step {} (the driver's count, NVML), while PyTorch reserved {} and {}: {} → {} outside its cache",
                format_bytes(first.2 as f64),
                first.0,
                format_bytes(last.2 as f64),
                last.0,
                format_bytes(first.3 as f64),
                format_bytes(last.3 as f64),
                format_bytes(first.1),
                format_bytes(last.1)
            ),
            format!(
                "{} steps after warm-up with a reading of the driver's (`--process-interval-ms`; the lowest of a step): slope {}/step, p = {}, noise {}",
                lowest.len() - warmup,
                format_bytes(trend.slope_per_step),
                format_p(trend.p_value),
                format_bytes(trend.noise_bytes)
            ),
        ],
        hints: vec![
            "PyTorch's numbers (`torch.cuda.memory_reserved()`, a memory snapshot) cannot show this memory; `nvidia-smi` does".to_owned(),
            "what allocates outside PyTorch's cache: NCCL communicators made again and again (a `dist.new_group` or process group per step, each with its own buffers: make them once), a library's or a CUDA extension's own `cudaMalloc` that is never freed (CuPy, TensorRT, custom kernels), CUDA graphs captured again".to_owned(),
        ],
    });
}
