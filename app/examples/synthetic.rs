//! Writes a synthetic recording: `cargo run --release -p tidemark-app --example synthetic --
//! OUT.msgpack [SAMPLES]` (SAMPLES in all, over two series; default 1,000,000). The web test and
//! anyone wanting a big file to try the viewer on use it.

#[path = "../benches/support/synthetic.rs"]
mod synthetic;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: synthetic OUT.msgpack [SAMPLES]");
        return std::process::ExitCode::from(2);
    };
    let samples = match args.next().map(|s| s.replace('_', "").parse::<u64>()) {
        None => 1_000_000,
        Some(Ok(n)) if n >= 200 => n,
        Some(_) => {
            eprintln!("synthetic: SAMPLES must be a whole number of at least 200");
            return std::process::ExitCode::from(2);
        }
    };
    let per_series = samples / 2;
    let steps = (per_series / 100).max(1);
    let bytes = synthetic::recording_bytes(per_series, steps);
    match std::fs::write(&out, &bytes) {
        Ok(()) => {
            println!(
                "{out}: {samples} samples, {steps} steps, {} bytes",
                bytes.len()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("synthetic: cannot write {out}: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
