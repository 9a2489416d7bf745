//! The probe inside real Python jobs: manual API, automatic PyTorch phases, children, abuse.

use collector::recording::{Edge, Phase, SeriesKey, SeriesKind};

use crate::{Job, begins, stderr};

const MIB: u64 = 1 << 20;

/// Host memory grows only inside "eval": the recording has the phases, the steps, the process'
/// own host numbers read by the probe at every edge (exact, however late the collector runs),
/// and the sampled host-memory series of the whole tree, which rises.
#[test]
fn manual_api_records_phases_steps_and_host_growth_in_eval() {
    let job = Job::new(
        r#"
import time, tidemark
assert tidemark.enabled()
kept = []
for i in range(12):
    tidemark.step(i)
    with tidemark.phase("forward"):
        time.sleep(0.01)
    with tidemark.phase("eval"):
        time.sleep(0.01)
        kept.append(b"e" * (4 << 20))  # kept: 4 MiB per step
        time.sleep(0.01)
time.sleep(0.3)  # what it kept, held while the collector's 10 Hz sampler looks
print("done")
"#,
    );
    let output = job.command(&[]).env("RANK", "3").output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "done\n");
    let recording = job.recording();
    assert!(recording.warnings.is_empty(), "{:?}", recording.warnings);

    let forward = begins(&recording, &Phase::Forward);
    let eval = begins(&recording, &Phase::Eval);
    assert_eq!(forward.len(), 12);
    assert_eq!(eval.len(), 12);
    assert_eq!(recording.phases.len(), 48);
    let steps: Vec<u64> = eval.iter().map(|e| e.step.unwrap()).collect();
    assert_eq!(steps, (0..12).collect::<Vec<_>>());
    assert!(recording.phases.times_ns().is_sorted());
    assert!(
        recording.phases.iter().all(|e| e.origin.rank == Some(3)),
        "RANK is the rank"
    );

    // The probe's own numbers at each edge: the eval phases hold the 12 × 4 MiB, forward nothing.
    let growth = |pick: fn(&collector::recording::PhaseEdge) -> Option<u64>, phase: Phase| {
        let mut total = 0i64;
        let phases: Vec<_> = recording.phases.iter().collect();
        for pair in phases.chunks(2) {
            let (begin, end) = (&pair[0], &pair[1]);
            assert_eq!((begin.edge, end.edge), (Edge::Begin, Edge::End));
            assert_eq!(begin.phase, end.phase);
            if begin.phase == phase {
                let (b, e) = (pick(begin), pick(end));
                let (b, e) = (
                    b.expect("a number at every edge"),
                    e.expect("at every edge"),
                );
                total += e as i64 - b as i64;
            }
        }
        total
    };
    let heap = |e: &collector::recording::PhaseEdge| e.host_heap;
    let rss = |e: &collector::recording::PhaseEdge| e.host_rss;
    let (eval_heap, forward_heap) = (growth(heap, Phase::Eval), growth(heap, Phase::Forward));
    assert!(
        eval_heap >= 47 * MIB as i64,
        "the heap grew {eval_heap} in eval"
    );
    assert!(
        forward_heap.abs() < MIB as i64,
        "the heap grew {forward_heap} in forward"
    );
    let (eval_rss, forward_rss) = (growth(rss, Phase::Eval), growth(rss, Phase::Forward));
    assert!(
        eval_rss >= 44 * MIB as i64,
        "resident memory grew {eval_rss} in eval"
    );
    assert!(
        forward_rss.abs() < 4 * MIB as i64,
        "resident grew {forward_rss} in forward"
    );

    // The collector's own samples of the whole process tree, at 10 Hz and after each batch of
    // edges (the 12 steps take 0.36 s).
    let host = recording
        .series(&SeriesKey::new(SeriesKind::HostRss))
        .unwrap();
    assert!(host.values.len() >= 4, "{} host samples", host.values.len());
    // From the last sample before the first eval (the samples are 0.1 s apart: the first one
    // after it may already hold a few steps' 4 MiB).
    let i = host.times_ns.partition_point(|&s| s < eval[0].t_ns);
    let start = host
        .values
        .at(i.saturating_sub(1).min(host.values.len() - 1));
    let peak = host.values.iter().max().unwrap();
    // 48 MiB kept (less what a busy machine's late first sample already holds).
    assert!(
        peak >= start + 36 * MIB,
        "host memory rose from {start} at the first eval to {peak}"
    );
}

/// Real PyTorch on CPU, automatic mode: exactly the phases the training loop ran. An evaluation
/// of the model that trains is one eval, from `model.eval()` to `model.train()` (or, where the
/// mode is set back without it, to the next training forward); a model that never trains (a
/// teacher) has an eval at each call.
#[test]
fn automatic_mode_finds_forward_backward_optimizer_and_eval_in_real_torch() {
    let job = Job::new(
        r#"
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
loss_fn = nn.MSELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
teacher = nn.Linear(8, 1).eval()
for step in range(6):
    loss = loss_fn(model(x), y)
    with torch.no_grad():
        teacher(x)  # a model that never trains: each of its calls is an eval of its own
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 3 == 2:
        model.eval()
        with torch.no_grad():
            for _ in range(2):
                model(x)
        if step == 2:
            for m in model.modules():  # the mode set back as Lightning does, without train()
                m.training = True
        else:
            model.train()
with torch.inference_mode():
    model(x)
print("trained")
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let count = |phase: Phase| begins(&recording, &phase).len();
    assert_eq!(count(Phase::Forward), 6);
    assert_eq!(count(Phase::Backward), 6);
    assert_eq!(count(Phase::Optimizer), 6);
    assert_eq!(
        count(Phase::Eval),
        9,
        "the teacher's 6 calls, 2 evaluations (from model.eval() to model.train() or to the next training forward), and one call in inference mode"
    );
    let ends = recording
        .phases
        .iter()
        .filter(|e| e.edge == Edge::End)
        .count();
    assert_eq!(ends, 27);
    // Steps count optimizer steps: forward k and backward k belong to step k.
    let forward_steps: Vec<u64> = begins(&recording, &Phase::Forward)
        .iter()
        .map(|e| e.step.unwrap())
        .collect();
    assert_eq!(forward_steps, vec![0, 1, 2, 3, 4, 5]);
    let eval_steps: Vec<u64> = begins(&recording, &Phase::Eval)
        .iter()
        .map(|e| e.step.unwrap())
        .collect();
    assert_eq!(eval_steps, vec![0, 1, 2, 3, 3, 4, 5, 6, 6]);
    // An evaluation holds its model's calls: the first ends as the next training forward begins.
    let edges: Vec<_> = recording.phases.iter().collect();
    let first = edges
        .iter()
        .position(|e| e.phase == Phase::Eval && e.step == Some(3))
        .unwrap();
    let (end, next) = (&edges[first + 1], &edges[first + 2]);
    assert_eq!(
        (end.edge, &end.phase, next.edge, &next.phase),
        (Edge::End, &Phase::Eval, Edge::Begin, &Phase::Forward),
        "{edges:#?}"
    );
    // No CUDA here: no allocator numbers, and nothing made up.
    assert!(recording.allocator.is_empty());
}

/// From the second step on a root model is observed through the call `Module.__call__` makes
/// first, without hooks (which take every call off torch's fast path): every forward is still a
/// phase, one that raises included; the model pickles and copies without anything of the probe,
/// is freed when the job lets it go, a DataParallel replica of it calls itself, and once
/// `module.compile()` takes that call the model is observed around the compiled call and its
/// phases go on.
#[test]
fn a_root_model_is_observed_off_the_hooks_and_left_as_it_was() {
    let job = Job::new(
        r#"
import copy, gc, io, sys, weakref
import torch
from torch import nn
torch.manual_seed(0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.fail = False
    def forward(self, x):
        if self.fail:
            raise RuntimeError("boom")
        return self.a(x)

def train(model, opt, steps):
    for _ in range(steps):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()

x = torch.randn(2, 4)
model, other = Net(), Net()
opt = torch.optim.SGD([*model.parameters(), *other.parameters()], lr=0.1)
(model(x).sum() + other(x).sum()).backward()  # the first step: both are roots
opt.step()
opt.zero_grad()
train(model, opt, 2)
print("hooks:", len(model._forward_pre_hooks), len(model._forward_hooks))
model.fail = True
try:
    model(x)
except RuntimeError:
    pass
model.fail = False
saved = io.BytesIO()
torch.save(model, saved)
print("tidemark in the pickle:", b"tidemark" in saved.getvalue())
twin = copy.deepcopy(model)
with torch.no_grad():
    twin.a.weight.add_(1.0)
    print("the copy computes with its own weights:", not torch.equal(twin(x), model(x)))
replica = model._replicate_for_data_parallel()
print("the replica calls itself:", "_compiled_call_impl" not in replica.__dict__)
del replica

other(x)
gone = weakref.ref(other)
gc.disable()
del other
print("freed when let go:", gone() is None)
gc.enable()

model.compile(backend="eager")
train(model, opt, 2)
print("hooks once compiled:", len(model._forward_pre_hooks), len(model._forward_hooks))
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "hooks: 0 0\ntidemark in the pickle: False\nthe copy computes with its own weights: True\n\
         the replica calls itself: True\nfreed when let go: True\nhooks once compiled: 0 0\n",
        "{}",
        stderr(&output)
    );
    let recording = job.recording();
    let count = |phase: Phase, edge: Edge| {
        recording
            .phases
            .iter()
            .filter(|e| e.phase == phase && e.edge == edge)
            .count()
    };
    // Both models in the first step, model in two more, the forward that raised, other's
    // last call, then the two compiled steps (`module.compile()` is seen as it takes the call).
    // The eval: model's call beside its copy's (a copy is no root).
    assert_eq!(count(Phase::Forward, Edge::Begin), 2 + 2 + 1 + 1 + 2);
    assert_eq!(
        count(Phase::Forward, Edge::End),
        8,
        "the forward that raised ended"
    );
    assert_eq!(count(Phase::Eval, Edge::Begin), 1);
    assert_eq!(count(Phase::Backward, Edge::Begin), 1 + 2 + 2);
}

/// Models compiled with `fullgraph=True` (where anything the compiler cannot trace is an error)
/// train under the collector as without it: the probe's hooks do nothing inside a compiled
/// region. `torch.compile(model)`'s wrapper is called outside it, so its steps keep their phases.
#[test]
fn compiled_models_train_under_the_probe_and_keep_their_phases() {
    let job = Job::new(
        r#"
import torch
from torch import nn
torch.manual_seed(0)
x = torch.randn(2, 4)
wrapped = torch.compile(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)), backend="eager", fullgraph=True)
inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
inner.compile(backend="eager", fullgraph=True)
opt = torch.optim.SGD([*wrapped.parameters(), *inner.parameters()], lr=0.1)
for _ in range(3):
    (wrapped(x).sum() + inner(x).sum()).backward()
    opt.step()
    opt.zero_grad()
print("trained")
"#,
    );
    // The first model's wrapper is a root from the first step on, found by the hooks. The second
    // model's call runs compiled whole, where they do nothing: it is observed around its compiled
    // call from its compile on, a root where nothing else is open.
    assert_eq!(phases_of_a_job_that_trained(&job), [6, 3, 3]);
}

/// Runs `job`, which prints "trained", and counts its forwards, backwards and optimizer steps.
fn phases_of_a_job_that_trained(job: &Job) -> [usize; 3] {
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "trained\n");
    let recording = job.recording();
    [Phase::Forward, Phase::Backward, Phase::Optimizer].map(|p| begins(&recording, &p).len())
}

/// Blocks compiled one by one (`block.compile()`) inside a model that is not: one forward a
/// step, the model's, not one a block. A model found as a root in eager steps and then called
/// by a function compiled whole (`fullgraph`): it trains, and the compiled steps have no forward
/// of their own (the probe's call is not traced into the graph).
#[test]
fn compiled_blocks_are_not_roots_and_compiled_functions_call_a_root_untouched() {
    let job = Job::new(
        r#"
import torch
from torch import nn
torch.manual_seed(0)
x = torch.randn(2, 4)
blocks = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1))
for block in blocks:
    block.compile(backend="eager", fullgraph=True)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
step = torch.compile(lambda x: model(x).sum(), backend="eager", fullgraph=True)
opt = torch.optim.SGD([*blocks.parameters(), *model.parameters()], lr=0.1)
for i in range(5):
    blocks(x).sum().backward()
    loss = model(x).sum() if i < 2 else step(x)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained")
"#,
    );
    // Forwards: blocks' 5 (its compiled blocks inside it are not roots) and model's 2 eager steps.
    assert_eq!(phases_of_a_job_that_trained(&job), [7, 10, 5]);
}

/// Automatic mode off: only what the job marks.
#[test]
fn automatic_mode_can_be_switched_off() {
    let job = Job::new(
        r#"
import torch, tidemark
model = torch.nn.Linear(4, 4)
model(torch.randn(2, 4)).sum().backward()
with tidemark.phase("mine"):
    pass
"#,
    );
    let output = job.run(&["--no-auto-phases"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let names: Vec<String> = recording
        .phases
        .iter()
        .map(|e| e.phase.as_str().to_owned())
        .collect();
    assert_eq!(names, ["mine", "mine"]);
}

/// A loop of `steps` steps of well under a millisecond each.
fn short_steps(steps: u32) -> Job {
    Job::new(&format!(
        r#"
import torch
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range({steps}):
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
"#
    ))
}

/// How optimizers stepping in other ways than one a step number the steps: a GAN's two in turn,
/// each with its own forward and backward, make one step an iteration (the first iteration's
/// two ends both count, until the probe has seen the cycle); an optimizer made anew each epoch
/// goes on counting, and so does a new one at every step (which often takes the id of the one
/// before it); one that steps seldom (every fifth iteration) adds a step the first time
/// only. The steps are numbered from 0 on the phases' edges.
#[test]
fn optimizers_that_step_in_turn_anew_or_seldom_count_the_loops_steps() {
    let job = Job::new(
        r#"
import sys
import torch
torch.manual_seed(0)
a, b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
x = torch.randn(4, 8)
def make(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)
def train(model, optimizer):
    model(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
opt_a, opt_b = make(a), make(b)
for i in range(20):
    if sys.argv[1] == "in_turn":
        train(a, opt_a)
        train(b, opt_b)
    elif sys.argv[1] == "anew":
        if i % 5 == 0:
            opt_a = make(a)
        train(a, opt_a)
    elif sys.argv[1] == "fresh":
        opt_a = make(a)
        train(a, opt_a)
    else:
        if i % 5 == 4:
            train(b, opt_b)
        train(a, opt_a)
"#,
    );
    for (how, steps) in [("in_turn", 21), ("anew", 20), ("fresh", 20), ("seldom", 21)] {
        let output = job.command(&[]).arg(how).output().unwrap();
        assert!(output.status.success(), "{how}: {}", stderr(&output));
        let recording = job.recording();
        let last = recording.phases.iter().filter_map(|e| e.step).max();
        assert_eq!(last, Some(steps - 1), "{how}");
    }
}

/// `TIDEMARK_OBSERVE_ONE_IN` that is neither a whole number ≥ 1 nor `auto` is named on stderr,
/// and every step is observed; the job runs as it would.
#[test]
fn a_bad_observe_one_in_is_named_and_every_step_is_observed() {
    let job = short_steps(130);
    for bad in ["0", "every"] {
        let output = job
            .command(&[])
            .env("TIDEMARK_OBSERVE_ONE_IN", bad)
            .output()
            .unwrap();
        assert!(output.status.success(), "{bad}: {}", stderr(&output));
        let said = format!("tidemark: TIDEMARK_OBSERVE_ONE_IN='{bad}' is neither a whole number");
        assert!(
            stderr(&output).contains(&said),
            "{bad}: {}",
            stderr(&output)
        );
        let recording = job.recording();
        assert!(
            recording.unobserved.is_empty(),
            "{bad}: {:?}",
            recording.unobserved
        );
        assert_eq!(begins(&recording, &Phase::Forward).len(), 130, "{bad}");
    }
}

/// A loop of short steps is observed on a sample of its steps by default (`auto`: these steps
/// take well under a millisecond, so one in many past the first 100), and the report says so;
/// `--observe-every-step` observes them all.
#[test]
fn a_loop_of_short_steps_is_observed_on_a_sample_unless_asked_for_every_step() {
    let job = short_steps(400);
    let forwards =
        |recording: &collector::recording::Recording| begins(recording, &Phase::Forward).len();
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let unobserved: u64 = recording.unobserved.iter().map(|u| u.steps).sum();
    let observed = forwards(&recording);
    // The first 100, the saved tensors' steps (128, 192, …) and at least one in 100 of the rest.
    assert!(
        (103..=150).contains(&observed) && observed as u64 + unobserved == 400,
        "{observed} observed, {unobserved} not"
    );
    let report = crate::report(&job.out());
    assert!(
        report.contains(&format!(
            "the probe observed the phases of {observed} of 400 steps"
        )),
        "{report}"
    );
    let output = job.run(&["--observe-every-step"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    assert!(
        recording.unobserved.is_empty(),
        "{:?}",
        recording.unobserved
    );
    assert_eq!(forwards(&recording), 400);
}

/// On the allocator's path `auto` weighs what reading the allocator's numbers takes at an
/// observed step's edges (a GPU's statistics cost more than the rest of an edge): the same
/// loop of 20 ms steps is observed one step in a few where they read fast, and at the fewest
/// (one in 100 past the first 100 steps and the saved tensors' steps) where each read takes 2 ms.
#[test]
fn auto_observes_fewer_steps_where_the_allocators_numbers_are_slow_to_read() {
    let job = Job::new(
        r#"
import time
import torch
import scripted_cuda
scripted_cuda.install(torch)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(400):
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    time.sleep(0.02)
"#,
    )
    .with_scripted_cuda();
    let observed = |read_s: &str| {
        let output = job
            .command(&["--no-census"])
            .env("SCRIPTED_CUDA_READ_S", read_s)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        let recording = job.recording();
        assert!(!recording.allocator.is_empty(), "no allocator numbers");
        begins(&recording, &Phase::Forward).len() - 100
    };
    let (fast, slow) = (observed("0"), observed("0.002"));
    // Slow: 3 of the 300 later steps, the saved tensors' 5 and the one after each run.
    assert!(
        slow <= 14,
        "{slow} of the later steps observed with slow reads"
    );
    assert!(
        fast >= 2 * slow,
        "{fast} with fast reads, {slow} with slow ones"
    );
}

/// Forked children, `subprocess` and `multiprocessing` spawn all reach the collector.
#[test]
fn the_probe_works_in_forked_spawned_and_subprocess_children() {
    let job = Job::new(
        r#"
import multiprocessing, os, subprocess, sys, tidemark

def work(name):
    import tidemark
    with tidemark.phase(name):
        pass

if __name__ == "__main__":
    work("parent")
    pid = os.fork()
    if pid == 0:
        work("forked")
        os._exit(0)
    os.waitpid(pid, 0)
    subprocess.run([sys.executable, "-c", "import tidemark\nwith tidemark.phase('subprocess'): pass"], check=True)
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=work, args=("spawned",))
    p.start()
    p.join()
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let mut seen: Vec<(String, u32)> = recording
        .phases
        .iter()
        .filter(|e| e.edge == Edge::Begin)
        .map(|e| (e.phase.to_string(), e.origin.pid))
        .collect();
    seen.sort();
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["forked", "parent", "spawned", "subprocess"]);
    let mut pids: Vec<u32> = seen.iter().map(|(_, p)| *p).collect();
    pids.dedup();
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), 4, "four processes: {seen:?}");
    assert_eq!(recording.dropped_total(), 0);
}

/// Garbage on the socket, and a flood while the collector is stopped (SIGSTOP) so that every
/// buffer overflows: counted, and the job unharmed.
#[test]
fn malformed_messages_and_floods_are_counted_and_the_job_is_unharmed() {
    let job = Job::new(
        r#"
import os, signal, socket, time, tidemark
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(50):
    s.sendto(b"not a tidemark message %d" % i, os.environ["TIDEMARK_SOCKET"])
time.sleep(0.2)
collector = os.getppid()
os.kill(collector, signal.SIGSTOP)
start = time.monotonic()
for i in range(100000):
    tidemark.begin("flood")
took = time.monotonic() - start
os.kill(collector, signal.SIGCONT)
print("flood took %.3f s" % took)
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let seconds: f64 = stdout.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(seconds < 10.0, "the flood blocked the job: {stdout}");
    let recording = job.recording();
    let malformed: u64 = recording.drops.iter().map(|d| d.malformed).sum();
    let dropped: u64 = recording.drops.iter().map(|d| d.dropped).sum();
    assert_eq!(malformed, 50);
    let delivered = recording.phases.len() as u64;
    assert!(
        dropped > 0,
        "a stopped collector cannot take 100000 edges: {delivered} delivered"
    );
    assert!(delivered > 0);
    // Back-to-back edges take the C heap's reading over its share of the job's time: the probe
    // says so at exit in one more message, which a full queue may drop (and count) as well.
    let heap_note = recording
        .notes
        .iter()
        .any(|n| n.text.contains("read the C heap at"));
    assert_eq!(
        delivered + dropped,
        100_000 + u64::from(!heap_note),
        "every edge (and the heap note) delivered or counted"
    );
    assert!(
        stderr(&output).contains("probe messages lost"),
        "{}",
        stderr(&output)
    );
}

/// A flood the collector keeps up with: batched, nothing lost.
#[test]
fn a_flood_of_edges_is_batched_and_nothing_is_lost() {
    let job = Job::new("import tidemark\nfor i in range(100000):\n    tidemark.begin('flood')\n");
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    assert_eq!(
        recording.phases.len() as u64 + recording.dropped_total(),
        100_000
    );
    assert!(recording.phases.times_ns().is_sorted(), "in order");
}

/// Without the probe: no phases, but host memory and the exit.
#[test]
fn no_probe_records_host_memory_only() {
    let job = Job::new("import tidemark\n");
    let output = job.run(&["--no-probe"]);
    // Without the probe on the path, `import tidemark` fails: the job's own error, passed on.
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("ModuleNotFoundError"));
    let recording = job.recording();
    assert!(recording.phases.is_empty());
    assert_eq!(recording.exits[0].code, Some(1));
}

/// Only the job's own user may send: a process of the job that switched to another user is
/// refused and counted (the kernel attaches the sender's credentials to every datagram).
#[test]
fn messages_from_another_user_are_refused_and_counted() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: switching users needs root (CI runs as root)");
        return;
    }
    let job = Job::new(
        r#"
import os, socket, time, tidemark
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.connect(os.environ["TIDEMARK_SOCKET"])
pid = os.fork()
if pid == 0:
    os.setgid(65534)
    os.setuid(65534)
    for i in range(5):
        s.send(b"tm2 P %d %d - - b - - - - - - - - - - intruder" % (time.monotonic_ns(), os.getpid()))
    os._exit(0)
os.waitpid(pid, 0)
with tidemark.phase("own"):
    pass
time.sleep(0.3)
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let refused: u64 = recording.drops.iter().map(|d| d.refused).sum();
    assert_eq!(refused, 5);
    let names: Vec<String> = recording
        .phases
        .iter()
        .map(|e| e.phase.as_str().to_owned())
        .collect();
    assert_eq!(names, ["own", "own"]);
}

/// The probe never harms the job, and keeps its phases through what real jobs do: a step that is
/// not a number, a forward that raises (a caught OOM, a retried batch) before any optimizer step
/// and in a loop that never steps one, a model run from two threads at once.
#[test]
fn the_probe_survives_odd_steps_failing_forwards_and_threads() {
    let job = Job::new(
        r#"
import threading
import torch, tidemark
from torch import nn

class Flaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.fail = 2
    def forward(self, x):
        x = self.inner(x)
        if self.fail:
            self.fail -= 1
            raise RuntimeError("CUDA out of memory (pretend)")
        return x

tidemark.step("x")          # not a number: must not raise
tidemark.step(None)
model = Flaky()
x = torch.randn(2, 4)
with torch.no_grad():       # pure inference: no optimizer step ever ends discovery
    for attempt in range(3):
        try:
            model(x)
        except RuntimeError:
            pass            # retried
    for _ in range(4):
        model(x)

def infer():
    with torch.no_grad():
        for _ in range(5):
            model(x)

threads = [threading.Thread(target=infer) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print("ok")
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "ok\n");
    assert!(
        stderr(&output).contains("tidemark: step('x') is not a whole number"),
        "{}",
        stderr(&output)
    );
    let recording = job.recording();
    let evals = begins(&recording, &Phase::Eval);
    // 3 attempts (2 raise) + 4 calls + 2 threads × 5 calls: every call is a phase.
    assert_eq!(evals.len(), 17, "{:?}", recording.phases);
    let ends = recording
        .phases
        .iter()
        .filter(|e| e.edge == Edge::End && e.phase == Phase::Eval)
        .count();
    assert_eq!(ends, 17, "a forward that raises still ends its phase");
    // Importing torch starts at step 0; "x" and None each count one step on.
    assert!(evals.iter().all(|e| e.step == Some(2)), "{evals:?}");
}

/// Real torch on CPU, automatic phases: a forward hook keeps each output (a clone: 8 MiB of
/// tensor memory per step). The probe's C-heap numbers at the edges put the growth in forward,
/// where it happens, and the report says which numbers it used. (Resident memory, sampled after
/// the edge, used to blame backward or the optimizer: freed activations stay resident.)
#[test]
fn a_forward_hooks_kept_outputs_are_attributed_to_forward_with_the_c_heap() {
    let job = Job::new(
        r#"
import torch
from torch import nn
torch.manual_seed(0)
kept = []
model = nn.Sequential(nn.Linear(256, 8192), nn.ReLU(), nn.Linear(8192, 256))
model[1].register_forward_hook(lambda m, i, out: kept.append(out.detach().clone()))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 256)
for step in range(30):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()   # the ReLU's output: 256 × 8192 floats = 8 MiB
    loss.backward()
    opt.step()
print(len(kept))
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    assert!(
        recording
            .phases
            .iter()
            .all(|e| e.host_heap.is_some() && e.host_rss.is_some())
    );
    let analysis = collector::analysis::analyze(&recording);
    assert_eq!(
        analysis.attribution,
        Some(collector::analysis::Attribution::HostHeap),
        "{:?}",
        analysis.attribution_note
    );
    let forward = analysis
        .phases
        .iter()
        .find(|p| p.phase == Phase::Forward)
        .unwrap();
    let share = forward.share_of_growth.unwrap();
    assert!(
        share > 0.9,
        "forward holds {share} of the growth: {analysis:#?}"
    );
    // The hook keeps the ReLU's output, exactly 8 MiB a step; the rest is kernel scratch.
    crate::assert_near(
        forward.retained_mean_bytes,
        8.0 * MIB as f64,
        "what forward retains per step",
    );
    let leak = analysis
        .finding(collector::analysis::FindingKind::Leak)
        .unwrap_or_else(|| panic!("no leak finding: {:#?}", analysis.findings));
    assert!(leak.title.contains("forward"), "{}", leak.title);

    let text = crate::report(&job.out());
    assert!(
        text.contains(
            "phases attributed with the training process' C heap in use (glibc mallinfo2)"
        ),
        "{text}"
    );
}

/// A loop that makes its gradients with `torch.autograd.grad` and assigns them (`p.grad = g`)
/// has a backward like any other; the derivative a model's own forward takes (a physics-informed
/// net's du/dx) stays in that forward. A forward hook's kept outputs are still the forward's.
#[test]
fn gradients_made_by_autograd_grad_are_a_backward() {
    let job = Job::new(
        r#"
import torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)

class Pinn(nn.Module):
    """Its forward takes a derivative itself."""
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, t):
        t = t.requires_grad_(True)
        u = self.net(t)
        (du,) = torch.autograd.grad(u.sum(), t, create_graph=True)
        return u, du

kept = []
model = nn.Sequential(nn.Linear(256, 8192), nn.ReLU(), nn.Linear(8192, 256))
model[1].register_forward_hook(lambda m, i, out: kept.append(out.detach().clone()))  # 8 MiB a step
pinn = Pinn()
params = list(model.parameters()) + list(pinn.parameters())
opt = torch.optim.SGD(params, lr=0.01)
x, t = torch.randn(256, 256), torch.rand(64, 1)
for step in range(30):
    u, du = pinn(t)
    loss = model(x).square().mean() + (du - u).square().mean()
    grads = torch.autograd.grad(loss, params)
    for p, g in zip(params, grads):
        p.grad = g
    opt.step()
"#,
    );
    let output = job.run(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    // One backward a step: the loop's; the forward's own derivative is not one.
    assert_eq!(begins(&recording, &Phase::Backward).len(), 30);
    let analysis = collector::analysis::analyze(&recording);
    assert!(
        !analysis
            .lacks
            .iter()
            .any(|l| l.contains("no backward seen")),
        "{:#?}",
        analysis.lacks
    );
    let leak = analysis
        .finding(collector::analysis::FindingKind::Leak)
        .unwrap_or_else(|| panic!("no leak finding: {:#?}", analysis.findings));
    assert_eq!(leak.phase, Some(Phase::Forward), "{leak:#?}");
}

/// Edges back to back for 10,000 steps: reading resident memory (a system call) at each would
/// take a large part of the job's time, so after the first 100 steps it is read on the steps its
/// share allows, both edges of a phase or neither, and the probe and the attribution say so.
/// (On a loaded machine the collector may fall behind and the probe drop messages: what is
/// checked holds for whatever arrived.)
#[test]
fn resident_memory_is_read_within_its_share_on_whole_steps_and_said() {
    let job = Job::new(
        r#"
import time, tidemark
for step in range(10000):
    tidemark.step(step)
    with tidemark.phase("forward"):
        pass
    if step % 500 == 499:
        time.sleep(0.002)  # the collector catches up
"#,
    );
    let output = job.run(&["--no-auto-phases"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let edges: Vec<_> = recording.phases.iter().collect();
    let dropped: u64 = recording.drops.iter().map(|d| d.dropped).sum();
    assert!(
        edges.len() >= 10_000,
        "{} edges: {}",
        edges.len(),
        stderr(&output)
    );
    let first = edges.iter().filter(|e| e.step < Some(100));
    assert!(first.clone().count() == 200 && first.clone().all(|e| e.host_rss.is_some()));
    let read = edges.iter().filter(|e| e.host_rss.is_some()).count();
    assert!(
        read >= 200 && read < edges.len() / 2,
        "{read} of {}",
        edges.len()
    );
    let mut by_step: std::collections::HashMap<u64, Vec<bool>> = Default::default();
    for e in &edges {
        by_step
            .entry(e.step.unwrap())
            .or_default()
            .push(e.host_rss.is_some());
    }
    for (step, read) in &by_step {
        assert!(read.iter().all(|&r| r == read[0]), "step {step}: {read:?}");
    }
    let note = recording
        .notes
        .iter()
        .find(|n| n.text.contains("read resident memory at"));
    match note {
        Some(note) => assert!(
            note.text.contains("/proc/self/statm")
                && (dropped > 0
                    || note
                        .text
                        .contains(&format!("at {read} of 20000 phase edges"))),
            "{}",
            note.text
        ),
        None => assert!(dropped > 0, "{:#?}", recording.notes),
    }
    // The C heap of this small process is cheap but read within its share as well: the phases
    // are attributed with what was read, saying how much.
    let analysis = collector::analysis::analyze(&recording);
    assert!(
        matches!(
            analysis.attribution,
            Some(
                collector::analysis::Attribution::HostHeap
                    | collector::analysis::Attribution::HostRssAtEdges
            )
        ),
        "{:?}",
        analysis.attribution
    );
    assert!(
        analysis
            .attribution_note
            .as_deref()
            .is_some_and(|n| n.contains("phase edges (within its share of the job's time)")),
        "{:?}",
        analysis.attribution_note
    );
}

#[test]
fn a_heap_too_fragmented_to_read_cheaply_is_read_within_its_share_and_said() {
    // 150,000 free chunks that cannot coalesce: glibc's mallinfo2 walks them all at every read,
    // and the edges come back to back, so reading it at each would cost the job most of its time.
    let job = Job::new(
        r#"
import ctypes, time, tidemark
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(200) for _ in range(300_000)]
for b in blocks[::2]:
    libc.free(b)
start = time.perf_counter()
for step in range(2000):
    tidemark.step(step)
    with tidemark.phase("forward"):
        time.sleep(0.0005)  # a second or more in all: resident memory's share then allows reads
print(f"{time.perf_counter() - start:.3f}")
"#,
    );
    let output = job.run(&["--no-auto-phases"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let recording = job.recording();
    let note = recording
        .notes
        .iter()
        .find(|n| n.text.contains("read the C heap at"))
        .unwrap_or_else(|| panic!("{:#?}", recording.notes));
    assert!(note.text.contains("mallinfo2"), "{}", note.text);
    let with_heap = recording
        .phases
        .iter()
        .filter(|e| e.host_heap.is_some())
        .count();
    assert!(
        with_heap >= 1 && with_heap < recording.phases.len() / 2,
        "{with_heap}"
    );
    // Resident memory is cheap to read: at every edge of the first 100 steps, then within its
    // own share (not the heap's).
    let first_steps = recording.phases.iter().filter(|e| e.step < Some(100));
    assert!(
        first_steps.clone().count() == 200 && first_steps.clone().all(|e| e.host_rss.is_some())
    );
    let with_rss = recording
        .phases
        .iter()
        .filter(|e| e.host_rss.is_some())
        .count();
    assert!(with_rss > with_heap, "{with_rss} ≤ {with_heap}");
    // How many reads its share allowed depends on how fast this machine walks the heap: the
    // attribution follows what was read. Read at 1 % of the edges or more (a fast machine), the
    // heap attributes and the note says at how many edges; less, resident memory attributes and
    // the note quotes why the heap was not read.
    let analysis = collector::analysis::analyze(&recording);
    let note = analysis.attribution_note.clone().unwrap_or_default();
    if with_heap * 100 >= recording.phases.len() && with_heap >= 40 {
        assert_eq!(
            analysis.attribution,
            Some(collector::analysis::Attribution::HostHeap)
        );
        let said = format!(
            "the C heap at {with_heap} of {} phase edges",
            recording.phases.len()
        );
        assert!(note.contains(&said), "{note}");
    } else {
        assert_eq!(
            analysis.attribution,
            Some(collector::analysis::Attribution::HostRssAtEdges)
        );
        assert!(note.contains("mallinfo2"), "{note}");
    }
}
