//! Following a 10-million-sample recording that grows by 1,000 samples a second (issue #19's
//! budget): the median frame ≤ 8 ms while following, and the view ≤ 1 s behind the file.
//! `cargo bench -p tidemark-app --bench follow` (`FOLLOW_BENCH_SECONDS`: how long it follows,
//! default 12).
//!
//! The file is written as the collector writes it (flushed every second of samples); the bench
//! appends a second's worth of it every second, draws frames at 60 per second as a window would
//! while the user looks at it, and times each frame and how long each second of data took to
//! reach the view.

#![cfg_attr(target_arch = "wasm32", allow(unused))] // Following reads files: native only.

use std::io::Write as _;
use std::time::{Duration, Instant};

use tidemark_app::TidemarkApp;

#[path = "support/synthetic.rs"]
mod synthetic;

#[path = "support/frame.rs"]
mod frame;
use frame::frame;

/// 5,000,000 instants × 2 series, then what arrives while following.
const BASE_INSTANTS: u64 = 5_000_000;
/// 1,000 samples a second: 500 instants of the two series.
const INSTANTS_PER_SECOND: u64 = 500;

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("follow: bench");
        return;
    }
    let seconds: u64 = std::env::var("FOLLOW_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let total = BASE_INSTANTS + seconds * INSTANTS_PER_SECOND;
    // (samples, bytes) at the end of every flushed chunk after the base.
    let mut marks: Vec<(u64, usize)> = Vec::new();
    let bytes = synthetic::recording_bytes_flushed(total, total / 100, BASE_INSTANTS, |s, b| {
        marks.push((s, b))
    });
    // The file as it stands when following starts: the first 10 million samples.
    let Some(&(base_samples, base_bytes)) = marks.first() else {
        eprintln!("no chunk was flushed");
        std::process::exit(1);
    };
    let dir = std::env::temp_dir().join(format!("tidemark-follow-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        eprintln!("cannot create {}", dir.display());
        std::process::exit(1);
    }
    let path = dir.join("growing.msgpack");
    let mut file = match std::fs::File::create(&path) {
        Ok(f) => f,
        Err(err) => {
            eprintln!("{}: {err}", path.display());
            std::process::exit(1);
        }
    };
    let append = |file: &mut std::fs::File, range: std::ops::Range<usize>| {
        if file
            .write_all(&bytes[range])
            .and_then(|()| file.flush())
            .is_err()
        {
            eprintln!("cannot write {}", path.display());
            std::process::exit(1);
        }
    };
    append(&mut file, 0..base_bytes);
    println!(
        "recording: {:.1} MB, {base_samples} samples when following starts; then 1,000 samples a second for {seconds} s",
        base_bytes as f64 / 1e6
    );

    let ctx = egui::Context::default();
    let mut app = TidemarkApp::empty();
    let start = Instant::now();
    app.follow_path(&path);
    let opened = frame(&ctx, &mut app);
    println!(
        "open: {:.0} ms to the first frame ({:.1} ms for the frame)",
        start.elapsed().as_secs_f64() * 1e3,
        opened.as_secs_f64() * 1e3
    );

    // Each further chunk (10 per second of data at 50 instants each) is appended at its time.
    let chunks: Vec<(u64, usize)> = marks.iter().skip(1).copied().collect();
    let per_second = (INSTANTS_PER_SECOND / 50) as usize;
    let began = Instant::now();
    let mut written = base_bytes;
    let mut appended_at: Vec<(u64, Instant)> = Vec::new(); // (samples then, when)
    let mut lags: Vec<Duration> = Vec::new();
    let mut seen = 0usize;
    let mut frames: Vec<Duration> = Vec::new();
    // The frames in which the run grew (those that read and drew new data).
    let mut grew: Vec<Duration> = Vec::new();
    let mut last_shown = 0;
    let mut next_second = 0usize;
    while began.elapsed() < Duration::from_secs(seconds) {
        let due = (began.elapsed().as_secs() as usize + 1) * per_second;
        while next_second < due.min(chunks.len()) {
            let (samples, end) = chunks[next_second];
            append(&mut file, written..end);
            written = end;
            appended_at.push((samples, Instant::now()));
            next_second += 1;
        }
        let took = frame(&ctx, &mut app);
        frames.push(took);
        let shown = app
            .runs()
            .first()
            .and_then(|r| r.run.as_ref().ok())
            .map_or(0, |r| r.recording.sample_count());
        if shown != last_shown {
            grew.push(took);
            last_shown = shown;
        }
        while seen < appended_at.len() && appended_at[seen].0 <= shown {
            lags.push(appended_at[seen].1.elapsed());
            seen += 1;
        }
        std::thread::sleep(Duration::from_millis(16));
    }
    let _ = std::fs::remove_dir_all(&dir);
    frames.sort();
    grew.sort();
    lags.sort();
    let at = |v: &[Duration], q: f64| v.get((v.len() as f64 * q) as usize).copied();
    let ms = |d: Option<Duration>| {
        d.map_or("—".to_owned(), |d| {
            format!("{:.2} ms", d.as_secs_f64() * 1e3)
        })
    };
    println!(
        "frames while following: {} frames, median {}, p95 {}, max {} (budget: median ≤ 8 ms)",
        frames.len(),
        ms(at(&frames, 0.5)),
        ms(at(&frames, 0.95)),
        ms(frames.last().copied())
    );
    println!(
        "  of them, the {} frames that read and drew new data: median {}, p95 {}",
        grew.len(),
        ms(at(&grew, 0.5)),
        ms(at(&grew, 0.95))
    );
    println!(
        "behind the file: {} of {} appends (100 samples each) reached the view; median {}, max {} after they were written (budget ≤ 1 s)",
        lags.len(),
        appended_at.len(),
        ms(at(&lags, 0.5)),
        ms(lags.last().copied())
    );
}
