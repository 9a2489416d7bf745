//! `collector`: records how a job uses GPU and host memory, and reports on recordings and
//! PyTorch memory snapshots.
//!
//! `collector --out run.msgpack -- python train.py` wraps a job; `collector --out run.msgpack
//! --pid 1234` attaches to a running one; `collector report|check|import FILE` read files; `collector diff A B` compares two; `collector serve DIR` serves a folder of runs and the web
//! viewer over HTTP.

mod cli;
mod record;
mod serve;

fn main() -> std::process::ExitCode {
    cli::main()
}
