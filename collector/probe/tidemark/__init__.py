"""tidemark's probe: tells the collector which phase of the training step is running, and what
PyTorch's caching allocator holds at every phase edge.

Manual API (a no-op when the job does not run under the collector)::

    import tidemark
    for i, batch in enumerate(loader):
        tidemark.step(i)
        with tidemark.phase("forward"):
            loss = model(batch)
        ...
        with tidemark.phase("eval"):
            evaluate(model)

Automatic mode (on by default under the collector, for PyTorch jobs): forward and eval are found
with module hooks on the root models, backward by wrapping ``torch.autograd.backward``, the
optimizer by optimizer step hooks. The step is the number of optimizer steps taken, unless the job
calls ``tidemark.step``.

Sending never blocks the job: lines wait in a batch that goes out as one non-blocking datagram
once its oldest line is ``_FLUSH_NS`` old (at the next edge, or from a thread that looks ten times
a second), so that an edge costs a few µs and the collector is woken a few dozen times a second;
when the collector is slow, batches wait in a small queue, and when that is full they are dropped
and counted.

What costs more than an edge is read within a share of the job's time, each measured as it goes:
the C heap at the edges of a job whose memory is on the host (``_HEAP_SHARE``) and resident memory
at the edges (``_RSS_SHARE``; both at every edge of the first steps), the categories at step
starts (``_CATEGORY_SHARE``) and the censuses (``_CENSUS_SHARE``, each one also bounded in time).
"""
import collections
import math
import os
import socket
import sys
import threading
import time

__all__ = ["phase", "step", "begin", "end", "enabled"]

_PROTOCOL = "tm2"
_QUEUE_LIMIT_BYTES = 1 << 20  # what may wait for a slow collector; beyond this, drop and count
_FLUSH_NS = 20_000_000       # a batch goes out once its oldest line is this old …
_FLUSHER_PERIOD_S = 0.1      # … at the next edge, or when the flusher thread looks
_BATCH_LINES = 256           # at most this many lines in one datagram …
_BATCH_BYTES = 32 << 10      # … and this many bytes (the collector reads 64 KiB at a time)

_sock = None
_path = None
_pid = os.getpid()
_rank = "-"
_step = None
_manual_step = False
_keep_peaks = False
_queue = collections.deque()
_queued_bytes = 0
_dropped = 0
_lock = threading.RLock()     # a batch is sent while holding it, so that batches go out in order
_torch = None
_pending = collections.deque()  # lines waiting to go out together (appends need no lock)
_pending_since = [0]         # when the batch's first line came (a list: no `global` on the hot path)
_pending_bytes = [0]
_flusher_started = False
_warned_step = False
_statm = None                # /proc/self/statm, open: this process' resident memory
_page_size = 4096
_mallinfo2 = None            # glibc's mallinfo2(): the C heap's bytes in use
_history = 0                 # collector --history: entries of allocator history to keep
_snapshots = ""              # where the snapshots go: "<base>.rank0.oom.pickle"
_history_started = False
_dumped = set()              # the reasons already dumped by this process
_census_on = True            # collector --no-census turns the censuses off
_CENSUS_STEPS = (16, 24)     # censuses at these step starts always, …
_CENSUS_GROWTH = 1.25        # … then at a step start ≥ 1.25 × the last census' step …
_CENSUS_SHARE = 0.001        # … while all censuses so far took ≤ 0.1 % of the time since step 0
_next_census = _CENSUS_STEPS[0]
_census_spent_ns = 0         # what the step censuses cost so far
_census_done = set()         # the reasons ("end", "oom") already taken by this process
_step_censuses = 0           # censuses taken at step starts
_first_step_ns = None        # when the first step started (the shares' clock for steps)
_grads_at_end = None         # {device: gradient bytes} after an optimizer step
_step_ends = 0               # optimizer steps seen
_categories_waiting = []     # categories lines waiting for the next edge's heap reading
_GRACE_STEPS = 100           # the first steps are read whole, so that a short job is judged
                             # exactly; then what costs more than an edge keeps within a share
_CATEGORY_SHARE = 0.001      # the categories (and step-end gradients) may take 0.1 % of the time …
_CATEGORY_GRACE_NS = 5_000_000  # … after a first 5 ms that are always granted
_CATEGORY_GRACE_CAP_NS = 100_000_000  # (the first steps' at most 100 ms)
_category_spent_ns = 0
_categories_skipped = 0      # step starts without categories, over the share
_HEAP_SHARE = 0.002          # the share of the job's time that reading the C heap may take …
_RSS_SHARE = 0.002           # … and reading resident memory (each after a first 5 ms always
_READ_GRACE_NS = 5_000_000   # granted; in the first steps, at most 200 ms)
_READ_GRACE_CAP_NS = 200_000_000
_host_since_ns = None        # the first edge (the shares' clock: not the job's imports)
_host_step = [None]          # the step the host readings were last decided for (a list: no `global`) …
_host_recheck = [0]          # … and without steps, when to decide again at a begin edge


def enabled():
    """Whether a collector is listening."""
    return _sock is not None


def step(i):
    """Sets the training step that the following phases belong to.

    Never raises into the job: a value that is not a whole number (``step("x")``) counts one
    step on from the last, with a word on stderr the first time."""
    global _step, _manual_step, _warned_step
    if _sock is None:
        return
    try:
        value = int(i)
        if value < 0:
            raise ValueError("negative")
    except (TypeError, ValueError, OverflowError):
        value = 0 if _step is None else _step + 1
        if not _warned_step:
            _warned_step = True
            try:
                print(f"tidemark: step({i!r}) is not a whole number ≥ 0: counting steps instead", file=sys.stderr)
            except Exception:
                pass
    _step = value
    _manual_step = True


def begin(name):
    """Marks the start of a phase (``forward``, ``backward``, ``optimizer``, ``eval`` or any name)."""
    if _sock is not None:
        _edge("b", name)


def end(name):
    """Marks the end of a phase."""
    if _sock is not None:
        _edge("e", name)


class phase:
    """``with tidemark.phase("eval"):`` — a phase around a block."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        if _sock is not None:
            _edge("b", self.name)
        return self

    def __exit__(self, *exc):
        if _sock is not None:
            _edge("e", self.name)
        return False


_NO_NUMBERS = "- - - - - - - -"
_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns  # what the probe's own work costs, preemption left out
_pread = os.pread
_modules = sys.modules


def _edge(edge, name):
    """Adds one phase edge to the batch: its time and what is read at it, raw (the line is made
    when the batch is sent, by ``_line``: one warm pass over a batch instead of a cold format at
    every edge). Resident memory and the C heap are read within their shares (``_Share``), the
    heap only where host memory is what is judged: not once CUDA is up and the allocator's numbers
    come. Nothing in it may reach the job: a failure counts as a dropped message. (The hot path of
    every edge: few calls, ``_add`` written out.)"""
    global _dropped
    try:
        torch = _torch if _torch is not None else _modules.get("torch")  # also without auto mode
        numbers = None
        if torch is not None and torch.cuda.is_initialized():
            numbers = _allocator_numbers(torch, edge)
        step = _step
        now = _monotonic_ns()
        if step != _host_step[0] or (step is None and edge == "b" and now >= _host_recheck[0]):
            _decide_host(step, now)
        statm = None
        if _statm is not None:
            rss = _rss
            if rss.granted:
                try:
                    statm = _pread(_statm, 64, 0)
                except OSError:
                    pass
                rss.spent_ns += _monotonic_ns() - now
                rss.done += 1
            else:
                rss.skipped += 1
        heap = None
        if numbers is None and _mallinfo2 is not None:
            if _heap.granted:
                heap = _read_heap()
            else:
                _heap.skipped += 1
        if _categories_waiting:
            _send_categories(heap)
        pending = _pending
        pending.append((now, step, edge, numbers, heap, statm, name))
        size = _pending_bytes[0] = _pending_bytes[0] + _EDGE_BYTES + len(name) + (numbers is not None and len(numbers))
        if len(pending) == 1:
            _pending_since[0] = now
            if not _flusher_started:
                _start_flusher()
        elif now - _pending_since[0] >= _FLUSH_NS or len(pending) >= _BATCH_LINES or size >= _BATCH_BYTES:
            _flush_pending()
    except Exception:
        _dropped += 1


_EDGE_BYTES = 128  # what an edge's line takes at most, its name and allocator numbers left out


def _line(entry):
    """A line of the batch: as it was added, or a phase edge's, made from what ``_edge`` read."""
    if type(entry) is str:
        return entry
    now, step, edge, numbers, heap, statm, name = entry
    rss = "-"
    if statm is not None:
        try:
            rss = int(statm.split()[1]) * _page_size
        except Exception:
            pass
    return (f"{_PROTOCOL} P {now} {_pid} {_rank} {'-' if step is None else step} {edge} "
            f"{_NO_NUMBERS if numbers is None else numbers} {'-' if heap is None else heap} {rss} {name}")


def _add(line, now):
    """Adds a line to the batch; sends the batch once its oldest line is ``_FLUSH_NS`` old or it
    is full. A batch that nothing follows is sent by the flusher thread. (`_edge` does the
    same, written out.)"""
    pending = _pending
    pending.append(line)
    size = _pending_bytes[0] = _pending_bytes[0] + len(line) + 1
    if len(pending) == 1:
        _pending_since[0] = now
        if not _flusher_started:
            _start_flusher()
    elif now - _pending_since[0] >= _FLUSH_NS or len(pending) >= _BATCH_LINES or size >= _BATCH_BYTES:
        _flush_pending()


def _try_send(sock, data):
    """One non-blocking send: True when sent or when the collector is gone (nothing to keep),
    False when the socket would block."""
    try:
        sock.send(data)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        pass
    return True


def _send(data):
    sock = _sock
    if sock is None:
        return
    if _queue or not _try_send(sock, data):
        _send_queued(data)


def _send_now(data):
    """Sends a message of its own after the batch waiting before it (records go out in order)."""
    _flush_pending()
    _send(data)


def _flush_pending():
    """Sends the batched lines as one datagram of lines."""
    with _lock:
        count = len(_pending)
        if not count:
            return
        lines = [_line(_pending.popleft()) for _ in range(count)]
        _pending_bytes[0] = 0
        _send("\n".join(lines).encode())


def _start_flusher():
    """A batch must not wait for the next edge for long: a daemon thread looks ten times a second
    (it wakes the job's thread that often, and no more: not once per edge)."""
    global _flusher_started
    _flusher_started = True
    try:
        threading.Thread(target=_flusher, name="tidemark-flusher", daemon=True).start()
    except Exception:
        pass  # no thread (at interpreter exit): the next edges, or the exit, send the batch


def _flusher():
    while True:
        time.sleep(_FLUSHER_PERIOD_S)
        if _pending and _monotonic_ns() - _pending_since[0] >= _FLUSH_NS:
            _flush_pending()


def _allocator_numbers(torch, edge):
    """Device and allocator numbers, read once CUDA is initialised (``_edge`` asks; this never
    initialises it), as the edge's line has them; ``None`` when they cannot be read."""
    try:
        if not _history_started:
            _start_history(torch)
        device = torch.cuda.current_device()
        s = torch.cuda.memory_stats_as_nested_dict(device)
        numbers = (
            f"{device} {s['allocated_bytes']['all']['current']} "
            f"{s['reserved_bytes']['all']['current']} {s['allocated_bytes']['all']['peak']} "
            f"{s['active_bytes']['all']['current']} {s['inactive_split_bytes']['all']['current']} "
            f"{s['num_alloc_retries']} {s['num_ooms']}"
        )
        if edge == "b" and not _keep_peaks:
            torch.cuda.reset_peak_memory_stats(device)
        return numbers
    except Exception:
        return None


class _Share:
    """A reading at the edges that costs more than an edge: taken at every edge of the first
    ``_GRACE_STEPS`` steps (a short job is judged with it throughout), then decided once per step
    (a phase has it at both of its edges or at neither) while what it took so far is within
    ``share`` of the time since the first edge."""

    __slots__ = ("share", "granted", "spent_ns", "done", "skipped")

    def __init__(self, share):
        self.share = share
        self.granted = False
        self.spent_ns = 0   # what the readings took so far
        self.done = 0       # edges read …
        self.skipped = 0    # … and edges not read, over the share

    def decide(self, step, elapsed_ns):
        self.granted = _granted(step, self.spent_ns, _READ_GRACE_CAP_NS,
                                self.share * elapsed_ns + _READ_GRACE_NS)

    def due_ns(self):
        """When (after the first edge) its share allows it again, as long as it is not read."""
        return 0 if self.granted else (self.spent_ns - _READ_GRACE_NS) / self.share


# The C heap (glibc's mallinfo2 walks every free chunk: cheap on a tidy heap, 25–300 µs in a torch
# process; timed in its thread's CPU time, so that a preemption does not count), read only where
# host memory is what is judged; resident memory (/proc/self/statm: a system call, 2–30 µs in a
# training loop), read at every kind of job (the ranks' host memory).
_heap = _Share(_HEAP_SHARE)
_rss = _Share(_RSS_SHARE)


def _decide_host(step, now):
    """Whether the edges of a new step read the C heap and resident memory. Without steps this is
    decided at a phase's begin edge (its end edge keeps it), and only from when one of them may be
    read again: an edge over both shares costs a comparison."""
    global _host_since_ns
    if _host_since_ns is None:
        _host_since_ns = now
    _host_step[0] = step
    _heap.decide(step, now - _host_since_ns)
    _rss.decide(step, now - _host_since_ns)
    _host_recheck[0] = _host_since_ns + min(_heap.due_ns(), _rss.due_ns())


def _read_heap():
    """The C heap's bytes in use (``uordblks + hblkhd``), or None."""
    heap = None
    start = _thread_time_ns()
    try:
        info = _mallinfo2()
        heap = info.uordblks + info.hblkhd
    except Exception:
        pass
    _heap.spent_ns += _thread_time_ns() - start
    _heap.done += 1
    return heap


def _granted(step, spent_ns, cap_ns, allowed_ns):
    """Whether work with a share may be done now: always in the first steps (up to a cap), then
    while what it took so far is within what its share allows."""
    if step is not None and step < _GRACE_STEPS and spent_ns < cap_ns:
        return True
    return spent_ns <= allowed_ns


def _reading_notes_at_exit():
    """Says how many edges went without the C heap or resident memory, and why, so that the
    attribution can say it."""
    if _sock is None:
        return
    for share, what, how in (
        (_heap, "the C heap", "glibc mallinfo2, which walks every free chunk"),
        (_rss, "resident memory", "/proc/self/statm"),
    ):
        if not share.skipped:
            continue
        try:
            mean = share.spent_ns / max(share.done, 1) / 1000
            text = (f"the probe read {what} at {share.done} of {share.done + share.skipped} phase edges in "
                    f"pid {_pid}: reading it ({how}) took {mean:.0f} µs on average, and it may take "
                    f"{share.share:.2%} of the job's time")
            _send_now(f"{_PROTOCOL} N {_monotonic_ns()} {_pid} {_rank} {text}".encode())
        except Exception:
            pass


def _open_host_readers():
    """Opens what the edges read of host memory: resident memory (``/proc/self/statm``) and the C
    heap's bytes in use (glibc ``mallinfo2``: what ``malloc`` handed out and not yet freed, which
    falls when memory is freed, unlike resident memory); what is missing (no /proc, not glibc)
    stays ``None``."""
    global _statm, _page_size, _mallinfo2
    try:
        if _statm is not None:
            os.close(_statm)
        _statm = None
        _statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        _page_size = os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        _statm = None
    if _mallinfo2 is None:
        try:
            import ctypes

            class _MallInfo2(ctypes.Structure):
                _fields_ = [(name, ctypes.c_size_t) for name in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd",
                    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

            function = ctypes.CDLL(None).mallinfo2  # glibc ≥ 2.33
            function.restype = _MallInfo2
            function.argtypes = []
            function()
            _mallinfo2 = function
        except Exception:
            _mallinfo2 = None


def _at_step_start(torch, models, optimizers):
    """At the start of a step (the first root forward after the step changed): the categories,
    within their share of the job's time, and a census when one is due. Never raises into the
    job."""
    global _first_step_ns, _category_spent_ns, _categories_skipped
    try:
        from . import _census

        step = _step or 0
        now = _monotonic_ns()
        if _first_step_ns is None:
            _first_step_ns = now
        elapsed = now - _first_step_ns
        if _granted(step, _category_spent_ns, _CATEGORY_GRACE_CAP_NS,
                    _CATEGORY_SHARE * elapsed + _CATEGORY_GRACE_NS):
            start = _thread_time_ns()
            try:
                _categories_waiting[:] = _category_lines(torch, models, optimizers, step, now)
            finally:
                _category_spent_ns += _thread_time_ns() - start
        else:
            _categories_skipped += 1
        if _census_due(step, elapsed):
            _send_census(torch, models, optimizers, "step")
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
        lines.append(f"{_PROTOCOL} C {now} {_pid} {_rank} {step} {where} {params} {grads} {before} {total} {state}")
    return lines


def _census_due(step, elapsed_ns):
    """Censuses at step starts: the first two at steps 16 and 24 whatever they cost, so that a
    run of 32 steps has two; then at a step at least 1.25 times the last one's, while all the
    step censuses so far took at most ``_CENSUS_SHARE`` of the time since the first step. The
    gap thus grows with what a census costs and the count with the log of the steps, and the last
    census comes close to the end, while the job's frames still hold its locals (the one at exit
    comes after ``main()`` returned)."""
    global _next_census, _step_censuses
    if not _census_on or _sock is None or step < _next_census:
        return False
    taken = _step_censuses
    if taken >= len(_CENSUS_STEPS) and _census_spent_ns > _CENSUS_SHARE * elapsed_ns:
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
    step = "-" if _step is None else _step
    where = "-" if device < 0 else device
    now = _monotonic_ns()
    _add(f"{_PROTOCOL} B {now} {_pid} {_rank} {step} {where} {freed}", now)


def _send_categories(heap):
    """Adds the categories waiting for the edge that follows them to the batch, with the C heap
    that edge read (one heap read per step, not two)."""
    heap = "-" if heap is None else str(heap)
    now = _monotonic_ns()
    for line in _categories_waiting:
        _add(line.replace("{heap}", heap), now)
    _categories_waiting.clear()


def _at_step_end():
    """After an optimizer step: the gradients then, so that the next step start can tell what
    was freed in between (``zero_grad``) from what the phases kept. Read at every step end for
    the first 8 steps, then at every 16th (they are the same from step to step), within the
    categories' share."""
    global _grads_at_end, _step_ends, _category_spent_ns
    _step_ends += 1
    if _step_ends > 8 and _step_ends % 16:
        return
    if _first_step_ns is not None and not _granted(
        _step, _category_spent_ns, _CATEGORY_GRACE_CAP_NS,
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


_CENSUS_LIMIT_S = {"step": 0.5, "end": 2.0, "oom": 2.0}  # a census stops there, saying so


def _send_census(torch, models, optimizers, reason):
    """Takes a census of the live tensors and sends it. Never raises into the job."""
    global _census_spent_ns
    if not _census_on or _sock is None:
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
        result = _census.census(torch, models, optimizers, full=died, limit_s=_CENSUS_LIMIT_S[reason])
        if reason == "step":
            _census_spent_ns += result["cost_ns"]
        step = "-" if _step is None else _step
        _send_now(f"{_PROTOCOL} H {_monotonic_ns()} {_pid} {_rank} {step} {reason} {_census.encode(result)}".encode())
    except Exception as error:
        _say(f"tidemark: census not taken ({error!r})")


def _census_at_exit():
    """At exit, the last census (with the frames an uncaught exception left)."""
    try:
        from . import _auto

        torch = _torch if _torch is not None else sys.modules.get("torch")
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
    """Once CUDA is up: watch for out-of-memory errors (a census and, with `collector --history`,
    a snapshot there), and with `--history` record the allocator's history with Python stacks and
    dump a snapshot at exit. Never raises into the job."""
    global _history_started
    _history_started = True
    if not _history and not _census_on:
        return
    if _history:
        try:
            torch.cuda.memory._record_memory_history(max_entries=_history, stacks="python")
        except Exception as error:
            _say(f"tidemark: cannot record the allocator's history ({error!r}); no snapshots")
            return
    try:
        torch._C._cuda_attach_out_of_memory_observer(_on_out_of_memory)
    except Exception as error:
        if _history:
            _say(f"tidemark: cannot watch for out-of-memory errors ({error!r}); a snapshot at exit only")
    if _history:
        import atexit

        atexit.register(_dump_snapshot, "end")


def _on_out_of_memory(device, alloc, device_alloc, device_free):
    """Called by PyTorch's allocator when it is about to raise an out-of-memory error."""
    _dump_snapshot("oom")
    _census_at_oom()


def _census_at_oom():
    try:
        from . import _auto

        torch = _torch if _torch is not None else sys.modules.get("torch")
        _send_census(torch, _auto.models(), _auto.optimizers(), "oom")
    except Exception:
        pass


def _dump_snapshot(reason):
    """Dumps the allocator's snapshot next to the recording, once per reason, and tells the
    collector where."""
    if reason in _dumped or not _snapshots:
        return
    _dumped.add(reason)
    who = f"rank{_rank}" if _rank != "-" else f"pid{_pid}"
    path = f"{_snapshots}.{who}.{reason}.pickle"
    try:
        torch = _torch if _torch is not None else sys.modules.get("torch")
        torch.cuda.memory._dump_snapshot(path)
    except Exception as error:
        _say(f"tidemark: cannot write the memory snapshot {path} ({error!r})")
        return
    try:
        _send_now(f"{_PROTOCOL} S {_monotonic_ns()} {_pid} {_rank} {reason} {path}".encode())
    except Exception:
        pass


def _say(line):
    try:
        print(line, file=sys.stderr)
    except Exception:
        pass


def _send_queued(data):
    """The collector is behind: queue the message (in order), or count it as dropped."""
    global _dropped, _queued_bytes
    with _lock:
        sock = _sock
        if sock is None:
            return
        _drain(sock)
        if not _queue and _try_send(sock, data):
            return
        if _queued_bytes + len(data) <= _QUEUE_LIMIT_BYTES:
            _queue.append(data)
            _queued_bytes += len(data)
        else:
            _dropped += data.count(b"\n") + 1


def _drain(sock):
    """Sends what waits in the queue, oldest first, until the socket would block."""
    global _dropped, _queued_bytes
    while _queue:
        try:
            sock.send(_queue[0])
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            _queue.clear()
            _queued_bytes = 0
            return
        _queued_bytes -= len(_queue.popleft())
    if _dropped and not _queue:
        try:
            sock.send(f"{_PROTOCOL} D {_pid} {_dropped}".encode())
            _dropped = 0
        except OSError:
            pass


def _flush_at_exit(timeout_s=0.5):
    """At exit, give queued messages a short while to get through; what cannot go is counted as
    dropped, and the count gets one last, briefly blocking, try."""
    global _dropped, _queued_bytes
    _flush_pending()
    deadline = time.monotonic() + timeout_s
    with _lock:
        sock = _sock
        if sock is None:
            return
        while _queue and time.monotonic() < deadline:
            _drain(sock)
            if _queue:
                time.sleep(0.001)
        _dropped += sum(data.count(b"\n") + 1 for data in _queue)
        _queue.clear()
        _queued_bytes = 0
        if _dropped:
            try:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                sock.send(f"{_PROTOCOL} D {_pid} {_dropped}".encode())
                _dropped = 0
            except OSError:
                pass


def _flush_before_os_exit():
    """``os._exit`` skips the exit handlers: a forked child (multiprocessing's workers, a job's
    own ``fork``) ends with it. The batch waiting then goes out first."""
    real_exit = os._exit

    def _exit(status):
        try:
            _flush_pending()
        except Exception:
            pass
        real_exit(status)

    _exit.__doc__ = real_exit.__doc__
    _exit.__wrapped__ = real_exit
    os._exit = _exit


def _connect(path):
    global _sock, _path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.connect(path)
    sock.setblocking(False)
    _sock, _path = sock, path


def _after_fork_in_child():
    """A forked child gets its own socket and pid; what the parent had queued stays its own."""
    global _pid, _dropped, _lock, _flusher_started
    _pid = os.getpid()
    _lock = threading.RLock()
    _queue.clear()
    _pending.clear()
    _pending_bytes[0] = 0
    _dropped = 0
    globals()["_queued_bytes"] = 0
    _flusher_started = False  # the parent's thread is not the child's
    _open_host_readers()  # /proc/self was the parent's when it was opened
    globals().update(_host_since_ns=None, _host_step=[None], _host_recheck=[0],
                     _heap=_Share(_HEAP_SHARE), _rss=_Share(_RSS_SHARE))
    if _path is not None:
        try:
            _connect(_path)
        except OSError:
            globals()["_sock"] = None


def _start_from_environment():
    """Called by the injected sitecustomize: connect, and install the automatic hooks."""
    global _rank, _keep_peaks, _history, _snapshots, _census_on
    path = os.environ.get("TIDEMARK_SOCKET")
    if not path:
        return
    try:
        _connect(path)
    except OSError as error:
        print(f"tidemark: cannot reach the collector at {path}: {error}", file=sys.stderr)
        return
    _open_host_readers()
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", ""))
    _rank = rank if rank.isdigit() else "-"
    _keep_peaks = os.environ.get("TIDEMARK_KEEP_PEAKS") == "1"
    history = os.environ.get("TIDEMARK_HISTORY", "0")
    _history = int(history) if history.isdigit() else 0
    _snapshots = os.environ.get("TIDEMARK_SNAPSHOTS", "")
    _census_on = os.environ.get("TIDEMARK_CENSUS", "1") == "1"
    import atexit

    atexit.register(_flush_at_exit)
    _flush_before_os_exit()
    atexit.register(_reading_notes_at_exit)
    atexit.register(_census_at_exit)  # runs first: exit handlers run last in, first out
    os.register_at_fork(after_in_child=_after_fork_in_child)
    if os.environ.get("TIDEMARK_AUTO", "1") == "1":
        from . import _auto

        _auto.install_when_torch_is_imported()
