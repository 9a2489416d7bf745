//! A leak told from settling by its shape, on synthetic step series with known truth: growth that
//! keeps its pace is a leak at any size above the noise, growth that slows to a plateau is not at
//! any size; and the sawtooth's range starts where the job runs, not before its interpreter did.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

use collector::analysis::{Analysis, Basis, FindingKind, analyze};
use collector::recording::SeriesKind;
use collector::recording::{Chunk, Column, Edge, Origin, Phase, Record, Recording, SeriesKey};
use tidemark_tests::{GIB, MIB};

const KIB: u64 = 1 << 10;
/// A step lasts 100 ms; the job's interpreter starts 1 s after the collector.
const STEP_NS: u64 = 100_000_000;
const START_NS: u64 = 1_000_000_000;

/// Deterministic noise.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

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

/// Host memory at the start of each step as a Python process shows it: `shape(step)` on a base of
/// 300 MiB, ±1.5 MiB of noise (batches, arenas) rounded to 4 KiB pages, and one step in 17
/// starting 12 MiB higher (a transient buffer not yet given back).
fn host_levels(steps: u64, seed: u64, shape: impl Fn(f64) -> f64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    (0..steps)
        .map(|step| {
            let spike = if rng.next().is_multiple_of(17) {
                12 * MIB
            } else {
                0
            };
            let level = 300.0 * MIB as f64 + shape(step as f64) + rng.noise(3 * MIB / 2) as f64;
            (level as u64 + spike) / 4096 * 4096
        })
        .collect()
}

/// A Python job without CUDA, as the collector records it: host samples from before the
/// interpreter runs (188 KiB, then the imports), then one forward phase a step whose edges carry
/// the process' resident memory; within each step it rises by `swing` and falls back.
fn host_recording(levels: &[u64], swing: u64) -> Recording {
    let mut recording = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    let origin = Origin {
        pid: 100,
        rank: None,
    };
    let mut times = vec![0, START_NS / 4, START_NS / 2, 3 * START_NS / 4];
    let mut values = vec![188 * KIB, 40 * MIB, 150 * MIB, 250 * MIB];
    for (step, &level) in levels.iter().enumerate() {
        let begin = START_NS + step as u64 * STEP_NS;
        for (edge, t_ns, rss) in [
            (Edge::Begin, begin, level),
            (Edge::End, begin + 40_000_000, level + swing),
        ] {
            let mut e = tidemark_tests::edge(t_ns, edge, Phase::Forward, Some(step as u64), origin);
            e.host_rss = Some(rss);
            recording.push(Record::Phase(e));
        }
        for (k, up) in [(0, 0), (1, swing), (2, swing), (3, 0), (4, 0)] {
            times.push(begin + k * 20_000_000);
            values.push(level + up);
        }
    }
    recording.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values,
            valid: None,
        }],
    }));
    recording
}

fn leak_of(analysis: &Analysis) -> Option<f64> {
    analysis
        .finding(FindingKind::Leak)
        .map(|f| f.growth_per_step_bytes.unwrap())
}

/// A rise of `bytes` that decays to a plateau with a time constant of `tau` steps.
fn settling(bytes: f64, tau: f64) -> impl Fn(f64) -> f64 {
    move |step| bytes * (1.0 - (-step / tau).exp())
}

/// A training step that keeps a 272 KiB tensor every step: a slow leak on a 300 MiB process,
/// 40 MiB over 150 steps, a tenth of where memory started. It is found with its rate, and what
/// it costs: 1 GiB every ~3,855 steps.
#[test]
fn a_slow_steady_host_leak_is_found_with_its_rate_and_cost() {
    let rate = 272.0 * KIB as f64;
    for seed in 0..30 {
        let levels = host_levels(150, seed, |step| rate * step);
        let analysis = analyze(&host_recording(&levels, 0));
        assert_eq!(analysis.basis, Basis::HostRss);
        let leak = analysis.finding(FindingKind::Leak).unwrap_or_else(|| {
            panic!("seed {seed}: {:#?} {:?}", analysis.findings, analysis.trend)
        });
        let slope = leak.growth_per_step_bytes.unwrap();
        // ±1.5 MiB of noise over 135 steps moves the Theil–Sen slope by a few KiB a step.
        assert!(
            (slope - rate).abs() < 0.1 * rate,
            "seed {seed}: {slope} B/step for {rate}"
        );
        assert!(leak.title.starts_with("Host memory leak"), "{}", leak.title);
        let cost = leak
            .evidence
            .iter()
            .find_map(|e| e.strip_prefix("at this pace it costs 1 GiB every "))
            .unwrap_or_else(|| panic!("seed {seed}: {:#?}", leak.evidence));
        let steps: f64 = cost.split(' ').next().unwrap().parse().unwrap();
        let exact = GIB as f64 / rate;
        assert!(
            (steps - exact).abs() < 0.12 * exact,
            "seed {seed}: {cost} ({exact} steps exactly)"
        );
        // 10 steps a second: a GiB every ~6 min 25 s.
        assert!(cost.contains(" min "), "{cost}");
        assert!(
            leak.evidence
                .iter()
                .any(|e| e.starts_with("it does not slow")),
            "{:#?}",
            leak.evidence
        );
    }
}

/// Memory that settles: +200 MiB, approached ever more slowly (time constants of 10 to 30 of
/// the 150 steps), is no leak at any size: its last third rises a small fraction of the pace
/// before it.
#[test]
fn an_exponential_settling_to_a_plateau_is_no_leak() {
    for tau in [10.0, 20.0, 30.0] {
        for seed in 0..30 {
            let levels = host_levels(150, seed, settling(200.0 * MIB as f64, tau));
            let analysis = analyze(&host_recording(&levels, 0));
            assert_eq!(
                leak_of(&analysis),
                None,
                "tau {tau}, seed {seed}: {:#?}",
                analysis.findings
            );
            assert!(
                analysis.findings.iter().all(|f| !f.kind.is_problem()),
                "tau {tau}, seed {seed}: {:#?}",
                analysis.findings
            );
        }
    }
}

/// What a size floor once stood in for: memory that rises fast (4 MiB a step), then sits flat
/// for the last 30 of 64 steps, is no leak.
#[test]
fn a_fast_rise_then_a_flat_run_is_no_leak() {
    for seed in 0..30 {
        let levels = host_levels(64, seed, |step| 4.0 * MIB as f64 * step.min(34.0));
        let analysis = analyze(&host_recording(&levels, 0));
        assert_eq!(
            leak_of(&analysis),
            None,
            "seed {seed}: {:#?}",
            analysis.findings
        );
    }
}

/// The same settling start, then a steady leak: the leak is found, at its own pace.
#[test]
fn a_steady_leak_after_a_settling_start_is_a_leak() {
    let rate = 272.0 * KIB as f64;
    for seed in 0..30 {
        let start = settling(200.0 * MIB as f64, 10.0);
        let levels = host_levels(150, seed, |step| start(step) + rate * step);
        let analysis = analyze(&host_recording(&levels, 0));
        let slope = leak_of(&analysis).unwrap_or_else(|| {
            panic!("seed {seed}: {:#?} {:?}", analysis.findings, analysis.trend)
        });
        // The settling's tail still rises in the first steps after warm-up: the median of the
        // pairwise slopes stays within a third of the leak's.
        assert!(
            (slope - rate).abs() < rate / 3.0,
            "seed {seed}: {slope} B/step for {rate}"
        );
    }
}

/// In 30 steps, settling that has not yet stopped cannot be told from a slow leak by its shape:
/// a healthy DDP rank's host memory creeps up to ~500 KiB a step there (then stays flat), and is
/// no leak, and a run this short cannot tell yet (without the C heap, which is exact); a job that
/// keeps 8 MiB a step is a leak.
#[test]
fn a_short_run_calls_only_a_fast_host_rise_a_leak() {
    for seed in 0..30 {
        let creep = host_levels(30, seed, |step| 400.0 * KIB as f64 * step);
        let analysis = analyze(&host_recording(&creep, 0));
        assert_eq!(
            leak_of(&analysis),
            None,
            "seed {seed}: {:#?}",
            analysis.findings
        );
        // Not "no leak": the run is too short to tell, and says what it lacks.
        let (headline, problem) = collector::analysis::headline(&analysis);
        assert_eq!(problem, None, "seed {seed}: {headline}");
        assert!(
            headline.starts_with("Cannot tell yet — not enough data: host memory rose"),
            "seed {seed}: {headline}"
        );

        let leak = host_levels(30, seed, |step| 8.0 * MIB as f64 * step);
        let analysis = analyze(&host_recording(&leak, 0));
        let slope = leak_of(&analysis).unwrap_or_else(|| {
            panic!("seed {seed}: {:#?} {:?}", analysis.findings, analysis.trend)
        });
        assert!(
            (slope / MIB as f64 - 8.0).abs() < 0.5,
            "seed {seed}: {slope}"
        );
    }
}

/// Noise alone, spikes included, is no leak.
#[test]
fn a_noisy_flat_series_is_no_leak() {
    for seed in 0..50 {
        let levels = host_levels(150, seed, |_| 0.0);
        let analysis = analyze(&host_recording(&levels, 0));
        assert_eq!(
            leak_of(&analysis),
            None,
            "seed {seed}: {:#?}",
            analysis.findings
        );
    }
}

/// Allocated bytes are exact: a steady leak of 16 KiB a step, 4.7 MiB over 300 steps, is found
/// with the step at which it fills the 80 GiB device, and how much a GiB costs.
#[test]
fn a_slow_gpu_leak_is_found_with_its_projection() {
    let analysis = analyze(&tidemark_tests::gpu_leak(300, 40 * GIB, 16 * KIB));
    assert_eq!(analysis.basis, Basis::Allocated);
    let leak = analysis
        .finding(FindingKind::Leak)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    assert_eq!(leak.growth_per_step_bytes, Some(16.0 * KIB as f64));
    assert!(
        leak.evidence
            .iter()
            .any(|e| e.starts_with("at this pace it costs 1 GiB every 65536 steps")),
        "{:#?}",
        leak.evidence
    );
    let projection = analysis.projection.as_ref().unwrap();
    // 40 GiB − 299 × 16 KiB left at 16 KiB a step.
    let left = (40 * GIB - 299 * 16 * KIB) / (16 * KIB);
    assert_eq!(projection.oom_step, 299 + left);
    assert!(
        leak.evidence
            .iter()
            .any(|e| e.contains(&format!("is full at step {}", 299 + left))),
        "{:#?}",
        leak.evidence
    );

    // The same 4.7 MiB allocated at one step (a buffer built lazily) and kept, flat after it:
    // not a leak.
    let mut once = Recording::new(tidemark_tests::header(&["python", "train.py"]));
    let origin = Origin { pid: 1, rank: None };
    for step in 0..300u64 {
        let t_ns = step * STEP_NS;
        let allocated = 40 * GIB + if step >= 100 { 300 * 16 * KIB } else { 0 };
        once.push(Record::Phase(tidemark_tests::edge(
            t_ns,
            Edge::Begin,
            Phase::Forward,
            Some(step),
            origin,
        )));
        once.push(Record::Allocator(tidemark_tests::reading(
            t_ns,
            origin,
            allocated,
            allocated + GIB,
            allocated,
        )));
    }
    let analysis = analyze(&once);
    assert_eq!(analysis.basis, Basis::Allocated);
    assert_eq!(leak_of(&analysis), None, "{:#?}", analysis.findings);
}

/// Every job's host memory is first sampled before its interpreter started (a few hundred KiB):
/// the sawtooth's range is that of the running job, not from that first sample.
#[test]
fn the_sawtooth_range_starts_where_the_job_runs() {
    let levels = host_levels(60, 1, |_| 0.0);
    let analysis = analyze(&host_recording(&levels, 400 * MIB));
    let cache = analysis
        .finding(FindingKind::Cache)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    let lowest = levels.iter().min().unwrap();
    let highest = levels.iter().max().unwrap() + 400 * MIB;
    assert_eq!(
        cache.evidence[0],
        format!(
            "between {} and {}; the lowest point of each step does not rise",
            collector::format::format_bytes(*lowest as f64),
            collector::format::format_bytes(highest as f64)
        )
    );
}

/// Without the probe (no phase edges), the samples of the warm-up are left out the same way.
#[test]
fn without_the_probe_the_sawtooth_range_starts_after_the_warm_up() {
    let mut recording = Recording::new(tidemark_tests::header(&["./train"]));
    let times: Vec<u64> = (0..2000u64).map(|i| i * 50_000_000).collect();
    let values: Vec<u64> = (0..2000u64)
        .map(|i| match i {
            0 => 188 * KIB,
            1..=9 => i * 30 * MIB,
            _ => 300 * MIB + (i % 10) * 40 * MIB,
        })
        .collect();
    recording.push(Record::Chunk(Chunk {
        times_ns: times,
        columns: vec![Column {
            series: SeriesKey::new(SeriesKind::HostRss),
            values,
            valid: None,
        }],
    }));
    let analysis = analyze(&recording);
    assert!(!analysis.by_step);
    let cache = analysis
        .finding(FindingKind::Cache)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    assert!(
        cache.evidence[0].starts_with("between 300 MiB and 660 MiB;"),
        "{}",
        cache.evidence[0]
    );
}
