//! Device memory from NVML (loaded at run time; nothing here needs a GPU to build or start).
//!
//! The devices are those the job can see, under the index the job uses (`cuda:N`): the CUDA
//! driver (through `cudarc`, loaded at run time) lists them as the job will, with
//! `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` applied, and each is matched to its NVML handle
//! by UUID. Only `cuInit` and device queries are called: no context, so no device memory is
//! taken (never `cuMemGetInfo`). Without libcuda, `CUDA_VISIBLE_DEVICES` is applied to NVML's
//! list by hand.

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
        let total_bytes = match device.memory_info() {
            Ok(memory) => memory.total,
            // An old driver: the v1 query has the capacity too.
            Err(_) => MemoryV1::load()
                .and_then(|v1| v1.query(&device))
                .map_or(0, |m| m.total),
        };
        all.push((index, uuid, name, total_bytes));
    }
    let mut notes = Vec::new();
    let nvml_uuids: Vec<&str> = all.iter().map(|d| d.1.as_str()).collect();
    let cuda = cuda_uuids();
    let visible: Vec<usize> = match &cuda {
        Ok(cuda) => cuda
            .iter()
            .filter_map(|uuid| nvml_uuids.iter().position(|u| u == uuid))
            .collect(),
        Err(_) => match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(list) => visible_devices(&list, &nvml_uuids),
            Err(_) => (0..all.len()).collect(),
        },
    };
    if let Ok(cuda) = &cuda
        && visible.len() < cuda.len()
    {
        notes.push(format!(
            "{} of the {} CUDA devices have no NVML counterpart (MIG instances?): their memory is not recorded",
            cuda.len() - visible.len(),
            cuda.len()
        ));
    }
    if let Err(why) = &cuda
        && std::env::var("CUDA_DEVICE_ORDER").as_deref() != Ok("PCI_BUS_ID")
    {
        let mut names: Vec<&str> = visible.iter().map(|&i| all[i].2.as_str()).collect();
        names.dedup();
        if names.len() > 1 {
            notes.push(format!("the CUDA driver cannot list the devices ({why}), the GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may number them differently from NVML, so cuda:N may not be the device recorded as N"));
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

/// The UUIDs of the devices the CUDA driver shows this process (and so the job, which inherits
/// its environment), in CUDA's order: `cuda:0` first.
fn cuda_uuids() -> Result<Vec<String>, String> {
    use cudarc::driver::result;
    // SAFETY: only tries to load libcuda, to find out whether it is there; cudarc panics on its
    // first call when the library is missing, so this must come first.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("libcuda not found".to_owned());
    }
    result::init().map_err(|err| format!("cuInit failed: {err:?}"))?;
    let count = result::device::get_count().map_err(|err| format!("{err:?}"))?;
    (0..count)
        .map(|ordinal| {
            let device = result::device::get(ordinal).map_err(|err| format!("{err:?}"))?;
            let uuid = result::device::get_uuid(device).map_err(|err| format!("{err:?}"))?;
            Ok(format_uuid(&uuid.bytes.map(|b| b as u8)))
        })
        .collect()
}

/// The driver's 16 UUID bytes as NVML writes them: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
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

/// NVML's first memory query (`nvmlDeviceGetMemoryInfo`), for drivers that lack the `_v2` one
/// nvml-wrapper calls: it has `used` but no `reserved`.
struct MemoryV1 {
    lib: nvml_wrapper_sys::bindings::NvmlLib,
}

impl MemoryV1 {
    fn load() -> Option<Self> {
        // SAFETY: loads the NVML library that nvml-wrapper already loaded; only the one function
        // below is called, with its documented signature.
        unsafe { nvml_wrapper_sys::bindings::NvmlLib::new("libnvidia-ml.so.1") }
            .ok()
            .map(|lib| Self { lib })
    }

    fn used(&self, device: &nvml_wrapper::Device<'_>) -> Option<u64> {
        self.query(device).map(|m| m.used)
    }

    fn query(
        &self,
        device: &nvml_wrapper::Device<'_>,
    ) -> Option<nvml_wrapper_sys::bindings::nvmlMemory_t> {
        let mut memory = nvml_wrapper_sys::bindings::nvmlMemory_t {
            total: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: the handle comes from a live `Device` of the same library, and `memory` is a
        // valid place for the result.
        let status = unsafe {
            self.lib
                .nvmlDeviceGetMemoryInfo(device.handle(), &mut memory)
        };
        (status == nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_SUCCESS).then_some(memory)
    }
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
    let mut v1: Option<Option<MemoryV1>> = None;
    // Whether each device answered its last memory query: a device that stops answering (fell
    // off the bus, reset, MIG reconfigured) is noted once each time it goes, and comes back.
    let mut answering = vec![true; handles.len()];
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let t_ns = clock.now_ns();
        let mut values = Vec::with_capacity(handles.len() * 2);
        for (k, (job, device)) in handles.iter().enumerate() {
            let mut error = None;
            let (used, reserved) = match device.memory_info() {
                Ok(memory) => (Some(memory.used), Some(memory.reserved)),
                Err(
                    nvml_wrapper::error::NvmlError::FunctionNotFound
                    | nvml_wrapper::error::NvmlError::FailedToLoadSymbol(_),
                ) => {
                    let v1 = v1.get_or_insert_with(|| {
                        let _ = tx.send(Msg::Note(
                            "the driver's NVML has no v2 memory query: device reserved memory is not recorded".to_owned(),
                        ));
                        MemoryV1::load()
                    });
                    (v1.as_ref().and_then(|v1| v1.used(device)), None)
                }
                Err(err) => {
                    error = Some(err);
                    (None, None)
                }
            };
            if answering[k] != used.is_some() {
                answering[k] = used.is_some();
                let at = t_ns as f64 / 1e9;
                let text = match error {
                    Some(err) => format!(
                        "device {job} stopped answering NVML at {at:.1} s ({err}): its memory is unavailable from then on"
                    ),
                    None if used.is_none() => format!(
                        "device {job} stopped answering NVML at {at:.1} s: its memory is unavailable from then on"
                    ),
                    None => format!("device {job} answers NVML again at {at:.1} s"),
                };
                let _ = tx.send(Msg::Note(text));
            }
            values.push((SeriesKey::device(SeriesKind::DeviceUsed, *job), used));
            values.push((
                SeriesKey::device(SeriesKind::DeviceReserved, *job),
                reserved,
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
    fn uuids_are_written_as_nvml_writes_them() {
        let bytes = [
            0x5f, 0x3c, 0x2a, 0x9e, 0x0b, 0x1d, 0x4c, 0x7e, 0x9a, 0x8f, 0x1e, 0x2d, 0x3c, 0x4b,
            0x5a, 0x69,
        ];
        assert_eq!(
            format_uuid(&bytes),
            "GPU-5f3c2a9e-0b1d-4c7e-9a8f-1e2d3c4b5a69"
        );
    }

    #[test]
    fn without_libcuda_the_driver_is_not_touched() {
        // No GPU driver on the machines that build this: the check must fail cleanly, no panic.
        if !std::path::Path::new("/dev/nvidiactl").exists() {
            assert!(cuda_uuids().is_err());
        }
    }

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
