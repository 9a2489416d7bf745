#!/usr/bin/env python3
"""What the probe costs a training job: steps/s of two CPU training loops alone and under the
collector, an isolated phase edge, and where the probe's time goes. Builds nothing.

    scripts/probe-bench.py COLLECTOR [--python PY] [--runs 5] [--seconds 20] [--loops small,many]
    scripts/probe-bench.py COLLECTOR --instructions [--loops small]

COLLECTOR is the `collector` binary to measure (its probe is the one built into it). PY is a
Python with torch (default: $TIDEMARK_PYTHON, else python3).

The loops (real torch on the CPU, one thread):
  small: 40 × nn.Linear(64, 64) in a Sequential, Adam, batch 32 (~5–7 ms a step);
  many:  1,000 parameter tensors (980 vectors of 64 added to the input, then 10 × Linear(64, 64)),
         fused Adam, batch 32 (~10 ms a step).
Each is run alone and under `collector --out … -- python job.py`, alternated, `--runs` times; a
run measures its steps/s over `--seconds` from its fifth step (the probe's first censuses, at
steps 16 and 24, and its first heap reads are inside). Printed: the median of each and the ratio.

Each job also reports the CPU time of its steps (all its threads) and its parent's (the
collector's) over the same window: on a shared machine CPU time per step moves less than wall time.

BENCH_FLUSH_NS=N in the environment sets the probe's batch interval (nanoseconds) in the jobs;
BENCH_WARMUP=N the steps before a run's steps/s is timed (default 5). `--collector-args` gives the
collector more options in the runs under it (`--collector-args=--no-probe`: the whole runs' noise
floor, with nothing of the probe in the job).

`--side-by-side` also runs the two at once, each on a CPU of its own (`taskset`; the collector
shares its job's), `--runs` rounds with the CPUs swapped each round, both timing the same
wall-clock window from 6 s after their start: what the machine does meanwhile falls on both.
Printed: the median of the rounds' ratios, and per second of the window. With them,
BENCH_OFF=1 takes the probe's hooks out from step 130 on (its modules, thread and the collector
stay: what the probe costs besides its hooks), BENCH_EVERY=N puts them back for one step in N
from step 130 (what observing a sample of short steps would cost), BENCH_COLLECTOR_APART=1 puts the
collector on the other CPU (its job stays on its own), BENCH_COLLECTOR_NICE=N starts the collector
at niceness N (its threads at N + 10) and its job back at the caller's, BENCH_BATCH_LINES=N sets the lines of a
full batch, BENCH_TYPICAL=1 leaves out what comes within a share
of the job's time (censuses, categories, host reads, saved tensors: what every step does).

Then, under the collector:
  - the probe off and on in the same process from step 130, in pairs of two steps each (off:
    the root model's hooks, the backward wrapper and the optimizer hooks taken out; the second
    step of each timed, after one of its kind), the median of the pairs' differences over the
    median step, wall and CPU: the typical step's cost, with both halves of a pair on the same
    machine (whole runs differ by ±10 % here: process to process, not probe to probe), and the
    mean of the differences (what comes once in many steps included; a pair with a full garbage
    collection left out);
    `--ab-piece call|backward|optimizer` switches only that piece (the call around the root
    model with its step starts; the backward wrapper; the optimizer hooks, which end the step);
  - the isolated edge: `tidemark.begin` 1.5 ms apart (the gap spent computing), 2,000 of them,
    median and mean µs; and edges back to back (best of 5 rounds of 100,000), µs per edge;
  - where the time goes, per loop: the probe's functions timed in the job (thread CPU time, the
    timer's own cost taken off): the phase edges (with the C heap reads in them), the step
    starts (categories, censuses), the step ends; the probe's own accounts of the heap reads,
    categories and censuses; and what torch's hook dispatch on the root model adds.

`--instructions` instead counts, with valgrind's callgrind, the instructions the probe adds to
a typical step (100 steps from step 140, the probe on — only what every step does — and off, in
two runs side by side): a number that moves little with the machine's load, where a step's time
moves by more than the probe costs.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

JOB = r'''
import os, statistics, sys, time
import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(0)
LOOP = os.environ["BENCH_LOOP"]
SECONDS = float(os.environ["BENCH_SECONDS"])
WHERE = os.environ.get("BENCH_WHERE") == "1"
AB = os.environ.get("BENCH_AB") == "1"
OFF = os.environ.get("BENCH_OFF") == "1" and "tidemark" in sys.modules  # the probe's hooks taken out from step 130 on (what stays: its thread, its modules)
EVERY = int(os.environ.get("BENCH_EVERY", "0")) if "tidemark" in sys.modules else 0  # hooks on 1 step in N from 130
COUNT = os.environ.get("BENCH_COUNT", "")  # under callgrind: the probe "on" (a typical step) or "off"

if LOOP == "small":
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(40)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
else:
    class Many(nn.Module):
        def __init__(self):
            super().__init__()
            self.offsets = nn.ParameterList([nn.Parameter(torch.randn(64) * 0.01) for _ in range(980)])
            self.body = nn.Sequential(*[nn.Linear(64, 64) for _ in range(10)])

        def forward(self, x):
            return self.body(x + torch.stack(list(self.offsets)).sum(0))

    model = Many()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(32, 64)
if os.environ.get("BENCH_FLUSH_NS") and "tidemark" in sys.modules:  # under the collector:
    sys.modules["tidemark"]._FLUSH_NS = int(os.environ["BENCH_FLUSH_NS"])  # the batch interval
if os.environ.get("BENCH_BATCH_LINES") and "tidemark" in sys.modules:
    sys.modules["tidemark"]._BATCH_LINES = int(os.environ["BENCH_BATCH_LINES"])  # a full batch

spent = {}
if WHERE:
    import tidemark

    clock = time.thread_time_ns

    def timed(function, key):
        spent[key] = [0, 0]

        def wrapper(*args):
            start = clock()
            try:
                return function(*args)
            finally:
                cell = spent[key]
                cell[0] += clock() - start
                cell[1] += 1
        return wrapper

    calibrate = timed(lambda: None, "timer")
    for _ in range(20000):
        calibrate()
    timer_ns = spent["timer"][0] / spent["timer"][1]
    plain_edge = getattr(tidemark, "_send_edge", tidemark._edge)  # (an older probe's inner edge)
    tidemark._edge = timed(tidemark._edge, "edges")
    tidemark._at_step_start = timed(tidemark._at_step_start, "step starts")
    tidemark._at_step_end = timed(tidemark._at_step_end, "step ends")


def step():
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()


if os.environ.get("BENCH_TYPICAL") == "1" and "tidemark" in sys.modules:
    # Only what every step does: no censuses, categories, host reads or saved tensors.
    import tidemark
    tidemark._steps._census_on = False
    tidemark._steps._CATEGORY_SHARE = tidemark._host.heap.share = tidemark._host.rss.share = 1e-12
    tidemark._steps._CATEGORY_GRACE_NS = tidemark._host.READ_GRACE_NS = 0
    sys.modules["tidemark._auto"]._SAVES_EVERY = 10 ** 9
for _ in range(130 if AB or COUNT or OFF or EVERY else int(os.environ.get("BENCH_WARMUP", "5"))):
    step()
for cell in spent.values():
    cell[0] = cell[1] = 0

if AB or COUNT or OFF or EVERY:
    # The probe switched off and on in the same process, step by step in pairs (which goes first
    # drawn at random), so that both halves of a pair see the same machine: off = the root
    # model's hooks (or its call, where the probe observes it by its call), the backward wrapper
    # and the optimizer hooks taken out (nothing of the probe runs); on = put back. From step 130: the first 100 steps, read whole, and the censuses at
    # steps 16 and 24 (each paid once) are behind.
    import random
    import tidemark
    from torch.optim import optimizer as optim_module

    wrapped_backward = torch.autograd.backward
    cells = [c.cell_contents for c in (wrapped_backward.__closure__ or ())]
    plain_backward = next(c for c in cells if callable(c) and getattr(c, "__name__", "") == "backward")
    saved = {}
    piece = os.environ.get("BENCH_AB_PIECE", "")  # only this one switched: call, backward, optimizer
    hook_dicts = []
    if piece in ("", "call"):
        hook_dicts += [(model, name) for name in ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called")]
    if piece in ("", "optimizer"):
        hook_dicts += [(optim_module, "_global_optimizer_pre_hooks"), (optim_module, "_global_optimizer_post_hooks")]

    observer = model.__dict__.get("_compiled_call_impl")  # the probe's call around the root's

    def probe(on):
        if observer is not None and piece in ("", "call"):
            if on:
                model.__dict__["_compiled_call_impl"] = observer
            else:
                model.__dict__.pop("_compiled_call_impl", None)
        for owner, name in hook_dicts:
            hooks = getattr(owner, name)
            if on:
                hooks.update(saved.pop((id(owner), name), {}))
            else:
                saved[(id(owner), name)] = dict(hooks)
                hooks.clear()
        if piece in ("", "backward"):
            torch.autograd.backward = wrapped_backward if on else plain_backward

    if OFF:
        probe(False)
    if EVERY:
        # What observing one step in N would cost: the hooks put back for one step in N.
        probe(False)
        every_step, counter = step, [0]

        def step():
            counter[0] += 1
            on = counter[0] % EVERY == 0
            if on:
                probe(True)
            every_step()
            if on:
                probe(False)
    if COUNT:
        # Instructions, under callgrind (the probe's cost on any machine, however busy): 100 steps
        # from step 140 counted, the probe off, or on with only what every step does (no
        # censuses, categories, host reads or saved tensors: the typical step, which the pairs'
        # median measures). Callgrind runs the job ~100 times slower: the probe's clocks are
        # stretched as much, so that its batches come as often a step as in a real run.
        import subprocess
        scale = int(os.environ.get("BENCH_SCALE", "100"))
        tidemark._FLUSH_NS *= scale
        tidemark._FLUSHER_PERIOD_S *= scale
        tidemark._host.READ_GAP_NS *= scale
        if COUNT == "on":
            steps_module = tidemark._steps
            steps_module._census_on = False
            steps_module._CATEGORY_SHARE = tidemark._host.heap.share = tidemark._host.rss.share = 1e-12
            steps_module._CATEGORY_GRACE_NS = tidemark._host.READ_GRACE_NS = 0
            sys.modules["tidemark._auto"]._SAVES_EVERY = 10 ** 9
        for _ in range(10):
            step()
        probe(COUNT != "off")
        for _ in range(3):
            step()

        def callgrind(switch):
            subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())], capture_output=True, check=True)
            time.sleep(0.5)

        callgrind("on")
        for _ in range(100):
            step()
        callgrind("off")
        sys.stdout.flush()
        getattr(os._exit, "__wrapped__", os._exit)(0)  # (the probe's own exit work not counted)

if AB:
    clocks = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
    costs = {kind: [] for kind in clocks}  # on − off, ns, a pair each
    steps_ns = {kind: [] for kind in clocks}  # the off steps
    longest = {kind: [] for kind in clocks}  # the longer of each pair's two steps
    deadline = time.perf_counter() + SECONDS
    while time.perf_counter() < deadline:
        taken = {}
        for on in random.sample((True, False), 2):
            probe(on)
            step()  # a step between: the one timed follows one of its own kind (caches as they are)
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            step()
            taken[on] = (time.perf_counter_ns() - wall, time.thread_time_ns() - cpu)
        probe(True)
        for i, kind in enumerate(clocks):
            costs[kind].append(taken[True][i] - taken[False][i])
            steps_ns[kind].append(taken[False][i])
            longest[kind].append(max(taken[True][i], taken[False][i]))
    for kind, values in costs.items():
        base = statistics.median(steps_ns[kind])
        # The mean takes in what comes once in many steps (a batch sent, host reads, categories,
        # censuses), which the median leaves out; pairs with a step over 3× the median (a full
        # garbage collection: ~50 ms, on either side at random) are left out of it.
        kept = [v for v, most in zip(values, longest[kind]) if most <= 3 * base]
        values.sort()
        n = len(values)
        print(f"ab {kind} {statistics.median(values) / base:.5f} {values[n // 4] / base:.5f} {values[3 * n // 4] / base:.5f} {n} {statistics.median(values) / 1000:.2f} {base / 1000:.1f} {statistics.fmean(kept) / base:.5f} {n - len(kept)}")
    sys.exit(0)


def parent_cpu_s():
    """The parent's CPU time (the collector, when the job runs under it), from /proc."""
    try:
        with open(f"/proc/{os.getppid()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


START_AT = float(os.environ.get("BENCH_START_AT", "0"))  # side by side: both time one window
while time.time() < START_AT:
    step()
steps = 0
start, cpu, parent = time.perf_counter(), time.process_time(), parent_cpu_s()
blocks = [0] * int(SECONDS)  # steps ended in each second of the window
while True:
    step()
    steps += 1
    elapsed = time.perf_counter() - start
    if elapsed >= SECONDS:
        break
    blocks[int(elapsed)] += 1
cpu, parent = time.process_time() - cpu, parent_cpu_s() - parent
print(f"steps/s {steps / elapsed:.3f} {steps} {cpu / steps * 1e6:.1f} {parent / steps * 1e6:.1f}")
print("blocks " + " ".join(map(str, blocks)))
if WHERE:
    step_us = elapsed / steps * 1e6
    print(f"step {step_us:.1f}")
    for key in ("edges", "step starts", "step ends"):
        total, calls = spent[key]
        per_step = (total - calls * timer_ns) / steps / 1000
        print(f"where {key}|{calls / steps:.2f}|{per_step:.2f}")
    t = tidemark
    for what, share in (("heap", getattr(t, "_heap", None)), ("rss", getattr(t, "_rss", None))):
        if share is None:  # an older probe: the heap's accounts only, resident memory at every edge
            if what == "heap":
                reads, skipped, spent = t._heap_reads_done[0], t._heap_skipped, t._heap_spent_ns
            else:
                continue
        else:
            skipped = t._host.skipped(share) if hasattr(t._host, "skipped") else share.skipped
            reads, spent = share.done, share.spent_ns
        print(f"account {what}|{reads}|{reads + skipped}|{spent / 1000 / steps:.2f}|{spent / 1000 / max(reads, 1):.1f}")
    st = getattr(t, "_steps", t)  # (an older probe kept the step starts' accounts in tidemark)
    if hasattr(st, "_category_spent_ns"):
        print(f"account categories|{st._category_spent_ns / 1000 / steps:.2f}|{st._categories_skipped}")
        print(f"account censuses|{st._census_spent_ns / 1000 / steps:.2f}|{st._step_censuses}")
    # One edge alone, without the heap (best of many): the fixed part of every edge.
    import timeit
    holder = getattr(t, "_readers", t)  # (an older probe held mallinfo2 in tidemark itself)
    name = "mallinfo2" if holder is not t else "_mallinfo2"
    heap = getattr(holder, name)
    setattr(holder, name, None)
    edge = min(timeit.repeat(lambda: plain_edge("b", "bench"), number=2000, repeat=5)) / 2000 * 1e6
    setattr(holder, name, heap)
    print(f"edge-alone {edge:.2f}")
    # What observing a root model's call adds to it, the probe's own work left out: a module
    # with the probe's kind of hooks (a pre-hook and an always-called hook: torch's dispatch of
    # them), or, where the probe observes the root by its call, with a call of that shape around
    # it, against one without.
    plain, hooked = nn.Linear(4, 4), nn.Linear(4, 4)
    if "_compiled_call_impl" in model.__dict__:
        import weakref
        ref = weakref.ref(hooked)
        def around(*args, **kwargs):
            module = ref()
            (lambda m, a: None)(module, args)
            try:
                return module._call_impl(*args, **kwargs)
            finally:
                (lambda m, a, o: None)(module, args, None)
        hooked.__dict__["_compiled_call_impl"] = around
        print("observed-by call")
    else:
        hooked.register_forward_pre_hook(lambda m, a: None, prepend=True)
        hooked.register_forward_hook(lambda m, a, o: None, always_call=True)
        print("observed-by hooks")
    small = torch.randn(1, 4)
    with torch.no_grad():
        a = min(timeit.repeat(lambda: plain(small), number=5000, repeat=5)) / 5000 * 1e6
        b = min(timeit.repeat(lambda: hooked(small), number=5000, repeat=5)) / 5000 * 1e6
    print(f"hook-dispatch {b - a:.2f}")
'''

EDGES = r'''
import time, tidemark
assert tidemark.enabled()
best = None
for _ in range(5):
    n = 100_000
    start = time.perf_counter_ns()
    for i in range(n):
        tidemark.begin("flood")
    per_edge = (time.perf_counter_ns() - start) / n
    best = per_edge if best is None else min(best, per_edge)
    time.sleep(0.3)
isolated = []
for i in range(2000):
    until = time.perf_counter_ns() + 1_500_000
    while time.perf_counter_ns() < until:
        pass
    start = time.perf_counter_ns()
    tidemark.begin("eval")
    isolated.append(time.perf_counter_ns() - start)
isolated.sort()
print(f"edges {best / 1000:.2f} {isolated[len(isolated) // 2] / 1000:.2f} {sum(isolated) / len(isolated) / 1000:.2f} {isolated[int(len(isolated) * 0.99)] / 1000:.2f}")
skipped = getattr(getattr(tidemark, "_host", None), "skipped", lambda s: s.skipped)
reads = [(s.done, s.done + skipped(s)) for s in (getattr(tidemark, "_heap", None), getattr(tidemark, "_rss", None)) if s is not None]
print("reads " + " ".join(f"{done}/{edges}" for done, edges in reads))
'''


def job_command(args, folder, loop, under, cpu=None):
    command = [args.python, os.path.join(folder, "job.py")]
    if under:
        command = [args.collector, "--out", os.path.join(folder, f"{loop}.msgpack"),
                   *args.collector_args.split(), "--"] + command
    nice = os.environ.get("BENCH_COLLECTOR_NICE")
    if under and nice:
        # The collector at this niceness, its job at the job's own.
        split = command.index("--") + 1
        command = ["nice", "-n", nice] + command[:split] + ["nice", "-n", str(-int(nice))] + command[split:]
    if cpu is not None:
        if under and os.environ.get("BENCH_COLLECTOR_APART") == "1":
            # The collector on the other CPU, its job on this one.
            command = ["taskset", "-c", str(1 - cpu)] + command[:command.index("--") + 1] + [
                "taskset", "-c", str(cpu)] + command[command.index("--") + 1:]
        else:
            command = ["taskset", "-c", str(cpu)] + command
    return command


def run_job(args, folder, loop, under, where=False, ab=False):
    env = dict(os.environ, BENCH_LOOP=loop, BENCH_SECONDS=str(args.seconds), OMP_NUM_THREADS="1")
    if where:
        env["BENCH_WHERE"] = "1"
    if ab:
        env["BENCH_AB"] = "1"
        if args.ab_piece:
            env["BENCH_AB_PIECE"] = args.ab_piece
    done = subprocess.run(job_command(args, folder, loop, under), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the {loop} job failed ({'under the collector' if under else 'alone'}):\n{done.stderr}")
    return done.stdout


def steps_per_s(output):
    """(steps/s, the job's CPU µs a step, its parent's CPU µs a step)."""
    for line in output.splitlines():
        if line.startswith("steps/s "):
            fields = line.split()
            return float(fields[1]), float(fields[3]), float(fields[4])
    sys.exit(f"no steps/s in the job's output:\n{output}")


def throughput(args, folder, loop):
    alone, under = [], []
    for i in range(args.runs):
        # Alternated, and which goes first alternates too: a machine that slows down or speeds
        # up during the bench shifts both alike.
        order = [False, True] if i % 2 == 0 else [True, False]
        for with_collector in order:
            value = steps_per_s(run_job(args, folder, loop, with_collector))
            (under if with_collector else alone).append(value)
        print(f"  {loop} run {i + 1}: alone {alone[-1][0]:.1f} steps/s ({alone[-1][1]:.0f} µs CPU a step), "
              f"under the collector {under[-1][0]:.1f} steps/s ({under[-1][1]:.0f} µs CPU a step in the job, "
              f"{under[-1][2]:.0f} in the collector)", flush=True)
    a = statistics.median(v[0] for v in alone)
    u = statistics.median(v[0] for v in under)
    a_cpu = statistics.median(v[1] for v in alone)
    u_cpu = statistics.median(v[1] for v in under)
    collector_cpu = statistics.median(v[2] for v in under)
    print(f"{loop}: alone {a:.1f} steps/s, under the collector {u:.1f} steps/s (medians of {args.runs}); "
          f"ratio {u / a:.4f} ({(u / a - 1) * 100:+.2f} %); CPU a step: alone {a_cpu:.0f} µs, under the "
          f"collector {u_cpu:.0f} µs in the job ({(u_cpu / a_cpu - 1) * 100:+.2f} %) + {collector_cpu:.0f} µs "
          "in the collector", flush=True)


def side_by_side(args, folder, loop):
    """Both at once, each on a CPU of its own (the collector with its job), swapped every round:
    the machine's load at that moment (neighbours in the shared caches, a slower quarter hour)
    falls on both alike, which alternated runs cannot give. Both time the same wall-clock window,
    from a moment set after their imports and first steps."""
    ratios, per_second = [], []
    for i in range(args.runs):
        start_at = time.time() + 6.0
        env = dict(os.environ, BENCH_LOOP=loop, BENCH_SECONDS=str(args.seconds), OMP_NUM_THREADS="1",
                   BENCH_START_AT=str(start_at))
        running = {under: subprocess.Popen(job_command(args, folder, loop, under, cpu=(i + under) % 2), env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for under in (False, True)}
        values = {}
        for under, process in running.items():
            out, err = process.communicate()
            if process.returncode != 0:
                sys.exit(f"the {loop} job failed ({'under the collector' if under else 'alone'}):\n{err}")
            values[under] = steps_per_s(out), [int(n) for line in out.splitlines() if line.startswith("blocks ")
                                                for n in line.split()[1:]]
        per_second.append([u / a if a else 1.0 for a, u in zip(values[False][1], values[True][1])])
        values = {under: value[0] for under, value in values.items()}
        ratios.append(values[True][0] / values[False][0])
        print(f"  {loop} round {i + 1} (alone on CPU {i % 2}): alone {values[False][0]:.1f} steps/s, under the "
              f"collector {values[True][0]:.1f} steps/s: {(ratios[-1] - 1) * 100:+.2f} %", flush=True)
    ratios.sort()
    n = len(ratios)
    print(f"{loop}: side by side, {n} rounds: under the collector / alone, median {(statistics.median(ratios) - 1) * 100:+.2f} % "
          f"(quartiles {(ratios[n // 4] - 1) * 100:+.2f} … {(ratios[3 * n // 4] - 1) * 100:+.2f} %)", flush=True)
    columns = list(zip(*per_second))
    print(f"{loop}: each second of the window, the median over the rounds: "
          + " ".join(f"{(statistics.median(c) - 1) * 100:+.1f}" for c in columns) + " %", flush=True)


def ab(args, folder, loop):
    for line in run_job(args, folder, loop, True, ab=True).splitlines():
        _, kind, median, low, high, pairs, cost_us, step_us, mean, left_out = line.split()
        median, low, high, mean = float(median), float(low), float(high), float(mean)
        what = "wall time" if kind == "wall" else "the job's CPU time"
        print(f"{loop}: in one process under the collector from step 130, the probe off and on, pairs of steps "
              f"({pairs} pairs over {args.seconds:.0f} s), {what}: the probe adds {cost_us} µs to a {step_us} µs step = "
              f"{median * 100:+.2f} % (median of the pairs; quartiles {low * 100:+.1f} … {high * 100:+.1f} %); "
              f"mean {mean * 100:+.2f} % (with what comes once in many steps; {left_out} pairs with a step over "
              "3× the median left out)", flush=True)


def edges(args, folder):
    script = os.path.join(folder, "edges.py")
    with open(script, "w") as f:
        f.write(EDGES)
    done = subprocess.run(
        [args.collector, "--out", os.path.join(folder, "edges.msgpack"), "--no-auto-phases", "--",
         args.python, script], capture_output=True, text=True)
    lines = done.stdout.splitlines()
    fields = lines[0].split() if lines else []
    if done.returncode != 0 or len(fields) != 5:
        sys.exit(f"the edge bench failed:\n{done.stdout}\n{done.stderr}")
    _, batched, median, mean, p99 = fields
    print(f"edges: back to back {batched} µs/edge (best of 5 rounds of 100,000); isolated (1.5 ms apart, "
          f"2,000): median {median} µs, mean {mean} µs, p99 {p99} µs", flush=True)
    if len(lines) > 1 and lines[1].startswith("reads ") and len(lines[1].split()) == 3:
        heap, rss = lines[1].split()[1:]
        print(f"  edges that read the C heap: {heap}, resident memory: {rss} (each within its share)", flush=True)


def where(args, folder, loop):
    output = run_job(args, folder, loop, True, where=True)
    lines = output.splitlines()
    step_us = next(float(l.split()[1]) for l in lines if l.startswith("step "))
    print(f"where the time goes, {loop} ({step_us:.0f} µs a step under the collector, probe functions timed):")
    total = 0.0
    observed_by = "hooks"
    for line in lines:
        if line.startswith("where "):
            key, calls, per_step = line[6:].split("|")
            total += float(per_step)
            print(f"  {key:<12} {float(calls):5.2f} a step  {float(per_step):7.2f} µs/step  {float(per_step) / step_us * 100:5.2f} %")
        elif line.startswith(("account heap|", "account rss|")):
            what, reads, edges, per_step, mean = line.split("|")
            what = "the C heap" if what.endswith("heap") else "resident memory"
            print(f"    of which {what}: read at {reads} of {edges} edges, {mean} µs a read, "
                  f"{per_step} µs/step ({float(per_step) / step_us * 100:.2f} %)")
        elif line.startswith("account categories|"):
            _, per_step, skipped = line.split("|")
            print(f"    of which the categories and step-end gradients: {per_step} µs/step "
                  f"({float(per_step) / step_us * 100:.2f} %), {skipped} step starts without them")
        elif line.startswith("account censuses|"):
            _, per_step, count = line.split("|")
            print(f"    of which the censuses: {count} at step starts, {per_step} µs/step "
                  f"({float(per_step) / step_us * 100:.2f} %)")
        elif line.startswith("edge-alone "):
            print(f"  one edge alone, without the heap (best of 10,000): {float(line.split()[1]):.2f} µs")
        elif line.startswith("observed-by "):
            observed_by = line.split()[1]
        elif line.startswith("hook-dispatch "):
            hooks = float(line.split()[1])
            what = ("torch's dispatch of the root model's two hooks" if observed_by == "hooks"
                    else "the call around the root model's")
            print(f"  {what}: {hooks:.2f} µs/step ({hooks / step_us * 100:.2f} %)")
            total += hooks
    print(f"  timed in all: {total:.1f} µs/step = {total / step_us * 100:.2f} % of a step "
          "(the hooks' own bodies, the backward wrapper and the optimizer hooks not counted: ~3 µs)", flush=True)


def instructions(args, folder, loop):
    """The instructions the probe adds to a typical step, counted by callgrind (valgrind): the
    probe on with only what every step does, and off, in two runs of the same job side by side.
    (Two processes' heaps differ, and what torch's own allocations cost with them: ~10,000
    instructions a step between runs of one build. What the probe does within its shares of the
    job's time — censuses, categories, host reads, saved tensors — is left out: under callgrind
    torch's vector kernels slow down more than Python does, so a share of the time holds several
    times the instructions it would in a real run; `where` gives their time.)"""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")

    def start(mode):
        env = dict(os.environ, BENCH_LOOP=loop, BENCH_SECONDS="0", OMP_NUM_THREADS="1", BENCH_COUNT=mode,
                   PYTHONHASHSEED="0")
        command = [args.collector, "--out", os.path.join(folder, f"{loop}-{mode}.msgpack"), "--",
                   "valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
                   args.python, os.path.join(folder, "job.py")]
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def collected(process, mode):
        out, err = process.communicate()
        for line in err.splitlines():
            if "Collected :" in line:
                return int(line.split("Collected :")[1].split()[0]) / 100
        sys.exit(f"callgrind counted nothing in the {loop} job ({mode}):\n{out}\n{err[-3000:]}")

    running = [(mode, start(mode)) for mode in ("on", "off")]
    counts = {mode: collected(process, mode) for mode, process in running}
    step, probe = counts["off"], counts["on"] - counts["off"]
    print(f"{loop}: instructions a step (callgrind, 100 steps from step 140): {step:,.0f} without the probe; "
          f"the probe adds {probe:,.0f} to a typical step ({probe / step * 100:+.2f} %)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("collector")
    parser.add_argument("--python", default=os.environ.get("TIDEMARK_PYTHON", "python3"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--loops", default="small,many")
    parser.add_argument("--skip", default="", help="comma-separated: where,ab,throughput,edges")
    parser.add_argument("--collector-args", default="",
                        help="more options for the collector in the runs under it (e.g. --no-probe)")
    parser.add_argument("--instructions", action="store_true",
                        help="only count the instructions the probe adds to a typical step, under callgrind (~6 minutes)")
    parser.add_argument("--ab-piece", choices=("call", "backward", "optimizer"),
                        help="the pairs switch only this piece of the probe (the rest stays on)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="also run alone and under the collector at once, a CPU each, --runs rounds")
    args = parser.parse_args()
    args.collector = os.path.abspath(args.collector)
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "job.py"), "w") as f:
            f.write(JOB)
        for loop in args.loops.split(","):
            if args.instructions:
                instructions(args, folder, loop)
                continue
            if "where" not in skip:
                where(args, folder, loop)
            if "ab" not in skip:
                ab(args, folder, loop)
            if "throughput" not in skip:
                throughput(args, folder, loop)
            if args.side_by_side:
                side_by_side(args, folder, loop)
        if "edges" not in skip and not args.instructions:
            edges(args, folder)


if __name__ == "__main__":
    main()
