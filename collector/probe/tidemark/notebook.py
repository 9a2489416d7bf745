"""Recording the Jupyter kernel you are in.

    %load_ext tidemark
    %tidemark start            # or: %tidemark start run.msgpack
    ...                        # the cells to record
    %tidemark stop
    %tidemark report           # the verdict; in a notebook, the HTML report with its picture

`start()`, `stop()`, `report()` and `view()` do the same from code; `%tidemark view` shows the web
viewer in the cell, following the recording. `start` runs a collector beside the
kernel on its pid (`collector --pid`), which samples the kernel's device and host memory, and
starts the probe in the running interpreter (automatic phases, the allocator's numbers, the
censuses), as if the kernel had been started under the collector. Nothing here may break the
kernel: a failure is said, and the kernel runs on.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# The running collector: (process, recording, its stderr's file), or None.
_running = None
# The recording of the last `start`, for `report` after `stop`.
_last = None
# Whether the probe was started in this process (once; a later start reconnects it).
_probe_started = False

_START_TIMEOUT_S = 10.0

# The viewer's server (`collector serve` on loopback): (process, its address, its folder), or None.
_server = None


class NotebookError(RuntimeError):
    """What `%tidemark` could not do, in words for the cell's output."""


def _collector():
    found = os.environ.get("TIDEMARK_COLLECTOR") or shutil.which("collector")
    if not found:
        raise NotebookError(
            "the collector is not installed where this kernel can find it: `pip install ./collector` "
            "(from a tidemark checkout; `pip install tidemark-torch` once it is published) puts it "
            "on PATH, or set TIDEMARK_COLLECTOR to its path"
        )
    return found


def _default_out():
    # Jupyter tells the kernel its notebook's path (JPY_SESSION_NAME), VS Code too
    # (__vsc_ipynb_file__); else the kernel's pid names it.
    main = sys.modules.get("__main__")
    notebook = os.environ.get("JPY_SESSION_NAME") or getattr(main, "__vsc_ipynb_file__", None)
    if notebook:
        name = os.path.splitext(os.path.basename(notebook))[0]
    else:
        name = f"kernel-{os.getpid()}"
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.msgpack"


def start(out=None):
    """Starts recording this kernel to `out` (default: named after the notebook and the time);
    returns the recording's path."""
    global _running, _last, _probe_started
    if _running is not None:
        raise NotebookError(f"already recording to {_running[1]}: `%tidemark stop` first")
    out = os.path.abspath(out or _default_out())
    folder = tempfile.mkdtemp(prefix="tidemark-notebook-")
    env_file = os.path.join(folder, "probe.json")
    log = open(os.path.join(folder, "collector.log"), "w+b")
    # A session of its own: interrupting the kernel (SIGINT to its group) leaves it running.
    process = subprocess.Popen(
        [_collector(), "--out", out, "--pid", str(os.getpid()), "--probe-env", env_file],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
    )
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not os.path.exists(env_file):
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.seek(0)
            said = log.read().decode(errors="replace").strip()
            log.close()
            raise NotebookError(f"the collector did not start: {said or 'it said nothing'}")
        time.sleep(0.02)
    with open(env_file) as f:
        env = json.load(f)
    os.environ.update(env)
    import tidemark

    if not _probe_started:
        tidemark._start_from_environment()
        _probe_started = True
    else:
        # The probe's hooks are in place: the new collector's socket and stack folder.
        tidemark._connect(env["TIDEMARK_SOCKET"])
        tidemark._answer_stacks(tidemark._stacks.main_thread_ident())
    _running = (process, out, log)
    _last = out
    _watch_cells()
    return out


# The cell running now, as its edges name it (`cell [12]: train(model, 3)`), or None.
_cell = None
_cells_watched = False
# A cell's name at most (the collector refuses a phase's name longer than 200 bytes).
_CELL_NAME_MOST = 160


def _watch_cells():
    """Marks each cell's run while recording: an edge at its start and one at its end, named by
    its execution count and its first line, so that memory is told per cell (once per kernel)."""
    global _cells_watched
    if _cells_watched:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    shell.events.register("pre_run_cell", _cell_begins)
    shell.events.register("post_run_cell", _cell_ends)
    _cells_watched = True


def _cell_name(count, source):
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if len(lines) > 1:
        first += " …"
    name = f"cell [{count}]: {first}"
    if len(name.encode()) > _CELL_NAME_MOST:
        name = name.encode()[: _CELL_NAME_MOST - 4].decode(errors="ignore") + " …"
    return name


def _cell_begins(info):
    global _cell
    _cell = None
    source = getattr(info, "raw_cell", "") or ""
    # The cells that start or stop the recording are not the notebook's own work.
    if _running is None or source.lstrip().startswith(("%tidemark", "%load_ext tidemark")):
        return
    try:
        import tidemark
        from IPython import get_ipython

        _cell = _cell_name(get_ipython().execution_count, source)
        tidemark._cell_edge("b", _cell)
    except Exception:
        _cell = None


def _cell_ends(result):
    global _cell
    name, _cell = _cell, None
    if name is None or _running is None:
        return
    try:
        import tidemark

        # The cell's execution count as it ran (at its start, IPython may have counted it
        # already or not: the collector takes the end's).
        count = getattr(result, "execution_count", None)
        if count is not None:
            name = "cell [" + str(count) + "]" + name.split("]", 1)[1]
        tidemark._cell_edge("e", name)
    except Exception:
        pass


def stop():
    """Stops recording; returns the recording's path."""
    global _running
    if _running is None:
        raise NotebookError("not recording: `%tidemark start` first")
    process, out, log = _running
    _running = None
    import tidemark

    # The last census, as at a job's end: who holds the kernel's memory now.
    tidemark._steps._census_at_exit()
    tidemark._flush_pending()
    tidemark._sock = None  # the probe's hooks stay; they send nothing now
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()
    return out


def report(path=None):
    """The verdict on the recording (`collector report`), as text."""
    done = subprocess.run([_collector(), "report", _recording(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise NotebookError(done.stderr.strip())
    return done.stdout


def report_html(path=None):
    """The report as one self-contained HTML page (`collector report --html`): the verdict, the
    picture of the run, the phases."""
    folder = tempfile.mkdtemp(prefix="tidemark-report-")
    page = os.path.join(folder, "report.html")
    done = subprocess.run([_collector(), "report", _recording(path), "--html", page],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise NotebookError(done.stderr.strip())
    with open(page, encoding="utf-8") as f:
        return f.read()


def view(path=None):
    """The web viewer on the recording (`collector serve` of its folder, on this machine's loopback,
    until the kernel ends), following it while it grows; returns the viewer's address."""
    from urllib.parse import quote

    import urllib.error
    import urllib.request

    path = os.path.abspath(_recording(path))
    base = _serve(os.path.dirname(path))
    try:
        urllib.request.urlopen(base + "viewer/", timeout=10).close()
    except urllib.error.HTTPError as error:
        said = error.read().decode(errors="replace").strip()
        raise NotebookError(f"{said} (`%tidemark report` shows the report in the cell)") from None
    except OSError as error:
        raise NotebookError(f"the viewer's server at {base} does not answer: {error}") from None
    # The run's address, relative to the viewer's page, as a query value (as the server's own
    # page links it: the name encoded as a path, then the whole as a value).
    run = quote("../runs/" + quote(os.path.basename(path)), safe="")
    return f"{base}viewer/?url={run}&follow=1"


def _serve(folder):
    """The address of a `collector serve` of `folder` (started once, again for another folder)."""
    global _server
    if _server is not None and (_server[0].poll() is not None or _server[2] != folder):
        _stop_server()
    if _server is not None:
        return _server[1]
    import select

    log = tempfile.TemporaryFile()
    command = [_collector(), "serve", folder, "--port", "0", "--pid", str(os.getpid())]
    if os.environ.get("TIDEMARK_WEB"):
        # A web viewer built apart (trunk's dist/), for a collector built without one.
        command += ["--web", os.environ["TIDEMARK_WEB"]]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True,
    )
    # Its first lines name the address ("  open http://127.0.0.1:PORT/"): read from the pipe as
    # they come (a buffered reader would hold them where `select` does not see them).
    deadline = time.monotonic() + _START_TIMEOUT_S
    fd = process.stdout.fileno()
    said, base = b"", None
    while base is None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        said += chunk
        for line in said.splitlines():
            words = line.split()
            if words[:1] == [b"open"] and len(words) > 1 and said.endswith(b"\n"):
                base = words[1].decode()
    if base is None:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.seek(0)
        why = (log.read() or said).decode(errors="replace").strip()
        log.close()
        raise NotebookError(f"the viewer's server did not start: {why or 'it said nothing'}")
    # What it prints after the address is not read: its lines go nowhere from here.
    threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
    log.close()
    _server = (process, base, folder)
    return base


def _drain(stream):
    try:
        while stream.read(4096):
            pass
    except (OSError, ValueError):
        pass


def _stop_server():
    global _server
    if _server is not None:
        process = _server[0]
        _server = None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


atexit.register(_stop_server)


def _recording(path):
    path = path or (_running[1] if _running else _last)
    if path is None:
        raise NotebookError("no recording yet: `%tidemark start` first")
    return path


class _Report:
    """The report as a cell shows it: the page in a frame of its own (its styles stay in it)
    where the front end draws HTML, the text elsewhere."""

    def __init__(self, text, page):
        self.text, self.page = text, page

    def _repr_mimebundle_(self, include=None, exclude=None):
        import html

        frame = (f'<iframe srcdoc="{html.escape(self.page, quote=True)}" '
                 'style="width:100%;height:720px;border:0" title="tidemark report"></iframe>')
        return {"text/plain": self.text, "text/html": frame}


def _magic(line):
    words = line.split()
    command, rest = (words[0], words[1:]) if words else ("", [])
    try:
        if command == "start":
            print(f"tidemark: recording this kernel to {start(rest[0] if rest else None)}")
        elif command == "stop":
            print(f"tidemark: stopped; the recording is {stop()}")
        elif command == "view":
            address = view(rest[0] if rest else None)
            try:
                from IPython.display import IFrame, display

                print(f"tidemark: the viewer, following the recording: {address}")
                display(IFrame(address, width="100%", height=720))
            except ImportError:
                print(f"tidemark: the viewer: {address}")
        elif command == "report":
            path = rest[0] if rest else None
            text = report(path)
            try:
                from IPython.display import display

                display(_Report(text, report_html(path)))
            except ImportError:
                print(text, end="")
        else:
            print("usage: %tidemark start [FILE] | stop | report [FILE] | view [FILE]")
    except NotebookError as error:
        print(f"tidemark: {error}", file=sys.stderr)


def load_ipython_extension(ipython):
    """`%load_ext tidemark`: the `%tidemark` line magic."""
    ipython.register_magic_function(_magic, "line", "tidemark")
