//! The collector's own costs, measured on real processes (issue #3's budgets):
//!
//! - CPU of the collector wrapping an idle job at the default rates (budget < 1 % of one core);
//! - the probe's cost per phase edge in CPython, manual API, no torch (budget ≤ 5 µs);
//! - host sampling at 1 kHz on a 10-process tree (budget: sustained);
//! - how long a stack dump on request pauses the thread that takes the signal, in a process of
//!   9 threads 40 frames deep (budget ≤ 10 ms), and that the collector's asks reach it.
//!
//! `cargo bench -p tidemark-collector --bench collector` (60 s idle run; set
//! `TIDEMARK_BENCH_IDLE_S` for a shorter one).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../tests/support/python.rs"]
mod python;
use python::python;

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds_of(&format!("/proc/{pid}/stat"))
}

/// utime + stime of a process' thread of this name, in seconds.
fn thread_cpu_seconds(pid: u32, name: &str) -> Option<f64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == name)
        })
        .and_then(|task| cpu_seconds_of(&task.path().join("stat").to_string_lossy()))
}

fn cpu_seconds_of(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(ticks / hz as f64)
}

fn idle_cpu(dir: &Path) {
    let seconds: u64 = std::env::var("TIDEMARK_BENCH_IDLE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut child = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(dir.join("idle.msgpack"))
        .args(["--", "sleep", &(seconds + 2).to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the collector");
    std::thread::sleep(Duration::from_secs(1));
    let watcher = || thread_cpu_seconds(child.id(), "stall-watch").unwrap_or(0.0);
    let (cpu0, watch0, t0) = (
        cpu_seconds(child.id()).unwrap_or(0.0),
        watcher(),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs(seconds));
    let (cpu1, watch1, wall) = (
        cpu_seconds(child.id()).unwrap_or(0.0),
        watcher(),
        t0.elapsed(),
    );
    let _ = child.wait();
    println!(
        "idle job, default rates: collector used {:.3} % of one core over {:.0} s ({:.3} s CPU), of which the stall watcher {:.4} %",
        100.0 * (cpu1 - cpu0) / wall.as_secs_f64(),
        wall.as_secs_f64(),
        cpu1 - cpu0,
        100.0 * (watch1 - watch0) / wall.as_secs_f64(),
    );
}

fn probe_edge_cost(dir: &Path) {
    let script = dir.join("edges.py");
    std::fs::write(
        &script,
        r#"
import time, tidemark
assert tidemark.enabled()
n = 200_000
best = None
for _ in range(5):
    start = time.perf_counter_ns()
    for i in range(n // 2):
        with tidemark.phase("forward"):
            pass
    per_edge = (time.perf_counter_ns() - start) / n
    best = per_edge if best is None else min(best, per_edge)
    time.sleep(0.2)  # let the collector drain, so that each round starts with an empty queue
# Isolated edges (1.5 ms apart): each one is its own datagram, one system call. The gap is spent
# computing, as a training loop does; after a sleep this VM runs everything ~8x slower for a while.
isolated = []
for i in range(2000):
    until = time.perf_counter_ns() + 1_500_000
    while time.perf_counter_ns() < until:
        pass
    start = time.perf_counter_ns()
    tidemark.begin("eval")
    isolated.append(time.perf_counter_ns() - start)
isolated.sort()
print(f"{best / 1000:.2f} {isolated[len(isolated) // 2] / 1000:.2f}")
"#,
    )
    .expect("write the script");
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(dir.join("edges.msgpack"))
        .args(["--no-auto-phases", "--"])
        .arg(python())
        .arg(&script)
        .output()
        .expect("run the collector");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut numbers = stdout.split_whitespace();
    let (batched, isolated) = (numbers.next().unwrap_or("?"), numbers.next().unwrap_or("?"));
    let recording =
        collector::recording::read_file(&dir.join("edges.msgpack")).expect("read the recording");
    println!(
        "probe, manual API, CPython: {batched} µs per phase edge back to back (best of 5 rounds of 200000, batched), {isolated} µs per isolated edge (median of 2000, one send each); {} delivered, {} dropped",
        recording.phases.len(),
        recording.dropped_total()
    );
}

fn host_sampling_1khz(dir: &Path) {
    let seconds = 5.0;
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(dir.join("tree.msgpack"))
        .args(["--host-interval-ms", "1", "--no-probe", "--", "sh", "-c"])
        .arg("for i in 1 2 3 4 5 6 7 8 9; do sleep 6 & done; sleep 5.5; wait")
        .output()
        .expect("run the collector");
    assert!(output.status.success());
    let recording =
        collector::recording::read_file(&dir.join("tree.msgpack")).expect("read the recording");
    let host = &recording.series[0];
    let times = &host.times_ns;
    // The steady part: while all 10 processes run.
    let window: Vec<u64> = times
        .iter()
        .copied()
        .filter(|t| (500_000_000..5_000_000_000).contains(t))
        .collect();
    let rate = window.len() as f64 / 4.5;
    let worst_gap_ms = window.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as f64 / 1e6;
    let late = recording
        .notes
        .iter()
        .find(|n| n.text.contains("host sampler"))
        .map_or("never fell behind".to_owned(), |n| n.text.clone());
    println!(
        "host sampling at 1 kHz on a 10-process tree: {rate:.0} samples/s over {seconds} s, worst gap {worst_gap_ms:.1} ms; {late}"
    );
}

/// The probe's stack dump (faulthandler, all threads) timed in the process itself: the signal
/// sent to itself is handled before `os.kill` returns, so the call's time is the pause. Then the
/// job stops stepping, and the collector's own asks (`--stall-after 0.5`) are counted.
fn stack_dump_pause(dir: &Path) {
    let script = dir.join("stacks.py");
    std::fs::write(
        &script,
        r#"
import os, signal, threading, time, tidemark
assert tidemark.enabled()
from tidemark import _stacks
number = signal.SIGRTMIN + _stacks._OFFSET
assert _stacks._file is not None, "the probe registered no stack dump"
def deep(n, event):
    return deep(n - 1, event) if n else event.wait()
events = [threading.Event() for _ in range(8)]
for e in events:
    threading.Thread(target=deep, args=(40, e), daemon=True).start()
time.sleep(0.2)
pauses = []
for _ in range(200):
    start = time.perf_counter_ns()
    os.kill(os.getpid(), number)
    pauses.append(time.perf_counter_ns() - start)
pauses.sort()
for step in range(5):
    tidemark.step(step)
    with tidemark.phase("forward"):
        time.sleep(0.01)
time.sleep(4)  # no step: the collector asks at 0.5, 1, 2 s
print(f"{pauses[len(pauses) // 2] / 1e3:.0f} {pauses[-1] / 1e3:.0f}")
for e in events:
    e.set()
"#,
    )
    .expect("write the script");
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(dir.join("stacks.msgpack"))
        .args(["--no-auto-phases", "--stall-after", "0.5", "--"])
        .arg(python())
        .arg(&script)
        .output()
        .expect("run the collector");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut numbers = stdout.split_whitespace();
    let (median, worst) = (numbers.next().unwrap_or("?"), numbers.next().unwrap_or("?"));
    let recording =
        collector::recording::read_file(&dir.join("stacks.msgpack")).expect("read the recording");
    let answered = recording
        .stalls
        .iter()
        .filter(|s| s.processes.iter().any(|p| p.threads.len() >= 9))
        .count();
    println!(
        "stack dump on request, 9 threads 40 frames deep: {median} µs median, {worst} µs worst of 200 (the pause of the thread that takes it); the collector asked {} times in the stall, answered with all 9 threads {answered} times",
        recording.stalls.len()
    );
}

fn main() {
    // Criterion-style filters are ignored: this bench always runs all four measurements.
    let dir = tempfile::tempdir().expect("a temporary folder");
    stack_dump_pause(dir.path());
    host_sampling_1khz(dir.path());
    probe_edge_cost(dir.path());
    idle_cpu(dir.path());
}
