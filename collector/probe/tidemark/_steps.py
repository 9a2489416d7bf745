"""What the probe does at step starts and ends, beside the edges: the categories (parameters,
gradients, optimizer state) within their share of the job's time, the gradients after an optimizer
step, the memory the backward freed of what the forwards saved, the censuses of who holds the live
tensors when one is due (``_census`` takes them), and, once CUDA is up, the allocator's history
and the snapshots at an out-of-memory error and at exit. Nothing here may raise into the job.
"""
import atexit
import math
import sys
import time

import tidemark as _tm

from . import _host

_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns

_history = 0                 # collector --history: entries of allocator history to keep
_snapshots = ""              # where the snapshots go: "<base>.rank0.oom.pickle"
_history_started = False
_dumped = set()              # the reasons already dumped by this process
_census_on = True            # collector --no-census turns the censuses off
_CENSUS_STEPS = (16, 24)     # censuses at these step starts always, …
_CENSUS_GROWTH = 1.25        # … then at a step start ≥ 1.25 × the last census' step …
_CENSUS_SHARE = 0.001        # … while all censuses so far took ≤ 0.1 % of the time since step 0
_next_census = _CENSUS_STEPS[0]
_census_due_ns = 0           # when the step censuses' share allows one again, once it was spent
_census_spent_ns = 0         # what the step censuses cost so far
_census_done = set()         # the reasons ("end", "oom") already taken by this process
_step_censuses = 0           # censuses taken at step starts
_first_step_ns = None        # when the first step started (the shares' clock for steps)
_grads_at_end = None         # {device: gradient bytes} after an optimizer step
_step_ends = 0               # optimizer steps seen
_categories_waiting = []     # categories lines waiting for the next edge's heap reading
_CATEGORY_SHARE = 0.0005     # the categories (and step-end gradients) may take 0.05 % of the time …
_CATEGORY_GRACE_NS = 5_000_000  # … after a first 5 ms that are always granted
_CATEGORY_GRACE_CAP_NS = 100_000_000  # (the first steps' at most 100 ms)
_category_spent_ns = 0
_categories_skipped = 0      # step starts without categories, over the share
_categories_due_ns = 0       # when the categories may be read again, once their share was spent
_census_limit_s = 0.5        # a census at a step start stops there, saying so (at the end: 4×)


def _at_step_start(torch):
    """At the start of a step (the first root forward after the step changed): the categories,
    within their share of the job's time, and a census when one is due (of the models and
    optimizers ``_auto`` found, listed only then). Never raises into the job."""
    global _first_step_ns, _category_spent_ns, _categories_skipped, _categories_due_ns
    try:
        step = _tm._step or 0
        now = _monotonic_ns()
        if now < _categories_due_ns and (step < _next_census or now < _census_due_ns):
            _categories_skipped += 1  # (as below would decide, without its work)
            return
        if _first_step_ns is None:
            _first_step_ns = now
        elapsed = now - _first_step_ns
        if _host.granted(step, _category_spent_ns, _CATEGORY_GRACE_CAP_NS,
                         _CATEGORY_SHARE * elapsed + _CATEGORY_GRACE_NS):
            start = _thread_time_ns()
            try:
                from . import _auto

                _categories_waiting[:] = _category_lines(torch, _auto.models(), _auto.optimizers(), step, now)
                _host.quiet_step[0] = _host.NOT_QUIET  # the next edge sends them, with its heap
            finally:
                _category_spent_ns += _thread_time_ns() - start
        else:
            _categories_skipped += 1
            # Past the first steps' grace (it does not come back): not before the share allows,
            # what they took standing still until then.
            _categories_due_ns = _first_step_ns + (_category_spent_ns - _CATEGORY_GRACE_NS) / _CATEGORY_SHARE
        if _census_due(step, elapsed):
            from . import _auto

            _send_census(torch, _auto.models(), _auto.optimizers(), "step")
    except Exception:
        pass


def _category_lines(torch, models, optimizers, step, now):
    from . import _census

    by_device = _census.categories(models, optimizers, step)
    cuda = _cuda_is_up(torch)
    lines = []
    for device in sorted(by_device):
        params, grads, states = by_device[device]
        total = "-"
        if device < 0:
            total = "{heap}"  # the C heap as the forward's begin edge reads it, next
        elif cuda:
            total = torch.cuda.memory_allocated(device)
        where = "-" if device < 0 else device
        state = ",".join(str(s) for s in states) or "-"
        before = "-" if _grads_at_end is None else _grads_at_end.get(device, 0)
        lines.append(f"{_tm._PROTOCOL} C {now} {_tm._pid} {_tm._rank} {step} {where} {params} {grads} {before} {total} {state}")
    return lines


def _census_due(step, elapsed_ns):
    """Censuses at step starts: the first two at steps 16 and 24 whatever they cost, so that a
    run of 32 steps has two; then at a step at least 1.25 times the last one's, while all the
    step censuses so far took at most ``_CENSUS_SHARE`` of the time since the first step. The
    gap thus grows with what a census costs and the count with the log of the steps, and the last
    census comes close to the end, while the job's frames still hold its locals (the one at exit
    comes after ``main()`` returned)."""
    global _next_census, _step_censuses, _census_due_ns
    if not _census_on or _tm._sock is None:
        _census_due_ns = math.inf
        return False
    if step < _next_census:
        return False
    taken = _step_censuses
    if taken >= len(_CENSUS_STEPS) and _census_spent_ns > _CENSUS_SHARE * elapsed_ns:
        _census_due_ns = _first_step_ns + _census_spent_ns / _CENSUS_SHARE  # not before the share allows
        return False
    _step_censuses = taken + 1
    if taken + 1 < len(_CENSUS_STEPS):
        _next_census = max(_CENSUS_STEPS[taken + 1], step + 1)
    else:
        _next_census = max(math.ceil(step * _CENSUS_GROWTH), step + 1)
    return True


def _saved_freed(device, freed):
    """A backward that just ended freed `freed` bytes on `device` (-1: the host) of what the
    forwards before it saved for it (sent before the backward's end edge, in the same batch)."""
    step = "-" if _tm._step is None else _tm._step
    where = "-" if device < 0 else device
    now = _monotonic_ns()
    _tm._add(f"{_tm._PROTOCOL} B {now} {_tm._pid} {_tm._rank} {step} {where} {freed}", now)


def _send_categories(heap):
    """Adds the categories waiting for the edge that follows them to the batch, with the C heap
    that edge read (one heap read per step, not two)."""
    heap = "-" if heap is None else str(heap)
    now = _monotonic_ns()
    for line in _categories_waiting:
        _tm._add(line.replace("{heap}", heap), now)
    _categories_waiting.clear()


def _at_step_end():
    """After an optimizer step: the gradients then, so that the next step start can tell what
    was freed in between (``zero_grad``) from what the phases kept. Read at every step end for
    the first 8 steps, then at every 64th (they are the same from step to step), within the
    categories' share."""
    global _grads_at_end, _step_ends, _category_spent_ns
    _step_ends += 1
    if _step_ends > 8 and _step_ends % 64:
        return
    if _first_step_ns is not None and not _host.granted(
        _tm._step, _category_spent_ns, _CATEGORY_GRACE_CAP_NS,
        _CATEGORY_SHARE * (_monotonic_ns() - _first_step_ns) + _CATEGORY_GRACE_NS,
    ):
        return
    start = _thread_time_ns()
    try:
        from . import _census

        _grads_at_end = _census.gradients()
    except Exception:
        _grads_at_end = None
    _category_spent_ns += _thread_time_ns() - start


def _send_census(torch, models, optimizers, reason):
    """Takes a census of the live tensors and sends it. Never raises into the job."""
    global _census_spent_ns
    if not _census_on or _tm._sock is None:
        return
    if reason != "step":
        if reason in _census_done:
            return
        _census_done.add(reason)
    try:
        from . import _census

        # Counting the tensors no name reaches looks at every object: only when the job dies
        # (an out-of-memory error, or an exit by an uncaught exception), where it costs no step.
        died = reason == "oom" or (reason == "end" and getattr(sys, "last_traceback", None) is not None)
        limit_s = _census_limit_s * (1 if reason == "step" else 4)
        result = _census.census(torch, models, optimizers, full=died, limit_s=limit_s)
        step = "-" if _tm._step is None else _tm._step
        # Objects that are not tensors: counted by type at a step census after which memory grew
        # outside the tensors, and what grew since said at the last (where it costs no step),
        # with the containers that hold them.
        started = time.perf_counter_ns()
        if reason == "step":
            _census.count_objects(_tm._step, result)
            # The census at exit runs before the exit handlers that the job's libraries registered
            # since the probe's (pyplot closes every figure at exit): registered again, it is the
            # last in, the first out.
            atexit.unregister(_census_at_exit)
            atexit.register(_census_at_exit)
        else:
            grown = _census.object_growth(started + int(limit_s * 1e9))
            if grown is not None:
                result["grown"] = grown
        result["cost_ns"] += time.perf_counter_ns() - started
        if reason == "step":
            _census_spent_ns += result["cost_ns"]
        _tm._send_now(f"{_tm._PROTOCOL} H {_monotonic_ns()} {_tm._pid} {_tm._rank} {step} {reason} {_census.encode(result)}".encode())
    except Exception as error:
        _tm._say(f"tidemark: census not taken ({error!r})")


def _census_at_exit():
    """At exit, the last census (with the frames an uncaught exception left)."""
    try:
        from . import _auto

        torch = _tm._torch if _tm._torch is not None else sys.modules.get("torch")
        if torch is not None:
            _send_census(torch, _auto.models(), _auto.optimizers(), "end")
    except Exception:
        pass


def _cuda_is_up(torch):
    try:
        return torch.cuda.is_initialized()
    except Exception:
        return False


def _start_history(torch):
    """Once CUDA is up: watch for out-of-memory errors (a census, the edges of an optimizer step
    that is not observed and, with `collector --history`, a snapshot there), and with
    `--history` record the allocator's history with Python stacks and dump a snapshot at exit.
    Never raises into the job."""
    global _history_started
    _history_started = True
    if _history:
        try:
            torch.cuda.memory._record_memory_history(max_entries=_history, stacks="python")
        except Exception as error:
            _tm._say(f"tidemark: cannot record the allocator's history ({error!r}); no snapshots")
            return
    try:
        torch._C._cuda_attach_out_of_memory_observer(_on_out_of_memory)
    except Exception as error:
        if _history:
            _tm._say(f"tidemark: cannot watch for out-of-memory errors ({error!r}); a snapshot at exit only")
    if _history:
        import atexit

        atexit.register(_dump_snapshot, "end")


def _on_out_of_memory(device, alloc, device_alloc, device_free):
    """Called by PyTorch's allocator when it is about to raise an out-of-memory error."""
    try:
        from . import _auto

        _auto._unobserved_at_error()  # an optimizer step not observed: its edges
    except Exception:
        pass
    _dump_snapshot("oom")
    _census_at_oom()


def _census_at_oom():
    try:
        from . import _auto

        torch = _tm._torch if _tm._torch is not None else sys.modules.get("torch")
        _send_census(torch, _auto.models(), _auto.optimizers(), "oom")
    except Exception:
        pass


def _dump_snapshot(reason):
    """Dumps the allocator's snapshot next to the recording, once per reason, and tells the
    collector where."""
    if reason in _dumped or not _snapshots:
        return
    _dumped.add(reason)
    who = f"rank{_tm._rank}" if _tm._rank != "-" else f"pid{_tm._pid}"
    path = f"{_snapshots}.{who}.{reason}.pickle"
    try:
        torch = _tm._torch if _tm._torch is not None else sys.modules.get("torch")
        torch.cuda.memory._dump_snapshot(path)
    except Exception as error:
        _tm._say(f"tidemark: cannot write the memory snapshot {path} ({error!r})")
        return
    try:
        _tm._send_now(f"{_tm._PROTOCOL} S {_monotonic_ns()} {_tm._pid} {_tm._rank} {reason} {path}".encode())
    except Exception:
        pass
