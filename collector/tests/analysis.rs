//! The diagnosis on recordings with known truth: synthetic series for the edge cases, and real
//! recordings made by the collector from real processes (the corpus in `tests/data/corpus/`).

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use collector::analysis::{Basis, FindingKind, analyze};
use collector::recording::{
    AllocatorSample, Chunk, Column, Edge, Header, Origin, Phase, Record, Recording, SeriesKey,
    SeriesKind, read_file,
};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Deterministic noise.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in ±`amplitude`.
    fn noise(&mut self, amplitude: u64) -> i64 {
        (self.next() % (2 * amplitude + 1)) as i64 - amplitude as i64
    }
}

/// What a synthetic training run does, per step.
struct Run {
    steps: u64,
    /// Bytes each phase leaves behind every time it runs.
    leak_forward: u64,
    leak_backward: u64,
    leak_eval: u64,
    /// The first step that leaks.
    leak_from: u64,
    /// ±noise on the level of each step (different batches).
    noise: u64,
    /// Growth over the first `warmup_steps` steps, then none.
    warmup_bytes: u64,
    warmup_steps: u64,
    /// An eval phase every this many steps (0: none).
    eval_every: u64,
    /// Transient peak of forward, and how much it grows per step.
    forward_peak: u64,
    forward_peak_growth: u64,
    /// Reserved above allocated, and how much that grows per step (fragmentation).
    cache: u64,
    cache_growth: u64,
    retries_per_step: u64,
    seed: u64,
}

impl Default for Run {
    fn default() -> Self {
        Self {
            steps: 100,
            leak_forward: 0,
            leak_backward: 0,
            leak_eval: 0,
            leak_from: 0,
            noise: 8 * MIB,
            warmup_bytes: 0,
            warmup_steps: 0,
            eval_every: 0,
            forward_peak: 2 * GIB,
            forward_peak_growth: 0,
            cache: 3 * GIB,
            cache_growth: 0,
            retries_per_step: 0,
            seed: 1,
        }
    }
}

fn header() -> Header {
    tidemark_tests::header(&["python", "train.py"])
}

/// A recording with phase edges and allocator numbers at every edge.
fn synthesize(run: &Run) -> Recording {
    let mut rng = Rng(run.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut recording = Recording::new(header());
    let origin = Origin {
        pid: 100,
        rank: None,
    };
    let mut t = 0u64;
    let mut retained = 4 * GIB; // weights, optimizer state
    let mut retries = 0;
    for step in 0..run.steps {
        let level_noise = rng.noise(run.noise);
        let leaking = step >= run.leak_from;
        let warmup = if step < run.warmup_steps {
            run.warmup_bytes / run.warmup_steps
        } else {
            0
        };
        retries += run.retries_per_step;
        let mut phase = |recording: &mut Recording, phase: Phase, net: u64, peak: u64| {
            let start = (retained as i64 + level_noise) as u64;
            let end = start + net;
            let reserved = start + run.cache + step * run.cache_growth + peak;
            for (edge, allocated, peak) in
                [(Edge::Begin, start, start), (Edge::End, end, start + peak)]
            {
                recording.push(Record::Phase(tidemark_tests::edge(
                    t,
                    edge,
                    phase.clone(),
                    Some(step),
                    origin,
                )));
                recording.push(Record::Allocator(AllocatorSample {
                    t_ns: t,
                    origin,
                    device: 0,
                    allocated,
                    reserved,
                    peak,
                    active: allocated,
                    inactive_split: 0,
                    retries,
                    ooms: 0,
                }));
                t += 10_000_000;
            }
            retained += net;
        };
        let forward_leak = if leaking { run.leak_forward } else { 0 };
        let backward_leak = if leaking { run.leak_backward } else { 0 };
        phase(
            &mut recording,
            Phase::Forward,
            forward_leak + warmup,
            run.forward_peak + step * run.forward_peak_growth,
        );
        phase(
            &mut recording,
            Phase::Backward,
            backward_leak,
            run.forward_peak / 2,
        );
        phase(&mut recording, Phase::Optimizer, 0, 256 * MIB);
        if run.eval_every > 0 && step % run.eval_every == run.eval_every - 1 {
            let eval_leak = if leaking { run.leak_eval } else { 0 };
            phase(&mut recording, Phase::Eval, eval_leak, GIB);
        }
    }
    recording
}

#[test]
fn a_1_mib_per_step_leak_under_8_mib_noise_is_found_within_50_steps_in_the_right_phase() {
    for seed in 0..20 {
        for (leak_forward, leak_backward, phase) in
            [(MIB, 0, Phase::Forward), (0, MIB, Phase::Backward)]
        {
            let run = Run {
                steps: 50,
                leak_forward,
                leak_backward,
                seed,
                ..Run::default()
            };
            let analysis = analyze(&synthesize(&run));
            assert_eq!(analysis.basis, Basis::Allocated);
            let leak = analysis
                .finding(FindingKind::Leak)
                .unwrap_or_else(|| panic!("seed {seed}: no leak found: {:?}", analysis.trend));
            assert_eq!(
                leak.phase.as_ref(),
                Some(&phase),
                "seed {seed}: {}",
                leak.title
            );
            let slope = leak.growth_per_step_bytes.unwrap();
            assert!(
                (slope - MIB as f64).abs() < 0.35 * MIB as f64,
                "seed {seed}: slope {slope}"
            );
            assert!(leak.title.contains(phase.as_str()));
            assert!(leak.evidence.iter().any(|e| e.contains("Mann–Kendall")));
            assert!(!leak.hints.is_empty());
        }
    }
}

#[test]
fn a_leak_only_in_eval_is_named_eval_with_eval_hints() {
    let run = Run {
        steps: 100,
        eval_every: 5,
        leak_eval: 10 * MIB,
        ..Run::default()
    };
    let analysis = analyze(&synthesize(&run));
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.phase, Some(Phase::Eval));
    assert!(
        leak.hints.iter().any(|h| h.contains("predictions")),
        "{:?}",
        leak.hints
    );
    let eval = analysis
        .phases
        .iter()
        .find(|p| p.phase == Phase::Eval)
        .unwrap();
    assert_eq!(eval.occurrences, 20);
    assert!((eval.net_mean_bytes - (10 * MIB) as f64).abs() < 1.0);
    assert!(eval.share_of_growth.unwrap() > 0.95);
    // The projection: 80 GiB device, ~2 MiB/step.
    let projection = analysis.projection.as_ref().unwrap();
    assert!(projection.oom_step > 100);
    assert!(analysis.finding(FindingKind::CapacityPressure).is_some());
}

#[test]
fn never_a_leak_on_a_healthy_sawtooth_or_on_warmup_then_plateau() {
    for seed in 0..50 {
        let healthy = analyze(&synthesize(&Run {
            seed,
            ..Run::default()
        }));
        assert!(
            healthy.finding(FindingKind::Leak).is_none(),
            "seed {seed}: {:?}",
            healthy.findings
        );
        let cache = healthy.finding(FindingKind::Cache).unwrap();
        assert!(cache.evidence[0].contains("reserved"));

        let plateau = Run {
            warmup_bytes: 2 * GIB,
            warmup_steps: 20,
            seed,
            ..Run::default()
        };
        let analysis = analyze(&synthesize(&plateau));
        assert!(
            analysis.finding(FindingKind::Leak).is_none(),
            "seed {seed}: warm-up called a leak: {:?}",
            analysis.findings
        );
    }
}

#[test]
fn a_leak_that_starts_half_way_is_found() {
    let run = Run {
        steps: 100,
        leak_from: 50,
        leak_forward: 2 * MIB,
        ..Run::default()
    };
    let analysis = analyze(&synthesize(&run));
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.phase, Some(Phase::Forward));
}

#[test]
fn fragmentation_is_told_from_a_leak() {
    let run = Run {
        cache_growth: 16 * MIB,
        retries_per_step: 1,
        ..Run::default()
    };
    let analysis = analyze(&synthesize(&run));
    assert!(analysis.finding(FindingKind::Leak).is_none());
    let finding = analysis.finding(FindingKind::Fragmentation).unwrap();
    let slope = finding.growth_per_step_bytes.unwrap();
    assert!(
        (slope - (16 * MIB) as f64).abs() < (2 * MIB) as f64,
        "{slope}"
    );
    assert!(finding.evidence.iter().any(|e| e.contains("retries +")));
}

#[test]
fn peak_creep_names_its_phase() {
    let run = Run {
        forward_peak_growth: 8 * MIB,
        ..Run::default()
    };
    let analysis = analyze(&synthesize(&run));
    assert!(analysis.finding(FindingKind::Leak).is_none());
    let creep = analysis.finding(FindingKind::PeakCreep).unwrap();
    assert_eq!(creep.phase, Some(Phase::Forward));
    let slope = creep.growth_per_step_bytes.unwrap();
    // One forward per step: the slope per occurrence is the growth per step.
    assert!((slope - (8 * MIB) as f64).abs() < MIB as f64, "{slope}");
}

#[test]
fn a_flat_run_has_no_problem() {
    let run = Run {
        noise: 0,
        cache: 0,
        ..Run::default()
    };
    let analysis = analyze(&synthesize(&run));
    assert!(
        analysis.findings.iter().all(|f| !f.kind.is_problem()),
        "{:?}",
        analysis.findings
    );
}

#[test]
fn a_run_too_short_to_judge_says_how_many_more_steps_are_needed() {
    let run = Run {
        steps: 6,
        leak_forward: 100 * MIB,
        ..Run::default()
    };
    let analysis = analyze(&synthesize(&run));
    let finding = analysis.finding(FindingKind::NotEnoughData).unwrap();
    assert!(
        finding.title.contains("6 steps recorded"),
        "{}",
        finding.title
    );
    assert!(finding.title.contains("(4 more)"), "{}", finding.title);
    assert!(analysis.finding(FindingKind::Leak).is_none());
}

/// Device numbers only (no probe): a sawtooth that falls back is the cache; a rising floor is a
/// leak of device memory.
fn device_only(rising_floor_per_window: u64) -> Recording {
    let mut recording = Recording::new(header());
    let n = 20_000u64;
    let times: Vec<u64> = (0..n).map(|i| i * 50_000_000).collect();
    let values: Vec<u64> = (0..n)
        .map(|i| 10 * GIB + (i % 20) * 300 * MIB + i / 200 * rising_floor_per_window)
        .collect();
    recording.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: vec![Column {
            series: SeriesKey::device(SeriesKind::DeviceUsed, 0),
            values,
            valid: None,
        }],
    }));
    recording
}

#[test]
fn device_numbers_only_say_what_they_can() {
    let sawtooth = analyze(&device_only(0));
    assert_eq!(sawtooth.basis, Basis::DeviceUsed);
    assert!(!sawtooth.by_step);
    assert!(sawtooth.finding(FindingKind::Leak).is_none());
    assert!(sawtooth.finding(FindingKind::Cache).is_some());
    assert!(sawtooth.lacks.iter().any(|l| l.contains("probe")));

    let leaking = analyze(&device_only(64 * MIB));
    let leak = leaking.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.basis, Basis::DeviceUsed);
    assert!(leak.title.contains("window"), "{}", leak.title);
}

#[test]
fn bad_recordings_get_a_verdict_that_says_what_it_cannot_tell() {
    // Nothing at all.
    let empty = analyze(&Recording::new(header()));
    assert!(empty.finding(FindingKind::NotEnoughData).is_some());
    assert!(!empty.lacks.is_empty());

    // One sample.
    let mut one = Recording::new(header());
    one.push(Record::Chunk(Chunk {
        times_ns: vec![5],
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values: vec![MIB],
            valid: None,
        }],
    }));
    assert!(analyze(&one).finding(FindingKind::NotEnoughData).is_some());

    // Unsorted and duplicate times, phases without steps, an end without a begin.
    let mut messy = Recording::new(header());
    let times: Vec<u64> = (0..200)
        .map(|i| (i * 7919 % 200) * 1_000_000)
        .chain([5_000_000; 20])
        .collect();
    let values: Vec<u64> = times.iter().map(|t| GIB + t / 1_000_000 * MIB).collect();
    messy.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values,
            valid: None,
        }],
    }));
    let origin = Origin { pid: 1, rank: None };
    messy.push(Record::Phase(tidemark_tests::edge(
        3,
        Edge::End,
        Phase::Eval,
        None,
        origin,
    )));
    for i in 0..30u64 {
        for edge in [Edge::Begin, Edge::End] {
            messy.push(Record::Phase(tidemark_tests::edge(
                i * 6_000_000 + (edge == Edge::End) as u64,
                edge,
                Phase::Forward,
                None,
                origin,
            )));
        }
    }
    messy.push(Record::Phase(tidemark_tests::edge(
        10,
        Edge::Begin,
        Phase::Forward,
        None,
        origin,
    )));
    let analysis = analyze(&messy);
    assert_eq!(analysis.basis, Basis::HostRss);
    assert!(analysis.by_step, "steps from the first phase's occurrences");
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.basis, Basis::HostRss);
    assert!(leak.title.starts_with("Host memory leak"), "{}", leak.title);
}

/// The corpus: recordings made by the collector from real Python processes (host-memory analogs
/// of the articles' cases; `tests/data/corpus/README.md` says how each was made).
#[test]
fn the_corpus_of_real_recordings_gets_the_right_verdicts() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus");
    let read = |name: &str| read_file(&dir.join(name)).unwrap();

    let eval = analyze(&read("eval_keeps_predictions.msgpack"));
    let leak = eval.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.basis, Basis::HostRss);
    assert_eq!(leak.phase, Some(Phase::Eval), "{}", leak.title);

    let losses = analyze(&read("forward_keeps_losses.msgpack"));
    let leak = losses.finding(FindingKind::Leak).unwrap();
    assert_eq!(leak.phase, Some(Phase::Forward), "{}", leak.title);

    let healthy = analyze(&read("healthy.msgpack"));
    assert!(
        healthy.finding(FindingKind::Leak).is_none(),
        "{:?}",
        healthy.findings
    );
}

/// Device numbers beside the allocator's: memory PyTorch does not account for, other processes
/// on a shared GPU, and a device run close to full.
#[test]
fn non_pytorch_memory_other_processes_and_a_nearly_full_device_are_reported_with_numbers() {
    let mut recording = synthesize(&Run {
        noise: 0,
        ..Run::default()
    });
    let n = 200u64;
    let times: Vec<u64> = (0..n).map(|i| i * 20_000_000).collect();
    // The device: 78 GiB used in all; the job's own process: 12 GiB; PyTorch reserved ~7.3 GiB.
    recording.push(Record::Chunk(Chunk {
        times_ns: times.clone(),
        columns: vec![
            Column {
                series: SeriesKey::device(SeriesKind::DeviceUsed, 0),
                values: vec![78 * GIB; n as usize],
                valid: None,
            },
            Column {
                series: SeriesKey {
                    kind: SeriesKind::ProcessDevice,
                    device: Some(0),
                    pid: Some(100),
                },
                values: vec![12 * GIB; n as usize],
                valid: None,
            },
        ],
    }));
    let analysis = analyze(&recording);
    let other = analysis.finding(FindingKind::OtherProcesses).unwrap();
    assert_eq!(other.title, "Other processes use 66.0 GiB on GPU 0");
    let non_pytorch = analysis.finding(FindingKind::NonPytorchMemory).unwrap();
    assert!(
        non_pytorch.title.ends_with("on GPU 0 is not PyTorch's"),
        "{}",
        non_pytorch.title
    );
    assert!(
        non_pytorch.evidence[0].contains("the job's own device memory: 12.0 GiB"),
        "{:?}",
        non_pytorch.evidence
    );
    let full = analysis.finding(FindingKind::CapacityPressure).unwrap();
    assert_eq!(full.title, "GPU 0 ran at 98% of its memory");
    assert!(analysis.finding(FindingKind::Leak).is_none());
}

#[test]
fn no_projection_without_a_device_capacity() {
    let run = Run {
        steps: 60,
        leak_forward: 4 * MIB,
        ..Run::default()
    };
    let mut recording = synthesize(&run);
    let with = analyze(&recording);
    assert!(with.finding(FindingKind::Leak).is_some());
    assert_eq!(with.projection.as_ref().unwrap().capacity_bytes, 80 * GIB);
    // As in an imported snapshot: the device is known, its capacity is not.
    for device in &mut recording.header.devices {
        device.total_bytes = 0;
    }
    let without = analyze(&recording);
    assert!(without.finding(FindingKind::Leak).is_some());
    assert_eq!(without.projection, None);
    assert!(without.finding(FindingKind::CapacityPressure).is_none());
    assert!(
        without
            .lacks
            .iter()
            .any(|l| l.starts_with("no device capacity")),
        "{:?}",
        without.lacks
    );
}

/// Two ranks, each training on its own GPU; rank 1 also holds memory on GPU 0 (a CUDA context
/// made before `set_device`), as per-process NVML numbers show: an imbalance that names it.
#[test]
fn a_rank_with_memory_on_another_ranks_gpu_is_named() {
    let mut recording = collector::recording::Recording::new(tidemark_tests::header(&["torchrun"]));
    for rank in 0..2u32 {
        let origin = Origin {
            pid: 100 + rank,
            rank: Some(rank),
        };
        for step in 0..20 {
            for mut record in tidemark_tests::sawtooth_step(step, 100_000_000, origin) {
                if let Record::Allocator(a) = &mut record {
                    a.device = rank;
                }
                recording.push(record);
            }
        }
    }
    let series = |device: u32, pid: u32, bytes: u64| Column {
        series: SeriesKey {
            kind: SeriesKind::ProcessDevice,
            device: Some(device),
            pid: Some(pid),
        },
        values: vec![bytes; 3],
        valid: None,
    };
    recording.push(Record::Chunk(Chunk {
        times_ns: vec![0, 1_000_000_000, 2_000_000_000],
        columns: vec![
            series(0, 100, 6 * GIB),
            series(0, 101, 600 * MIB),
            series(1, 101, 6 * GIB),
        ],
    }));
    let analysis = analyze(&recording);
    assert_eq!(analysis.ranks.len(), 2);
    let imbalance = analysis
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::Imbalance)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    assert_eq!(
        imbalance.title,
        "Imbalance: other ranks hold 600 MiB on GPU 0"
    );
    assert_eq!(
        imbalance.evidence,
        vec!["rank 1 (pid 101, on GPU 1) holds 600 MiB on GPU 0 (rank 0's)".to_owned()]
    );
    assert!(imbalance.hints[0].contains("set_device(local_rank)"));
}

/// An OOM message without the processes' numbers (the form before PyTorch 2.1): NVML's numbers,
/// sampled by the collector, show that other processes held the memory.
#[test]
fn an_oom_whose_message_lacks_the_others_memory_takes_it_from_nvml() {
    let mut recording = collector::recording::Recording::new(tidemark_tests::header(&["python"]));
    let origin = Origin {
        pid: 100,
        rank: None,
    };
    for step in 0..15 {
        for record in tidemark_tests::sawtooth_step(step, 100_000_000, origin) {
            recording.push(record);
        }
    }
    let times: Vec<u64> = (0..16).map(|i| i * 100_000_000).collect();
    let column = |kind: SeriesKind, pid: Option<u32>, bytes: u64| Column {
        series: SeriesKey {
            kind,
            device: Some(0),
            pid,
        },
        values: vec![bytes; times.len()],
        valid: None,
    };
    recording.push(Record::Chunk(Chunk {
        times_ns: times.clone(),
        columns: vec![
            column(SeriesKind::DeviceUsed, None, 22 * GIB),
            column(SeriesKind::ProcessDevice, Some(100), 6 * GIB),
        ],
    }));
    recording.push(Record::Oom(collector::recording::Oom {
        t_ns: 1_500_000_000,
        device: Some(0),
        tried_bytes: Some(2 * GIB),
        capacity_bytes: Some(23 * GIB),
        free_bytes: Some(GIB),
        allocated_bytes: Some(5 * GIB),
        reserved_unallocated_bytes: Some(100 * MIB),
        message: "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; …)"
            .to_owned(),
        ..Default::default()
    }));
    let analysis = analyze(&recording);
    let oom = &analysis.ooms[0];
    assert_eq!(oom.other_processes_bytes, Some(16 * GIB), "{oom:#?}");
    assert_eq!(
        oom.cause,
        collector::analysis::OomCause::OtherMemory,
        "{oom:#?}"
    );
}

/// The probe read the C heap at most edges but not all (reading it grew costly): the phases are
/// still attributed with the heap, each occurrence whose two edges have it; resident memory,
/// which stays up when memory is freed and rises where fresh pages are touched, would blame
/// backward for forward's leak.
#[test]
fn a_heap_read_at_most_edges_still_attributes_the_phases() {
    // One edge in five without the heap (the probe's budget).
    let recording = tidemark_tests::forward_keeps_on_the_host(60, 2, |_, n| !n.is_multiple_of(5));
    let analysis = analyze(&recording);
    assert_eq!(
        analysis.attribution,
        Some(collector::analysis::Attribution::HostHeap)
    );
    assert!(
        analysis
            .attribution_note
            .as_deref()
            .is_some_and(|n| n.contains("read the C heap at 192 of 240 phase edges")),
        "{:?}",
        analysis.attribution_note
    );
    let forward = analysis
        .phases
        .iter()
        .find(|p| p.phase == Phase::Forward)
        .unwrap();
    assert!(
        forward.share_of_growth.unwrap() > 0.9,
        "{:#?}",
        analysis.phases
    );
}

/// A host recording of `steps` identical steps: each edge of `step` is (phase, edge, what the C
/// heap changed by since the edge before), read by the probe at every edge; 8 MiB of parameters
/// and `gradients` (MiB at each step's start, and at the end of the step before) as the probe's
/// categories report them.
fn heap_steps(
    steps: u64,
    gradients: (f64, f64),
    step: &[(Phase, collector::recording::Edge, f64)],
) -> Recording {
    heap_steps_with_rss(steps, gradients, step, |_, heap| heap + 400.0 * MIB as f64)
}

/// [`heap_steps`] with resident memory given by `rss(step, heap)`.
fn heap_steps_with_rss(
    steps: u64,
    gradients: (f64, f64),
    step: &[(Phase, collector::recording::Edge, f64)],
    rss_of: impl Fn(u64, f64) -> f64,
) -> Recording {
    heap_steps_varying(steps, |_| gradients, |_| step.to_vec(), rss_of)
}

/// [`heap_steps_with_rss`] whose steps differ: step `s` has the edges `step(s)` and the
/// gradients `gradients(s)`.
fn heap_steps_varying(
    steps: u64,
    gradients_of: impl Fn(u64) -> (f64, f64),
    step_of: impl Fn(u64) -> Vec<(Phase, collector::recording::Edge, f64)>,
    rss_of: impl Fn(u64, f64) -> f64,
) -> Recording {
    use collector::recording::{Origin, Record};
    let origin = Origin { pid: 7, rank: None };
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    let mut heap = 300.0 * MIB as f64;
    // The collector's own samples of resident memory, at each edge.
    let (mut times, mut rss) = (Vec::new(), Vec::new());
    let mib = |m: f64| (m * MIB as f64) as u64;
    for s in 0..steps {
        let (gradients, step) = (gradients_of(s), step_of(s));
        recording.push(Record::Categories(collector::recording::Categories {
            t_ns: s * 100_000_000,
            origin,
            step: Some(s),
            device: None,
            parameters: 8 * MIB,
            gradients: mib(if s == 0 { 0.0 } else { gradients.0 }),
            gradients_at_last_end: (s > 0).then(|| mib(gradients.1)),
            optimizer_state: Vec::new(),
            total: None,
        }));
        for (k, (phase, edge, delta)) in step.iter().enumerate() {
            heap += delta * MIB as f64;
            let t_ns = s * 100_000_000 + k as u64 * 5_000_000;
            let mut e = tidemark_tests::edge(t_ns, *edge, phase.clone(), Some(s), origin);
            let resident = rss_of(s, heap) as u64;
            e.host_heap = Some(heap as u64);
            e.host_rss = Some(resident);
            recording.push(Record::Phase(e));
            times.push(t_ns);
            rss.push(resident);
        }
    }
    recording.push(Record::Chunk(collector::recording::Chunk {
        times_ns: times,
        columns: vec![collector::recording::Column {
            series: collector::recording::SeriesKey::new(collector::recording::SeriesKind::HostRss),
            values: rss,
            valid: None,
        }],
    }));
    recording
}

/// That the phases were attributed `with` that memory, else what the attribution's note said.
fn assert_attributed(
    analysis: &collector::analysis::Analysis,
    with: collector::analysis::Attribution,
) {
    assert_eq!(
        analysis.attribution,
        Some(with),
        "{:?}",
        analysis.attribution_note
    );
}

/// The phase the leak is put in, and what each phase retains per occurrence, in MiB.
fn leak_phase(analysis: &collector::analysis::Analysis) -> (Option<Phase>, Vec<(Phase, f64)>) {
    let leak = analysis
        .finding(FindingKind::Leak)
        .unwrap_or_else(|| panic!("no leak: {:#?}", analysis.findings));
    let retained = analysis
        .phases
        .iter()
        .map(|p| (p.phase.clone(), p.retained_mean_bytes / MIB as f64))
        .collect();
    (leak.phase.clone(), retained)
}

/// `out = model(x); opt.zero_grad(); loss.backward(); opt.step()`: the 8 MiB of gradients are
/// freed between forward and backward and made again by backward. The 2 MiB the forward keeps a
/// step are the forward's, not hidden behind the gradients freed and charged to the backward.
#[test]
fn gradients_freed_between_forward_and_backward_are_the_backwards_to_make_again() {
    use collector::recording::Edge::{Begin, End};
    let recording = heap_steps(
        60,
        (8.0, 8.0),
        &[
            (Phase::Forward, Begin, 0.0),
            (Phase::Forward, End, 2.5), // 0.5 MiB of activations, 2 MiB kept
            (Phase::Backward, Begin, -8.0), // zero_grad(set_to_none=True)
            (Phase::Backward, End, 7.5), // the gradients again, the activations freed
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
        ],
    );
    let analysis = analyze(&recording);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Forward), "{retained:?}");
    let forward = retained
        .iter()
        .find(|(p, _)| *p == Phase::Forward)
        .unwrap()
        .1;
    assert!((forward - 2.0).abs() < 0.01, "{retained:?}");
    // The backward makes the gradients again and gives back the activations: it keeps nothing.
    let backward = retained
        .iter()
        .find(|(p, _)| *p == Phase::Backward)
        .unwrap()
        .1;
    assert!(backward.abs() < 0.01, "{retained:?}");
    // The gradients are freed in every step, before the backward: not kept.
    assert!(
        analysis
            .freed_before_backward
            .is_some_and(|f| (f / MIB as f64 - 8.0).abs() < 0.01),
        "{:?}",
        analysis.freed_before_backward
    );
}

/// What each backward of a `heap_steps` recording freed of the forward's saved tensors, as the
/// probe measures it: `mib` at every backward, sent just before its end edge (edge `end_edge`
/// of each step).
fn with_saved_freed(mut recording: Recording, steps: u64, end_edge: u64, mib: f64) -> Recording {
    use collector::recording::{Origin, Record, SavedFreed};
    for s in 0..steps {
        recording.push(Record::SavedFreed(SavedFreed {
            t_ns: s * 100_000_000 + end_edge * 5_000_000 - 1,
            origin: Origin { pid: 7, rank: None },
            step: Some(s),
            device: None,
            bytes: (mib * MIB as f64) as u64,
        }));
    }
    recording
}

/// A Grad-CAM style backward hook keeps 2 MiB of gradients a step, in the most common loop
/// order. The backward frees the forward's 10 MiB of activations while it makes the gradients
/// again and the 2 MiB it keeps: by its net it gives back 8 MiB, and the forward seems to keep
/// what the backward kept. With what the backward freed of the forward's saved tensors measured
/// (the probe's `saved_freed`), the backward keeps its 2 MiB and the forward nothing. A forward
/// hook that keeps 2 MiB, measured the same way, stays the forward's.
#[test]
fn a_backward_that_frees_the_activations_still_keeps_the_gradients_it_made() {
    use collector::recording::Edge::{Begin, End};
    let backward_hook = with_saved_freed(
        heap_steps(
            60,
            (8.0, 8.0),
            &[
                (Phase::Forward, Begin, 0.0),
                (Phase::Forward, End, 10.0), // the activations, saved for the backward
                (Phase::Backward, Begin, -8.0), // zero_grad(set_to_none=True)
                (Phase::Backward, End, 8.0 - 10.0 + 2.0), // gradients, activations, the hook's
                (Phase::Optimizer, Begin, 0.0),
                (Phase::Optimizer, End, 0.0),
            ],
        ),
        60,
        3,
        10.0,
    );
    let retained_of = |retained: &[(Phase, f64)], phase: Phase| {
        retained.iter().find(|(p, _)| *p == phase).unwrap().1
    };
    let (phase, retained) = leak_phase(&analyze(&backward_hook));
    assert_eq!(phase, Some(Phase::Backward), "{retained:?}");
    assert!(
        (retained_of(&retained, Phase::Backward) - 2.0).abs() < 0.01,
        "{retained:?}"
    );
    assert!(
        retained_of(&retained, Phase::Forward).abs() < 0.01,
        "{retained:?}"
    );

    let forward_hook = with_saved_freed(
        heap_steps(
            60,
            (8.0, 8.0),
            &[
                (Phase::Forward, Begin, 0.0),
                (Phase::Forward, End, 12.0), // the activations, and the hook's 2 MiB
                (Phase::Backward, Begin, -8.0),
                (Phase::Backward, End, 8.0 - 10.0),
                (Phase::Optimizer, Begin, 0.0),
                (Phase::Optimizer, End, 0.0),
            ],
        ),
        60,
        3,
        10.0,
    );
    let (phase, retained) = leak_phase(&analyze(&forward_hook));
    assert_eq!(phase, Some(Phase::Forward), "{retained:?}");
    assert!(
        (retained_of(&retained, Phase::Forward) - 2.0).abs() < 0.01,
        "{retained:?}"
    );
    assert!(
        retained_of(&retained, Phase::Backward).abs() < 0.01,
        "{retained:?}"
    );

    // Measured on the first steps only, as the probe samples: the later backwards take the last
    // measurement (a training step saves the same graph each time).
    let sampled = {
        let mut r = backward_hook.clone();
        r.saved_freed.retain(|f| f.step.is_some_and(|s| s < 8));
        r
    };
    let (phase, retained) = leak_phase(&analyze(&sampled));
    assert_eq!(phase, Some(Phase::Backward), "{retained:?}");
}

/// A training step's edges in a `heap_steps` recording: the forward's 0.5 MiB of activations,
/// given back by the backward; nothing kept.
fn training_step_keeping_nothing() -> Vec<(Phase, collector::recording::Edge, f64)> {
    use collector::recording::Edge::{Begin, End};
    vec![
        (Phase::Forward, Begin, 0.0),
        (Phase::Forward, End, 0.5),
        (Phase::Backward, Begin, 0.0),
        (Phase::Backward, End, -0.5),
        (Phase::Optimizer, Begin, 0.0),
        (Phase::Optimizer, End, 0.0),
    ]
}

/// An eval pass keeps 2 MiB of logits a step while the process settles around them: resident
/// memory rises 6 MiB a step over the first half of the run, then 1 MiB a step as malloc reuses
/// pages it had freed (an LBFGS job under load did this). By resident memory alone the rise slows
/// like settling; the C heap, read at every step start, keeps its 2 MiB a step: a leak, said so.
/// Memory that settles in the heap too stays no leak.
#[test]
fn a_leak_the_process_settles_around_is_told_by_the_c_heap() {
    use collector::recording::Edge::{Begin, End};
    let mut step = training_step_keeping_nothing();
    step.extend([(Phase::Eval, Begin, 0.0), (Phase::Eval, End, 2.0)]);
    let settling_rss = |s: u64| {
        let s = s as f64;
        let mib = if s < 30.0 {
            6.0 * s
        } else {
            180.0 + (s - 30.0)
        };
        (400.0 + mib) * MIB as f64
    };
    let recording = heap_steps_with_rss(60, (8.0, 8.0), &step, |s, _| settling_rss(s));
    let analysis = analyze(&recording);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Eval), "{retained:?}");
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    assert!(
        leak.evidence
            .iter()
            .any(|e| e.starts_with("the C heap in use does not slow")),
        "{:#?}",
        leak.evidence
    );

    // The heap settles too (what the eval keeps stops after 20 steps): no leak.
    let settled = [
        (Phase::Forward, Begin, 0.0),
        (Phase::Forward, End, 0.5),
        (Phase::Backward, Begin, 0.0),
        (Phase::Backward, End, -0.5),
    ];
    let recording = heap_steps_with_rss(60, (8.0, 8.0), &settled, |s, _| settling_rss(s));
    let analysis = analyze(&recording);
    assert!(
        analysis.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        analysis.findings
    );
}

/// An eval pass keeps 2 MiB a step, and the collector's samples of resident memory fall anywhere
/// in a step of a fast loop (ten a second, late on a busy machine), so they scatter by up to
/// 120 MiB around the rise: by resident memory alone the rise is lost in its noise. The C heap,
/// read by the probe at every step start, is exact: the leak is found, at its own rate, whatever
/// the samples did. Without the eval's keep, the same scatter is no leak.
#[test]
fn a_leak_the_c_heap_reads_exactly_is_found_at_its_rate_however_resident_memory_scatters() {
    use collector::recording::Edge::{Begin, End};
    let mut step = training_step_keeping_nothing();
    // Where in its step each sample fell: a fixed scatter, so that the test is the same each run.
    let scattered = |s: u64, heap: f64| {
        let fell = (s.wrapping_mul(2_654_435_761) >> 7) % 120;
        heap + (400 + fell) as f64 * MIB as f64
    };
    let flat = analyze(&heap_steps_with_rss(60, (8.0, 8.0), &step, scattered));
    assert!(
        flat.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        flat.findings
    );
    step.extend([(Phase::Eval, Begin, 0.0), (Phase::Eval, End, 2.0)]);
    let analysis = analyze(&heap_steps_with_rss(60, (8.0, 8.0), &step, scattered));
    let resident = analysis.trend.as_ref().unwrap();
    assert!(
        resident.growth_bytes < 3.0 * resident.noise_bytes,
        "resident memory alone should not show it: {resident:#?}"
    );
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Eval), "{retained:?}");
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    let rate = leak.growth_per_step_bytes.unwrap() / MIB as f64;
    assert!((rate - 2.0).abs() < 0.01, "{rate} MiB/step: {leak:#?}");
    assert!(leak.title.ends_with("+2.00 MiB/step"), "{}", leak.title);
    assert!(
        leak.evidence.iter().any(|e| e.starts_with(
            "the C heap in use at each step's start, read by the probe: 2.00 MiB/step"
        )),
        "{:#?}",
        leak.evidence
    );
}

/// An evaluation every third step draws a figure and never closes it: the C heap keeps 1.8 MiB
/// each time (600 KiB a step), resident memory 900 KiB a step (Python's own arenas too), over a
/// run of 90 steps. The heap is exact and does not settle around pages: a leak, as in a long run,
/// whether resident memory's pace is over the short run's least or under it (a job judged a leak
/// in one run and no leak in the next). Without the heap, resident memory's slow rise is not "no
/// leak" but a run too short to tell.
#[test]
fn a_short_runs_slow_leak_the_c_heap_reads_is_a_leak() {
    use collector::recording::Edge::{Begin, End};
    let step_of = |s: u64| {
        let mut step = training_step_keeping_nothing();
        let kept = if s % 3 == 2 { 1.8 } else { 0.0 };
        step.extend([(Phase::Eval, Begin, 0.0), (Phase::Eval, End, kept)]);
        step
    };
    let resident = |s: u64, heap: f64| heap + (400.0 + 0.3 * s as f64) * MIB as f64;
    let recording = heap_steps_varying(90, |_| (8.0, 8.0), step_of, resident);
    let analysis = analyze(&recording);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Eval), "{retained:?}");
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    let rate = leak.growth_per_step_bytes.unwrap() / MIB as f64;
    assert!((rate - 0.6).abs() < 0.01, "{rate} MiB/step: {leak:#?}");

    let mut without_heap = recording.clone();
    without_heap.phases = Default::default();
    for mut edge in recording.phases.iter() {
        edge.host_heap = None;
        without_heap.phases.push(edge);
    }
    let analysis = analyze(&without_heap);
    assert!(
        analysis.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        analysis.findings
    );
    let (headline, problem) = collector::analysis::headline(&analysis);
    assert_eq!(problem, None, "{headline}");
    assert!(
        headline.starts_with("Cannot tell yet — not enough data: host memory rose")
            && headline.contains("without slowing over 90 steps")
            && headline.ends_with("over 100 steps or more (10 more)"),
        "{headline}"
    );
}

/// The same evaluation closes its figures, but a figure is a reference cycle: the C heap keeps
/// each until Python's cycle collector runs (at step 34 of 90 here), which frees them in one go;
/// resident memory, which does not fall when memory is freed, rises 1.1 MiB a step throughout.
/// No leak: a sawtooth, said so in the headline. A leak whose one step start caught a transient
/// (a buffer not yet freed) still is one.
#[test]
fn a_heap_that_gives_its_rise_back_in_one_go_is_a_sawtooth_not_a_leak() {
    use collector::recording::Edge::{Begin, End};
    let step_of = |s: u64| {
        let mut step = training_step_keeping_nothing();
        let kept = match s {
            34 => -18.0,
            s if s % 3 == 2 => 1.8,
            _ => 0.0,
        };
        step.extend([(Phase::Eval, Begin, 0.0), (Phase::Eval, End, kept)]);
        step
    };
    let resident = |s: u64, _: f64| (400.0 + 1.1 * s as f64) * MIB as f64;
    let analysis = analyze(&heap_steps_varying(90, |_| (8.0, 8.0), step_of, resident));
    assert!(
        analysis.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        analysis.findings
    );
    let (headline, problem) = collector::analysis::headline(&analysis);
    assert_eq!(problem, Some(false), "{headline}");
    assert!(
        headline.starts_with("No leak: a sawtooth that falls back: the C heap rose to")
            && headline.ends_with("back at once at step 35"),
        "{headline}"
    );

    // A leak of 2 MiB a step; one step start caught 30 MiB not yet freed.
    let step_of = |s: u64| {
        let mut step = training_step_keeping_nothing();
        let kept = match s {
            40 => 32.0,
            41 => -28.0,
            _ => 2.0,
        };
        step.extend([(Phase::Eval, Begin, 0.0), (Phase::Eval, End, kept)]);
        step
    };
    let resident = |_: u64, heap: f64| heap + 400.0 * MIB as f64;
    let analysis = analyze(&heap_steps_varying(90, |_| (8.0, 8.0), step_of, resident));
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Eval), "{retained:?}");
}

/// The same loop with an eval pass after the optimizer that keeps its logits.
#[test]
fn an_eval_leak_is_not_blamed_on_the_backward_that_makes_the_freed_gradients_again() {
    use collector::recording::Edge::{Begin, End};
    let recording = heap_steps(
        60,
        (8.0, 8.0),
        &[
            (Phase::Forward, Begin, 0.0),
            (Phase::Forward, End, 0.5),
            (Phase::Backward, Begin, -8.0),
            (Phase::Backward, End, 7.5),
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
            (Phase::Eval, Begin, 0.0),
            (Phase::Eval, End, 2.0),
        ],
    );
    let (phase, retained) = leak_phase(&analyze(&recording));
    assert_eq!(phase, Some(Phase::Eval), "{retained:?}");
}

/// `optimizer.step(closure)` with LBFGS (two closure calls a step): the closure clears the
/// gradients and runs forward and backward; between the calls the optimizer makes 24 MiB of its
/// own (a flat copy of the gradients, a direction) and frees them when it returns. The forward
/// keeps 2 MiB each time: the leak is the forward's, not the closure's.
#[test]
fn an_optimizers_own_temporaries_around_its_closure_do_not_hide_what_forward_keeps() {
    use collector::recording::Edge::{Begin, End};
    // The categories are read at the first forward, after the closure cleared the gradients:
    // none there, 8 MiB at the end of the step before; the memory did not fall between the
    // steps, so those 8 MiB are not given back twice.
    let recording = heap_steps(
        60,
        (0.0, 8.0),
        &[
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Forward, Begin, -8.0), // the closure's zero_grad
            (Phase::Forward, End, 2.5),
            (Phase::Backward, Begin, 0.0), // the loss, computed in the closure
            (Phase::Backward, End, 7.5),
            (Phase::Forward, Begin, 16.0), // +24 of the optimizer's own, −8 zero_grad
            (Phase::Forward, End, 2.5),
            (Phase::Backward, Begin, 0.0),
            (Phase::Backward, End, 7.5),
            (Phase::Optimizer, End, -24.0),
        ],
    );
    let (phase, retained) = leak_phase(&analyze(&recording));
    assert_eq!(phase, Some(Phase::Forward), "{retained:?}");
    let forward = retained
        .iter()
        .find(|(p, _)| *p == Phase::Forward)
        .unwrap()
        .1;
    assert!((forward - 2.0).abs() < 0.01, "{retained:?}");
}

/// `opt.zero_grad()` at the top of the loop frees the gradients between the steps, and
/// `zero_grad(set_to_none=False)` keeps them: only the second is told its gradients are kept.
/// Cleared after the forward, they are freed, and said to live through the forward.
#[test]
fn gradients_are_kept_only_where_the_loop_does_not_free_them() {
    use collector::recording::Edge::{Begin, End};
    // Kept (a finding), and freed after the forward (said under the categories).
    let judged = |recording: &Recording| {
        let analysis = analyze(recording);
        let (phase, retained) = leak_phase(&analysis);
        assert_eq!(phase, Some(Phase::Forward), "{retained:?}");
        let host = analysis.categories.iter().find(|c| c.device.is_none());
        (
            analysis.finding(FindingKind::GradientsKept).is_some(),
            host.is_some_and(|c| c.gradients_freed_after_forward),
        )
    };
    let top = heap_steps(
        60,
        (0.0, 8.0),
        &[
            (Phase::Forward, Begin, -8.0), // zero_grad before the forward
            (Phase::Forward, End, 2.5),
            (Phase::Backward, Begin, 0.0),
            (Phase::Backward, End, 7.5),
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
        ],
    );
    assert_eq!(judged(&top), (false, false));
    let between = heap_steps(
        60,
        (8.0, 8.0),
        &[
            (Phase::Forward, Begin, 0.0),
            (Phase::Forward, End, 2.5),
            (Phase::Backward, Begin, -8.0), // zero_grad after the forward
            (Phase::Backward, End, 7.5),
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
        ],
    );
    assert_eq!(judged(&between), (false, true));
    let in_place = heap_steps(
        60,
        (8.0, 8.0),
        &[
            (Phase::Forward, Begin, 0.0),
            (Phase::Forward, End, 2.5),
            (Phase::Backward, Begin, 0.0), // zeroed in place: nothing freed
            (Phase::Backward, End, -0.5),
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
        ],
    );
    assert_eq!(judged(&in_place), (true, false));
}

/// Resident memory that rises 2 MiB a step while the C heap in use stays flat and the census
/// finds no holder that grew: the report's own evidence says nothing the job allocates grows, so
/// the rise is a question (Python's arenas, memory kept after it was freed), not a leak in a
/// phase. With a holder that grew outside the heap (shared memory, a mapped file), it is a leak
/// again; with one that grew inside the heap before the rise (a replay buffer filling up, the
/// heap rising with it early on and flat since), it is still the question.
#[test]
fn a_resident_rise_that_nothing_allocated_explains_is_a_question_not_a_leak() {
    use collector::recording::{Categories, Census, Holder, Origin, Record};
    #[derive(PartialEq)]
    enum Holder_ {
        Flat,
        GrowsOutsideTheHeap,
        GrewInsideTheHeapEarly,
        /// Over the first third after the warm-up, as a replay buffer fills to its `maxlen`:
        /// the heap's trend over the run rises, but it settled, and it is not what keeps rising.
        FilledInsideTheHeap,
        /// The same, with the C heap not read at the last steps (over its share of the job's
        /// time): their categories carry no total, and the heap read before them still counts.
        FilledInsideTheHeapLastStepsUnread,
    }
    let build = |holder: Holder_| {
        let origin = Origin { pid: 7, rank: None };
        let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
        let (mut times, mut rss) = (Vec::new(), Vec::new());
        for s in 0..60u64 {
            let early = match holder {
                Holder_::GrewInsideTheHeapEarly => s.min(16) * 8 * MIB,
                Holder_::FilledInsideTheHeap | Holder_::FilledInsideTheHeapLastStepsUnread => {
                    (s.clamp(6, 26) - 6) * 5 * MIB / 2
                }
                _ => 0,
            };
            let heap = 200 * MIB + early + s % 3 * 64 * 1024;
            let read = holder != Holder_::FilledInsideTheHeapLastStepsUnread || s < 50;
            recording.push(Record::Categories(Categories {
                t_ns: s * 100_000_000,
                origin,
                step: Some(s),
                parameters: 8 * MIB,
                total: read.then_some(heap),
                ..Categories::default()
            }));
            for (k, (phase, edge)) in tidemark_tests::FORWARD_BACKWARD.into_iter().enumerate() {
                let t_ns = s * 100_000_000 + k as u64 * 5_000_000;
                let resident = 600 * MIB + s * 2 * MIB + if k == 3 { 2 * MIB } else { 0 };
                let mut e = tidemark_tests::edge(t_ns, edge, phase, Some(s), origin);
                e.host_heap = read.then_some(heap + if k == 1 { MIB } else { 0 });
                e.host_rss = Some(resident);
                recording.push(Record::Phase(e));
                times.push(t_ns);
                rss.push(resident);
            }
            if s == 8 || s == 59 {
                let bytes = match holder {
                    Holder_::Flat => 4 * MIB,
                    Holder_::GrowsOutsideTheHeap => s * 2 * MIB,
                    Holder_::GrewInsideTheHeapEarly => s.min(16) * 8 * MIB,
                    Holder_::FilledInsideTheHeap | Holder_::FilledInsideTheHeapLastStepsUnread => {
                        (s.clamp(6, 26) - 6) * 5 * MIB / 2
                    }
                };
                recording.push(Record::Census(Census {
                    t_ns: s * 100_000_000 + 1,
                    origin,
                    step: Some(s),
                    reason: "step".to_owned(),
                    holders: vec![Holder {
                        key: "__main__.buffer".to_owned(),
                        name: "__main__.buffer".to_owned(),
                        what: "list, a global of __main__".to_owned(),
                        tensors: 4,
                        bytes,
                        ..Holder::default()
                    }],
                    tensors: 4,
                    bytes,
                    ..Census::default()
                }));
            }
        }
        recording.push(Record::Chunk(collector::recording::Chunk {
            times_ns: times,
            columns: vec![collector::recording::Column {
                series: collector::recording::SeriesKey::new(
                    collector::recording::SeriesKind::HostRss,
                ),
                values: rss,
                valid: None,
            }],
        }));
        analyze(&recording)
    };
    let flat = build(Holder_::Flat);
    assert!(
        flat.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        flat.findings
    );
    let question = flat
        .finding(FindingKind::ResidentGrowth)
        .unwrap_or_else(|| panic!("{:#?}", flat.findings));
    assert!(
        question
            .title
            .starts_with("Host memory rises 2.00 MiB/step, but nothing the job allocates grows"),
        "{}",
        question.title
    );
    assert_eq!(question.phase, None);
    assert_eq!(collector::analysis::headline(&flat).1, None);

    for early in [
        build(Holder_::GrewInsideTheHeapEarly),
        build(Holder_::FilledInsideTheHeap),
        build(Holder_::FilledInsideTheHeapLastStepsUnread),
    ] {
        assert!(
            early.finding(FindingKind::Leak).is_none(),
            "{:#?}",
            early.findings
        );
        let question = early
            .finding(FindingKind::ResidentGrowth)
            .unwrap_or_else(|| panic!("{:#?}", early.findings));
        assert!(
            question
                .evidence
                .iter()
                .any(|e| e
                    .contains("what the holders that grew keep (__main__.buffer) is in that heap")),
            "{:#?}",
            question.evidence
        );
    }

    let held = build(Holder_::GrowsOutsideTheHeap);
    assert!(held.finding(FindingKind::ResidentGrowth).is_none());
    let leak = held
        .finding(FindingKind::Leak)
        .unwrap_or_else(|| panic!("{:#?}", held.findings));
    assert!(
        leak.title.ends_with("held by __main__.buffer"),
        "{}",
        leak.title
    );
}

/// `batches.append(x.repeat(…))` before `opt.zero_grad()` at the top of the loop: between the
/// steps the loop keeps 2 MiB and frees the 8 MiB of gradients, so memory falls 6 MiB there.
/// The gradients freed are the backward's to give back, all 8 MiB of them, and the 2 MiB kept
/// are between the phases, not the backward's.
#[test]
fn what_the_loop_keeps_where_it_frees_the_gradients_is_kept_between_the_phases() {
    use collector::recording::Edge::{Begin, End};
    let recording = heap_steps(
        60,
        (0.0, 8.0),
        &[
            (Phase::Forward, Begin, -6.0),
            (Phase::Forward, End, 0.5),
            (Phase::Backward, Begin, 0.0),
            (Phase::Backward, End, 7.5),
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
        ],
    );
    let analysis = analyze(&recording);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, None, "{retained:?}");
    let leak = analysis.finding(FindingKind::Leak).unwrap();
    assert!(leak.title.contains("between phases"), "{}", leak.title);
}

/// `opt.zero_grad()` at the top of the loop, and every 4th step an evaluation without
/// `torch.no_grad()` whose summed loss the loop keeps: 2 MiB of graph a batch, two batches. The
/// evaluation follows the optimizer step, so it opens the next step, with the gradients of the
/// step before still alive: they are freed after it, by the next `zero_grad`. That step begins
/// with the gradients, the others without; the evaluation made what is kept, not the backward
/// of the step before it, and the evaluation does not give back the gradients in place of it.
#[test]
fn an_evaluation_that_opens_a_step_before_the_gradients_are_freed_keeps_what_it_kept() {
    use collector::recording::Edge::{Begin, End};
    let opens_with_eval = |s: u64| s > 0 && s.is_multiple_of(4);
    let step = |s: u64| {
        let mut edges = Vec::new();
        // The 8 MiB of gradients of the step before, freed before this step's training forward:
        // between the steps, or after this step's evaluation.
        let mut freed = if s == 0 { 0.0 } else { -8.0 };
        if opens_with_eval(s) {
            edges.extend([
                (Phase::Eval, Begin, 0.0),
                (Phase::Eval, End, 4.0), // 2 MiB of graph kept, 2 MiB of output
                (Phase::Eval, Begin, -2.0),
                (Phase::Eval, End, 4.0),
            ]);
            freed -= 2.0; // and the last output
        }
        edges.extend([
            (Phase::Forward, Begin, freed),
            (Phase::Forward, End, 0.5),
            (Phase::Backward, Begin, 0.0),
            (Phase::Backward, End, 7.5),
            (Phase::Optimizer, Begin, 0.0),
            (Phase::Optimizer, End, 0.0),
        ]);
        edges
    };
    // Read at the training forward: after the gradients were freed.
    let recording = heap_steps_varying(
        60,
        |_| (0.0, 8.0),
        step,
        |_, heap| heap + 400.0 * MIB as f64,
    );
    let analysis = analyze(&recording);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Eval), "{retained:?}");
    let of = |phase: Phase| retained.iter().find(|(p, _)| *p == phase).unwrap().1;
    assert!((of(Phase::Eval) - 2.0).abs() < 0.01, "{retained:?}");
    assert!(of(Phase::Backward).abs() < 0.01, "{retained:?}");
    assert!(
        analysis.finding(FindingKind::GradientsKept).is_none(),
        "{:#?}",
        analysis.findings
    );
}

/// A host job whose resident memory creeps up half a MiB a step for the whole of a 60-step run
/// while the C heap keeps nothing (its holes filling with pages, the interpreter settling): 30
/// MiB beyond the heap, but no rise that a run this short calls a leak. The heap, where frees
/// show, attributes the phases, not resident memory, where they may not (a loop that freed its
/// gradients between forward and backward was said to keep them, in 3 runs of 16 on a busy
/// machine).
#[test]
fn resident_memory_that_creeps_beyond_the_heap_does_not_take_the_attribution() {
    let recording = heap_steps_with_rss(
        60,
        (8.0, 8.0),
        &training_step_keeping_nothing(),
        |s, heap| heap + (400.0 + 0.5 * s as f64) * MIB as f64,
    );
    let analysis = analyze(&recording);
    assert_attributed(&analysis, collector::analysis::Attribution::HostHeap);
    assert!(
        analysis.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        analysis.findings
    );
}

/// A long host job: the probe reads the C heap at every edge of the first steps only, then at
/// whole steps now and then (within its share of the job's time). The steps it read still
/// attribute the phases with the heap, and the unread stretches between them are not counted
/// as growth between the phases.
#[test]
fn a_heap_read_at_some_whole_steps_still_attributes_the_phases() {
    let recording =
        tidemark_tests::forward_keeps_on_the_host(400, 2, |step, _| step < 20 || step % 25 == 0);
    let analysis = analyze(&recording);
    assert_attributed(&analysis, collector::analysis::Attribution::HostHeap);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Forward), "{retained:?}");
    assert!(
        analysis.between_phases.is_none_or(|b| b < 0.1),
        "{:?}",
        analysis.between_phases
    );
}

/// A host job longer than the C heap's share lets it be read for: the heap read at every edge of
/// the first 100 steps only, resident memory at all 300 (its share is larger), growing 3 MiB a
/// step for the 2 MiB kept (the heap's holes). Over their whole series resident memory grows
/// more than four times what the heap does, but over the same steps it does not: the growth is
/// inside malloc, and the heap attributes the phases (resident memory, which stays up where the
/// backward frees, put a loop's leaks in backward or between the phases).
#[test]
fn a_heap_read_over_fewer_steps_than_resident_memory_is_compared_over_the_same_steps() {
    let recording = tidemark_tests::forward_keeps_on_the_host(300, 3, |step, _| step < 100);
    let analysis = analyze(&recording);
    assert_attributed(&analysis, collector::analysis::Attribution::HostHeap);
    let (phase, retained) = leak_phase(&analysis);
    assert_eq!(phase, Some(Phase::Forward), "{retained:?}");
    // The phase table says how many of the occurrences observed were measured.
    let forward = analysis
        .phases
        .iter()
        .find(|p| p.phase == Phase::Forward)
        .unwrap();
    assert_eq!(forward.observed, 300);
    assert!((95..=100).contains(&forward.occurrences), "{forward:?}");
    assert_eq!(
        forward.count_text(),
        format!("{} of 300", forward.occurrences)
    );
    let every = analyze(&tidemark_tests::forward_keeps_on_the_host(
        300,
        3,
        |_, _| true,
    ));
    for p in &every.phases {
        assert_eq!((p.occurrences, p.observed), (300, 300), "{p:?}");
        assert_eq!(p.count_text(), "300");
    }
    // Growth outside malloc is still told over the same steps: the heap flat while resident
    // memory rises.
    let mut outside = tidemark_tests::forward_keeps_on_the_host(300, 3, |step, _| step < 100);
    outside.phases = {
        let mut phases = collector::recording::PhaseEdges::default();
        for mut e in outside.phases.iter() {
            e.host_heap = e.host_heap.map(|_| 100 * MIB);
            phases.push(e);
        }
        phases
    };
    let analysis = analyze(&outside);
    assert_attributed(&analysis, collector::analysis::Attribution::HostRssAtEdges);
}

/// Resident memory sampled every 100 ms over a loop of 20 ms steps that keeps 2 MiB a step: the
/// steps after the last sample inside the loop are not given the sample taken once the loop was
/// over, when what it kept was freed (it would read as memory that falls back).
#[test]
fn steps_are_not_given_a_sample_taken_after_the_loop_ended() {
    const STEP_NS: u64 = 20_000_000;
    let origin = Origin { pid: 7, rank: None };
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    for record in tidemark_tests::forward_steps(origin, 60, STEP_NS, 15_000_000, |_| 0) {
        let Record::Phase(mut e) = record else {
            unreachable!()
        };
        e.host_rss = None;
        recording.push(Record::Phase(e));
    }
    // In the loop (its last edge at 1,195 ms): 500 MiB and 2 MiB a step; at 1,200 ms, freed.
    let mut times_ns: Vec<u64> = (0..12).map(|k| k * 100_000_000).collect();
    let mut values: Vec<u64> = times_ns
        .iter()
        .map(|t| 500 * MIB + t / STEP_NS * 2 * MIB)
        .collect();
    times_ns.push(1_200_000_000);
    values.push(400 * MIB);
    recording.push(Record::Chunk(Chunk {
        times_ns,
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values,
            valid: None,
        }],
    }));
    let analysis = analyze(&recording);
    assert_eq!(analysis.basis, Basis::HostRss);
    assert_eq!(analysis.step_series.values.len(), 60);
    assert!(
        analysis.step_series.values.iter().all(|&v| v >= 500 * MIB),
        "{:?}",
        analysis.step_series.values
    );
    assert!(
        analysis.finding(FindingKind::Leak).is_some(),
        "{:#?}",
        analysis.findings
    );
}

/// Two moments of a recording (the viewer's right-clicks A and B): what each phase did between
/// them, what each curve read at both, and who came to hold more from census to census.
#[test]
fn two_moments_of_a_recording_say_what_each_phase_and_holder_did_between_them() {
    use collector::compare::compare_moments;
    use collector::recording::{Census, Holder};
    let run = Run {
        steps: 50,
        leak_forward: MIB,
        leak_backward: 2 * MIB,
        noise: 0,
        ..Run::default()
    };
    let mut recording = synthesize(&run);
    // A step is three phases of two edges 10 ms apart: 60 ms; censuses at steps 5, 10, 30, 40.
    let step_ns = 60_000_000;
    let origin = Origin {
        pid: 100,
        rank: None,
    };
    for s in [5, 10, 30, 40] {
        recording.push(Record::Census(Census {
            t_ns: s * step_ns,
            origin,
            step: Some(s),
            reason: "step".to_owned(),
            holders: vec![Holder {
                key: "k".to_owned(),
                name: "__main__.losses".to_owned(),
                what: "list, a global of __main__".to_owned(),
                device: Some(0),
                tensors: s,
                bytes: s * MIB,
                ..Holder::default()
            }],
            ..Census::default()
        }));
    }
    let analysis = analyze(&recording);
    // B before A: the same answer.
    let moments = compare_moments(&recording, &analysis, 30 * step_ns, 10 * step_ns);
    assert_eq!(
        (moments.from_ns, moments.to_ns),
        (10 * step_ns, 30 * step_ns)
    );
    assert_eq!(moments.steps, [Some(10), Some(30)]);
    let phase = |name: &str| moments.phases.iter().find(|p| p.phase == name).unwrap();
    // Steps 10 to 29 lie between the moments: 20 of each phase.
    assert_eq!(phase("forward").occurrences, 20);
    assert_eq!(phase("forward").net_bytes, 20.0 * MIB as f64);
    assert_eq!(phase("backward").net_bytes, 40.0 * MIB as f64);
    assert_eq!(phase("optimizer").net_bytes, 0.0);
    assert_eq!(phase("forward").watermark_bytes, 2.0 * GIB as f64);
    let allocated = moments
        .series
        .iter()
        .find(|s| s.name == "allocated" && s.device == Some(0))
        .unwrap();
    assert_eq!(allocated.value.a, Some((4 * GIB + 30 * MIB) as f64));
    assert_eq!(allocated.value.change, Some(60.0 * MIB as f64));
    assert_eq!(moments.between_phases_bytes, Some(0.0));
    // The censuses at steps 10 and 30; the one at 40 is after B.
    assert_eq!(moments.census_steps, [Some(10), Some(30)]);
    assert_eq!(moments.holders.len(), 1, "{:?}", moments.holders);
    assert_eq!(moments.holders[0].name, "__main__.losses");
    assert_eq!(moments.holders[0].held.change, Some(20.0 * MIB as f64));
    assert!(moments.notes.is_empty(), "{:?}", moments.notes);

    // Two moments inside one step: no phase whole between them, said; no census between them.
    let inside = compare_moments(&recording, &analysis, 12 * step_ns + 1, 12 * step_ns + 5);
    assert!(inside.phases.is_empty());
    assert!(
        inside
            .notes
            .iter()
            .any(|n| n.contains("no phase began and ended")),
        "{:?}",
        inside.notes
    );
    assert!(
        inside
            .notes
            .iter()
            .any(|n| n.contains("no census was taken")),
        "{:?}",
        inside.notes
    );
}
