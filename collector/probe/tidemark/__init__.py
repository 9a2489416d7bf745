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
once its oldest line is ``_FLUSH_NS`` old (sent by a thread that looks ten times a second; a full
batch goes at once), so that an edge costs a few µs and the collector is woken about five times a second
(each datagram wakes it, and on a small machine the job pays for that in the next edges; at the
job's exit, ``os._exit`` and a fork the batch is sent; a job killed by a signal loses it);
when the collector is slow, batches wait in a small queue, and when that is full they are dropped
and counted.

What costs more than an edge is read within a share of the job's time, each measured as it goes:
the C heap at the edges of a job whose memory is on the host and resident memory at the edges
(``_host``; both at every edge of the first steps), the categories at step starts and the
censuses (``_steps``; each census also bounded in time, ``_census``).

This module holds the API and the wire (the edges, their batch, the socket); ``_host`` the host
numbers, ``_steps`` what is done at step starts and ends, ``_census`` who holds the tensors, and
``_auto`` the automatic phases.
"""
import collections
import os
import socket
import sys
import threading
import time

__all__ = ["phase", "step", "begin", "end", "enabled"]

_PROTOCOL = "tm2"
_QUEUE_LIMIT_BYTES = 1 << 20  # what may wait for a slow collector; beyond this, drop and count
_FLUSH_NS = 200_000_000      # a batch goes out once its oldest line is this old …
_FLUSHER_PERIOD_S = 0.1      # … when the flusher thread looks (a full batch goes at once)
_BATCH_LINES = 256           # a batch goes at most this many lines …
_BATCH_BYTES = 32 << 10      # … in datagrams of at most this many bytes (the collector reads 64 KiB)

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
_cuda = None                  # torch.cuda, once auto mode found torch (its `_initialized`: one look)
_pending = collections.deque()  # lines waiting to go out together (appends need no lock)
_pending_since = [0]         # when the batch's first line came (a list: no `global` on the hot path)
_flusher_started = False
_warned_step = False


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


def _cell_edge(edge, name):
    """A notebook cell's edge (``tidemark.notebook``): it always reads what it can, the allocator's
    numbers once CUDA is up and resident memory (a cell's run is rare, and what it kept is read
    off its edges), and is sent at once. Nothing in it may reach the kernel."""
    global _dropped
    if _sock is None:
        return
    try:
        torch = _modules.get("torch")
        numbers = None
        if torch is not None and torch.cuda.is_initialized():
            numbers = _allocator_numbers(torch, edge)
        statm = None
        if _readers.statm is not None:
            try:
                statm = _pread(_readers.statm, 64, 0)
            except OSError:
                pass
        now = _monotonic_ns()
        _add(_line((now, _step, edge, numbers, None, statm, name)), now)
        # Sent at once, with what is batched before it: a kernel killed (restarted) right after
        # a cell still tells where the cell ended.
        _flush_pending()
    except Exception:
        _dropped += 1


_NO_NUMBERS = "- - - - - - - -"
_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns  # what the probe's own work costs, preemption left out
_pread = os.pread
_modules = sys.modules


def _edge(edge, name):
    """Adds one phase edge to the batch: its time and what is read at it, raw (the line is made
    when the batch is sent, by ``_line``: one warm pass over a batch instead of a cold format at
    every edge). Nothing in it may reach the job: a failure counts as a dropped message. (The
    hot path of every edge: an edge of a step that reads nothing of the host, without CUDA — what
    it would read is decided at the step's first edge — adds its time and names only.)"""
    global _dropped
    try:
        step = _step
        if step == _quiet_step[0] and _cuda is not None and not _cuda._initialized:
            entry = (_monotonic_ns(), step, edge, name)
            _quiet_edges[0] += 1
        else:
            entry = _read_edge(edge, name, step)
        pending = _pending
        pending.append(entry)
        if len(pending) == 1:
            _pending_since[0] = entry[0]
            if not _flusher_started:
                _start_flusher()
        elif len(pending) >= _BATCH_LINES:
            _flush_pending()
    except Exception:
        _dropped += 1


def _read_edge(edge, name, step):
    """An edge that reads: the allocator's numbers once CUDA is up, and resident memory and the
    C heap within their shares (``_host``), the heap only where host memory is what is judged
    (not once CUDA is up and the allocator's numbers come); the first edge of a step decides what
    its edges read. Returns the edge's entry of the batch (its time and names only where the
    step turned out to read nothing)."""
    torch = _torch if _torch is not None else _modules.get("torch")  # also without auto mode
    numbers = None
    if torch is not None and torch.cuda.is_initialized():
        numbers = _allocator_numbers(torch, edge)
    now = _monotonic_ns()
    if step != _host_decided[0] or (step is None and edge == "b" and now >= _host_recheck[0]):
        _decide_host(step, now)
        if step == _quiet_step[0] and numbers is None and _cuda is not None and not _cuda._initialized:
            _quiet_edges[0] += 1
            if _categories_waiting:
                _send_categories(None)
            return (now, step, edge, name)
    statm = None
    readers = _readers
    if readers.statm is not None:
        rss = _rss
        if rss.granted:
            try:
                statm = _pread(readers.statm, 64, 0)
            except OSError:
                pass
            # Wall time (a thread-time clock is a system call): a read takes 2–30 µs, so more
            # is the thread preempted on a busy machine, counted as the most a read costs, not
            # as the job's time spent.
            rss.spent_ns += min(_monotonic_ns() - now, _RSS_READ_MOST_NS)
            rss.done += 1
        else:
            rss.skipped += 1
    heap = None
    if numbers is None and readers.mallinfo2 is not None:
        if _heap.granted:
            heap = _read_heap()
        else:
            _heap.skipped += 1
    if _categories_waiting:
        _send_categories(heap)
    return (now, step, edge, numbers, heap, statm, name)


_RSS_READ_MOST_NS = 100_000  # what one read of resident memory is counted at most


def _quiet_format():
    """The line of an edge that read nothing, to format with its entry (time, step, edge, name):
    the allocator's numbers, the heap and resident memory all ``-``."""
    return f"{_PROTOCOL} P %d {_pid} {_rank} %d %s {_NO_NUMBERS} - - %s"


def _line(entry):
    """A line of the batch: as it was added, or a phase edge's, made from what ``_read_edge``
    read (``_flush_pending`` formats the edges that read nothing itself, with ``_quiet_format``)."""
    if type(entry) is str:
        return entry
    now, step, edge, numbers, heap, statm, name = entry
    rss = "-" if statm is None else _host.resident_bytes(statm)
    return (f"{_PROTOCOL} P {now} {_pid} {_rank} {'-' if step is None else step} {edge} "
            f"{_NO_NUMBERS if numbers is None else numbers} {'-' if heap is None else heap} {rss} {name}")


def _add(line, now):
    """Adds a line to the batch; sends the batch when it is full (the flusher thread sends it
    once its oldest line is ``_FLUSH_NS`` old). (`_edge` does the same, written out.)"""
    pending = _pending
    pending.append(line)
    if len(pending) == 1:
        _pending_since[0] = now
        if not _flusher_started:
            _start_flusher()
    elif len(pending) >= _BATCH_LINES:
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
    """Sends the batched lines as datagrams of lines, each within ``_BATCH_BYTES``."""
    with _lock:
        count = len(_pending)
        if not count:
            return
        quiet = _quiet_format()
        entries = [_pending.popleft() for _ in range(count)]
        lines = [quiet % entry if type(entry) is tuple and len(entry) == 4 else _line(entry) for entry in entries]
        data = "\n".join(lines).encode()
        if len(data) <= _BATCH_BYTES:
            _send(data)
            return
        chunk, size = [], 0
        for line in lines:
            if chunk and size + len(line) + 1 > _BATCH_BYTES:
                _send("\n".join(chunk).encode())
                chunk, size = [], 0
            chunk.append(line)
            size += len(line) + 1
        _send("\n".join(chunk).encode())


def _start_flusher():
    """The batch is sent by a daemon thread that looks ten times a second (so that an edge checks
    no clock but its own, and the job's thread is woken that often, not once per batch)."""
    global _flusher_started
    _flusher_started = True
    try:
        threading.Thread(target=_flusher, name="tidemark-flusher", daemon=True).start()
    except Exception:
        pass  # no thread (at interpreter exit): a full batch, or the exit, sends it


def _flusher():
    while True:
        time.sleep(_FLUSHER_PERIOD_S)
        if _pending and _monotonic_ns() - _pending_since[0] >= _FLUSH_NS:
            _flush_pending()


_allocator_read_ns = 0  # what reading them took since the last step's end (``_auto`` weighs it)


def _allocator_numbers(torch, edge):
    """Device and allocator numbers, read once CUDA is initialised (``_edge`` asks; this never
    initialises it), as the edge's line has them; ``None`` when they cannot be read. What the
    reading took is added up (``_allocator_read_ns``): a GPU's statistics cost more than the edge."""
    global _allocator_read_ns
    start = _monotonic_ns()
    try:
        if not _steps._history_started:
            _steps._start_history(torch)
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
    finally:
        _allocator_read_ns += _monotonic_ns() - start




def _reading_notes_at_exit():
    """Says how many edges went without the C heap or resident memory, and why, so that the
    attribution can say it."""
    if _sock is None:
        return
    try:
        for text in _host.notes():
            _send_now(f"{_PROTOCOL} N {_monotonic_ns()} {_pid} {_rank} {text}".encode())
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
    _dropped = 0
    globals()["_queued_bytes"] = 0
    _flusher_started = False  # the parent's thread is not the child's
    _host.after_fork_in_child()  # /proc/self was the parent's when it was opened
    if _path is not None:
        try:
            _connect(_path)
        except OSError:
            globals()["_sock"] = None
    # The handler came with the fork, writing to the parent's file: this process gets its own,
    # and the thread that forked is its main thread.
    _answer_stacks(threading.get_ident())


def _answer_stacks(main_ident):
    """Registers the stack dump on request (``_stacks``) and tells the collector its signal."""
    number = _stacks.register(os.environ.get("TIDEMARK_STACKS", ""), main_ident)
    if number is not None:
        _send_now(f"{_PROTOCOL} T {_monotonic_ns()} {_pid} {_rank} {number}".encode())


def _start_from_environment():
    """Called by the injected sitecustomize: connect, and install the automatic hooks."""
    global _rank, _keep_peaks
    path = os.environ.get("TIDEMARK_SOCKET")
    if not path:
        return
    try:
        _connect(path)
    except OSError as error:
        print(f"tidemark: cannot reach the collector at {path}: {error}", file=sys.stderr)
        return
    _host.open_readers()
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", ""))
    _rank = rank if rank.isdigit() else "-"
    _keep_peaks = os.environ.get("TIDEMARK_KEEP_PEAKS") == "1"
    history = os.environ.get("TIDEMARK_HISTORY", "0")
    _steps._history = int(history) if history.isdigit() else 0
    _steps._snapshots = os.environ.get("TIDEMARK_SNAPSHOTS", "")
    _steps._census_on = os.environ.get("TIDEMARK_CENSUS", "1") == "1"
    try:
        limit = float(os.environ.get("TIDEMARK_CENSUS_LIMIT_S", "0.5"))
    except ValueError:
        limit = 0.5
    _steps._census_limit_s = limit if limit > 0 else 0.5
    import atexit

    atexit.register(_flush_at_exit)
    _flush_before_os_exit()
    atexit.register(_reading_notes_at_exit)
    atexit.register(_steps._census_at_exit)  # runs first: exit handlers run last in, first out
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _answer_stacks(_stacks.main_thread_ident())
    if os.environ.get("TIDEMARK_AUTO", "1") == "1":
        from . import _auto

        _auto.install_when_torch_is_imported()


# What the edges read of host memory (``_host``) and do at step starts and ends (``_steps``),
# bound here once: the edge's hot path reads them as globals. (Imported last: both read this
# module's names.)
from . import _host, _stacks, _steps  # noqa: E402
from ._host import decide as _decide_host, read_heap as _read_heap  # noqa: E402
from ._host import decided_step as _host_decided, recheck_ns as _host_recheck  # noqa: E402
from ._host import quiet_edges as _quiet_edges, quiet_step as _quiet_step  # noqa: E402
from ._host import heap as _heap, readers as _readers, rss as _rss  # noqa: E402
from ._steps import _at_step_end, _at_step_start, _saved_freed  # noqa: E402,F401 (for _auto)
from ._steps import _categories_waiting, _send_categories  # noqa: E402


def load_ipython_extension(ipython):
    """`%load_ext tidemark` in a Jupyter kernel: the `%tidemark` magic (``tidemark.notebook``)."""
    from . import notebook

    notebook.load_ipython_extension(ipython)
