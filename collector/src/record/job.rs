//! The job: started with the probe's environment, its stderr teed through the OOM parser, the
//! signals the collector receives forwarded to it.

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;

use collector::oom::OomLines;
use collector::recording::Record;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

use super::clock::Clock;
use super::recorder::Msg;

/// Starts the job. stdin and stdout are inherited untouched; stderr is piped to [`tee_stderr`].
pub fn spawn(command: &[OsString], env: &[(String, OsString)]) -> std::io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command"))?;
    Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
}

/// The exit status a shell would give: the code, or 128 + N for death by signal N.
pub fn exit_code(status: ExitStatus) -> (u8, Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code.clamp(0, 255) as u8, Some(code), None),
        (None, Some(signal)) => ((128 + signal).clamp(0, 255) as u8, None, Some(signal)),
        (None, None) => (1, None, None),
    }
}

/// The last lines the job wrote to stderr, for the report of a job that failed.
pub type Tail = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// How many of the last stderr lines are kept, and how long each may be.
const TAIL_LINES: usize = 20;
const TAIL_LINE_CHARS: usize = 400;

/// Copies the job's stderr to ours as it comes (no waiting for whole lines: progress bars stay
/// live), parses each line for CUDA out-of-memory messages, and keeps the last lines in `tail`.
pub fn tee_stderr(
    mut stderr: ChildStderr,
    clock: Clock,
    live_status: bool,
    tx: &Sender<Msg>,
    tail: &Tail,
) {
    let mut buf = [0u8; 16 * 1024];
    let mut line = Vec::new();
    let mut ooms = OomLines::default();
    loop {
        let n = match stderr.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut out = std::io::stderr().lock();
        if live_status {
            // Clear the status line; it is drawn again at the next flush.
            let _ = out.write_all(b"\r\x1b[K");
        }
        let _ = out.write_all(&buf[..n]);
        let _ = out.flush();
        drop(out);
        for &byte in &buf[..n] {
            if byte == b'\n' || byte == b'\r' {
                check_line(&line, clock, &mut ooms, tx);
                keep(&line, tail);
                line.clear();
            } else if line.len() < 64 * 1024 {
                line.push(byte);
            }
        }
    }
    check_line(&line, clock, &mut ooms, tx);
    keep(&line, tail);
    if let Some(oom) = ooms.finish() {
        let _ = tx.send(Msg::Record(Record::Oom(oom)));
    }
}

fn keep(line: &[u8], tail: &Tail) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    if text.trim().is_empty() {
        return;
    }
    let text: String = text.chars().take(TAIL_LINE_CHARS).collect();
    if let Ok(mut tail) = tail.lock() {
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(text);
    }
}

fn check_line(line: &[u8], clock: Clock, ooms: &mut OomLines, tx: &Sender<Msg>) {
    let text = String::from_utf8_lossy(line);
    for oom in ooms.line(&text, clock.now_ns()) {
        let _ = tx.send(Msg::Record(Record::Oom(oom)));
    }
}

/// Forwards SIGINT, SIGTERM and SIGHUP to `pid` until `signals` is closed.
///
/// A signal the kernel sent (Ctrl-C at a terminal, a hang-up) already reached the job, which
/// shares our process group: it is not sent twice. When `pid` is `None` (attached to a process
/// that is not ours), a signal stops the recording instead.
pub fn forward_signals(mut signals: SignalsInfo<WithOrigin>, pid: Option<u32>, on_stop: impl Fn()) {
    for origin in signals.forever() {
        match pid {
            Some(pid) => {
                if matches!(origin.cause, Cause::Kernel) {
                    continue;
                }
                if let (Ok(signal), Ok(pid)) = (Signal::try_from(origin.signal), i32::try_from(pid))
                {
                    let _ = kill(Pid::from_raw(pid), signal);
                }
            }
            None => on_stop(),
        }
    }
}

/// The signals the collector handles instead of dying from them.
pub fn catch_signals() -> std::io::Result<SignalsInfo<WithOrigin>> {
    SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
}
