#!/usr/bin/env python3
"""Where a browser tab's time goes when it opens a big file: the web build in headless Chromium
opens FILE by `?url=`, with the browser's CPU profiler on, and prints the time to the first frame,
the app's stages (the bytes read and a snapshot parsed as they came, the run judged) and the
functions that took the most time themselves.

  scripts/tab-profile.py DIST FILE [--runs N] [--top K] [--no-profile] [--threads]

For function names, build the site without stripping them:
  CARGO_PROFILE_WEB_RELEASE_STRIP=false trunk build --release --dist /tmp/dist-names
(`--no-profile` times the runs without the profiler, which slows the page a little.)

`--threads` records the browser's own trace (every process) instead of the profile and prints the
time each thread spent in its tasks (the page's, the worker's, the network's, the `.wasm`'s
compile, the GPU process') and the page's frame commits: on two cores they compete.
"""

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless import browser, marks, serve_quietly  # noqa: E402


def self_times(profile):
    """Milliseconds of samples per function, the function's own (not its callees')."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    deltas = profile.get("timeDeltas", [])
    spent = collections.Counter()
    for sample, delta in zip(profile.get("samples", [])[1:], deltas[1:]):
        frame = nodes[sample]["callFrame"]
        name = frame["functionName"] or f"({frame.get('url', '').rsplit('/', 1)[-1] or 'program'})"
        spent[name] += delta / 1000.0
    return spent


class BrowserTrace:
    """The browser's trace (Chromium's DevTools protocol, over its own socket: Selenium does not
    hand its events over), from `start` to `stop`, which returns its events."""

    CATEGORIES = ["devtools.timeline", "v8", "v8.gc", "blink", "blink.user_timing", "toplevel",
                  "disabled-by-default-devtools.timeline"]

    def __init__(self, driver):
        import threading
        import urllib.request

        import websocket  # websocket-client, Selenium's own dependency

        address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
        with urllib.request.urlopen(f"http://{address}/json/version") as answer:
            self.socket = websocket.create_connection(json.load(answer)["webSocketDebuggerUrl"])
        self.events, self.complete, self.sent = [], threading.Event(), 0
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self):
        import websocket

        while True:
            try:
                message = json.loads(self.socket.recv())
            except websocket.WebSocketConnectionClosedException:  # the browser quit
                return
            if message.get("method") == "Tracing.dataCollected":
                self.events.extend(message["params"]["value"])
            elif message.get("method") == "Tracing.tracingComplete":
                self.complete.set()

    def _send(self, method, params):
        self.sent += 1
        self.socket.send(json.dumps({"id": self.sent, "method": method, "params": params}))

    def start(self):
        self.events.clear()
        self.complete.clear()
        self._send("Tracing.start", {"transferMode": "ReportEvents", "traceConfig": {"includedCategories": self.CATEGORIES}})

    def stop(self):
        self._send("Tracing.end", {})
        self.complete.wait(120)
        return list(self.events)


def print_threads(events):
    """Milliseconds each thread spent in its tasks, busiest first, and the page's commits."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    busy = collections.Counter()
    tasks = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ("RunTask", "ThreadPool_RunTask"):
            busy[(e["pid"], names.get((e["pid"], e["tid"]), "?"))] += e.get("dur", 0) / 1000
            tasks[(e["pid"], names.get((e["pid"], e["tid"]), "?"))] += 1
    print("  busy threads (ms in tasks):")
    for (pid, thread), ms in busy.most_common(10):
        print(f"  {ms:8.0f} ms  {thread} (process {pid}), {tasks[(pid, thread)]} tasks")
    at = [(e["ts"], e["dur"] / 1000) for e in events if e.get("ph") == "X" and e.get("name") == "Commit"
          and names.get((e["pid"], e["tid"])) == "CrRendererMain" and "dur" in e]
    commits = [ms for _, ms in at]
    slow = sorted((round(ms) for ms in commits if ms >= 5), reverse=True)
    print(f"  the pages' frame commits: {len(commits)}, {sum(commits):.0f} ms; those over 5 ms: {slow}")
    # When they came: before the read's end, and between it and the first frame shown.
    mark = {e["name"]: e["ts"] for e in events if e.get("name") in ("stage:arrived", "tidemark:shown")}
    if len(mark) == 2:
        reading = [ms for ts, ms in at if ts < mark["stage:arrived"]]
        judging = [ms for ts, ms in at if mark["stage:arrived"] <= ts < mark["tidemark:shown"]]
        print(f"  commits while reading: {len(reading)}, {sum(reading):.0f} ms; "
              f"after, before the first frame shown: {len(judging)}, {sum(judging):.0f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dist", type=Path)
    parser.add_argument("file", type=Path)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--threads", action="store_true")
    args = parser.parse_args()
    if args.threads:
        args.no_profile = True
    if not (args.dist / "index.html").is_file():
        print(f"{args.dist}: no index.html (run trunk build --release first)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        shutil.copytree(args.dist, site, dirs_exist_ok=True)
        name = "opened" + "".join(args.file.suffixes)
        (site / name).symlink_to(args.file.resolve())
        server = serve_quietly(site)
        driver = browser("--window-size=1280,800", *(["--remote-allow-origins=*"] if args.threads else []))
        trace = BrowserTrace(driver) if args.threads else None
        try:
            for run in range(args.runs):
                driver.get("about:blank")
                if trace:
                    trace.start()
                if not args.no_profile:
                    driver.execute_cdp_cmd("Profiler.enable", {})
                    driver.execute_cdp_cmd("Profiler.setSamplingInterval", {"interval": 500})
                    driver.execute_cdp_cmd("Profiler.start", {})
                driver.get(f"http://127.0.0.1:{server.server_port}/index.html?url={name}")
                deadline = time.monotonic() + 180
                found = []
                while time.monotonic() < deadline:
                    found = marks(driver, "tidemark:", "stage:")
                    if any(m[0] in ("tidemark:shown", "tidemark:failed") for m in found):
                        break
                    time.sleep(0.1)
                wasm = driver.execute_script(
                    "const m = performance.getEntriesByName('wasm-memory'); return m.length ? m[m.length - 1].detail : null;"
                )
                print(f"run {run + 1}: " + ", ".join(f"{n} {t:.0f} ms" + (f" ({d})" if n.startswith("stage:") else "") for n, d, t in found)
                      + (f"; wasm memory {wasm / 1e6:.0f} MB" if wasm else ""))
                for url, start, first, end, size in driver.execute_script(
                    "return performance.getEntriesByType('resource')"
                    ".filter(r => r.name.endsWith('.wasm') || r.name.includes('" + name + "'))"
                    ".map(r => [r.name.split('/').pop(), r.startTime, r.responseStart, r.responseEnd, r.decodedBodySize]);"
                ):
                    print(f"  {url}: requested at {start:.0f} ms, first byte {first:.0f} ms, last {end:.0f} ms ({size / 1e6:.1f} MB)")
                if trace:
                    print_threads(trace.stop())
                if not args.no_profile:
                    profile = driver.execute_cdp_cmd("Profiler.stop", {})["profile"]
                    spent = self_times(profile)
                    total = sum(spent.values())
                    print(f"  self time, {total:.0f} ms sampled:")
                    for function, ms in spent.most_common(args.top):
                        print(f"  {ms:8.0f} ms {100 * ms / total:5.1f} %  {function[:110]}")
        finally:
            driver.quit()
            server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
