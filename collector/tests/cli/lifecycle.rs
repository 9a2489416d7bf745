//! Exit statuses, signals, crashes of the collector itself, and outputs that cannot be written.

use std::process::Stdio;
use std::time::{Duration, Instant};

use collector::recording::read_recording;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Job, stderr};

fn wait_for(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn exit_statuses_are_passed_through() {
    for (script, code, signal) in [
        ("import sys; sys.exit(0)", 0, None),
        ("import sys; sys.exit(3)", 3, None),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            137,
            Some(9),
        ),
    ] {
        let job = Job::new(script);
        let output = job.run(&[]);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{script}: {}",
            stderr(&output)
        );
        let recording = job.recording();
        assert!(recording.end.is_some(), "{script}");
        let exit = &recording.exits[0];
        assert_eq!(exit.signal, signal, "{script}");
        if signal.is_none() {
            assert_eq!(exit.code, Some(code), "{script}");
        }
    }
}

#[test]
fn sigterm_to_the_collector_reaches_the_job_and_the_file_is_complete() {
    let job = Job::new(
        r#"
import signal, sys, time
def on_term(signum, frame):
    open("got-term", "w").write("yes")
    sys.exit(5)
signal.signal(signal.SIGTERM, on_term)
open("ready", "w").write("yes")
time.sleep(60)
"#,
    );
    let mut child = job.command(&[]).stderr(Stdio::piped()).spawn().unwrap();
    wait_for(&job.path("ready"));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(5));
    assert!(job.path("got-term").exists());
    let recording = job.recording();
    assert!(recording.warnings.is_empty(), "{:?}", recording.warnings);
    assert!(recording.end.is_some());
    assert_eq!(recording.exits[0].code, Some(5));
}

#[test]
fn a_grandchild_that_outlives_the_job_does_not_keep_the_collector_waiting() {
    // The job starts a process that inherits its stderr and outlives it (as an orphaned
    // DataLoader worker does), then exits: the collector finishes the recording and exits with
    // the job, though the pipe it reads the job's stderr from stays open.
    let job = Job::new(
        "import subprocess, sys\np = subprocess.Popen(['sleep', '120'])\nopen('sleeper.pid', 'w').write(str(p.pid))\nprint('bye', file=sys.stderr)\nsys.exit(3)\n",
    );
    let mut child = job
        .command(&[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if let Some(pid) = std::fs::read_to_string(job.path("sleeper.pid"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let status = status.expect("the collector still waited a minute after its job had exited");
    assert_eq!(status.code(), Some(3));
    let recording = job.recording();
    assert!(recording.end.is_some(), "the recording was not finished");
    assert_eq!(recording.exits[0].code, Some(3));
}

#[test]
fn a_collector_killed_with_sigkill_leaves_a_file_readable_to_within_a_second() {
    let job = Job::new(
        r#"
import time, tidemark
open("ready", "w").write("yes")
i = 0
while True:
    tidemark.step(i)
    with tidemark.phase("tick"):
        time.sleep(0.005)
    i += 1
"#,
    );
    let mut child = job.command(&[]).stderr(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    wait_for(&job.path("ready"));
    std::thread::sleep(Duration::from_millis(2500));
    let killed_after = started.elapsed();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // The job is orphaned by the kill; end it.
    let _ = std::process::Command::new("pkill")
        .arg("-f")
        .arg(job.path("job.py"))
        .status();

    let bytes = std::fs::read(job.out()).unwrap();
    let recording = read_recording(&bytes).unwrap();
    assert!(recording.end.is_none());
    assert_eq!(recording.warnings.len(), 1);
    assert!(
        recording.warnings[0].contains("incomplete"),
        "{}",
        recording.warnings[0]
    );
    let last_ns = recording.phases.last().unwrap().t_ns;
    // The collector's clock starts after `started`, so its times are at most ours. The probe's
    // edges reach it in batches of up to 0.2 s: they may lag the file's last second by that.
    let lost = killed_after.as_nanos() as u64 - last_ns;
    assert!(lost <= 1_450_000_000, "lost {} ms", lost / 1_000_000);
    let host = &recording.series[0];
    let lost = killed_after.as_nanos() as u64 - host.times_ns.last().unwrap();
    assert!(
        lost <= 1_200_000_000,
        "lost {} ms of samples",
        lost / 1_000_000
    );
}

#[test]
fn an_unwritable_output_is_refused_before_the_job_runs() {
    let job = Job::new("open('ran', 'w').write('yes')\n");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["--out", "/nonexistent-dir/run.msgpack", "--"])
        .arg(crate::python())
        .arg(job.path("job.py"))
        .current_dir(job.dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(err.contains("cannot create the recording"), "{err}");
    assert!(
        err.trim_end().ends_with("/nonexistent-dir/run.msgpack"),
        "{err}"
    );
    assert!(!job.path("ran").exists(), "the job ran");
}

#[test]
fn a_missing_program_gives_127() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.msgpack");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(&out)
        .args(["--", "no-such-program-tidemark"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert!(stderr(&output).contains("no-such-program-tidemark"));
}

#[test]
fn attaching_records_a_running_process_until_it_exits() {
    let mut sleeper = std::process::Command::new("sleep")
        .arg("1.5")
        .spawn()
        .unwrap();
    // On a busy machine the new process may not show its command line at once.
    let cmdline = format!("/proc/{}/cmdline", sleeper.id());
    for _ in 0..100 {
        if std::fs::read(&cmdline).is_ok_and(|c| c.starts_with(b"sleep")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.msgpack");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(&out)
        .args([
            "--pid",
            &sleeper.id().to_string(),
            "--host-interval-ms",
            "50",
        ])
        .output()
        .unwrap();
    sleeper.wait().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let recording = collector::recording::read_file(&out).unwrap();
    assert_eq!(recording.header.command, ["sleep", "1.5"]);
    assert!(recording.series[0].values.len() >= 10);
}

/// Runs `collector --out DIR/run.msgpack -- python DIR/job.py` inside a private mount namespace
/// after `setup` (shell commands: mounts); `None` where this machine cannot make one (not root).
fn in_private_mounts(job: &Job, setup: &str) -> Option<std::process::Output> {
    let can = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !can {
        eprintln!("skipped: this machine cannot make a private mount namespace (unshare -m)");
        return None;
    }
    let output = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!("{setup} && exec \"$@\""))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(job.out())
        .arg("--")
        .arg(crate::python())
        .arg(job.path("job.py"))
        .env_remove("TMPDIR")
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(job.dir.path())
        .output()
        .unwrap();
    Some(output)
}

const HARMLESS_JOB: &str = r#"
import sys, tidemark
print("enabled", tidemark.enabled())
with tidemark.phase("forward"):
    kept = [0] * 1000
sys.exit(3)
"#;

/// Every usual temporary folder read-only: the probe's folder goes beside the recording, so the
/// job still has `import tidemark`, its phases are recorded and its status passed through.
#[test]
fn with_a_read_only_tmp_the_probe_lives_beside_the_recording() {
    // The job's folder must not be under /tmp, which goes read-only.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("job.py"), HARMLESS_JOB).unwrap();
    let job = Job { dir };
    let setup = "for d in /tmp /var/tmp /dev/shm; do mount --bind -o ro $d $d || exit 99; done";
    let Some(output) = in_private_mounts(&job, setup) else {
        return;
    };
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "enabled True\n");
    let recording = job.recording();
    assert_eq!(recording.phases.len(), 2);
    let left: Vec<_> = std::fs::read_dir(job.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("tidemark-"))
        .collect();
    assert!(left.is_empty(), "the probe's folder is removed: {left:?}");
}

/// No `/proc`: host memory cannot be read; the collector says so and records the rest, and the
/// job runs as it would.
#[test]
fn without_proc_host_memory_is_said_missing_and_the_job_runs() {
    let job = Job::new(HARMLESS_JOB);
    let Some(output) = in_private_mounts(&job, "umount -l /proc") else {
        return;
    };
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "enabled True\n");
    let err = stderr(&output);
    assert!(err.contains("collector: cannot read /proc"), "{err}");
    let recording = job.recording();
    assert_eq!(recording.phases.len(), 2);
    assert!(
        recording
            .notes
            .iter()
            .any(|n| n.text.contains("host memory is not recorded")),
        "{:?}",
        recording.notes
    );
    assert_eq!(recording.exits[0].code, Some(3));
}

/// A memory cgroup of its own with `limit` bytes (v1, as Docker, Kubernetes and SLURM make them
/// where the machine has v1), removed when dropped; `None` where this machine cannot make one
/// (not root, or no v1 memory controller).
struct MemoryCgroup {
    path: std::path::PathBuf,
}

impl MemoryCgroup {
    fn new(limit: u64) -> Option<Self> {
        let root = std::path::Path::new("/sys/fs/cgroup/memory");
        let path = root.join(format!("tidemark-test-{}", std::process::id()));
        let made = std::fs::create_dir(&path).is_ok()
            && std::fs::write(path.join("memory.limit_in_bytes"), limit.to_string()).is_ok();
        if !made {
            let _ = std::fs::remove_dir(&path);
            eprintln!("skipped: this machine cannot make a v1 memory cgroup under {root:?}");
            return None;
        }
        Some(Self { path })
    }
}

impl MemoryCgroup {
    /// Runs the collector on `job` inside the cgroup (the shell moves itself in, then becomes
    /// the collector).
    fn run(&self, job: &Job) -> std::process::Output {
        let command = job.command(&[]);
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec \"$@\"",
                self.path.display()
            ))
            .arg("sh")
            .arg(command.get_program())
            .args(command.get_args())
            .current_dir(job.dir.path())
            .output()
            .unwrap()
    }

    /// Runs `job` in the cgroup: it exits with `code`, and the report says who killed it
    /// (`killed_by`, as the JSON spells it); the report's text.
    fn died(&self, job: &Job, code: i32, killed_by: &str) -> String {
        let output = self.run(job);
        assert_eq!(output.status.code(), Some(code), "{}", stderr(&output));
        let json = crate::report_json(&job.out());
        assert_eq!(
            json["analysis"]["ending"]["killed_by"], killed_by,
            "{:#}",
            json["analysis"]["ending"]
        );
        crate::report(&job.out())
    }
}

/// `collector check` fails on the job's recording (exit 1).
fn check_fails(job: &Job) {
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("check")
        .arg(job.out())
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Its processes are gone once the collector has returned; a cgroup lingers a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// A job that keeps 8 MiB a step inside a container-like memory cgroup of 300 MiB dies by the
/// cgroup's OOM killer, printing nothing. The collector, in the same cgroup but small, lives on:
/// the exit status (137) is passed through, the report leads with who killed it and the limit it
/// reached, and `check` fails on it.
#[test]
fn a_job_the_cgroups_oom_killer_kills_is_said_killed_at_its_limit() {
    let Some(cgroup) = MemoryCgroup::new(300 << 20) else {
        return;
    };
    let job = Job::new(
        r#"
import time, torch
kept = []
for step in range(1000):
    kept.append(torch.ones(2 << 20))  # 8 MiB a step, touched
    time.sleep(0.02)
"#,
    );
    let text = cgroup.died(&job, 137, "cgroup_oom");
    let cgroup_name = cgroup.path.file_name().unwrap().to_string_lossy();
    assert!(
        text.contains("Killed by the kernel's OOM killer")
            && text.contains(&format!("/{cgroup_name}"))
            && text.contains("300 MiB limit"),
        "{text}"
    );
    check_fails(&job);
}

/// A DataLoader worker that keeps 8 MiB of every item it loads, in a memory cgroup of 1 GiB:
/// the kernel kills the worker, the largest process; the trainer then fails ("DataLoader worker
/// … exited unexpectedly", exit status 1). The report names the worker killed by the cgroup's
/// OOM killer at its limit, with the hint about what workers copy.
#[test]
fn a_dataloader_worker_the_cgroups_oom_killer_kills_is_named() {
    let Some(cgroup) = MemoryCgroup::new(1 << 30) else {
        return;
    };
    let job = Job::new(
        r#"
import time, torch
from torch.utils.data import DataLoader, Dataset

class Grows(Dataset):
    def __init__(self):
        self.kept = []
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        self.kept.append(torch.ones(2 << 20))  # 8 MiB in the worker, touched
        time.sleep(0.02)
        return torch.zeros(4)

for batch in DataLoader(Grows(), batch_size=1, num_workers=1):
    pass
"#,
    );
    let text = cgroup.died(&job, 1, "cgroup_oom");
    assert!(
        text.contains("✗ A DataLoader worker (pid ")
            && text.contains("Killed by the kernel's OOM killer")
            && text.contains("1.00 GiB limit"),
        "{text}"
    );
    assert!(
        text.contains("DataLoader workers copy what they touch"),
        "{text}"
    );
}

/// `kill -9` from outside a job in a memory cgroup far from its limit: no OOM killer moved, and
/// the report says so, with the cgroup's peak against its limit; the exit status (137) is passed
/// through and `check` fails.
#[test]
fn a_kill_from_outside_far_from_the_limit_is_not_an_oom() {
    let Some(cgroup) = MemoryCgroup::new(2 << 30) else {
        return;
    };
    let job = Job::new(
        r#"
import os, time
import torch
open("pid.new", "w").write(str(os.getpid()))
os.replace("pid.new", "pid")
time.sleep(120)
"#,
    );
    let pid_file = job.path("pid");
    let killer = std::thread::spawn(move || {
        for _ in 0..600 {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                std::thread::sleep(std::time::Duration::from_millis(500));
                let pid = nix::unistd::Pid::from_raw(pid.trim().parse().unwrap());
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    });
    let output = cgroup.run(&job);
    assert!(killer.join().unwrap(), "the job never wrote its pid");
    assert_eq!(output.status.code(), Some(137), "{}", stderr(&output));
    let json = crate::report_json(&job.out());
    assert_eq!(
        json["analysis"]["ending"]["killed_by"], "outside",
        "{:#}",
        json["analysis"]["ending"]
    );
    let text = crate::report(&job.out());
    assert!(
        text.contains("Killed from outside (SIGKILL): not by an OOM killer")
            && text.contains("% of its 2.00 GiB limit"),
        "{text}"
    );
    check_fails(&job);
}
