//! The rules on the devices as a whole (NVML): memory used near the capacity, other processes on
//! the GPU, and memory this job holds outside PyTorch's cache.

use super::phases;
use super::rules::median_u64;
use super::{Analysis, Basis, Finding, FindingKind, GIB};
use crate::format::{format_bytes, format_duration};
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
