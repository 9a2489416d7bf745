//! The command line: its clap types, what `collector` with no subcommand records, and the
//! dispatch to each subcommand.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use super::failure::exit;
use super::{check, diff, flame, import, report, serve};
use clap::Parser;

/// Records how a job uses GPU and host memory, with the training phases, into a file that
/// survives crashes.
///
/// Wrap a job: `collector --out run.msgpack -- python train.py --epochs 3`.
/// Attach to a running one: `collector --out run.msgpack --pid 1234`.
///
/// The job's standard input and output pass through untouched, its standard error passes
/// through while the collector watches it for CUDA out-of-memory errors, and the collector exits
/// with the job's exit status (128 + N when the job was killed by signal N).
///
/// Then `collector report run.msgpack` explains what it shows, and `collector check run.msgpack`
/// fails (exit status 1) when it finds a leak: a gate for CI.
#[derive(Debug, Parser)]
#[command(
    name = "collector",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Explain a recording or a PyTorch memory snapshot: the verdict with its evidence, the
    /// phases, what was not recorded.
    Report(report::ReportArgs),
    /// Exit 1 when a recording (or snapshot) shows a leak (or other chosen findings), 0 when
    /// not, 2 when it cannot be read. For CI.
    Check(check::CheckArgs),
    /// Compare two PyTorch memory snapshots (by allocation site, per device) or two recordings
    /// (per phase, the step baseline and its trend, categories, holders, peaks, OOMs): A, B and
    /// the change. Exit 2 when they cannot be read or compared.
    Diff(diff::DiffArgs),
    /// The flame graph of a PyTorch memory snapshot's memory by allocating stack, per device:
    /// the bytes alive at a moment of its trace (or bytes × lifetime over it), library frames
    /// folded into the first frame of your code. Folded stacks on standard output (for
    /// speedscope, inferno, `flamegraph.pl`), or `--svg FILE`. Exit 2 when the file cannot be
    /// read or has no trace.
    Flame(flame::FlameArgs),
    /// Convert a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`) into a recording:
    /// its allocated and reserved curves, OOMs and phases.
    Import(import::ImportArgs),
    /// Serve the runs in a folder and the web viewer over HTTP, for a machine reached by
    /// `ssh -L` (as `tensorboard --logdir`): the page lists the runs (growing or finished, with
    /// their verdicts) and opens one in the viewer. Only this machine can connect unless
    /// `--host` says otherwise (then with a token). Exit 2 when the folder cannot be read or the
    /// port is taken.
    Serve(serve::ServeArgs),
}

/// What to record, and how.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Where to write the recording. Created (or truncated) before the job starts. `%h` is
    /// this host, `%r` the node's rank (`SLURM_NODEID`, `GROUP_RANK` or `NODE_RANK`, else 0), `%p`
    /// the collector's pid, `%%` a percent sign: one command line gives every node its own file.
    #[arg(long, short, value_name = "PATH", required = true)]
    pub out: Option<PathBuf>,

    /// Attach to this running process and its children instead of starting a job. Recording
    /// stops when the process exits, or on Ctrl-C.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,

    /// With --pid: make the probe's channel anyway and write what the process needs to start the
    /// probe in itself (its environment, as JSON) to FILE, once the collector listens. What a
    /// notebook's `%tidemark start` uses to record the kernel it runs in.
    #[arg(long, value_name = "FILE", requires = "pid")]
    pub probe_env: Option<PathBuf>,

    /// Interval between device-memory samples (NVML), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub device_interval_ms: u64,

    /// Interval between host-memory samples of the job's process tree, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub host_interval_ms: u64,

    /// Interval between per-process device-memory samples, in milliseconds (at least 1000: the
    /// driver call is slow and takes a lock).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub process_interval_ms: u64,

    /// Which GPUs to record, as the job numbers them (`cuda:N`), e.g. `0,2`. Default: all the
    /// job can see (`CUDA_VISIBLE_DEVICES` is honoured).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub gpus: Option<Vec<u32>>,

    /// Do not inject the Python probe: no phases, steps or allocator numbers, only device and
    /// host memory and what the job prints.
    #[arg(long)]
    pub no_probe: bool,

    /// Do not find phases automatically in PyTorch jobs; only phases the job marks with
    /// `tidemark.phase(…)` are recorded.
    #[arg(long)]
    pub no_auto_phases: bool,

    /// Leave PyTorch's peak-memory counters alone. By default the probe resets them at every phase
    /// start (`torch.cuda.reset_peak_memory_stats`) to measure each phase's peak.
    #[arg(long)]
    pub keep_peaks: bool,

    /// Take no census of who holds the live tensors. By default the probe takes one at steps 16
    /// and 24, then at a step at least 1.25 times the last one's while the censuses have taken at
    /// most 0.1 % of the time since the first step, at the end and at an out-of-memory error;
    /// each walks the job's objects from its globals and frames, which pauses the job briefly.
    #[arg(long)]
    pub no_census: bool,

    /// How long a census may pause the job, in seconds: one at a step start stops after this long
    /// (default 0.5), the one at the end or at an out-of-memory error after four times this. A
    /// census cut short says so, and how far it got; give a job with millions of Python objects
    /// more time to find a holder far from its names.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.5, value_parser = census_limit)]
    pub census_limit: f64,

    /// Observe the phases of every step. By default a loop of short steps (under ~48 ms) has the
    /// phases of every step of its first 100, of every eval and of a sample of the others
    /// observed, so that observing takes at most 0.25 % of the job's time (the report says how
    /// many); `TIDEMARK_OBSERVE_ONE_IN=N` in the job's environment observes one in N.
    #[arg(long)]
    pub observe_every_step: bool,

    /// Record the allocator's history once CUDA is up (`torch.cuda.memory._record_memory_history`
    /// with Python stacks, the last ENTRIES allocations and frees; default 100000), and dump a
    /// PyTorch memory snapshot next to the recording at an out-of-memory error
    /// (`run.rank0.oom.pickle`) and at the end of the job (`run.rank0.end.pickle`). Off by
    /// default: recording a stack with every allocation slows the job down.
    #[arg(long, value_name = "ENTRIES", num_args = 0..=1, default_missing_value = "100000", value_parser = clap::value_parser!(u64).range(1..))]
    pub history: Option<u64>,

    /// How often the recording is flushed to disk, in milliseconds: at most this much is lost if
    /// the collector is killed.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=1000))]
    pub flush_interval_ms: u64,

    /// How long no step may end before the job counts as stalled, in seconds. By default 10
    /// times the median step and at least 60 s (300 s before the first step). At a stall the
    /// collector asks every probed process for the Python stacks of all its threads (each pauses
    /// well under a millisecond), and again at 2×, 4× … that long while it lasts; the report
    /// leads with a stall the job never came out of, and `check` fails on it.
    #[arg(long, value_name = "SECONDS", value_parser = stall_after)]
    pub stall_after: Option<f64>,

    /// The job to run, after `--`: `collector --out run.msgpack -- python train.py`.
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "pid"
    )]
    pub command: Vec<OsString>,
}

impl From<RecordArgs> for crate::record::Options {
    fn from(args: RecordArgs) -> Self {
        Self {
            out: args.out,
            pid: args.pid,
            probe_env: args.probe_env,
            device_interval_ms: args.device_interval_ms,
            host_interval_ms: args.host_interval_ms,
            process_interval_ms: args.process_interval_ms,
            gpus: args.gpus,
            no_probe: args.no_probe,
            no_auto_phases: args.no_auto_phases,
            keep_peaks: args.keep_peaks,
            no_census: args.no_census,
            census_limit_s: args.census_limit,
            observe_every_step: args.observe_every_step,
            history: args.history,
            flush_interval_ms: args.flush_interval_ms,
            stall_after: args.stall_after.map(std::time::Duration::from_secs_f64),
            command: args.command,
        }
    }
}

/// `--census-limit`: seconds, from a millisecond to a minute.
fn census_limit(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if (0.001..=60.0).contains(&seconds) => Ok(seconds),
        Ok(_) => Err("a census may take from 0.001 to 60 seconds".to_owned()),
        Err(_) => Err(format!("not a number of seconds: {text:?}")),
    }
}

/// `--stall-after`: seconds, from a tenth of a second to a week.
fn stall_after(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if (0.1..=604_800.0).contains(&seconds) => Ok(seconds),
        Ok(_) => Err("a stall is from 0.1 to 604800 seconds (a week) without a step".to_owned()),
        Err(_) => Err(format!("not a number of seconds: {text:?}")),
    }
}

/// Parses the command line and runs the command; the exit status is the command's.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Report(args)) => exit("collector", report::report(&args)),
        Some(Command::Check(args)) => exit("collector check", check::check(&args)),
        Some(Command::Diff(args)) => exit("collector diff", diff::diff(&args)),
        Some(Command::Flame(args)) => exit("collector flame", flame::flame(&args)),
        Some(Command::Import(args)) => exit("collector", import::import(&args)),
        Some(Command::Serve(args)) => exit("collector", serve::serve(&args)),
        None => crate::record::run(cli.record.into()),
    }
}

/// Writes to standard output. A reader that went away (`collector report run.msgpack | head`) is
/// not an error: the rest is dropped, and the command ends as it would have (a `check` keeps its
/// verdict's exit status).
pub(crate) fn out(text: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_fmt(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_job_takes_everything_after_the_separator() {
        let cli = Cli::try_parse_from([
            "collector",
            "--out",
            "run.msgpack",
            "--",
            "python",
            "train.py",
            "--out",
            "x",
        ])
        .unwrap();
        assert_eq!(cli.record.command, ["python", "train.py", "--out", "x"]);
        assert_eq!(cli.record.device_interval_ms, 50);
        assert!(Cli::try_parse_from(["collector", "--out", "run.msgpack"]).is_err());
        assert!(Cli::try_parse_from(["collector", "--out", "r", "--pid", "1"]).is_ok());
        let cli = Cli::try_parse_from(["collector", "report", "run.msgpack", "--json"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Report(ref r)) if r.json));
        let cli = Cli::try_parse_from([
            "collector",
            "check",
            "r.msgpack",
            "--fail-on",
            "leak,peak_creep",
            "--max-growth",
            "1MiB/step",
        ])
        .unwrap();
        let Some(Command::Check(check)) = cli.command else {
            panic!("not check")
        };
        assert_eq!(check.max_growth, Some(1048576.0));
        assert_eq!(check.fail_on.len(), 2);
        assert!(Cli::try_parse_from(["collector", "check", "r", "--fail-on", "nonsense"]).is_err());
    }
}
