//! Importing a PyTorch memory snapshot of 1,000,000 trace entries with ~20 frames each (shared
//! the way PyTorch shares them: one frames list per allocation, in its entries and its block), against
//! Python's own `pickle.load` of the same file, and the importer's peak memory against the file's
//! size. Budgets (issue #7): faster than `pickle.load`; peak ≤ 2× the file.
//!
//! `cargo bench -p tidemark-collector --bench snapshot` (`SNAPSHOT_BENCH_ENTRIES=N` for another
//! size; `SNAPSHOT_BENCH_OURS_ONLY=1` to leave out `pickle.load`, for profiles). The file is written once by `tests/data/snapshots/cases.py big` into `target/`;
//! with `SNAPSHOT_BENCH_GENERATOR=shared`, by the second generator beside the project
//! (`../shared/bench/gen_snapshot_shared_trace.py N`: stacks shared as lists, `compile_context`
//! and `user_metadata` on every entry, annotations, a live set that grows), so that a speed-up
//! is not one file's.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[path = "support/counting.rs"]
mod counting;
use counting::{Counting, LIVE, PEAK};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[path = "../tests/support/python.rs"]
mod python;
use python::python;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("snapshot: bench");
        return;
    }
    let entries: u64 = std::env::var("SNAPSHOT_BENCH_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let second = std::env::var("SNAPSHOT_BENCH_GENERATOR").is_ok_and(|g| g == "shared");
    let (generator, args, file) = if second {
        (
            manifest.join("../../shared/bench/gen_snapshot_shared_trace.py"),
            vec![],
            manifest.join(format!(
                "../target/snapshot-bench-sharedtrace-{entries}.pickle"
            )),
        )
    } else {
        (
            manifest.join("tests/data/snapshots/cases.py"),
            vec!["big"],
            manifest.join(format!("../target/snapshot-bench-shared-{entries}.pickle")),
        )
    };
    if !file.exists() {
        println!(
            "writing {} ({entries} entries) with {}…",
            file.display(),
            generator.display()
        );
        // cases.py takes `big FILE N`, the second generator `N FILE`.
        let mut command = Command::new(python());
        command.arg(&generator).args(args);
        if second {
            command.arg(entries.to_string()).arg(&file);
        } else {
            command.arg(&file).arg(entries.to_string());
        }
        if !command.status().is_ok_and(|s| s.success()) {
            eprintln!("{} failed", generator.display());
            std::process::exit(1);
        }
    }
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    println!(
        "snapshot: {:.1} MB, {entries} trace entries",
        size as f64 / 1e6
    );

    let mut ours = Vec::new();
    let mut reports = Vec::new();
    for round in 0..3 {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let start = Instant::now();
        // As `collector report` and the viewer read it: part by part, not read into memory.
        let snapshot = match collector::open::stream_snapshot(&file) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        };
        let parsed = start.elapsed();
        let peak_parsed = PEAK.load(Ordering::Relaxed) - before;
        let held_parsed = LIVE.load(Ordering::Relaxed) - before;
        // What `collector report` does after that: the trace as a recording, its analysis and
        // the verdict (live blocks, sites, suspects, segments), the blocks' lives swept alongside.
        let collector::snapshot::Judged {
            snapshot,
            recording,
            verdict,
            ..
        } = collector::snapshot::Judged::new(snapshot);
        let reported = start.elapsed();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        let held = LIVE.load(Ordering::Relaxed) - before;
        println!(
            "round {round}: read + parse {:.2} s (peak {:.0} MB, {:.0} MB held), + curves, analysis and verdict (the report) {:.2} s ({} live blocks at the end); peak {:.0} MB = {:.2}× the file (allocated, a window of the file included); held after {:.0} MB ({} entries, {} stacks, {} allocator readings)",
            parsed.as_secs_f64(),
            peak_parsed as f64 / 1e6,
            held_parsed as f64 / 1e6,
            reported.as_secs_f64(),
            verdict.live.len(),
            peak as f64 / 1e6,
            peak as f64 / size as f64,
            held as f64 / 1e6,
            snapshot.entries.len(),
            snapshot.stack_count(),
            recording.allocator.len()
        );
        ours.push(parsed.as_secs_f64());
        reports.push(reported.as_secs_f64());
        if round == 0 {
            // What `collector import` writes: smaller than the pickle, ≤ 8 B per reading.
            let out = file.with_extension("imported.msgpack");
            if collector::recording::write_file(&out, &recording).is_ok() {
                let written = std::fs::metadata(&out).map_or(0, |m| m.len());
                println!(
                    "import: a {:.1} MB recording = {:.2}× the pickle, {:.2} bytes per allocator reading (budget: smaller than the pickle, ≤ 8)",
                    written as f64 / 1e6,
                    written as f64 / size as f64,
                    written as f64 / recording.allocator.len().max(1) as f64
                );
                let _ = std::fs::remove_file(&out);
            }
        }
        drop(recording);
        drop(snapshot);
    }

    if std::env::var_os("SNAPSHOT_BENCH_OURS_ONLY").is_some() {
        return;
    }
    let script = "import pickle, sys, time\n\
        t = time.perf_counter()\n\
        with open(sys.argv[1], 'rb') as f:\n    s = pickle.load(f)\n\
        print(time.perf_counter() - t)\n";
    let mut theirs = Vec::new();
    for _ in 0..3 {
        let out = Command::new(python())
            .arg("-c")
            .arg(script)
            .arg(&file)
            .output();
        match out.ok().and_then(|o| String::from_utf8(o.stdout).ok()) {
            Some(text) => {
                if let Ok(t) = text.trim().parse::<f64>() {
                    theirs.push(t);
                }
            }
            None => eprintln!("python pickle.load failed"),
        }
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "pickle.load (Python's C unpickler): {}",
        theirs
            .iter()
            .map(|t| format!("{t:.2} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "best of 3: tidemark {:.2} s, pickle.load {:.2} s: tidemark is {:.1}× faster",
        best(&ours),
        best(&theirs),
        best(&theirs) / best(&ours)
    );
    println!(
        "the whole report (read, parse, curves, analysis, verdict): best {:.2} s = {:.2}× pickle.load (budget ≤ 0.10×, issue #29)",
        best(&reports),
        best(&reports) / best(&theirs)
    );
}
