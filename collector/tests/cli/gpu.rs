//! The GPU path without a GPU: stand-in `libnvidia-ml.so.1` and `libcuda.so.1` (C, built here
//! with `cc`, `tests/data/standin/`) with scripted numbers, loaded by the collector through the
//! real dynamic-loading path (`LD_LIBRARY_PATH`); and the probe's allocator path with a job whose
//! `torch.cuda` reports scripted `memory_stats`. `collector/gpu-check/` proves it on hardware.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use collector::recording::{Recording, SeriesKey, SeriesKind};

use crate::{Job, stderr};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const H100: &str = "GPU-11111111-2222-3333-4444-555555555555";
const A100: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

/// Builds a stand-in library from `tests/data/standin/{source}.c` into `dir/{name}`.
fn build(source: &str, dir: &Path, name: &str, defines: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/standin/{source}.c"));
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
        .args(defines)
        .arg("-o")
        .arg(dir.join(name))
        .arg(&c)
        .output()
        .expect("cc (a C compiler) builds the stand-in driver libraries");
    assert!(
        output.status.success(),
        "cc {}: {}",
        c.display(),
        stderr(&output)
    );
}

/// A job that writes its pid where the stand-in NVML looks for it, then idles `seconds`.
fn gpu_job(seconds: f64) -> Job {
    Job::new(&format!(
        r#"
import os, time
with open(os.environ["STANDIN_NVML_PIDFILE"], "w") as f:
    f.write(str(os.getpid()))
time.sleep({seconds})
print("done")
"#
    ))
}

/// Runs the job with the stand-ins of `libs` first on the library path.
fn run_with(job: &Job, libs: &Path, env: &[(&str, &str)], extra: &[&str]) -> Output {
    let mut command = job.command(extra);
    command
        .env("LD_LIBRARY_PATH", libs)
        .env("STANDIN_NVML_PIDFILE", job.path("pid"))
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("CUDA_DEVICE_ORDER");
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    output
}

fn both(job: &Job) -> PathBuf {
    let libs = job.path("libs");
    build("nvml", &libs, "libnvidia-ml.so.1", &[]);
    build("cuda", &libs, "libcuda.so.1", &[]);
    libs
}

fn values(recording: &Recording, kind: SeriesKind, device: u32) -> Vec<u64> {
    recording
        .series(&SeriesKey::device(kind, device))
        .map(|s| s.values.to_vec())
        .unwrap_or_default()
}

fn devices(recording: &Recording) -> Vec<(u32, &str, &str, u64)> {
    recording
        .header
        .devices
        .iter()
        .map(|d| (d.index, d.uuid.as_str(), d.name.as_str(), d.total_bytes))
        .collect()
}

/// CUDA numbers the devices the other way round from NVML: the recording uses the job's numbers
/// (`cuda:N`), matched by UUID; used and reserved memory at the asked rate; per-process memory
/// where the driver has it and "unavailable" (never 0) where it has not; the end summary.
#[test]
fn two_devices_in_cuda_order_with_rates_per_process_memory_and_the_summary() {
    let job = gpu_job(1.2);
    let libs = both(&job);
    let output = run_with(
        &job,
        &libs,
        &[("STANDIN_CUDA_ORDER", "1,0")],
        &["--device-interval-ms", "20"],
    );
    let recording = job.recording();
    assert_eq!(
        devices(&recording),
        vec![
            (0, A100, "Stand-in A100", 40 * GIB),
            (1, H100, "Stand-in H100", 80 * GIB)
        ]
    );
    let a100 = values(&recording, SeriesKind::DeviceUsed, 0);
    let h100 = values(&recording, SeriesKind::DeviceUsed, 1);
    assert!(a100.len() >= 10, "{} samples of device 0", a100.len());
    assert!(a100.iter().all(|&v| v == 2 * GIB), "{a100:?}");
    // The H100's stand-in adds 1 MiB per query: every query after the first (which found the
    // device's capacity) is in the recording, in order.
    let expected: Vec<u64> = (2..=h100.len() as u64 + 1).map(|k| GIB + k * MIB).collect();
    assert_eq!(h100, expected);
    assert!(
        values(&recording, SeriesKind::DeviceReserved, 1)
            .iter()
            .all(|&v| v == 512 * MIB)
    );
    // 20 ms between device samples (the median: a busy machine delays some).
    let times = &recording
        .series(&SeriesKey::device(SeriesKind::DeviceUsed, 0))
        .unwrap()
        .times_ns;
    let mut gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    assert!(
        (15_000_000..=40_000_000).contains(&median),
        "median gap {median} ns"
    );

    // Per process: the H100 (NVML 0) reports the job's pid with 768 MiB; the A100 cannot.
    let pid: u32 = std::fs::read_to_string(job.path("pid"))
        .unwrap()
        .parse()
        .unwrap();
    let process = |device: u32| {
        recording
            .series
            .iter()
            .filter(|s| s.key.kind == SeriesKind::ProcessDevice && s.key.device == Some(device))
            .collect::<Vec<_>>()
    };
    let h100_processes = process(1);
    let job_series = h100_processes
        .iter()
        .find(|s| s.key.pid == Some(pid))
        .expect("the job's process on the H100");
    assert!(!job_series.values.is_empty());
    assert!(job_series.values.iter().all(|v| v == 768 * MIB));
    assert!(
        process(0).iter().all(|s| s.values.is_empty()),
        "unsupported is unavailable, not 0: {:?}",
        process(0)
    );

    let err = stderr(&output);
    assert!(err.contains("peak device 2.00 GiB"), "{err}");
    let report = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .arg(job.out())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("2 GPUs"), "{text}");
    assert!(
        !text.contains("NVML was not available"),
        "NVML was there: {text}"
    );
}

/// `CUDA_VISIBLE_DEVICES` as the job sees it: through the CUDA driver when it is there, applied
/// to NVML's list by hand when it is not (an index, a UUID prefix), and an empty list is no GPU.
#[test]
fn cuda_visible_devices_picks_and_renumbers_with_and_without_libcuda() {
    let job = gpu_job(0.3);
    let libs = both(&job);
    run_with(&job, &libs, &[("CUDA_VISIBLE_DEVICES", "1")], &[]);
    let recording = job.recording();
    assert_eq!(
        devices(&recording),
        vec![(0, A100, "Stand-in A100", 40 * GIB)]
    );
    assert!(!values(&recording, SeriesKind::DeviceUsed, 0).is_empty());
    assert!(
        recording
            .series(&SeriesKey::device(SeriesKind::DeviceUsed, 1))
            .is_none()
    );

    // CUDA's order reversed: index 1 is now the H100.
    run_with(
        &job,
        &libs,
        &[("CUDA_VISIBLE_DEVICES", "1"), ("STANDIN_CUDA_ORDER", "1,0")],
        &[],
    );
    assert_eq!(
        devices(&job.recording()),
        vec![(0, H100, "Stand-in H100", 80 * GIB)]
    );

    // No libcuda: the collector applies the list to NVML's devices itself.
    let nvml_only = job.path("nvml-only");
    build("nvml", &nvml_only, "libnvidia-ml.so.1", &[]);
    run_with(
        &job,
        &nvml_only,
        &[("CUDA_VISIBLE_DEVICES", "GPU-aaaa,0")],
        &[],
    );
    assert_eq!(
        devices(&job.recording()),
        vec![
            (0, A100, "Stand-in A100", 40 * GIB),
            (1, H100, "Stand-in H100", 80 * GIB)
        ]
    );

    let output = run_with(&job, &libs, &[("CUDA_VISIBLE_DEVICES", "")], &[]);
    let recording = job.recording();
    assert!(recording.header.devices.is_empty());
    assert!(
        recording
            .notes
            .iter()
            .any(|n| n.text.contains("no GPU visible to the job")),
        "{:?} / {}",
        recording.notes,
        stderr(&output)
    );
}

/// An old driver without the v2 memory query (the v1 fallback: used, no reserved), and a device
/// that falls off the bus mid-run: unavailable from then on, said once, the job untouched.
#[test]
fn an_old_driver_and_a_device_that_disappears() {
    let job = gpu_job(0.8);
    let libs = job.path("libs");
    build("nvml", &libs, "libnvidia-ml.so.1", &["-DNO_V2"]);
    build("cuda", &libs, "libcuda.so.1", &[]);
    let output = run_with(
        &job,
        &libs,
        &[("STANDIN_NVML_LOSE_AFTER", "5")],
        &["--device-interval-ms", "20"],
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "done\n");
    let recording = job.recording();
    let h100 = values(&recording, SeriesKind::DeviceUsed, 0);
    assert!(h100.len() >= 10, "{} samples", h100.len());
    // The v1 query found the capacity, then gave the used memory.
    assert_eq!(
        devices(&recording),
        vec![
            (0, H100, "Stand-in H100", 80 * GIB),
            (1, A100, "Stand-in A100", 40 * GIB)
        ]
    );
    assert_eq!(h100[0], GIB + 2 * MIB, "the v1 query's used memory");
    assert!(values(&recording, SeriesKind::DeviceReserved, 0).is_empty());
    assert_eq!(
        values(&recording, SeriesKind::DeviceUsed, 1),
        vec![2 * GIB; 4],
        "five answers (the first gave its capacity), then lost"
    );
    let notes: Vec<&str> = recording.notes.iter().map(|n| n.text.as_str()).collect();
    assert!(
        notes.iter().any(|n| n.contains("no v2 memory query")),
        "{notes:?}"
    );
    let lost: Vec<_> = notes
        .iter()
        .filter(|n| n.starts_with("device 1 stopped answering NVML"))
        .collect();
    assert_eq!(lost.len(), 1, "{notes:?}");
}

/// The probe's allocator path: a job whose `torch.cuda` reports scripted numbers (CUDA cannot
/// start here) gets them recorded at every phase edge, with the peak reset at each phase start
/// unless `--keep-peaks`.
#[test]
fn the_probe_records_scripted_allocator_numbers_at_every_edge() {
    let job = Job::new(
        r#"
import torch, tidemark
calls = {"reset": 0, "stats": 0}
def stats(device):
    calls["stats"] += 1
    n = calls["stats"]
    return {
        "allocated_bytes": {"all": {"current": n << 20, "peak": (n + 1) << 20}},
        "reserved_bytes": {"all": {"current": 64 << 20}},
        "active_bytes": {"all": {"current": n << 20}},
        "inactive_split_bytes": {"all": {"current": 3 << 20}},
        "num_alloc_retries": 2,
        "num_ooms": 1,
    }
def reset(device):
    calls["reset"] += 1
torch.cuda.is_initialized = lambda: True
torch.cuda.current_device = lambda: 1
torch.cuda.memory_stats_as_nested_dict = stats
torch.cuda.reset_peak_memory_stats = reset
for i in range(3):
    tidemark.step(i)
    with tidemark.phase("forward"):
        pass
    with tidemark.phase("backward"):
        pass
print(calls["stats"], calls["reset"])
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "12 6\n");
    let recording = job.recording();
    assert_eq!(recording.allocator.len(), 12);
    for (n, sample) in recording.allocator.iter().enumerate() {
        let n = n as u64 + 1;
        assert_eq!(sample.device, 1);
        assert_eq!(
            (sample.allocated, sample.reserved, sample.peak),
            (n * MIB, 64 * MIB, (n + 1) * MIB)
        );
        assert_eq!(
            (
                sample.active,
                sample.inactive_split,
                sample.retries,
                sample.ooms
            ),
            (n * MIB, 3 * MIB, 2, 1)
        );
        assert_eq!(sample.t_ns, recording.phases.t_ns(n as usize - 1));
    }
    let output = job.run(&["--keep-peaks"]);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "12 0\n");
}

/// A training process whose device memory outside PyTorch's cache grows 8 MiB a step (the
/// stand-in driver counts what the job says it holds; its `torch.cuda` reports what PyTorch
/// reserved): a leak that PyTorch's numbers cannot show, found from the driver's count less
/// PyTorch's, and `check` fails on it. The same growth inside PyTorch's cache (reserved rising
/// with the driver's count) is PyTorch's and is no such finding, nor is a flat context. The
/// driver's per-process count is read once a second: each job steps for 18 s (about 18 readings, 12 needed to judge after warm-up and the last step), the three at once.
#[test]
fn device_memory_outside_pytorch_that_grows_is_a_finding() {
    use collector::analysis::{FindingKind, analyze};
    const JOB: &str = r#"
import os, time
import torch, tidemark
case = os.environ["CASE"]
reserved = 512 << 20
torch.cuda.is_initialized = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.memory_stats_as_nested_dict = lambda device=None: {
    "allocated_bytes": {"all": {"current": reserved - (64 << 20), "peak": reserved}},
    "reserved_bytes": {"all": {"current": reserved}},
    "active_bytes": {"all": {"current": reserved - (64 << 20)}},
    "inactive_split_bytes": {"all": {"current": 0}},
    "num_alloc_retries": 0,
    "num_ooms": 0,
}
torch.cuda.reset_peak_memory_stats = lambda device=None: None
path = os.environ["STANDIN_NVML_PIDFILE"]
outside = 300 << 20  # the CUDA context
for step in range(300):
    if case == "outside":
        outside += 8 << 20
    elif case == "inside":
        reserved += 8 << 20
    with open(path + ".new", "w") as f:
        f.write(f"{os.getpid()} {reserved + outside}")
    os.replace(path + ".new", path)
    tidemark.step(step)
    with tidemark.phase("forward"):
        time.sleep(0.03)
    with tidemark.phase("backward"):
        time.sleep(0.03)
"#;
    let runs: Vec<(&str, Job)> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["outside", "inside", "flat"]
            .into_iter()
            .map(|case| {
                scope.spawn(move || {
                    let job = Job::new(JOB);
                    let libs = both(&job);
                    run_with(&job, &libs, &[("CASE", case)], &[]);
                    (case, job)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (case, job) in &runs {
        let recording = job.recording();
        let samples = recording
            .series
            .iter()
            .filter(|s| s.key.kind == SeriesKind::ProcessDevice && s.key.device == Some(0))
            .map(|s| s.values.len())
            .sum::<usize>();
        assert!(samples >= 12, "{case}: {samples} samples of the process");
        let analysis = analyze(&recording);
        let found = analysis.finding(FindingKind::NonPytorchGrowth);
        if *case != "outside" {
            assert!(found.is_none(), "{case}: {found:#?}");
            continue;
        }
        let found = found.unwrap_or_else(|| panic!("{:#?}", analysis.findings));
        assert!(
            found
                .title
                .starts_with("Device memory outside PyTorch's cache leaks on GPU 0: +8"),
            "{found:#?}"
        );
        let rate = found.growth_per_step_bytes.unwrap();
        assert!((rate - 8.0 * MIB as f64).abs() < 0.5 * MIB as f64, "{rate}");
        assert!(
            found.evidence[0].contains("outside its cache"),
            "{:#?}",
            found.evidence
        );
        let check = Command::new(env!("CARGO_BIN_EXE_collector"))
            .arg("check")
            .arg(job.out())
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
        assert!(
            String::from_utf8_lossy(&check.stdout)
                .contains("FAILED: Device memory outside PyTorch's cache leaks on GPU 0"),
            "{}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
}
