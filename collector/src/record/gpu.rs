//! Device memory from NVML (loaded at run time; nothing here needs a GPU to build or start).
//!
//! The devices are those the job can see: `CUDA_VISIBLE_DEVICES` (indices or UUIDs) is applied
//! to NVML's list, and each device is recorded under the index the job uses (`cuda:N`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use collector::recording::{Device, SeriesKey, SeriesKind};
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use super::clock::{Clock, Ticker};
use super::host::ProcessTree;
use super::recorder::Msg;

/// NVML and the devices to record.
pub struct Gpus {
    nvml: Nvml,
    /// (the job's index, NVML's index)
    devices: Vec<(u32, u32)>,
}

/// Opens NVML and picks the job's devices. The error is one line for the user.
pub fn open(selection: Option<&[u32]>) -> Result<(Gpus, Vec<Device>, Vec<String>), String> {
    let nvml = Nvml::init()
        .map_err(|err| format!("NVML is not available ({err}): device memory is not recorded"))?;
    let count = nvml.device_count().map_err(|err| {
        format!("NVML cannot count devices ({err}): device memory is not recorded")
    })?;
    let mut all = Vec::new();
    for index in 0..count {
        let device = nvml
            .device_by_index(index)
            .map_err(|err| format!("NVML cannot open device {index} ({err})"))?;
        let uuid = device.uuid().unwrap_or_default();
        let name = device.name().unwrap_or_else(|_| "unknown GPU".to_owned());
        let total_bytes = device.memory_info().map(|m| m.total).unwrap_or(0);
        all.push((index, uuid, name, total_bytes));
    }
    let mut notes = Vec::new();
    let visible: Vec<usize> = match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(list) => visible_devices(&list, &all.iter().map(|d| d.1.as_str()).collect::<Vec<_>>()),
        Err(_) => (0..all.len()).collect(),
    };
    if std::env::var("CUDA_DEVICE_ORDER").as_deref() != Ok("PCI_BUS_ID") {
        let mut names: Vec<&str> = visible.iter().map(|&i| all[i].2.as_str()).collect();
        names.dedup();
        if names.len() > 1 {
            notes.push("the GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may number them differently from NVML, so cuda:N may not be the device recorded as N".to_owned());
        }
    }
    let mut devices = Vec::new();
    let mut picked = Vec::new();
    for (job_index, &i) in visible.iter().enumerate() {
        let job_index = job_index as u32;
        if selection.is_some_and(|s| !s.contains(&job_index)) {
            continue;
        }
        let (nvml_index, uuid, name, total_bytes) = &all[i];
        devices.push(Device {
            index: job_index,
            name: name.clone(),
            uuid: uuid.clone(),
            total_bytes: *total_bytes,
        });
        picked.push((job_index, *nvml_index));
    }
    if picked.is_empty() {
        return Err("no GPU visible to the job: device memory is not recorded".to_owned());
    }
    Ok((
        Gpus {
            nvml,
            devices: picked,
        },
        devices,
        notes,
    ))
}

/// Applies `CUDA_VISIBLE_DEVICES` (indices, or UUIDs and their unique prefixes) to the devices'
/// UUIDs; like CUDA, stops at the first entry that names no device.
pub fn visible_devices(list: &str, uuids: &[&str]) -> Vec<usize> {
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let found = if let Ok(index) = entry.parse::<usize>() {
            (index < uuids.len()).then_some(index)
        } else if entry.starts_with("GPU-") {
            let matches: Vec<usize> = (0..uuids.len())
                .filter(|&i| uuids[i].starts_with(entry))
                .collect();
            (matches.len() == 1).then(|| matches[0])
        } else {
            None
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => break,
        }
    }
    out
}

/// Samples every device's used and reserved memory each `interval`, and the job's processes'
/// device memory each `process_interval`, until `stop` is set.
pub fn sample(
    gpus: Gpus,
    clock: Clock,
    interval: Duration,
    process_interval: Duration,
    root_pid: u32,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
) {
    let Gpus { nvml, devices } = gpus;
    let handles: Vec<_> = devices
        .iter()
        .filter_map(|&(job, nvml_index)| nvml.device_by_index(nvml_index).ok().map(|d| (job, d)))
        .collect();
    let mut ticker = Ticker::new(clock, interval);
    let mut process_ticker = Ticker::new(clock, process_interval);
    let mut tree = ProcessTree::new(root_pid);
    let mut warned_unavailable = false;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let t_ns = clock.now_ns();
        let mut values = Vec::with_capacity(handles.len() * 2);
        for (job, device) in &handles {
            let memory = device.memory_info().ok();
            values.push((
                SeriesKey::device(SeriesKind::DeviceUsed, *job),
                memory.as_ref().map(|m| m.used),
            ));
            values.push((
                SeriesKey::device(SeriesKind::DeviceReserved, *job),
                memory.as_ref().map(|m| m.reserved),
            ));
        }
        if tx
            .send(Msg::Samples {
                source: "device",
                t_ns,
                values,
            })
            .is_err()
        {
            return;
        }
        if process_ticker.until_next().is_zero() || stopping {
            process_ticker.tick();
            let pids = tree.pids().to_vec();
            let mut values = Vec::new();
            for (job, device) in &handles {
                let processes = device.running_compute_processes().unwrap_or_default();
                let mut found = false;
                for process in processes.iter().filter(|p| pids.contains(&p.pid)) {
                    if let UsedGpuMemory::Used(bytes) = process.used_gpu_memory {
                        found = true;
                        let key = SeriesKey {
                            kind: SeriesKind::ProcessDevice,
                            device: Some(*job),
                            pid: Some(process.pid),
                        };
                        values.push((key, Some(bytes)));
                    }
                }
                if !found {
                    // The driver reports none of the job's processes: unavailable, not zero.
                    let key = SeriesKey {
                        kind: SeriesKind::ProcessDevice,
                        device: Some(*job),
                        pid: Some(root_pid),
                    };
                    values.push((key, None));
                    if !warned_unavailable && !processes.is_empty() {
                        warned_unavailable = true;
                        let text = "the driver reports GPU processes but none of the job's (a container's PID namespace, or MIG): per-process device memory is unavailable".to_owned();
                        let _ = tx.send(Msg::Note(text));
                    }
                }
            }
            let t_ns = clock.now_ns();
            if tx
                .send(Msg::Samples {
                    source: "process",
                    t_ns,
                    values,
                })
                .is_err()
            {
                return;
            }
        }
        if stopping {
            return;
        }
        if let Some(late_ns) = ticker.tick() {
            let _ = tx.send(Msg::Late {
                sampler: "device",
                late_ns,
            });
        }
        std::thread::sleep(ticker.until_next());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices_by_index_and_uuid() {
        let uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-abcd-3"];
        assert_eq!(visible_devices("2,0", &uuids), vec![2, 0]);
        assert_eq!(visible_devices("GPU-bbbb", &uuids), vec![1]);
        // An ambiguous prefix, and everything after it, names no device.
        assert_eq!(visible_devices("1,GPU-a,0", &uuids), vec![1]);
        assert_eq!(visible_devices("", &uuids), Vec::<usize>::new());
        assert_eq!(visible_devices("5", &uuids), Vec::<usize>::new());
    }
}
