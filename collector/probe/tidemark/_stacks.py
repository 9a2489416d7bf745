"""Stacks on request, for a job that hangs.

When no step has ended for far longer than steps take, the collector asks each probed process for
the Python stacks of all its threads, with the signal this process named when it started (``tm2 T
<pid> <signal>``). ``faulthandler`` answers from its C signal handler into this process' own file
in the collector's folder (``TIDEMARK_STACKS``), so a thread blocked in C (a collective, a lock, a
queue's ``get``) answers too, and the job pauses for well under a millisecond. The file's first
line names the main thread, which ``faulthandler`` does not.

A signal the job or a library already handles is left alone: the process then names none, and
the collector never sends it one (a real-time signal's default is to end the process). Under
faulthandler's handler the signal is ignored, so that once faulthandler lets go of it (the
interpreter exiting) an ask does nothing; a program the process then runs (``exec``) inherits it
ignored, and an exec'd Python's probe takes it again.
"""
import faulthandler
import os
import signal
import threading

_OFFSET = 13   # the signal is SIGRTMIN + this: far from the few that libraries take
_file = None   # kept open: faulthandler writes to its descriptor


def register(folder, main_ident):
    """Registers the handler; returns the signal's number, or None where it cannot be had."""
    global _file
    if not folder:
        return None
    try:
        number = signal.SIGRTMIN + _OFFSET
        if number > signal.SIGRTMAX or signal.getsignal(number) not in (signal.SIG_DFL, signal.SIG_IGN):
            return None
        path = os.path.join(folder, f"{os.getpid()}.txt")
        stream = open(path, "w", encoding="utf-8")
        stream.write(f"tidemark stacks pid {os.getpid()} main 0x{main_ident:016x}\n")
        stream.flush()
        # Ignored underneath: when faulthandler lets go of the signal (at the interpreter's exit)
        # it puts back what was there before, so an ask that comes as the process exits is
        # ignored instead of ending it (a real-time signal's default).
        # (A forked child has its parent's registration: faulthandler would only change the file
        # of a signal it holds, and not install its handler again over the SIG_IGN.)
        faulthandler.unregister(number)
        signal.signal(number, signal.SIG_IGN)
        faulthandler.register(number, file=stream, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError, AttributeError):
        return None
    old, _file = _file, stream
    if old is not None:
        try:
            old.close()
        except OSError:
            pass
    return int(number)


def main_thread_ident():
    return threading.main_thread().ident or threading.get_ident()
