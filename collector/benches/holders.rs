//! What knowing who holds the memory costs the job (issue #16's budgets), on real PyTorch:
//!
//! - the categories at every step start (and the gradients at every step end) of a model with
//!   1,000 parameter tensors and Adam: µs per step, against a 50 ms step (20 steps/s; budget 1 %;
//!   the C heap they carry is the next edge's reading, counted in the per-edge cost);
//! - one census of a process holding 1,000,000 Python objects (measured and reported);
//! - all censuses of each acceptance job (`tests/data/holders/train.py`, `objects.py`) against
//!   its wall time (budget 1 %).
//!
//! `cargo bench -p tidemark-collector --bench holders` (needs torch: `TIDEMARK_PYTHON`).

use std::path::Path;
use std::process::Command;

#[path = "../tests/support/python.rs"]
mod python;
use python::python;

const SCRIPT: &str = r#"
import sys, time, weakref, torch, tidemark
from tidemark import _auto, _steps
from torch import nn
assert tidemark.enabled()
torch.set_num_threads(1)
model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(500)])  # 1,000 parameter tensors
opt = torch.optim.Adam(model.parameters())
_auto._roots[id(model)] = model  # what the automatic phases would have found
_auto._optimizers.append(weakref.ref(opt))
x = torch.randn(4, 16)
costs = []
for step in range(200):
    tidemark._step = step
    start = time.perf_counter_ns()
    tidemark._at_step_start(torch)
    _steps._send_categories(0)  # what the forward's begin edge adds: sending them
    costs.append(time.perf_counter_ns() - start)
    opt.zero_grad(set_to_none=True)
    model(x).sum().backward()
    opt.step()
    start = time.perf_counter_ns()
    tidemark._at_step_end()
    costs[-1] += time.perf_counter_ns() - start
tidemark._steps._census_on = False  # no census in the timed steps above (step 16, 64 would take one)
costs = costs[20:]
costs.sort()
mean = sum(costs) / len(costs)
print(f"categories {mean / 1000:.1f} {costs[len(costs) // 2] / 1000:.1f} {costs[-1] / 1000:.1f}")

class Item:
    def __init__(self, i):
        self.i = i
        self.name = "x"
held = [Item(i) for i in range(1_000_000)]
import gc
from tidemark import _census
objects = len(gc.get_objects())
for full in (False, True):
    best = None
    for _ in range(3):
        start = time.perf_counter_ns()
        result = _census.census(torch, [model], [opt], full)
        elapsed = time.perf_counter_ns() - start
        best = elapsed if best is None else min(best, elapsed)
    print(f"census {int(full)} {best / 1e6:.1f} {result['objects']} {objects}")
# Objects that are not tensors: counted by type at the first census, and at the last what grew
# since with the containers that hold it (1,000,000 more `Item`s, held by `held`).
start = time.perf_counter_ns()
_census._counted = (0, _census._object_counts())  # (what `count_objects` takes when it counts)
counted = time.perf_counter_ns() - start
more = [Item(i) for i in range(1_000_000)]
start = time.perf_counter_ns()
grown = _census.object_growth(time.perf_counter_ns() + 10**10)
growth = time.perf_counter_ns() - start
print(f"objects {counted / 1e6:.1f} {growth / 1e6:.1f} {len(gc.get_objects())} {grown['containers'][0]['name']}")
"#;

fn categories_and_census(dir: &Path) {
    let script = dir.join("bench.py");
    std::fs::write(&script, SCRIPT).expect("write the script");
    let output = Command::new(env!("CARGO_BIN_EXE_collector"))
        .arg("--out")
        .arg(dir.join("bench.msgpack"))
        .args(["--no-auto-phases", "--no-census", "--"])
        .arg(python())
        .arg(&script)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run the collector");
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        println!(
            "the bench job failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["categories", mean, median, worst] => {
                let share = mean.parse::<f64>().unwrap_or(f64::NAN) / 50_000.0 * 100.0;
                println!(
                    "categories, 1,000 parameter tensors + Adam: {mean} µs per step (median {median}, worst {worst}) = {share:.2} % of a 50 ms step (budget 1 %)"
                );
            }
            ["census", full, ms, visited, objects] => println!(
                "census of a process with {objects} gc-tracked objects (1,000,000 held by a global list): {ms} ms, {visited} objects walked{}",
                if *full == "1" {
                    ", counting the tensors no name reaches (only when the job dies)"
                } else {
                    ""
                }
            ),
            ["objects", counted, growth, objects, container] => println!(
                "objects by type: counted in {counted} ms at the first census; at the last, with {objects} gc-tracked objects, what grew and the container that holds it ({container}) in {growth} ms"
            ),
            _ => println!("{line}"),
        }
    }
}

fn acceptance_jobs(dir: &Path) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/holders");
    let (train, objects) = (data.join("train.py"), data.join("objects.py"));
    // The leaks of tensors and the healthy loop, then those that are not tensors (which pay for
    // counting the objects by type).
    for (script, case) in [
        (&train, "losses"),
        (&train, "hook"),
        (&train, "detach"),
        (&train, "eval_logits"),
        (&train, "attention"),
        (&train, "buffer"),
        (&train, "zero_grad_keep"),
        (&train, "healthy"),
        (&objects, "figures"),
        (&objects, "closed"),
        (&objects, "records"),
        // The figures again, 6 times as long (about a minute): counting the objects is a fixed
        // cost, once at a step census and once at the end, that a longer job spreads thinner.
        (&objects, "figures 540"),
    ] {
        let out = dir.join(format!("{}.msgpack", case.replace(' ', "-")));
        let status = Command::new(env!("CARGO_BIN_EXE_collector"))
            .arg("--out")
            .arg(&out)
            .arg("--")
            .arg(python())
            .arg(script)
            .args(case.split(' '))
            .env("OMP_NUM_THREADS", "1")
            .output()
            .expect("run the collector");
        let Ok(recording) = collector::recording::read_file(&out) else {
            println!("{case}: no recording ({})", status.status);
            continue;
        };
        let cost: u64 = recording.censuses.iter().map(|c| c.cost_ns).sum();
        let costs: Vec<String> = recording
            .censuses
            .iter()
            .map(|c| format!("{:.1}", c.cost_ns as f64 / 1e6))
            .collect();
        println!(
            "{case}: {} censuses ({} ms) took {:.1} ms of {:.2} s = {:.2} % of the run (budget 1 %)",
            recording.censuses.len(),
            costs.join(" + "),
            cost as f64 / 1e6,
            recording.duration_ns() as f64 / 1e9,
            100.0 * cost as f64 / recording.duration_ns().max(1) as f64
        );
    }
}

fn main() {
    // Criterion-style filters are ignored: this bench always runs both measurements.
    let dir = tempfile::tempdir().expect("a temporary folder");
    categories_and_census(dir.path());
    acceptance_jobs(dir.path());
}
