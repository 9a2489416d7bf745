//! What the job prints: stderr passes through unchanged, OOM messages become events.

use crate::{Job, stderr};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

fn bytes(x: f64) -> Option<u64> {
    Some(x.round() as u64)
}

#[test]
fn every_oom_message_form_becomes_an_event_and_stderr_passes_through() {
    let lines = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.27 GiB is free. Process 1 has 77.86 GiB memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and 120.00 MiB is reserved by PyTorch but unallocated.",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 1 has a total capacty of 14.75 GiB of which 45.06 MiB is free. Of the allocated memory 13.92 GiB is allocated by PyTorch, and 652.21 MiB is reserved by PyTorch but unallocated.",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 2; 7.79 GiB total capacity; 6.49 GiB already allocated; 3.56 MiB free; 6.56 GiB reserved in total by PyTorch)",
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a total capacity of 79.33 GiB of which 301.81 MiB is free.",
        "RuntimeError: CUDA error: out of memory",
    ];
    let script = format!(
        "import sys\nsys.stderr.write('progress 50%\\r')\nfor line in {lines:?}:\n    print(line, file=sys.stderr)\nprint('épilogue ✓', file=sys.stderr)\n"
    );
    let job = Job::new(&script);
    let output = job.run(&["--no-probe"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    let passed = format!("progress 50%\r{}\népilogue ✓\n", lines.join("\n"));
    assert!(err.contains(&passed), "stderr changed: {err}");

    let ooms = job.recording().ooms;
    assert_eq!(ooms.len(), 5);
    assert_eq!(ooms[0].tried_bytes, bytes(2.0 * GIB));
    assert_eq!(ooms[0].free_bytes, bytes(1.27 * GIB));
    assert_eq!(ooms[0].allocated_bytes, bytes(76.5 * GIB));
    assert_eq!(ooms[0].reserved_unallocated_bytes, bytes(120.0 * MIB));
    assert_eq!(ooms[1].device, Some(1));
    assert_eq!(ooms[1].capacity_bytes, bytes(14.75 * GIB));
    assert_eq!(ooms[2].device, Some(2));
    assert_eq!(ooms[2].allocated_bytes, bytes(6.49 * GIB));
    assert_eq!(ooms[2].free_bytes, bytes(3.56 * MIB));
    assert_eq!(ooms[3].rank, Some(3));
    assert_eq!(ooms[3].tried_bytes, bytes(512.0 * MIB));
    assert_eq!(ooms[4].tried_bytes, None);
    assert_eq!(ooms[4].message, lines[4]);
    assert!(ooms.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
}

#[test]
fn stdin_and_stdout_pass_through_untouched() {
    use std::io::Write as _;
    let job = Job::new("import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read()[::-1])\n");
    let mut child = job
        .command(&["--no-probe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let mut expected = input.clone();
    expected.reverse();
    assert_eq!(output.stdout, expected);
}

/// On a terminal: one live status line, redrawn in place. In a batch job: a start line and the
/// end summary, no control characters.
#[test]
fn the_terminal_gets_a_status_line_and_batch_jobs_a_start_line_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.msgpack");
    let command = format!(
        "{} --out {} -- sleep 2.5",
        env!("CARGO_BIN_EXE_collector"),
        out.display()
    );
    // `script` runs the collector on a pseudo-terminal.
    let output = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let tty = String::from_utf8_lossy(&output.stdout);
    assert!(tty.contains("\r\x1b[Ktidemark 00:00:0"), "{tty:?}");
    assert!(tty.contains("samples"), "{tty:?}");
    assert!(!tty.contains("recording pid"), "{tty:?}");
    assert!(tty.contains("job exit status 0"), "{tty:?}");

    let batch = std::process::Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(&out)
        .args(["--", "sleep", "1.5"])
        .output()
        .unwrap();
    let err = stderr(&batch);
    assert!(err.starts_with("collector: recording pid"), "{err}");
    assert!(
        err.contains("samples") && err.contains("job exit status 0"),
        "{err}"
    );
    assert!(!err.contains('\x1b'), "{err:?}");
}
