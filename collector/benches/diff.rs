//! `collector diff A B` and `collector check B --baseline A` of two 10 M-sample recordings (the
//! budget: ≤ 1 s, reading both files included). Runs the real binary on files, as a CI job would.
//! `cargo bench -p tidemark-collector --bench diff`.

use std::process::Command;
use std::time::Instant;

fn main() {
    // `DIFF_BENCH_DIR=dir` keeps the two files there (made once), for profiles.
    let temporary = tempfile::tempdir().expect("a temporary folder");
    let dir = std::env::var_os("DIFF_BENCH_DIR")
        .map_or_else(|| temporary.path().to_owned(), std::path::PathBuf::from);
    let a = dir.join("main.msgpack");
    let b = dir.join("branch.msgpack");
    let recording = tidemark_tests::long_run();
    if !a.exists() || !b.exists() {
        collector::recording::write_file(&a, &recording).expect("write the recording");
        collector::recording::write_file(&b, &recording).expect("write the recording");
    }
    println!(
        "two recordings of {} samples, {} phase edges, {} allocator readings, {:.0} MB each",
        recording.sample_count(),
        recording.phases.len(),
        recording.allocator.len(),
        std::fs::metadata(&a).map_or(0, |m| m.len()) as f64 / 1e6
    );
    drop(recording);
    let runs: [(&str, Vec<&std::ffi::OsStr>); 4] = [
        // For scale: one file read and analyzed.
        ("report (one file)", vec!["report".as_ref(), a.as_os_str()]),
        ("diff", vec!["diff".as_ref(), a.as_os_str(), b.as_os_str()]),
        (
            "diff --json",
            vec![
                "diff".as_ref(),
                a.as_os_str(),
                b.as_os_str(),
                "--json".as_ref(),
            ],
        ),
        (
            "check --baseline",
            vec![
                "check".as_ref(),
                b.as_os_str(),
                "--baseline".as_ref(),
                a.as_os_str(),
            ],
        ),
    ];
    for (name, args) in runs {
        let times = timed(name, &args);
        println!(
            "{name}: {:.2} s median of 3 ({:.2}–{:.2} s; both files read, both analyzed; budget ≤ 1 s)",
            times[1], times[0], times[2]
        );
    }
    if let Some(snapshot) = std::env::var_os("DIFF_BENCH_SNAPSHOT").map(std::path::PathBuf::from) {
        // A second file with the same bytes (a hard link where the folder allows it).
        let other = dir.join("other.pickle");
        if !other.exists() && std::fs::hard_link(&snapshot, &other).is_err() {
            std::fs::copy(&snapshot, &other).expect("copy the snapshot");
        }
        let size = std::fs::metadata(&snapshot).map_or(0, |m| m.len()) as f64 / 1e6;
        let one = timed("report", &["report".as_ref(), snapshot.as_os_str()]);
        let two = timed(
            "diff",
            &["diff".as_ref(), snapshot.as_os_str(), other.as_os_str()],
        );
        println!(
            "snapshot of {size:.0} MB: report {:.2} s, diff of two copies {:.2} s (medians of 3; {:.2}–{:.2} and {:.2}–{:.2} s): {:.2}× (budget ≤ 2×)",
            one[1],
            two[1],
            one[0],
            one[2],
            two[0],
            two[2],
            two[1] / one[1]
        );
    }
}

/// Three runs of the collector with `args`, sorted, in seconds.
fn timed(name: &str, args: &[&std::ffi::OsStr]) -> Vec<f64> {
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_collector"))
            .args(args)
            .output()
            .expect("run the collector");
        times.push(start.elapsed().as_secs_f64());
        assert!(
            output.status.code().is_some_and(|c| c < 2),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    times.sort_by(f64::total_cmp);
    times
}
