//! `collector report --html` and `--svg` of the 10 M-sample benchmark recording (issue #18's
//! budget: ≤ 1 s and ≤ 2 MB; the picture is decimated like the viewer draws it, never more points
//! than pixels). Runs the real binary on a file, as a CI job would.
//! `cargo bench -p tidemark-collector --bench report`.

use std::process::Command;
use std::time::Instant;

fn main() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("long.msgpack");
    let recording = tidemark_tests::long_run();
    collector::recording::write_file(&file, &recording).expect("write the recording");
    println!(
        "recording: {} samples, {} phase edges, {} allocator readings, {:.0} MB",
        recording.sample_count(),
        recording.phases.len(),
        recording.allocator.len(),
        std::fs::metadata(&file).map_or(0, |m| m.len()) as f64 / 1e6
    );
    drop(recording);
    for (flag, out) in [("--html", "report.html"), ("--svg", "plot.svg")] {
        let out = dir.path().join(out);
        let mut times = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            let status = Command::new(env!("CARGO_BIN_EXE_collector"))
                .arg("report")
                .arg(&file)
                .arg(flag)
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("run the collector");
            times.push(start.elapsed().as_secs_f64());
            assert!(status.success());
        }
        times.sort_by(f64::total_cmp);
        let size = std::fs::metadata(&out).map_or(0, |m| m.len());
        println!(
            "report {flag}: {:.2} s median of 3 ({:.2}–{:.2} s; reading, analysis and text included), {:.0} KB written (budget ≤ 1 s, ≤ 2 MB)",
            times[1],
            times[0],
            times[2],
            size as f64 / 1e3
        );
    }
}
