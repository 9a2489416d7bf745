//! The job that died: real jobs under the collector print PyTorch's out-of-memory message, in
//! every form PyTorch has printed it (1.0's "cached", 1.4's "reserved in total", 2.1's sentence
//! with its "capacty", 2.2's, 2.4's with private pools, ROCm's "HIP"), after the allocator
//! situation each cause needs — a rising baseline, a phase that spikes, a large cache of unusable
//! pieces, memory outside PyTorch's cache — and the verdict, the JSON and `collector check` name
//! the cause with the numbers that decided it, whatever the form. CUDA cannot run here: the
//! jobs' `torch` is a stand-in module whose `torch.cuda` reports scripted `memory_stats`.

use collector::analysis::{CONTEXT_ALLOWANCE_BYTES, FindingKind, OomCause, OomVerdict, analyze};
use collector::recording::Phase;

use crate::{Job, stderr};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The forms, in the order `die_in_every_form` prints them.
const FORMS: [&str; 6] = [
    "cached",
    "reserved",
    "capacty",
    "sentence",
    "private_pools",
    "hip",
];

/// Whether a form lists the processes on the device (the sentence forms of CUDA builds).
fn lists_processes(form: &str) -> bool {
    matches!(form, "capacty" | "sentence" | "private_pools")
}

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

def size(b):
    """PyTorch's format_size."""
    if b <= 1024:
        return "%d bytes" % b
    if b <= MIB:
        return "%.2f KiB" % (b / 1024)
    if b <= GIB:
        return "%.2f MiB" % (b / MIB)
    return "%.2f GiB" % (b / GIB)

FORMS = ["cached", "reserved", "capacty", "sentence", "private_pools", "hip"]

def message(form, tried, capacity, free, allocated, unallocated, process, others=(), prefix=""):
    t, c, f, a, u = map(size, (tried, capacity, free, allocated, unallocated))
    this = "".join("Process %d has %s memory in use. " % (4242 + i, size(o)) for i, o in enumerate(others))
    this += "Including non-PyTorch memory, this process has %s memory in use. " % size(process)
    if form == "cached":  # 1.0 to 1.3
        text = f"RuntimeError: CUDA out of memory. Tried to allocate {t} (GPU 0; {c} total capacity; {a} already allocated; {f} free; {u} cached)"
    elif form == "reserved":  # 1.4 to 2.0
        r = size(allocated + unallocated)
        text = f"RuntimeError: CUDA out of memory. Tried to allocate {t} (GPU 0; {c} total capacity; {a} already allocated; {f} free; {r} reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
    elif form == "capacty":  # 2.1
        text = f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacty of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
    elif form == "sentence":  # 2.2, 2.3
        text = f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    elif form == "private_pools":  # 2.4 on
        text = f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, with 0 bytes allocated in private pools (e.g., CUDA Graphs), and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    else:  # ROCm
        text = f"torch.OutOfMemoryError: HIP out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    return prefix + text

def die_in_every_form(**numbers):
    for form in FORMS[:-1]:
        print(message(form, **numbers), file=sys.stderr)
    die(message(FORMS[-1], **numbers))
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

/// The verdicts of the job's out-of-memory errors, one per form.
fn per_form(analysis: &collector::analysis::Analysis) -> Vec<(&'static str, &OomVerdict)> {
    assert_eq!(analysis.ooms.len(), FORMS.len(), "{:#?}", analysis.ooms);
    FORMS.into_iter().zip(&analysis.ooms).collect()
}

/// The bytes of the part that stands for `cause` (0 when there is none).
fn part(v: &OomVerdict, cause: OomCause) -> u64 {
    v.contributions
        .iter()
        .find(|c| c.cause == cause)
        .map_or(0, |c| c.bytes)
}

/// The message rounds each number to two decimals of its unit (a GiB figure is up to 5 MiB off),
/// and a part is computed from up to four of them.
fn near(value: u64, expected: u64) -> bool {
    value.abs_diff(expected) <= 20 * MIB
}

fn verdict_line(report: &str) -> &str {
    report
        .lines()
        .skip_while(|l| !l.starts_with("VERDICT"))
        .nth(1)
        .unwrap_or("")
}

#[test]
fn a_leak_that_reaches_capacity_is_a_leak_driven_oom_in_every_form() {
    let job = oom_job(
        r#"
train(30, lambda i: 2 * GIB + i * 400 * MIB, lambda i: GIB)
die_in_every_form(tried=GIB, capacity=15 * GIB + 788 * MIB, free=300 * MIB, allocated=14 * GIB,
                  unallocated=200 * MIB, process=15 * GIB + 256 * MIB)
"#,
    );
    let (analysis, report) = run(&job);
    // Allocated at step 29's start, 26 steps of 400 MiB above step 3's (the trend's first point).
    let base = 2 * GIB + 29 * 400 * MIB;
    let outside = 15 * GIB + 788 * MIB - 300 * MIB - 14 * GIB - 200 * MIB;
    for (form, oom) in per_form(&analysis) {
        assert_eq!(oom.cause, OomCause::Leak, "{form}: {oom:#?}");
        assert_eq!(oom.step, Some(29));
        assert_eq!(oom.device, Some(0));
        assert_eq!(oom.requested_bytes, Some(GIB));
        assert_eq!(oom.allocated_bytes, Some(14 * GIB));
        assert!(
            near(oom.shortfall_bytes.unwrap(), 724 * MIB),
            "{form}: {oom:#?}"
        );
        assert_eq!(oom.contributions[0].cause, OomCause::Leak, "{form}");
        assert_eq!(part(oom, OomCause::Leak), 26 * 400 * MIB, "{form}");
        assert!(
            near(part(oom, OomCause::Peak), 14 * GIB - base),
            "{form}: {oom:#?}"
        );
        assert!(near(oom.outside_cache_bytes.unwrap(), outside), "{form}");
        assert!(
            near(
                part(oom, OomCause::OtherMemory),
                outside - CONTEXT_ALLOWANCE_BYTES
            ),
            "{form}: {oom:#?}"
        );
        assert!(
            near(part(oom, OomCause::Fragmentation), 200 * MIB),
            "{form}"
        );
        if lists_processes(form) {
            // 15.25 GiB in use by the process, 14.2 GiB of it PyTorch's.
            let own = oom.outside_pytorch_bytes.unwrap();
            assert!(
                near(own, 15 * GIB + 256 * MIB - 14 * GIB - 200 * MIB),
                "{own}"
            );
        }
    }
    assert_eq!(analysis.findings[0].kind, FindingKind::Oom);
    let first = verdict_line(&report);
    assert!(
        first.contains("Out of memory (leak-driven)") && first.contains("step 29"),
        "{report}"
    );
    assert!(
        report.contains(
            "never fell back: 10.2 GiB from step 3 to step 29, 14.4× the 724 MiB missing"
        ),
        "{report}"
    );
    assert!(
        report.contains("what took the room, largest first"),
        "{report}"
    );
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
    assert_eq!(ooms[0]["contributions"][0]["cause"], "leak");
    assert_eq!(ooms[0]["contributions"][0]["bytes"], 26 * 400 * MIB);
    assert!(ooms[0]["shortfall_bytes"].as_u64().is_some());
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
fn a_flat_baseline_and_a_spiking_forward_is_a_peak_driven_oom_in_every_form() {
    // In step 20's forward, 5.5 GiB above the step's start.
    let job = oom_job(
        r#"
train(20, lambda i: 4 * GIB, lambda i: 2 * GIB)
tidemark.step(20)
with tidemark.phase("forward"):
    state["allocated"] = 9 * GIB + 512 * MIB
die_in_every_form(tried=6 * GIB, capacity=15 * GIB + 800 * MIB, free=5 * GIB + 205 * MIB,
                  allocated=9 * GIB + 512 * MIB, unallocated=300 * MIB, process=10 * GIB + 512 * MIB)
"#,
    );
    let (analysis, report) = run(&job);
    assert!(analysis.finding(FindingKind::Leak).is_none());
    for (form, oom) in per_form(&analysis) {
        assert_eq!(oom.cause, OomCause::Peak, "{form}: {oom:#?}");
        assert_eq!(oom.phase, Some(Phase::Forward));
        assert_eq!(oom.step, Some(20));
        assert_eq!(oom.contributions[0].cause, OomCause::Peak, "{form}");
        assert!(
            near(part(oom, OomCause::Peak), 5 * GIB + 512 * MIB),
            "{form}: {oom:#?}"
        );
        assert!(near(oom.shortfall_bytes.unwrap(), 819 * MIB), "{form}");
        assert_eq!(part(oom, OomCause::Leak), 0, "{form}");
        // Outside the cache 806 MiB, less a context's 512 MiB; 300 MiB of unusable pieces.
        assert!(
            near(part(oom, OomCause::OtherMemory), 294 * MIB),
            "{form}: {oom:#?}"
        );
        assert!(
            near(part(oom, OomCause::Fragmentation), 300 * MIB),
            "{form}"
        );
    }
    let first = verdict_line(&report);
    assert!(first.contains("Out of memory (peak-driven)"), "{report}");
    assert!(first.contains("in forward"), "{report}");
    assert!(
        report.contains("the peak of forward does not fit: 819 MiB short (forward held 5.50 GiB above the step's start"),
        "{report}"
    );
    assert!(report.contains("gradient accumulation"), "{report}");
}

#[test]
fn a_cache_of_unusable_pieces_larger_than_the_rest_is_fragmentation_in_every_form() {
    let job = oom_job(
        r#"
train(15, lambda i: 17 * GIB, lambda i: GIB)
die_in_every_form(tried=2 * GIB, capacity=23 * GIB + 655 * MIB, free=GIB + 100 * MIB,
                  allocated=18 * GIB + 200 * MIB, unallocated=3 * GIB + 410 * MIB,
                  process=22 * GIB + 400 * MIB)
"#,
    );
    let (analysis, report) = run(&job);
    for (form, oom) in per_form(&analysis) {
        assert_eq!(oom.cause, OomCause::Fragmentation, "{form}: {oom:#?}");
        assert!(
            near(part(oom, OomCause::Fragmentation), 3 * GIB + 410 * MIB),
            "{form}"
        );
        // The phase's transient, the next largest: 18.2 GiB at the error, 17 GiB at the step's start.
        assert!(
            near(part(oom, OomCause::Peak), GIB + 200 * MIB),
            "{form}: {oom:#?}"
        );
        assert!(near(oom.shortfall_bytes.unwrap(), 922 * MIB), "{form}");
    }
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
fn memory_outside_the_cache_is_the_cause_in_every_form() {
    let job = oom_job(
        r#"
train(15, lambda i: 7 * GIB, lambda i: GIB)
die_in_every_form(tried=2 * GIB, capacity=23 * GIB + 655 * MIB, free=GIB,
                  allocated=7 * GIB + 512 * MIB, unallocated=100 * MIB, process=8 * GIB + 100 * MIB,
                  others=(12 * GIB, 2 * GIB + 512 * MIB), prefix="[rank0]: ")
"#,
    );
    let (analysis, report) = run(&job);
    let outside = 23 * GIB + 655 * MIB - GIB - 7 * GIB - 512 * MIB - 100 * MIB;
    for (form, oom) in per_form(&analysis) {
        assert_eq!(oom.cause, OomCause::OtherMemory, "{form}: {oom:#?}");
        assert_eq!(oom.rank, Some(0));
        assert!(near(oom.outside_cache_bytes.unwrap(), outside), "{form}");
        assert!(
            near(
                part(oom, OomCause::OtherMemory),
                outside - CONTEXT_ALLOWANCE_BYTES
            ),
            "{form}: {oom:#?}"
        );
        assert!(
            near(part(oom, OomCause::Peak), 512 * MIB),
            "{form}: {oom:#?}"
        );
        if lists_processes(form) {
            assert_eq!(oom.other_processes_bytes, Some(14 * GIB + GIB / 2));
            assert_eq!(oom.cause_name(), "someone else's memory");
        }
    }
    // The forms before 2.1 do not say whose it is (NVML would, where the job runs on a GPU).
    assert!(
        report.contains("Out of memory (someone else's memory)"),
        "{report}"
    );
    assert!(
        report.contains("15.0 GiB of the device was held outside PyTorch's cache"),
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

/// The out-of-memory errors of others than PyTorch's caching allocator, printed after 20 steps
/// that held 6 GiB: each is named (who could not allocate), explained with what the cache held
/// at the probe's last reading, and told what would leave it room; the cudaMallocAsync
/// backend's numbers, printed on lines of their own, are read with it.
#[test]
fn out_of_memory_in_cublas_cudnn_nccl_and_the_runtime_is_named_with_the_caches_numbers() {
    for (line, who, hint) in [
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "in cuBLAS",
            "CUBLAS_WORKSPACE_CONFIG",
        ),
        (
            "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
            "in cuDNN",
            "cudnn.benchmark",
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled cuda error, NCCL version 2.21.5 ncclUnhandledCudaError: Call to CUDA function failed. Last error: Cuda failure 'out of memory'",
            "in NCCL",
            "NCCL_BUFFSIZE",
        ),
        (
            "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     : 6.00 GiB\nRequested               : 2.00 GiB\nDevice limit            : 7.00 GiB\nFree (according to CUDA): 6.12 MiB\nPyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB",
            "in cudaMallocAsync",
            "empty_cache",
        ),
        (
            "RuntimeError: CUDA error: out of memory",
            "in the CUDA runtime",
            "set_per_process_memory_fraction",
        ),
    ] {
        let job = oom_job(&format!(
            "train(20, lambda i: 6 * GIB, lambda i: 512 * MIB)\ndie({line:?})\n"
        ));
        let (analysis, report) = run(&job);
        assert_eq!(analysis.ooms.len(), 1, "{line}: {:#?}", analysis.ooms);
        if who == "in cudaMallocAsync" {
            // Its numbers, on the lines after its first, are read with it.
            let v = &analysis.ooms[0];
            assert_eq!(
                (v.requested_bytes, v.capacity_bytes, v.allocated_bytes),
                (Some(2 * GIB), Some(7 * GIB), Some(6 * GIB)),
                "{v:#?}"
            );
        }
        let finding = analysis.finding(FindingKind::Oom).unwrap();
        assert!(
            finding.title.starts_with(&format!("Out of memory {who} (")),
            "{line}: {}",
            finding.title
        );
        assert!(
            finding.evidence[0].starts_with("the allocation that failed was"),
            "{line}: {:#?}",
            finding.evidence
        );
        assert!(
            finding.evidence[1].contains("PyTorch's cache on cuda:0 held ")
                && finding.evidence[1]
                    .contains("GiB reserved, 6.00 GiB of it allocated to tensors"),
            "{line}: {:#?}",
            finding.evidence
        );
        assert!(
            finding.hints.iter().any(|h| h.contains(hint)),
            "{line}: {:#?}",
            finding.hints
        );
        assert!(report.contains(&format!("Out of memory {who}")), "{report}");
    }
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

/// With `TIDEMARK_OBSERVE_ONE_IN` the probe observes a sample of a long loop's steps; an
/// out-of-memory error in a step it does not observe is still put in its step and its phase:
/// the phase that raised sends its edges then (the forward and the backward as the error leaves
/// them, the optimizer step at exit). Real torch on CPU; the error is raised by the job's own hook
/// in step 130 (steps 129 to 131 are not observed).
#[test]
fn an_oom_in_a_step_not_observed_is_put_in_its_step_and_phase() {
    let script = r#"
import sys
import torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
WHERE = sys.argv[1]
model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 32)
step = [0]
MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 512.00 MiB is free."

def die(*_):
    if step[0] == 130:
        raise torch.OutOfMemoryError(MESSAGE)

if WHERE == "forward":
    model[1].register_forward_pre_hook(die)
elif WHERE == "backward":
    model[2].weight.register_hook(lambda grad: die())
else:
    optimizer.register_step_pre_hook(die)
for i in range(140):
    step[0] = i
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
"#;
    for phase in [Phase::Forward, Phase::Backward, Phase::Optimizer] {
        let job = Job::new(script);
        let output = job
            .command(&[])
            .arg(phase.as_str())
            .env("TIDEMARK_OBSERVE_ONE_IN", "4")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let recording = job.recording();
        // Sent at exit: steps 129 and 130, the one that died.
        assert!(
            recording
                .unobserved
                .iter()
                .any(|u| u.first_step == Some(129) && u.steps == 2),
            "{phase}: {:?}",
            recording.unobserved
        );
        let analysis = analyze(&recording);
        let oom = analysis
            .ooms
            .first()
            .unwrap_or_else(|| panic!("{phase}: no OOM: {}", stderr(&output)));
        assert_eq!(
            (oom.step, oom.phase.as_ref()),
            (Some(130), Some(&phase)),
            "{}",
            stderr(&output)
        );
    }
}
