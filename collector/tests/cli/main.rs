//! The `collector` binary on real jobs: real child processes, the real probe, real signals.

#![allow(clippy::unwrap_used)] // In tests a panic is how a failure is reported.

mod compare;
mod docs;
mod frameworks;
mod gpu;
mod hangs;
mod holders;
mod inputs;
mod jobs;
mod lifecycle;
mod loops;
mod notebook;
mod oom;
mod pictures;
mod probe;
mod ranks;
mod report;
mod serve;

use std::path::PathBuf;
use std::process::{Command, Output};

use collector::recording::{Edge, Phase, Recording, read_file};

#[path = "../support/python.rs"]
mod python_path;
pub use python_path::python;

/// A temporary folder with a job script in it.
pub struct Job {
    pub dir: tempfile::TempDir,
}

impl Job {
    pub fn new(script: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("job.py"), script).unwrap();
        Self { dir }
    }

    /// Writes `scripted_cuda.py` beside the job, for a job that imports it: its `torch.cuda`
    /// then reports the C heap in use as allocated bytes (the allocator's path without a GPU).
    pub fn with_scripted_cuda(self) -> Self {
        std::fs::write(
            self.path("scripted_cuda.py"),
            include_str!("../data/scripted_cuda.py"),
        )
        .unwrap();
        self
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn out(&self) -> PathBuf {
        self.path("run.msgpack")
    }

    /// `collector --out DIR/run.msgpack [extra…] -- python DIR/job.py`
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_collector"));
        command
            .arg("--out")
            .arg(self.out())
            .args(extra)
            .arg("--")
            .arg(python())
            .arg(self.path("job.py"))
            .current_dir(self.dir.path());
        command
    }

    pub fn run(&self, extra: &[&str]) -> Output {
        self.command(extra).output().unwrap()
    }

    pub fn recording(&self) -> Recording {
        read_file(&self.out()).unwrap()
    }
}

/// Begin edges of one phase, in order.
pub fn begins(recording: &Recording, phase: &Phase) -> Vec<collector::recording::PhaseEdge> {
    recording
        .phases
        .iter()
        .filter(|e| e.edge == Edge::Begin && &e.phase == phase)
        .collect()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that `measured` bytes are `exact` bytes within what the allocator and the kernels add
/// around a tensor of known size: ±15 % or ±1 MiB, whichever is larger. A job kept exactly
/// `exact` bytes, but PyTorch's CPU kernels choose their scratch buffers by the CPU's features
/// and glibc rounds and pads, so what the C heap or the allocator shows moves by up to a MiB from
/// one machine to the next.
pub fn assert_near(measured: f64, exact: f64, what: &str) {
    const MIB: f64 = 1024.0 * 1024.0;
    let margin = (0.15 * exact.abs()).max(MIB);
    assert!(
        (measured - exact).abs() <= margin,
        "{what}: measured {measured:.0} B, the job kept {exact:.0} B (± {margin:.0} B allowed)"
    );
}

/// `collector report FILE`: its text.
pub fn report(file: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("report")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `collector report --json FILE`, parsed.
pub fn report_json(file: &std::path::Path) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .args(["report", "--json"])
        .arg(file)
        .output()
        .unwrap();
    serde_json::from_slice(&output.stdout).unwrap()
}
