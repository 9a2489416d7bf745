"""The probe's host numbers at the phase edges: resident memory (``/proc/self/statm``) and the C
heap's bytes in use (glibc ``mallinfo2``), each read within its share of the job's time
(``Share``), and the note at exit that says how many edges had them.

The C heap (``mallinfo2`` walks every free chunk: cheap on a tidy heap, 25–300 µs in a torch
process; timed in its thread's CPU time, so that a preemption does not count) is read only where
host memory is what is judged; resident memory (a system call, 2–30 µs in a training loop) at
every kind of job (the ranks' host memory). The edge itself (``tidemark._edge``) reads them as
this module decides; nothing here may reach the job.
"""
import os
import time

HEAP_SHARE = 0.0005          # the share of the job's time that reading the C heap may take …
RSS_SHARE = 0.00025          # … and reading resident memory (each after a first 5 ms always
READ_GRACE_NS = 5_000_000    # granted; in the first steps, at most 200 ms)
READ_GRACE_CAP_NS = 200_000_000
GRACE_STEPS = 100            # the first steps are read whole, so that a short job is judged with them
READ_GAP_NS = 10_000_000     # after them, a step (without steps, a phase) read at most every 10 ms

_thread_time_ns = time.thread_time_ns  # what the probe's own work costs, preemption left out
_monotonic_ns = time.monotonic_ns


def granted(step, spent_ns, cap_ns, allowed_ns):
    """Whether work with a share may be done now: always in the first steps (up to a cap), then
    while what it took so far is within what its share allows."""
    if step is not None and step < GRACE_STEPS and spent_ns < cap_ns:
        return True
    return spent_ns <= allowed_ns


class Share:
    """A reading at the edges that costs more than an edge: taken at every edge of the first
    ``GRACE_STEPS`` steps (a short job is judged with it throughout), then decided once per step
    (a phase has it at both of its edges or at neither) while what it took so far is within
    ``share`` of the time since the first edge."""

    __slots__ = ("share", "granted", "spent_ns", "done", "skipped", "granted_at_ns")

    def __init__(self, share):
        self.share = share
        self.reset()

    def reset(self):
        self.granted = False
        self.spent_ns = 0   # what the readings took so far
        self.done = 0       # edges read …
        self.skipped = 0    # … and edges not read, over the share
        self.granted_at_ns = -READ_GAP_NS  # when (after the first edge) it was last granted

    def decide(self, step, elapsed_ns):
        """After the first steps, a step (or a phase, without steps) is read while the share
        allows it and no read step began in the last ``READ_GAP_NS``: a loop of short steps is
        read every few steps, so that most of its edges read nothing and cost a few µs."""
        if step is not None and step < GRACE_STEPS and self.spent_ns < READ_GRACE_CAP_NS:
            self.granted = True
        else:
            self.granted = (self.spent_ns <= self.share * elapsed_ns + READ_GRACE_NS
                            and elapsed_ns - self.granted_at_ns >= READ_GAP_NS)
        if self.granted:
            self.granted_at_ns = elapsed_ns

    def due_ns(self):
        """When (after the first edge) it may be read again, as long as it is not read."""
        if self.granted:
            return 0
        return max((self.spent_ns - READ_GRACE_NS) / self.share, self.granted_at_ns + READ_GAP_NS)


class Readers:
    """What the edges read host memory with; ``None`` where it is missing (no /proc, not glibc)."""

    __slots__ = ("statm", "page_size", "mallinfo2")

    def __init__(self):
        self.statm = None       # /proc/self/statm, open: this process' resident memory
        self.page_size = 4096
        self.mallinfo2 = None


heap = Share(HEAP_SHARE)
rss = Share(RSS_SHARE)
readers = Readers()
since_ns = [None]            # the first edge (the shares' clock: not the job's imports)
decided_step = [None]        # the step the readings were last decided for …
recheck_ns = [0]             # … and without steps, when to decide again at a begin edge
NOT_QUIET = object()
quiet_step = [NOT_QUIET]     # the step whose edges read nothing of the host (the edge's short way)
quiet_edges = [0]            # edges that went the short way: skipped by both shares


def decide(step, now):
    """Whether the edges of a new step read the C heap and resident memory. Without steps this is
    decided at a phase's begin edge (its end edge keeps it), and only from when one of them may be
    read again: an edge over both shares costs a comparison."""
    if since_ns[0] is None:
        since_ns[0] = now
    decided_step[0] = step
    if now < recheck_ns[0] and step is not None and step >= GRACE_STEPS:
        # Neither was granted, and neither may be before `recheck_ns` (what they took stays
        # what it was until one is read): as `Share.decide` would decide, without its work.
        quiet_step[0] = step
        return
    heap.decide(step, now - since_ns[0])
    rss.decide(step, now - since_ns[0])
    recheck_ns[0] = since_ns[0] + min(heap.due_ns(), rss.due_ns())
    # A step that reads neither: its other edges take the short way (``tidemark._edge``).
    quiet = step is not None and not (heap.granted and readers.mallinfo2) and not (rss.granted and readers.statm)
    quiet_step[0] = step if quiet else NOT_QUIET


def skipped(share):
    """The edges that did not read `share`'s number, over its share (the short way's too)."""
    reader = readers.mallinfo2 if share is heap else readers.statm
    return share.skipped + (quiet_edges[0] if reader is not None else 0)


def read_heap():
    """The C heap's bytes in use (``uordblks + hblkhd``), or None."""
    value = None
    start = _thread_time_ns()
    try:
        info = readers.mallinfo2()
        value = info.uordblks + info.hblkhd
    except Exception:
        pass
    heap.spent_ns += _thread_time_ns() - start
    heap.done += 1
    return value


def resident_bytes(statm):
    """Resident memory from what ``/proc/self/statm`` read, or ``-``."""
    try:
        return int(statm.split()[1]) * readers.page_size
    except Exception:
        return "-"


def notes():
    """What to say at exit of the readings that were not taken at every edge, and why, so that
    the attribution can say it (without the protocol's prefix)."""
    out = []
    for share, what, how in (
        (heap, "the C heap", "glibc mallinfo2, which walks every free chunk"),
        (rss, "resident memory", "/proc/self/statm"),
    ):
        missed = skipped(share)
        if not missed:
            continue
        mean = share.spent_ns / max(share.done, 1) / 1000
        out.append(f"the probe read {what} at {share.done} of {share.done + missed} phase edges in "
                   f"pid {os.getpid()}: reading it ({how}) took {mean:.0f} µs on average, and it may take "
                   f"{share.share:.2%} of the job's time")
    return out


def open_readers():
    """Opens what the edges read of host memory: resident memory (``/proc/self/statm``) and the C
    heap's bytes in use (glibc ``mallinfo2``: what ``malloc`` handed out and not yet freed, which
    falls when memory is freed, unlike resident memory); what is missing stays ``None``."""
    try:
        if readers.statm is not None:
            os.close(readers.statm)
        readers.statm = None
        readers.statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        readers.page_size = os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        readers.statm = None
    if readers.mallinfo2 is None:
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
            readers.mallinfo2 = function
        except Exception:
            readers.mallinfo2 = None


def after_fork_in_child():
    """A forked child reads its own /proc/self, and its shares start again."""
    open_readers()
    heap.reset()
    rss.reset()
    since_ns[0] = None
    decided_step[0] = None
    recheck_ns[0] = 0
    quiet_step[0] = NOT_QUIET
    quiet_edges[0] = 0
