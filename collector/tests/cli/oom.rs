//! The job that died: real jobs under the collector print PyTorch's out-of-memory message (in
//! each form PyTorch has printed it) after the allocator situation each cause needs — a rising
//! baseline, a phase that spikes, a large cache of unusable pieces, others' memory — and the
//! verdict, the JSON and `collector check` name the cause with its numbers. CUDA cannot run here:
//! the jobs' `torch` is a stand-in module whose `torch.cuda` reports scripted `memory_stats`.

use collector::analysis::{FindingKind, OomCause, analyze};
use collector::recording::Phase;

use crate::{Job, stderr};

const GIB: u64 = 1 << 30;

/// A stand-in `torch` whose allocator numbers the job sets, and a training loop with manual
/// phases: each step starts at `base(i)` bytes allocated, forward adds `peak(i)` at its peak and
/// keeps half of it until backward.
const PRELUDE: &str = r#"
import sys, types, tidemark
GIB, MIB = 1 << 30, 1 << 20
state = {"allocated": 0, "peak": 0}
def stats(device):
    a = state["allocated"]
    return {
        "allocated_bytes": {"all": {"current": a, "peak": max(state["peak"], a)}},
        "reserved_bytes": {"all": {"current": max(state["peak"], a) + 256 * MIB}},
        "active_bytes": {"all": {"current": a}},
        "inactive_split_bytes": {"all": {"current": 0}},
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }
torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(
    is_initialized=lambda: True,
    current_device=lambda: 0,
    memory_stats_as_nested_dict=stats,
    reset_peak_memory_stats=lambda device: state.update(peak=state["allocated"]),
)
sys.modules["torch"] = torch

def train(steps, base, peak):
    for i in range(steps):
        tidemark.step(i)
        state["allocated"] = base(i)
        with tidemark.phase("forward"):
            state["peak"] = base(i) + peak(i)
            state["allocated"] = base(i) + peak(i) // 2
        with tidemark.phase("backward"):
            state["allocated"] = base(i)

def die(message):
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "train.py", line 42, in <module>', file=sys.stderr)
    print(message, file=sys.stderr)
    sys.exit(1)
"#;

fn oom_job(body: &str) -> Job {
    Job::new(&format!("{PRELUDE}\n{body}"))
}

/// Runs the job; returns the analysis and the report's text.
fn run(job: &Job) -> (collector::analysis::Analysis, String) {
    let output = job.run(&[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let recording = job.recording();
    let analysis = analyze(&recording);
    (analysis, crate::report(&job.out()))
}

fn verdict_line(report: &str) -> &str {
    report
        .lines()
        .skip_while(|l| !l.starts_with("VERDICT"))
        .nth(1)
        .unwrap_or("")
}

#[test]
fn a_leak_that_reaches_capacity_is_a_leak_driven_oom() {
    let job = oom_job(
        r#"
train(30, lambda i: 2 * GIB + i * 400 * MIB, lambda i: GIB)
die("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 15.25 GiB memory in use. Of the allocated memory 14.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.")
"#,
    );
    let (analysis, report) = run(&job);
    let oom = &analysis.ooms[0];
    assert_eq!(oom.cause, OomCause::Leak, "{oom:#?}");
    assert_eq!(oom.step, Some(29));
    assert_eq!(oom.device, Some(0));
    assert_eq!(oom.requested_bytes, Some(GIB));
    assert_eq!(oom.allocated_bytes, Some(14 * GIB));
    // 15.25 GiB in use by the process, 14.2 GiB of it PyTorch's.
    let outside = oom.outside_pytorch_bytes.unwrap() as f64 / GIB as f64;
    assert!((outside - 1.05).abs() < 0.01, "{outside}");
    assert_eq!(analysis.findings[0].kind, FindingKind::Oom);
    let first = verdict_line(&report);
    assert!(
        first.contains("Out of memory (leak-driven)") && first.contains("step 29"),
        "{report}"
    );
    assert!(report.contains("never fell back"), "{report}");
    assert!(
        report.contains("empty_cache()` does not cure a leak"),
        "{report}"
    );
    assert!(report.contains("the job exited with status 1"), "{report}");

    // --json carries the numbers; check fails on it by default.
    let json = crate::report_json(&job.out());
    let ooms = &json["analysis"]["ooms"];
    assert_eq!(ooms[0]["cause"], "leak");
    assert_eq!(ooms[0]["requested_bytes"], GIB);
    assert_eq!(ooms[0]["step"], 29);
    assert_eq!(json["analysis"]["findings"][0]["kind"], "oom");
    assert_eq!(json["analysis"]["ending"]["exit_code"], 1);
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("check")
        .arg(job.out())
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains("FAILED: Out of memory"));
}

#[test]
fn a_flat_baseline_and_a_spiking_forward_is_a_peak_driven_oom() {
    // The form before PyTorch 2.1, in step 20's forward.
    let job = oom_job(
        r#"
train(20, lambda i: 4 * GIB, lambda i: 2 * GIB)
tidemark.step(20)
with tidemark.phase("forward"):
    state["allocated"] = 9 * GIB
die("RuntimeError: CUDA out of memory. Tried to allocate 6.00 GiB (GPU 0; 15.78 GiB total capacity; 9.50 GiB already allocated; 5.20 GiB free; 9.80 GiB reserved in total by PyTorch)")
"#,
    );
    let (analysis, report) = run(&job);
    let oom = &analysis.ooms[0];
    assert_eq!(oom.cause, OomCause::Peak, "{oom:#?}");
    assert_eq!(oom.phase, Some(Phase::Forward));
    assert_eq!(oom.step, Some(20));
    assert!(analysis.finding(FindingKind::Leak).is_none());
    let first = verdict_line(&report);
    assert!(first.contains("Out of memory (peak-driven)"), "{report}");
    assert!(first.contains("in forward"), "{report}");
    assert!(
        report.contains("the peak of forward does not fit: 819 MiB short"),
        "{report}"
    );
    assert!(report.contains("gradient accumulation"), "{report}");
}

#[test]
fn a_cache_of_unusable_pieces_is_fragmentation() {
    let job = oom_job(
        r#"
train(15, lambda i: 6 * GIB, lambda i: GIB)
die("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 22.50 GiB memory in use. Of the allocated memory 18.20 GiB is allocated by PyTorch, and 3.40 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
"#,
    );
    let (analysis, report) = run(&job);
    assert_eq!(analysis.ooms[0].cause, OomCause::Fragmentation);
    assert!(
        verdict_line(&report).contains("Out of memory (fragmentation)"),
        "{report}"
    );
    assert!(
        report.contains(
            "PyTorch's cache held 3.40 GiB unallocated, more than the 2.00 GiB asked for"
        ),
        "{report}"
    );
    assert!(report.contains("expandable_segments:True"), "{report}");
}

#[test]
fn memory_held_by_other_processes_is_someone_elses() {
    let job = oom_job(
        r#"
train(15, lambda i: 3 * GIB, lambda i: GIB)
die("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.00 GiB is free. Process 4242 has 12.00 GiB memory in use. Process 4343 has 2.50 GiB memory in use. Including non-PyTorch memory, this process has 8.10 GiB memory in use. Of the allocated memory 7.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.")
"#,
    );
    let (analysis, report) = run(&job);
    let oom = &analysis.ooms[0];
    assert_eq!(oom.cause, OomCause::OtherMemory, "{oom:#?}");
    assert_eq!(oom.rank, Some(0));
    assert_eq!(oom.other_processes_bytes, Some(14 * GIB + GIB / 2));
    assert!(
        verdict_line(&report).contains("Out of memory (someone else's memory)"),
        "{report}"
    );
    assert!(report.contains("nvidia-smi"), "{report}");
}

#[test]
fn an_oom_in_the_first_step_is_too_big_from_the_start() {
    let job = oom_job(
        r#"
tidemark.step(0)
with tidemark.phase("forward"):
    state["allocated"] = 70 * GIB
die("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 8.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.")
"#,
    );
    let (analysis, report) = run(&job);
    assert_eq!(analysis.ooms[0].cause, OomCause::TooBigFromTheStart);
    assert!(
        verdict_line(&report).contains("too big from the start"),
        "{report}"
    );
    assert!(report.contains("sharding (FSDP"), "{report}");
}

#[test]
fn a_job_that_fails_otherwise_says_how_with_its_last_lines() {
    let job = Job::new("import tidemark\nimport no_such_module_here\n");
    let (analysis, report) = run(&job);
    assert!(analysis.ooms.is_empty());
    let failed = analysis.finding(FindingKind::Failed).unwrap();
    assert_eq!(failed.title, "The job failed: exit status 1");
    assert!(
        failed
            .evidence
            .iter()
            .any(|l| l.contains("ModuleNotFoundError: No module named 'no_such_module_here'")),
        "{failed:#?}"
    );
    assert!(
        verdict_line(&report).contains("The job failed: exit status 1"),
        "{report}"
    );
    assert_eq!(analysis.ending.exit_code, Some(1));
    assert!(analysis.ending.recording_complete);
}

/// Bad input: a message cut in the middle, one whose numbers contradict each other, and one
/// from a rank the recording has nothing else about — each says what it knows, invents nothing.
#[test]
fn odd_oom_messages_say_what_they_know_and_invent_nothing() {
    let job = oom_job(
        r#"
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capac", file=sys.stderr)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 20.00 GiB is free. Including non-PyTorch memory, this process has 1.00 GiB memory in use. Of the allocated memory 30.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.", file=sys.stderr)
die("[rank5]: RuntimeError: CUDA error: out of memory")
"#,
    );
    let (analysis, report) = run(&job);
    assert_eq!(analysis.ooms.len(), 3);
    for oom in &analysis.ooms {
        assert_eq!(oom.cause, OomCause::Unknown, "{oom:#?}");
    }
    assert_eq!(analysis.ooms[0].requested_bytes, Some(2 * GIB));
    assert_eq!(analysis.ooms[0].capacity_bytes, None);
    assert_eq!(analysis.ooms[2].rank, Some(5));
    assert!(
        report.contains("the message carries no numbers"),
        "{report}"
    );
    assert!(
        report.contains("Out of memory (cause not determined)"),
        "{report}"
    );
}

/// `--history`: the probe turns on the allocator's history once CUDA is up, dumps a snapshot at
/// the OOM (PyTorch's out-of-memory observer) and at exit, next to the recording, and the
/// recording names both; `report` opens the pair as one. The stand-in `torch` copies a real
/// snapshot where PyTorch would write its own.
#[test]
fn with_history_the_snapshot_at_the_oom_is_dumped_beside_the_recording_and_reported() {
    let body = r#"
import os, shutil
calls, observers = [], []
def dump(path):
    calls.append(("dump", os.path.basename(path)))
    shutil.copy(os.environ["SNAPSHOT_FIXTURE"], path)
torch.cuda.memory = types.SimpleNamespace(
    _record_memory_history=lambda **kw: calls.append(("history", kw)),
    _dump_snapshot=dump,
)
torch._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append)
train(12, lambda i: 3 * GIB, lambda i: GIB)
if observers:
    observers[0](0, 2 * GIB, 14 * GIB, 512 * MIB)  # the allocator, about to raise
print(calls)
die("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 512.00 MiB is free.")
"#;
    let job = oom_job(body);
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/snapshots/real/bcrafton_cs336_training_step.pickle");
    let output = job
        .command(&["--history=5000"])
        .env("RANK", "0")
        .env("SNAPSHOT_FIXTURE", &fixture)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "[('history', {'max_entries': 5000, 'stacks': 'python'}), ('dump', 'run.rank0.oom.pickle')]\n",
        "history once CUDA is up, then the dump at the OOM"
    );
    let oom_file = job.path("run.rank0.oom.pickle");
    let end_file = job.path("run.rank0.end.pickle");
    assert!(
        oom_file.is_file() && end_file.is_file(),
        "{}",
        stderr(&output)
    );
    let recording = job.recording();
    let named: Vec<(&str, &str)> = recording
        .snapshots
        .iter()
        .map(|s| (s.reason.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        named,
        vec![
            ("oom", oom_file.to_str().unwrap()),
            ("end", end_file.to_str().unwrap())
        ]
    );
    assert_eq!(recording.snapshots[0].origin.rank, Some(0));

    // Moved elsewhere together, the pair still opens as one.
    let moved = tempfile::tempdir().unwrap();
    for name in ["run.msgpack", "run.rank0.oom.pickle"] {
        std::fs::rename(job.path(name), moved.path().join(name)).unwrap();
    }
    let text = crate::report(&moved.path().join("run.msgpack"));
    assert!(text.contains("Out of memory ("), "{text}");
    let at = text
        .find("AT THE OUT-OF-MEMORY ERROR")
        .expect("the paired snapshot");
    assert!(text[at..].contains("run.rank0.oom.pickle"), "{text}");
    assert!(
        text[at..].contains("LIVE BLOCKS AT THE END (447 blocks"),
        "{text}"
    );
    assert!(
        text[at..].contains("cs336_basics/optimizer.py:74"),
        "{text}"
    );
    let json = crate::report_json(&moved.path().join("run.msgpack"));
    assert_eq!(json["paired_snapshot"]["reason"], "oom");
    assert_eq!(
        json["paired_snapshot"]["snapshot"]["live_blocks_at_end"],
        447
    );

    // Without --history nothing is turned on and nothing is written.
    let plain = oom_job(body);
    let output = plain
        .command(&[])
        .env("SNAPSHOT_FIXTURE", &fixture)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "[]\n");
    assert!(plain.recording().snapshots.is_empty());
}
