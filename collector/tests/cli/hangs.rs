//! Hangs: real jobs that stop making progress under the collector, the stacks it asks for, and
//! what the report and `check` say once something from outside ends them (as a scheduler's time
//! limit does). A job that comes out of a long pause is not a hang.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use collector::recording::{Stall, read_file};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Job, python, report};

/// Runs `command` (which records to `job.out()`) until its recording holds a stall that `ready`
/// accepts, then sends SIGTERM to the collector (it passes it to the job), and waits for it.
/// Returns the collector's exit status and what it printed on stderr.
fn until_stalled(
    job: &Job,
    mut command: Command,
    ready: impl Fn(&Stall) -> bool,
) -> (ExitStatus, String) {
    let log = job.path("collector.log");
    let mut child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut seen = false;
    while Instant::now() < deadline && !seen {
        std::thread::sleep(Duration::from_millis(250));
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the job ended ({status}) before it stalled: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        // The recording is written as it goes: what it holds so far reads back.
        seen = read_file(&job.out()).is_ok_and(|r| r.stalls.iter().any(&ready));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    let printed = std::fs::read_to_string(&log).unwrap_or_default();
    // A process the job forked may outlive it (a DataLoader worker asleep in its read): the
    // collector finished all the same; end what is left of this job's own processes.
    let script = job.path("job.py");
    for stall in read_file(&job.out()).map(|r| r.stalls).unwrap_or_default() {
        for process in stall.processes {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", process.origin.pid));
            if cmdline
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*script.to_string_lossy()))
            {
                let _ = kill(Pid::from_raw(process.origin.pid as i32), Signal::SIGKILL);
            }
        }
    }
    assert!(seen, "no stall seen in 300 s: {printed}");
    (status, printed)
}

/// Runs `job` as two `torchrun` ranks on gloo under the collector (`--stall-after 3`) until a
/// stall where both ranks answered with their stacks; what the collector printed.
fn two_ranks_until_both_answered(job: &Job) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_collector"));
    command
        .arg("--out")
        .arg(job.out())
        .args(["--stall-after", "3", "--flush-interval-ms", "100", "--"])
        .arg(python())
        .args([
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
        ])
        .arg(job.path("job.py"))
        .current_dir(job.dir.path())
        .env("OMP_NUM_THREADS", "1");
    let (_, printed) = until_stalled(job, command, |stall| {
        let answered = |rank| {
            stall
                .processes
                .iter()
                .any(|p| p.origin.rank == Some(rank) && p.step.is_some() && !p.threads.is_empty())
        };
        answered(0) && answered(1)
    });
    printed
}

/// `collector check FILE`: its exit status and output.
fn check(job: &Job) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("check")
        .arg(job.out())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn a_loop_whose_batches_stop_coming_is_a_hang_with_its_stack() {
    // The thread that feeds the loop ends after six batches (as a producer that dies does): the
    // loop waits in the queue's get for good.
    let job = Job::new(
        r#"
import queue, threading
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = queue.Queue()
def feed():
    for _ in range(6):
        batches.put(torch.randn(32, 64))
threading.Thread(target=feed, name="feeder", daemon=True).start()
for step in range(100):
    x = batches.get()
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
"#,
    );
    let command = job.command(&["--stall-after", "2", "--flush-interval-ms", "100"]);
    let (status, printed) = until_stalled(&job, command, |stall| {
        stall
            .processes
            .iter()
            .any(|p| p.step == Some(5) && !p.threads.is_empty())
    });
    // The collector passed SIGTERM on to the job, and its status back.
    assert_eq!(status.code(), Some(128 + 15), "{printed}");

    let recording = job.recording();
    let stall = recording.stalls.last().unwrap();
    let main = stall.processes[0].threads.iter().find(|t| t.main).unwrap();
    assert!(
        main.frames
            .iter()
            .any(|f| f.function == "get" && f.file.ends_with("queue.py")),
        "{main:?}"
    );
    assert!(
        main.frames
            .iter()
            .any(|f| f.function == "<module>" && f.file.ends_with("job.py") && f.line == 12),
        "{main:?}"
    );

    let text = report(&job.out());
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with('✗'))
        .unwrap_or("");
    assert!(
        verdict.contains("✗ Stalled at step 5 for ")
            && verdict.contains(": waits in a queue's get in <module> (")
            && verdict.contains("/job.py:12)"),
        "{text}"
    );
    assert!(
        text.contains("then the job was killed by signal 15 (SIGTERM)"),
        "{text}"
    );
    assert!(text.contains("DataLoader(timeout="), "{text}");
    let (code, said) = check(&job);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("Stalled at step 5"), "{said}");
}

#[test]
fn a_long_pause_the_job_comes_out_of_is_not_a_hang() {
    // A checkpoint written for 4 s between steps of a few ms: the collector asks for the stacks
    // (it cannot know the pause will end), and the job goes on.
    let job = Job::new(
        r#"
import time
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(30):
    model(torch.randn(32, 64)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    if step == 10:
        time.sleep(4)  # "saving a checkpoint"
"#,
    );
    let output = job.run(&["--stall-after", "1.5"]);
    assert!(output.status.success(), "{}", crate::stderr(&output));
    let recording = job.recording();
    assert!(
        recording
            .stalls
            .iter()
            .any(|s| s.processes.iter().any(|p| p.step == Some(10)
                && p.threads.iter().any(|t| t
                    .frames
                    .iter()
                    .any(|f| f.file.ends_with("job.py") && f.line == 11)))),
        "{:?}",
        recording.stalls
    );
    let text = report(&job.out());
    assert!(!text.contains("Stalled"), "{text}");
    let (_, said) = check(&job);
    assert!(!said.contains("Stalled"), "{said}");
}

#[test]
fn the_rank_that_never_reaches_the_collective_is_told_from_the_rank_that_waits() {
    // Two ranks on gloo average their loss for the log every step; rank 1 gets stuck before its
    // fourth step (a file lock, a dead data source): rank 0 waits in all_reduce.
    let job = Job::new(
        r#"
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    if rank == 1 and step == 3:
        time.sleep(3600)
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    dist.all_reduce(loss.detach())
"#,
    );
    let printed = two_ranks_until_both_answered(&job);

    let text = report(&job.out());
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with('✗'))
        .unwrap_or("");
    assert!(
        verdict.contains("✗ Stalled at step 2 for ")
            && verdict
                .contains(": rank 1 never reached the collective rank 0 waits in (all_reduce)"),
        "{text}\n{printed}"
    );
    // Each rank's own stack: rank 1 sleeps in the job, rank 0 waits in all_reduce.
    assert!(text.contains("rank 0 (pid "), "{text}");
    assert!(text.contains("rank 1 (pid "), "{text}");
    assert!(
        text.contains("waits in a collective (all_reduce)"),
        "{text}"
    );
    assert!(text.contains("runs <module> ("), "{text}");
    let (code, said) = check(&job);
    assert_eq!(code, Some(1), "{said}");
}

#[test]
fn a_dataloader_whose_worker_blocks_names_the_worker_and_where_it_is() {
    // The worker's read of item 40 never returns (a network file system that hangs): the loop
    // waits for its eleventh batch for good. The worker was forked: the probe registered its own
    // stack dump there.
    let job = Job::new(
        r#"
import time
import torch
from torch.utils.data import DataLoader, Dataset
class Shards(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        if i == 40:
            time.sleep(3600)
        return torch.randn(64)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in DataLoader(Shards(), batch_size=4, num_workers=1):
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
"#,
    );
    let command = job.command(&["--stall-after", "2", "--flush-interval-ms", "100"]);
    let (_, printed) = until_stalled(&job, command, |stall| {
        let answered = |steps: bool| {
            stall
                .processes
                .iter()
                .any(|p| p.step.is_some() == steps && !p.threads.is_empty())
        };
        stall.processes.iter().any(|p| p.step == Some(9)) && answered(true) && answered(false)
    });
    let text = report(&job.out());
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with('✗'))
        .unwrap_or("");
    assert!(
        verdict.contains("✗ Stalled at step 9 for ")
            && verdict.contains(": waits for the DataLoader's next batch in <module> (")
            && verdict.contains("/job.py:14); its worker (pid ")
            && verdict.contains(") is in __getitem__ (")
            && verdict.ends_with("/job.py:10)"),
        "{text}\n{printed}"
    );
    assert!(text.contains("a DataLoader worker (pid "), "{text}");
    let (code, _) = check(&job);
    assert_eq!(code, Some(1));
}

#[test]
fn an_ask_that_meets_a_process_as_it_exits_does_not_end_it() {
    // At the interpreter's exit faulthandler lets go of the signal; an ask then (the collector
    // cannot know the process is exiting) must find it ignored, not end the process with the
    // signal's default action.
    let job = Job::new(
        r#"
import faulthandler, os, signal, sys, tidemark
from tidemark import _stacks
number = signal.SIGRTMIN + _stacks._OFFSET
assert _stacks._file is not None, "no stack dump registered"
faulthandler.unregister(number)  # as the interpreter's exit does
os.kill(os.getpid(), number)
print("alive", file=sys.stderr)
"#,
    );
    let output = job.run(&["--no-auto-phases"]);
    let printed = crate::stderr(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("alive"), "{printed}");
}

#[test]
fn a_process_that_ignores_the_request_is_said_so_and_the_watch_goes_on() {
    // The job takes the probe's signal over (ignores it) and then hangs: the collector waits
    // for an answer, says there was none, and the job is untouched until it is stopped.
    let job = Job::new(
        r#"
import signal, time, tidemark
from tidemark import _stacks
for step in range(3):
    tidemark.step(step)
    with tidemark.phase("forward"):
        time.sleep(0.01)
signal.signal(signal.SIGRTMIN + _stacks._OFFSET, signal.SIG_IGN)
time.sleep(3600)
"#,
    );
    let command = job.command(&[
        "--no-auto-phases",
        "--stall-after",
        "1",
        "--flush-interval-ms",
        "100",
    ]);
    let (status, printed) = until_stalled(&job, command, |stall| {
        stall.processes.iter().any(|p| {
            p.step == Some(2)
                && p.missing
                    .as_deref()
                    .is_some_and(|m| m.starts_with("it did not answer"))
        })
    });
    // It was still running (the ask did not end it): SIGTERM did.
    assert_eq!(status.code(), Some(128 + 15), "{printed}");
    let text = report(&job.out());
    assert!(text.contains("✗ Stalled at step 2 for "), "{text}");
    assert!(
        text.contains("no stacks: it did not answer within 2 s"),
        "{text}"
    );
}

/// DistributedDataParallel all-reduces the gradients inside `backward()` (its hooks, in C++): a
/// rank stuck before its backward leaves the other waiting in backward, with no Python frame of
/// torch.distributed on its stack. The rank that waits is still told from the rank that stalls.
#[test]
fn a_ddp_rank_that_waits_inside_backward_is_told_from_the_rank_that_never_got_there() {
    let job = Job::new(
        r#"
import time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    if rank == 1 and step == 3:
        time.sleep(3600)  # a dead data source, a file lock: never reaches backward
    loss.backward()
    opt.step()
    opt.zero_grad()
"#,
    );
    let printed = two_ranks_until_both_answered(&job);
    let text = report(&job.out());
    let verdict = text
        .lines()
        .find(|l| l.trim_start().starts_with('✗'))
        .unwrap_or("");
    assert!(
        verdict.contains("✗ Stalled at step 3 for ")
            && verdict.contains(
                ": rank 1 never reached the collective rank 0 waits in (backward's gradient reduction)"
            ),
        "{text}\n{printed}"
    );
    assert!(
        text.contains("DistributedDataParallel and FSDP reduce the gradients inside `backward()`"),
        "{text}"
    );
    let (code, said) = check(&job);
    assert_eq!(code, Some(1), "{said}");
}
