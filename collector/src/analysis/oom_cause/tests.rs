use super::*;
use crate::analysis::analyze;
use crate::oom::parse_oom_line;
use crate::recording::{AllocatorSample, Edge, Header, Origin, PhaseEdge, Record};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const STEP_NS: u64 = 100_000_000;
/// Each number of a message is rounded to two decimals of its unit: a GiB figure is up to
/// 5 MiB off, and a part is computed from up to four of them.
const PRINTED: u64 = 20 * MIB;

fn part(cause: OomCause, bytes: u64) -> Contribution {
    Contribution {
        cause,
        bytes,
        what: String::new(),
    }
}

#[test]
fn the_largest_part_that_covers_half_of_what_was_missing_is_the_cause() {
    let parts = [
        part(OomCause::Leak, 10 * GIB),
        part(OomCause::Fragmentation, 96 * MIB),
    ];
    assert_eq!(
        decide(16 * MIB, &parts).map(|c| c.cause),
        Some(OomCause::Leak)
    );
    // Fragmentation larger than the rest, and at least half of what was missing.
    let parts = [
        part(OomCause::Peak, GIB),
        part(OomCause::Fragmentation, 3 * GIB),
    ];
    assert_eq!(
        decide(5 * GIB, &parts).map(|c| c.cause),
        Some(OomCause::Fragmentation)
    );
    // The largest covers less than half: none is the cause.
    assert_eq!(decide(7 * GIB, &parts), None);
    assert_eq!(decide(GIB, &[]), None);
    assert_eq!(decide(0, &[part(OomCause::Peak, 0)]), None);
}

/// PyTorch's `format_size`.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes <= 1024 {
        format!("{bytes} bytes")
    } else if bytes <= MIB {
        format!("{:.2} KiB", b / 1024.0)
    } else if bytes <= GIB {
        format!("{:.2} MiB", b / MIB as f64)
    } else {
        format!("{:.2} GiB", b / GIB as f64)
    }
}

/// The device at an error, as PyTorch saw it.
#[derive(Clone, Copy)]
struct Device {
    tried: u64,
    capacity: u64,
    free: u64,
    allocated: u64,
    unallocated: u64,
    /// This process' memory in use, PyTorch's and not.
    process: u64,
    /// Other processes' memory in use.
    others: [u64; 2],
}

/// Every form of the message PyTorch has printed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    /// 1.0 to 1.3: "… free; … cached)".
    Cached,
    /// 1.4 to 2.0: "… free; … reserved in total by PyTorch)".
    Reserved,
    /// 2.1: the sentence, "capacty".
    Capacty,
    /// 2.2 and 2.3: the sentence.
    Sentence,
    /// 2.4 on: the sentence with private pools.
    PrivatePools,
    /// ROCm builds: "HIP out of memory", no processes.
    Hip,
}

const FORMS: [Form; 6] = [
    Form::Cached,
    Form::Reserved,
    Form::Capacty,
    Form::Sentence,
    Form::PrivatePools,
    Form::Hip,
];

impl Form {
    /// Whether it lists the processes.
    fn lists_processes(self) -> bool {
        matches!(self, Form::Capacty | Form::Sentence | Form::PrivatePools)
    }

    fn message(self, d: &Device) -> String {
        let (t, c, f, a, u) = (
            size(d.tried),
            size(d.capacity),
            size(d.free),
            size(d.allocated),
            size(d.unallocated),
        );
        let mut processes = String::new();
        for (i, &o) in d.others.iter().enumerate().filter(|(_, o)| **o > 0) {
            processes.push_str(&format!(
                "Process {} has {} memory in use. ",
                4242 + i,
                size(o)
            ));
        }
        let this = format!(
            "{processes}Including non-PyTorch memory, this process has {} memory in use. ",
            size(d.process)
        );
        match self {
            Form::Cached => format!(
                "RuntimeError: CUDA out of memory. Tried to allocate {t} (GPU 0; {c} total capacity; {a} already allocated; {f} free; {u} cached)"
            ),
            Form::Reserved => format!(
                "RuntimeError: CUDA out of memory. Tried to allocate {t} (GPU 0; {c} total capacity; {a} already allocated; {f} free; {} reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
                size(d.allocated + d.unallocated)
            ),
            Form::Capacty => format!(
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacty of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
            ),
            Form::Sentence => format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            ),
            Form::PrivatePools => format!(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. {this}Of the allocated memory {a} is allocated by PyTorch, with 0 bytes allocated in private pools (e.g., CUDA Graphs), and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            ),
            Form::Hip => format!(
                "torch.OutOfMemoryError: HIP out of memory. Tried to allocate {t}. GPU 0 has a total capacity of {c} of which {f} is free. Of the allocated memory {a} is allocated by PyTorch, and {u} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            ),
        }
    }
}

/// A training run as the probe records it: each step starts at `base(i)` allocated, forward
/// peaks `peak` above it and keeps half until backward ends.
fn run(steps: u64, base: impl Fn(u64) -> u64, peak: u64) -> Recording {
    let mut recording = Recording::new(Header::new(0, "test".to_owned(), vec![]));
    for i in 0..steps {
        let b = base(i);
        step(&mut recording, i, &[(b, b), (b + peak / 2, b + peak)]);
        let t = i * STEP_NS + STEP_NS / 2;
        edge(
            &mut recording,
            t,
            Phase::Backward,
            Edge::Begin,
            i,
            b + peak / 2,
            b + peak,
        );
        edge(
            &mut recording,
            t + STEP_NS / 4,
            Phase::Backward,
            Edge::End,
            i,
            b,
            b + peak,
        );
    }
    recording
}

/// Step `i`'s forward: begin and end at (allocated, peak).
fn step(recording: &mut Recording, i: u64, forward: &[(u64, u64); 2]) {
    let t = i * STEP_NS;
    let [(a0, p0), (a1, p1)] = *forward;
    edge(recording, t, Phase::Forward, Edge::Begin, i, a0, p0);
    edge(
        recording,
        t + STEP_NS / 4,
        Phase::Forward,
        Edge::End,
        i,
        a1,
        p1,
    );
}

fn edge(
    recording: &mut Recording,
    t_ns: u64,
    phase: Phase,
    edge: Edge,
    step: u64,
    allocated: u64,
    peak: u64,
) {
    let origin = Origin { pid: 7, rank: None };
    recording.push(Record::Phase(PhaseEdge {
        t_ns,
        edge,
        phase,
        step: Some(step),
        origin,
        host_heap: None,
        host_rss: None,
    }));
    recording.push(Record::Allocator(AllocatorSample {
        t_ns,
        origin,
        device: 0,
        allocated,
        reserved: peak + 256 * MIB,
        peak,
        ..AllocatorSample::default()
    }));
}

/// The recording with `device` printed in every form after its last edge; their verdicts.
fn judged(mut recording: Recording, device: &Device) -> Vec<(Form, OomVerdict)> {
    let last = recording.phases.iter().map(|e| e.t_ns).max().unwrap_or(0);
    for (k, form) in FORMS.iter().enumerate() {
        let line = form.message(device);
        let oom = parse_oom_line(&line, last + 1 + k as u64).unwrap();
        recording.push(Record::Oom(oom));
    }
    let analysis = analyze(&recording);
    assert_eq!(analysis.ooms.len(), FORMS.len());
    FORMS.into_iter().zip(analysis.ooms).collect()
}

fn bytes_of(v: &OomVerdict, cause: OomCause) -> u64 {
    v.contributions
        .iter()
        .find(|c| c.cause == cause)
        .map_or(0, |c| c.bytes)
}

fn near(value: u64, expected: u64) -> bool {
    value.abs_diff(expected) <= PRINTED
}

#[test]
fn a_leak_that_filled_the_device_is_the_cause_in_every_form() {
    // 26 steps of 400 MiB between the trend's first point (step 3) and step 29.
    let recording = run(30, |i| 2 * GIB + i * 400 * MIB, GIB);
    let base = 2 * GIB + 29 * 400 * MIB;
    let device = Device {
        tried: GIB,
        capacity: 15 * GIB + 790 * MIB,
        free: 300 * MIB,
        allocated: 14 * GIB,
        unallocated: 200 * MIB,
        process: 15 * GIB,
        others: [0, 0],
    };
    for (form, v) in judged(recording, &device) {
        assert_eq!(v.cause, OomCause::Leak, "{form:?}: {v:#?}");
        assert_eq!(v.step, Some(29));
        assert_eq!(v.contributions[0].cause, OomCause::Leak, "{form:?}");
        assert_eq!(bytes_of(&v, OomCause::Leak), 26 * 400 * MIB, "{form:?}");
        assert!(
            near(v.shortfall_bytes.unwrap(), 724 * MIB),
            "{form:?}: {v:#?}"
        );
        assert!(
            near(bytes_of(&v, OomCause::Peak), 14 * GIB - base),
            "{form:?}: {v:#?}"
        );
        // capacity − free − reserved, less the context's allowance.
        let outside = device.capacity - device.free - 14 * GIB - 200 * MIB;
        assert!(near(v.outside_cache_bytes.unwrap(), outside), "{form:?}");
        assert!(
            near(
                bytes_of(&v, OomCause::OtherMemory),
                outside - CONTEXT_ALLOWANCE_BYTES
            ),
            "{form:?}: {v:#?}"
        );
        assert!(near(bytes_of(&v, OomCause::Fragmentation), 200 * MIB));
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("never fell back: 10.2 GiB from step 3 to step 29")),
            "{form:?}: {:#?}",
            v.evidence
        );
    }
}

#[test]
fn a_phase_that_spikes_on_a_flat_baseline_is_the_cause_in_every_form() {
    let mut recording = run(20, |_| 4 * GIB, 2 * GIB);
    step(
        &mut recording,
        20,
        &[
            (4 * GIB, 4 * GIB),
            (9 * GIB + 512 * MIB, 9 * GIB + 512 * MIB),
        ],
    );
    let device = Device {
        tried: 6 * GIB,
        capacity: 15 * GIB + 800 * MIB,
        free: 5 * GIB + 205 * MIB,
        allocated: 9 * GIB + 512 * MIB,
        unallocated: 300 * MIB,
        process: 10 * GIB + 512 * MIB,
        others: [0, 0],
    };
    for (form, v) in judged(recording, &device) {
        assert_eq!(v.cause, OomCause::Peak, "{form:?}: {v:#?}");
        assert_eq!(v.phase, Some(Phase::Forward));
        assert_eq!(v.contributions[0].cause, OomCause::Peak);
        assert!(near(bytes_of(&v, OomCause::Peak), 5 * GIB + 512 * MIB));
        assert!(near(v.shortfall_bytes.unwrap(), 819 * MIB), "{form:?}");
        assert_eq!(bytes_of(&v, OomCause::Leak), 0);
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("the peak of forward does not fit: 819 MiB short")),
            "{form:?}: {:#?}",
            v.evidence
        );
    }
}

#[test]
fn a_cache_of_unusable_pieces_larger_than_the_rest_is_fragmentation_in_every_form() {
    let recording = run(15, |_| 17 * GIB, GIB);
    let device = Device {
        tried: 2 * GIB,
        capacity: 23 * GIB + 655 * MIB,
        free: GIB + 100 * MIB,
        allocated: 18 * GIB + 200 * MIB,
        unallocated: 3 * GIB + 410 * MIB,
        process: 22 * GIB + 400 * MIB,
        others: [0, 0],
    };
    for (form, v) in judged(recording, &device) {
        assert_eq!(v.cause, OomCause::Fragmentation, "{form:?}: {v:#?}");
        assert!(near(
            bytes_of(&v, OomCause::Fragmentation),
            3 * GIB + 410 * MIB
        ));
        assert!(
            near(bytes_of(&v, OomCause::Peak), GIB + 200 * MIB),
            "{v:#?}"
        );
        assert!(near(v.shortfall_bytes.unwrap(), 924 * MIB), "{form:?}");
        assert!(
            v.evidence.iter().any(|e| e.contains(
                "PyTorch's cache held 3.40 GiB unallocated, more than the 2.00 GiB asked for"
            )),
            "{form:?}: {:#?}",
            v.evidence
        );
    }
}

#[test]
fn memory_outside_the_cache_is_the_cause_in_every_form_named_by_who_holds_it() {
    let recording = run(15, |_| 7 * GIB, GIB);
    let device = Device {
        tried: 2 * GIB,
        capacity: 23 * GIB + 655 * MIB,
        free: GIB,
        allocated: 7 * GIB + 512 * MIB,
        unallocated: 100 * MIB,
        process: 8 * GIB + 100 * MIB,
        others: [12 * GIB, 2 * GIB + 512 * MIB],
    };
    let outside = device.capacity - device.free - device.allocated - device.unallocated;
    for (form, v) in judged(recording, &device) {
        assert_eq!(v.cause, OomCause::OtherMemory, "{form:?}: {v:#?}");
        assert!(near(v.outside_cache_bytes.unwrap(), outside), "{form:?}");
        assert!(
            near(
                bytes_of(&v, OomCause::OtherMemory),
                outside - CONTEXT_ALLOWANCE_BYTES
            ),
            "{form:?}: {v:#?}"
        );
        assert!(near(bytes_of(&v, OomCause::Peak), 512 * MIB), "{v:#?}");
        if form.lists_processes() {
            assert_eq!(v.other_processes_bytes, Some(14 * GIB + 512 * MIB));
            assert_eq!(v.cause_name(), "someone else's memory");
        } else {
            // The message does not tell whose, and this machine has no NVML samples.
            assert_eq!(v.other_processes_bytes, None);
            assert_eq!(v.cause_name(), "memory outside PyTorch's cache");
        }
    }
}

fn alone(line: &str) -> OomVerdict {
    let mut recording = Recording::new(Header::new(0, "test".to_owned(), vec![]));
    recording.push(Record::Oom(parse_oom_line(line, 1).unwrap()));
    analyze(&recording).ooms.remove(0)
}

/// The old form alone proves that 22 GiB of the device were held outside PyTorch's cache.
#[test]
fn the_old_form_alone_tells_memory_outside_the_cache() {
    let v = alone(
        "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 23.65 GiB total capacity; 1.20 GiB already allocated; 301.56 MiB free; 1.31 GiB reserved in total by PyTorch)",
    );
    assert_eq!(v.cause, OomCause::OtherMemory, "{v:#?}");
    let outside = (23.65 * GIB as f64 - 301.56 * MIB as f64 - 1.31 * GIB as f64) as u64;
    assert!(near(v.outside_cache_bytes.unwrap(), outside), "{v:#?}");
    assert!(near(v.shortfall_bytes.unwrap(), 210 * MIB + 450 * 1024));
    assert_eq!(v.cause_name(), "memory outside PyTorch's cache");
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("22.0 GiB of the device was held outside PyTorch's cache")),
        "{:#?}",
        v.evidence
    );
}

/// 15.3 GiB of tensors on a 15.8 GiB device: with a leak in the run, the leak is the cause,
/// though the cache's 96.5 MiB unallocated exceed the 20 MiB asked; on a flat baseline, the
/// same pieces are the cause when they exceed the phase's transient.
#[test]
fn tensors_that_fill_the_device_are_the_leak_not_fragmentation() {
    let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which 4.75 MiB is free. Including non-PyTorch memory, this process has 15.76 GiB memory in use. Of the allocated memory 15.30 GiB is allocated by PyTorch, and 96.50 MiB is reserved by PyTorch but unallocated.";
    let mut leaking = run(30, |i| 3 * GIB + i * 420 * MIB, 256 * MIB);
    leaking.push(Record::Oom(parse_oom_line(line, 30 * STEP_NS).unwrap()));
    let v = analyze(&leaking).ooms.remove(0);
    assert_eq!(v.cause, OomCause::Leak, "{v:#?}");
    assert_eq!(bytes_of(&v, OomCause::Leak), 26 * 420 * MIB);
    assert!(near(
        bytes_of(&v, OomCause::Fragmentation),
        96 * MIB + 512 * 1024
    ));
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("PyTorch's tensors held 15.3 GiB of the 15.8 GiB device (97%)")),
        "{:#?}",
        v.evidence
    );

    let mut flat = run(30, |_| 15 * GIB + 250 * MIB, 256 * MIB);
    flat.push(Record::Oom(parse_oom_line(line, 30 * STEP_NS).unwrap()));
    let v = analyze(&flat).ooms.remove(0);
    assert_eq!(v.cause, OomCause::Fragmentation, "{v:#?}");
    assert!(near(bytes_of(&v, OomCause::Peak), 57 * MIB), "{v:#?}");
}

/// In a container PyTorch does not find its own PID among NVML's: the job is listed as
/// "Process N", with more memory than all that is outside the cache.
#[test]
fn a_process_that_is_this_one_under_another_pid_is_not_someone_else() {
    let v = alone(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a total capacty of 14.75 GiB of which 235.06 MiB is free. Process 20398 has 14.52 GiB memory in use. Of the allocated memory 14.06 GiB is allocated by PyTorch, and 330.42 MiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(v.other_processes_bytes, Some(0), "{v:#?}");
    assert_ne!(v.cause, OomCause::OtherMemory);
    assert_eq!(v.cause, OomCause::Fragmentation, "{v:#?}");
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("one of them is this process under another PID")),
        "{:#?}",
        v.evidence
    );
}

#[test]
fn a_device_with_room_to_spare_did_not_run_out_of_its_capacity() {
    let v = alone(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacty of 79.15 GiB of which 38.09 GiB is free. Including non-PyTorch memory, this process has 41.06 GiB memory in use. Of the allocated memory 39.10 GiB is allocated by PyTorch, and 427.46 MiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(v.cause, OomCause::Unknown, "{v:#?}");
    assert_eq!(v.shortfall_bytes, Some(0));
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("set_per_process_memory_fraction")),
        "{:#?}",
        v.evidence
    );
    // A little more free than asked on a full device: still judged by its parts.
    let v = alone(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacty of 4.00 GiB of which 41.56 MiB is free. Including non-PyTorch memory, this process has 3.44 GiB memory in use. Of the allocated memory 2.58 GiB is allocated by PyTorch, and 1.90 MiB is reserved by PyTorch but unallocated.",
    );
    assert_eq!(v.cause, OomCause::OtherMemory, "{v:#?}");
    assert_eq!(v.cause_name(), "this process' memory outside PyTorch");
}

/// Under a memory fraction the room is what the limit leaves the cache; memory outside the
/// cache does not count against it.
#[test]
fn under_a_memory_fraction_the_room_is_the_limit() {
    let mut recording = run(15, |_| 3 * GIB, 512 * MIB);
    recording.push(Record::Oom(
        parse_oom_line(
            "RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 23.65 GiB total capacity; 3.50 GiB already allocated; 12.00 GiB free; 4.00 GiB allowed; 3.90 GiB reserved in total by PyTorch)",
            15 * STEP_NS,
        )
        .unwrap(),
    ));
    let v = analyze(&recording).ooms.remove(0);
    assert!(
        near(v.shortfall_bytes.unwrap(), 1024 * MIB - 102 * MIB),
        "{v:#?}"
    );
    assert_eq!(bytes_of(&v, OomCause::OtherMemory), 0, "{v:#?}");
    assert!(near(bytes_of(&v, OomCause::Peak), 512 * MIB));
    assert!(near(bytes_of(&v, OomCause::Fragmentation), 410 * MIB));
    assert_eq!(v.cause, OomCause::Peak, "{v:#?}");
}

#[test]
fn numbers_that_contradict_each_other_decide_nothing() {
    let v = alone(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 20.00 GiB is free. Including non-PyTorch memory, this process has 1.00 GiB memory in use. Of the allocated memory 30.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
    );
    assert_eq!(v.cause, OomCause::Unknown);
    assert!(v.contributions.is_empty());
    assert_eq!(v.outside_cache_bytes, None);
    assert!(v.evidence.iter().any(|e| e.contains("contradict")));
}

/// No part covers half of what was missing: on a flat baseline the request itself is the
/// phase's peak; in the first step, the job is too big from the start.
#[test]
fn a_request_larger_than_every_part_is_the_peak_or_too_big() {
    let mut recording = run(15, |_| 10 * GIB, 100 * MIB);
    recording.push(Record::Oom(
        parse_oom_line(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 13.50 GiB of which 3.00 GiB is free. Of the allocated memory 10.05 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.",
            15 * STEP_NS,
        )
        .unwrap(),
    ));
    let v = analyze(&recording).ooms.remove(0);
    assert_eq!(v.cause, OomCause::Peak, "{v:#?}");
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("the 4.00 GiB request alone")),
        "{:#?}",
        v.evidence
    );

    let mut first = run(0, |_| 0, 0);
    step(&mut first, 0, &[(0, 0), (70 * GIB, 70 * GIB)]);
    first.push(Record::Oom(
        parse_oom_line(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 8.00 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.",
            STEP_NS,
        )
        .unwrap(),
    ));
    let v = analyze(&first).ooms.remove(0);
    assert_eq!(v.cause, OomCause::TooBigFromTheStart, "{v:#?}");
    assert_eq!(v.contributions[0].cause, OomCause::Peak);
}

#[test]
fn without_numbers_only_the_recording_speaks() {
    let mut leaking = run(30, |i| 2 * GIB + i * 400 * MIB, GIB);
    leaking.push(Record::Oom(
        parse_oom_line("RuntimeError: CUDA error: out of memory", 30 * STEP_NS).unwrap(),
    ));
    let v = analyze(&leaking).ooms.remove(0);
    assert_eq!(v.cause, OomCause::Leak, "{v:#?}");
    assert_eq!(v.shortfall_bytes, None);
    assert_eq!(bytes_of(&v, OomCause::Leak), 26 * 400 * MIB);

    let v = alone("RuntimeError: CUDA error: out of memory");
    assert_eq!(v.cause, OomCause::Unknown);
}

/// Memory outside PyTorch's cache that the driver saw grow step by step before the error: the
/// error's evidence says so, with the finding's numbers.
#[test]
fn memory_outside_the_cache_that_grew_before_the_error_says_so() {
    let mut recording = Recording::new(Header::new(0, "test".to_owned(), vec![]));
    recording.push(Record::Oom(
        parse_oom_line(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 4.00 GiB of which 21.56 MiB is free. Including non-PyTorch memory, this process has 3.96 GiB memory in use. Of the allocated memory 1.58 GiB is allocated by PyTorch, and 1.90 MiB is reserved by PyTorch but unallocated.",
            1,
        )
        .unwrap(),
    ));
    let mut analysis = analyze(&recording);
    let without = judge_oom(&recording, &analysis, &recording.ooms[0]);
    assert_eq!(without.cause, OomCause::OtherMemory, "{without:#?}");
    assert!(!without.evidence.iter().any(|e| e.contains("step by step")));
    analysis.findings.push(crate::analysis::Finding {
        kind: FindingKind::NonPytorchGrowth,
        title: "Device memory outside PyTorch's cache leaks on GPU 0: +8.00 MiB/step".to_owned(),
        phase: None,
        basis: Basis::DeviceUsed,
        growth_per_step_bytes: Some(8.0 * MIB as f64),
        evidence: vec![
            "process 7 held 1.00 GiB of the device at step 3 and 2.20 GiB at step 160".to_owned(),
        ],
        hints: Vec::new(),
    });
    let with = judge_oom(&recording, &analysis, &recording.ooms[0]);
    assert_eq!(with.cause, OomCause::OtherMemory);
    assert!(
        with.evidence.iter().any(|e| e
            == "it had grown step by step before the error, 8.00 MiB/step: process 7 held 1.00 GiB of the device at step 3 and 2.20 GiB at step 160"),
        "{:#?}",
        with.evidence
    );
}

/// The leak's sentence names the phase that keeps it, where the leak finding names one.
#[test]
fn a_leak_that_led_to_the_error_is_named_with_its_phase() {
    let mut recording = run(30, |i| 2 * GIB + i * 400 * MIB, GIB);
    recording.push(Record::Oom(
        parse_oom_line(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 300.00 MiB is free. Of the allocated memory 14.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.",
            29 * STEP_NS + STEP_NS / 4,
        )
        .unwrap(),
    ));
    let mut analysis = analyze(&recording);
    let leak = analysis
        .findings
        .iter_mut()
        .find(|f| f.kind == FindingKind::Leak)
        .expect("a leak");
    leak.phase = Some(Phase::Forward);
    let v = judge_oom(&recording, &analysis, &recording.ooms[0]);
    assert_eq!(v.cause, OomCause::Leak, "{v:#?}");
    assert!(
        v.evidence.iter().any(|e| e.starts_with(
            "allocated GPU memory at the start of each step rose by 400 MiB/step in forward and never fell back: 10.2 GiB from step 3 to step 29"
        )),
        "{:#?}",
        v.evidence
    );
}

/// PyTorch ≥ 2.4 says how much of the allocated memory sits in private pools (CUDA graphs,
/// `torch.cuda.MemPool`): the numbers say it too, and "0 bytes" is not said.
#[test]
fn the_private_pools_share_of_the_allocated_memory_is_said() {
    let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 has a total capacity of 39.49 GiB of which 321.31 MiB is free. Including non-PyTorch memory, this process has 37.46 GiB memory in use. Of the allocated memory 36.04 GiB is allocated by PyTorch, with 12.00 GiB allocated in private pools (e.g., CUDA Graphs), and 321.37 MiB is reserved by PyTorch but unallocated.";
    let v = alone(line);
    assert_eq!(v.private_pools_bytes, Some(12 * GIB));
    let numbers = v.evidence.first().unwrap();
    assert!(
        numbers.contains(
            "36.0 GiB held by PyTorch's tensors (12.0 GiB of it in private pools: CUDA graphs'"
        ),
        "{numbers}"
    );
    let none = alone(&line.replace(
        "12.00 GiB allocated in private",
        "0 bytes allocated in private",
    ));
    assert_eq!(none.private_pools_bytes, Some(0));
    assert!(
        !none.evidence.first().unwrap().contains("private pools"),
        "{:#?}",
        none.evidence
    );
}
