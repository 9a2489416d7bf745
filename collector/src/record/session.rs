//! One recorded job from start to end: its output, the probe's channel, the samplers, the job,
//! and the recording's end.

use std::fs::File;
use std::io::{BufWriter, IsTerminal as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use collector::format::format_bytes;
use collector::recording::{Exit, Header, Record, SeriesKey, SeriesKind, Writer};

use super::clock::{Clock, Ticker};
use super::host::ProcessTree;
use super::kernel::{Mounts, Watch};
use super::recorder::{Msg, Recorder, Summary};
use super::{gpu, job, probe, stall};

/// Exit status when the collector itself cannot start (bad output path, bad arguments).
const EXIT_SETUP: u8 = 2;

/// What to record and how: `collector`'s options as plain values (the command line's own types
/// stay in [`crate::cli`]).
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to write the recording (`{host}` and `{pid}` expanded).
    pub out: Option<std::path::PathBuf>,
    /// A running process to attach to instead of starting `command`.
    pub pid: Option<u32>,
    /// With `pid`: make the probe's channel and write the environment the process needs to start
    /// the probe in itself, as JSON, to this file.
    pub probe_env: Option<std::path::PathBuf>,
    /// Between device-memory samples (NVML), in milliseconds.
    pub device_interval_ms: u64,
    /// Between host-memory samples of the job's process tree, in milliseconds.
    pub host_interval_ms: u64,
    /// Between per-process device-memory samples, in milliseconds.
    pub process_interval_ms: u64,
    /// Only these GPUs, as the job numbers them.
    pub gpus: Option<Vec<u32>>,
    /// No probe in the job: device and host memory only.
    pub no_probe: bool,
    /// The probe without its automatic phases.
    pub no_auto_phases: bool,
    /// Leave PyTorch's peak-memory counters alone (not reset at every phase start).
    pub keep_peaks: bool,
    /// No census of who holds memory.
    pub no_census: bool,
    /// How long a census at a step start may take, in seconds (four times this at the end).
    pub census_limit_s: f64,
    /// Observe the phases of every step, not a sample of a loop's short steps.
    pub observe_every_step: bool,
    /// Record PyTorch's allocator history (this many entries) and dump snapshots.
    pub history: Option<u64>,
    /// Between flushes of the recording to disk, in milliseconds.
    pub flush_interval_ms: u64,
    /// How long without a step ending is a stall (asking for the stacks); `None`: 10× the
    /// median step and at least a minute.
    pub stall_after: Option<Duration>,
    /// The job to start.
    pub command: Vec<std::ffi::OsString>,
}

/// Records the job described by `args`; returns the job's exit status.
pub fn run(args: Options) -> ExitCode {
    let Some(out) = args.out.clone() else {
        eprintln!("collector: --out PATH is required to record");
        return ExitCode::from(EXIT_SETUP);
    };
    let out = expand_out(&out, &host_name(), std::process::id());
    let clock = Clock::start();
    let start_unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);

    // The output first: if it cannot be created, say so before anything runs.
    let file = match File::create(&out) {
        Ok(file) => file,
        Err(err) => {
            eprintln!(
                "collector: cannot create the recording ({err}); the job was not started: {}",
                out.display()
            );
            return ExitCode::from(EXIT_SETUP);
        }
    };

    let mut notes = Vec::new();
    if let Err(err) = std::fs::read("/proc/self/statm") {
        let note = format!(
            "cannot read /proc ({err}): host memory is not recorded (the job runs on; device memory and the probe's numbers still are)"
        );
        eprintln!("collector: {note}");
        notes.push(note);
    }
    let (gpus, devices) = match gpu::open(args.gpus.as_deref()) {
        Ok((gpus, devices, gpu_notes)) => {
            notes.extend(gpu_notes);
            (Some(gpus), devices)
        }
        Err(note) => {
            notes.push(note);
            (None, Vec::new())
        }
    };

    let channel = if args.no_probe || (args.pid.is_some() && args.probe_env.is_none()) {
        if args.pid.is_some() {
            notes.push(
                "attached to a running process: no probe, so no phases, steps or allocator numbers"
                    .to_owned(),
            );
        }
        None
    } else {
        match probe::Channel::create(out.parent()) {
            Ok(channel) => Some(Arc::new(channel)),
            Err(err) => {
                eprintln!(
                    "collector: the probe is not available ({err}); recording without it (a job that imports tidemark needs it installed: pip install tidemark-torch)"
                );
                notes.push(format!("probe not available: {err}"));
                None
            }
        }
    };

    let command: Vec<String> = match args.pid {
        // A process that has just been started may not show its command line yet: a few tries.
        Some(pid) => (0..10)
            .find_map(|attempt| {
                if attempt > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|raw| {
                        raw.split(|&b| b == 0)
                            .filter(|part| !part.is_empty())
                            .map(|part| String::from_utf8_lossy(part).into_owned())
                            .collect::<Vec<_>>()
                    })
                    .ok()
                    .filter(|command| !command.is_empty())
            })
            .unwrap_or_else(|| vec![format!("pid {pid}")]),
        None => args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
    };
    let mut header = Header::new(start_unix_ns, host_name(), command.clone());
    header.devices = devices;
    header.device_interval_ns = gpus.as_ref().map(|_| args.device_interval_ms * 1_000_000);
    header.host_interval_ns = Some(args.host_interval_ms * 1_000_000);

    // The kernel's view of memory (cgroups, OOM kills) from before the job starts: the job
    // inherits the collector's cgroups.
    let watch = args
        .pid
        .is_none()
        .then(|| Watch::start(Mounts::of_this_machine(), std::process::id()));

    // Start the job (or find the one to attach to).
    let live_status = std::io::stderr().is_terminal();
    let mut child = None;
    let root_pid = match args.pid {
        Some(pid) => {
            if !ProcessTree::new(pid).root_alive() {
                eprintln!("collector: no process {pid} to attach to");
                return ExitCode::from(EXIT_SETUP);
            }
            pid
        }
        None => {
            // Snapshots go next to the recording: run.msgpack → run.rank0.oom.pickle.
            let base = std::path::absolute(&out)
                .unwrap_or_else(|_| out.clone())
                .with_extension("");
            let history = args.history.map(|entries| (entries, base.as_path()));
            let env = channel
                .as_ref()
                .map(|c| {
                    probe::job_environment(
                        c,
                        !args.no_auto_phases,
                        args.keep_peaks,
                        (!args.no_census).then_some(args.census_limit_s),
                        args.observe_every_step,
                        history,
                    )
                })
                .unwrap_or_default();
            match job::spawn(&args.command, &env) {
                Ok(spawned) => {
                    let pid = spawned.id();
                    child = Some(spawned);
                    pid
                }
                Err(err) => {
                    let program = command.first().map_or("", String::as_str);
                    eprintln!("collector: cannot start the job ({err}): {program}");
                    let code = if err.kind() == std::io::ErrorKind::NotFound {
                        127
                    } else {
                        126
                    };
                    return ExitCode::from(code);
                }
            }
        }
    };
    header.pid = Some(root_pid);

    let writer = match Writer::new(BufWriter::new(file), &header) {
        Ok(writer) => Some(writer),
        Err(err) => {
            eprintln!(
                "collector: writing the recording failed ({err}): the job runs on, but nothing is recorded: {}",
                out.display()
            );
            None
        }
    };
    if !live_status {
        eprintln!(
            "collector: recording pid {root_pid} to {}{}",
            out.display(),
            if gpus.is_some() {
                ""
            } else {
                " (host memory, phases and events only)"
            }
        );
    }

    let (tx, rx) = mpsc::channel::<Msg>();
    for note in notes {
        let _ = tx.send(Msg::Note(note));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut samplers: Vec<JoinHandle<()>> = Vec::new();

    // Host sampler; it also samples at each phase edge the probe sends.
    let (host_tx, host_rx) = mpsc::channel::<()>();
    let host_interval = Duration::from_millis(args.host_interval_ms);
    let host_sampler = spawn_named("host-sampler", {
        let (stop, tx) = (stop.clone(), tx.clone());
        move || sample_host(root_pid, watch, clock, host_interval, &stop, &host_rx, &tx)
    });
    if let Some(gpus) = gpus {
        let device_interval = Duration::from_millis(args.device_interval_ms);
        let process_interval = Duration::from_millis(args.process_interval_ms);
        samplers.extend(spawn_named("device-sampler", {
            let (stop, tx) = (stop.clone(), tx.clone());
            move || {
                gpu::sample(
                    gpus,
                    clock,
                    device_interval,
                    process_interval,
                    root_pid,
                    stop,
                    tx,
                )
            }
        }));
    }
    let progress = Arc::new(Mutex::new(stall::Progress::default()));
    let listener = channel.as_ref().and_then(|channel| {
        probe::spawn_listener(
            channel.clone(),
            clock,
            stop.clone(),
            tx.clone(),
            host_tx,
            progress.clone(),
        )
        .ok()
    });
    // Attached with the probe's channel: the process starts the probe in itself from what this
    // file says (a notebook's kernel), once the listener is there to hear it.
    if let (Some(channel), Some(path)) = (channel.as_ref(), args.probe_env.as_ref()) {
        let base = std::path::absolute(&out)
            .unwrap_or_else(|_| out.clone())
            .with_extension("");
        let env = probe::job_environment(
            channel,
            !args.no_auto_phases,
            args.keep_peaks,
            (!args.no_census).then_some(args.census_limit_s),
            args.observe_every_step,
            args.history.map(|entries| (entries, base.as_path())),
        );
        let json: serde_json::Map<String, serde_json::Value> = env
            .into_iter()
            .filter(|(name, _)| name != "PYTHONPATH")
            .map(|(name, value)| (name, value.to_string_lossy().into_owned().into()))
            .collect();
        let written = path.with_extension("partial");
        let result = std::fs::write(&written, serde_json::Value::Object(json).to_string())
            .and_then(|()| std::fs::rename(&written, path));
        if let Err(err) = result {
            eprintln!(
                "collector: cannot write the probe's environment to {}: {err}",
                path.display()
            );
        }
    }
    if let Some(channel) = channel.as_ref() {
        samplers.extend(
            stall::spawn_watcher(
                progress,
                channel.stacks_dir(),
                args.stall_after,
                clock,
                stop.clone(),
                tx.clone(),
            )
            .ok(),
        );
    }
    let tail = job::Tail::default();
    let tee = child
        .as_mut()
        .and_then(|c| c.stderr.take())
        .and_then(|stderr| {
            let tx = tx.clone();
            let tail = tail.clone();
            spawn_named("stderr-tee", move || {
                job::tee_stderr(stderr, clock, live_status, &tx, &tail)
            })
        });
    let recorder = writer.and_then(|writer| {
        let recorder = Recorder::new(
            writer,
            out.clone(),
            clock,
            Duration::from_millis(args.flush_interval_ms),
            live_status,
        );
        spawn_named("recorder", move || recorder.run(&rx))
    });

    // Signals: forwarded to the job, or (attached) they end the recording.
    let attached_stop = Arc::new(AtomicBool::new(false));
    let signals = job::catch_signals().ok();
    let signal_handle = signals.as_ref().map(|s| s.handle());
    let forwarder = signals.and_then(|signals| {
        let pid = child.as_ref().map(|c| c.id());
        let attached_stop = attached_stop.clone();
        spawn_named("signals", move || {
            job::forward_signals(signals, pid, || {
                attached_stop.store(true, Ordering::Relaxed)
            })
        })
    });

    // Wait for the job.
    let (exit_code, exit) = match child.as_mut() {
        Some(child) => match child.wait() {
            Ok(status) => {
                let (code, exit_code, signal) = job::exit_code(status);
                (
                    code,
                    Some(Exit {
                        t_ns: clock.now_ns(),
                        code: exit_code,
                        signal,
                        stderr_tail: Vec::new(),
                        kernel: None,
                    }),
                )
            }
            Err(err) => {
                eprintln!("collector: lost track of the job: {err}");
                (1, None)
            }
        },
        None => {
            let tree = ProcessTree::new(root_pid);
            while tree.root_alive() && !attached_stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
            (0, None)
        }
    };

    // Last samples, then the end record.
    stop.store(true, Ordering::Relaxed);
    for sampler in samplers {
        let _ = sampler.join();
    }
    let (tree, watch) = host_sampler.and_then(|h| h.join().ok()).unzip();
    if let Some(listener) = listener {
        let _ = listener.join();
    }
    if let Some(tee) = tee {
        // A grandchild may still hold the job's stderr open: give it a moment, no more.
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while !tee.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if tee.is_finished() {
            let _ = tee.join();
        }
    }
    if let Some(mut exit) = exit {
        if exit.code != Some(0)
            && let Ok(tail) = tail.lock()
        {
            exit.stderr_tail = tail.iter().cloned().collect();
        }
        if let (Some(tree), Some(Some(watch))) = (tree, watch) {
            exit.kernel = Some(watch.finish(&tree));
        }
        let _ = tx.send(Msg::Record(Record::Exit(exit)));
    }
    let _ = tx.send(Msg::Finish);
    drop(tx);
    if let Some(handle) = signal_handle {
        handle.close();
    }
    if let Some(forwarder) = forwarder {
        let _ = forwarder.join();
    }
    let summary = recorder.and_then(|r| r.join().ok());
    print_summary(&out, clock, summary.as_ref(), exit_code);
    drop(channel);
    ExitCode::from(exit_code)
}

fn spawn_named<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<JoinHandle<T>> {
    match std::thread::Builder::new().name(name.to_owned()).spawn(f) {
        Ok(handle) => Some(handle),
        Err(err) => {
            eprintln!("collector: cannot start the {name} thread ({err}); recording without it");
            None
        }
    }
}

/// Samples the tree's resident memory at each tick, and whenever `now` says a phase edge came;
/// the cgroups of each process that joins the tree are shown to `watch`. Hands back the tree
/// (what each of its processes was) and the watch at the end.
fn sample_host(
    root_pid: u32,
    mut watch: Option<Watch>,
    clock: Clock,
    interval: Duration,
    stop: &AtomicBool,
    now: &mpsc::Receiver<()>,
    tx: &Sender<Msg>,
) -> (ProcessTree, Option<Watch>) {
    let mut tree = ProcessTree::new(root_pid);
    let mut ticker = Ticker::new(clock, interval);
    let key = SeriesKey::new(SeriesKind::HostRss);
    let mut members_seen = 0;
    loop {
        let t_ns = clock.now_ns();
        let values = vec![(key.clone(), tree.rss_bytes(t_ns))];
        if let Some(watch) = watch.as_mut()
            && tree.members().len() != members_seen
        {
            members_seen = tree.members().len();
            for member in tree.members().values() {
                watch.see(&member.cgroups);
            }
        }
        if tx
            .send(Msg::Samples {
                source: "host",
                t_ns,
                values,
            })
            .is_err()
            || stop.load(Ordering::Relaxed)
        {
            return (tree, watch);
        }
        // Sleep to the next deadline, waking early for phase edges (and to notice the stop).
        loop {
            if ticker.until_next().is_zero() {
                if let Some(late_ns) = ticker.tick() {
                    let _ = tx.send(Msg::Late {
                        sampler: "host",
                        late_ns,
                    });
                }
                break;
            }
            let wait = ticker.until_next().min(Duration::from_millis(50));
            match now.recv_timeout(wait) {
                Ok(()) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
            }
        }
    }
}

/// `--out` with `%h` (this host), `%r` (the node's rank: `SLURM_NODEID`, `GROUP_RANK` or
/// `NODE_RANK`, else 0), `%p` (the collector's pid) and `%%` filled in, so that one command line
/// gives every node of a job its own file.
fn expand_out(out: &std::path::Path, host: &str, pid: u32) -> std::path::PathBuf {
    let text = out.to_string_lossy();
    if !text.contains('%') {
        return out.to_owned();
    }
    let node = ["SLURM_NODEID", "GROUP_RANK", "NODE_RANK"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "0".to_owned());
    let mut expanded = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            expanded.push(c);
            continue;
        }
        match chars.next() {
            Some('h') => expanded.push_str(host),
            Some('r') => expanded.push_str(&node),
            Some('p') => expanded.push_str(&pid.to_string()),
            Some('%') => expanded.push('%'),
            Some(other) => {
                expanded.push('%');
                expanded.push(other);
            }
            None => expanded.push('%'),
        }
    }
    std::path::PathBuf::from(expanded)
}

/// This host's name (`TIDEMARK_HOSTNAME` overrides it: tests stand in for several nodes).
fn host_name() -> String {
    if let Some(name) = std::env::var_os("TIDEMARK_HOSTNAME").and_then(|n| n.into_string().ok()) {
        return name;
    }
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_default()
}

fn print_summary(out: &std::path::Path, clock: Clock, summary: Option<&Summary>, exit_code: u8) {
    let seconds = clock.now_ns() as f64 / 1e9;
    let Some(summary) = summary else {
        eprintln!("collector: nothing was recorded; the job exited with status {exit_code}");
        return;
    };
    let mut line = format!(
        "collector: {seconds:.1} s, {} samples, {} phase edges",
        summary.samples, summary.phase_edges
    );
    let peaks = [
        ("allocated", summary.peak_allocated_bytes),
        ("device", summary.peak_device_bytes),
        ("host", summary.peak_host_bytes),
    ];
    for (name, peak) in peaks {
        if let Some(bytes) = peak {
            line.push_str(&format!(", peak {name} {}", format_bytes(bytes as f64)));
        }
    }
    if summary.ooms > 0 {
        line.push_str(&format!(", {} out-of-memory errors", summary.ooms));
    }
    if summary.dropped > 0 {
        line.push_str(&format!(", {} probe messages lost", summary.dropped));
    }
    line.push_str(&format!(
        "; job exit status {exit_code}; {} written to {}",
        format_bytes(summary.file_bytes as f64),
        out.display()
    ));
    eprintln!("{line}");
    for note in &summary.notes {
        eprintln!("collector: note: {note}");
    }
    if let Some(err) = &summary.write_error {
        eprintln!("collector: the recording stopped early: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::expand_out;
    use std::path::Path;

    #[test]
    fn out_patterns_name_each_node_s_file() {
        let out = |p: &str| expand_out(Path::new(p), "gpu-07", 4242);
        assert_eq!(out("run.msgpack"), Path::new("run.msgpack"));
        assert_eq!(
            out("/r/run-%h-%p.msgpack"),
            Path::new("/r/run-gpu-07-4242.msgpack")
        );
        assert_eq!(out("100%%-%x-%"), Path::new("100%-%x-%"));
    }
}
