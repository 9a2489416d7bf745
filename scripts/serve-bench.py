#!/usr/bin/env python3
"""`collector serve` against a local file, in headless Chromium (the budgets of `collector serve`):

  scripts/serve-bench.py COLLECTOR DIST RECORDING [ROUNDS]

- the first frame of RECORDING (the 10 M-sample benchmark file: `DIFF_BENCH_DIR=dir cargo bench
  -p tidemark-collector --bench diff` leaves one in dir) opened through `collector serve DIR
  --web DIST` (the viewer's link) against the same viewer and file served as static files from
  one folder (`?url=`), in alternated rounds: the time from navigation to the app's
  `tidemark:shown` mark (its first frame drawn), median of ROUNDS (default 5); budget ≤ 1.5×;
- a recording that grows while the viewer follows it through the server: the time from the
  bytes written to the app's `tidemark:grew` mark saying it holds more samples (budget ≤ 1 s),
  median of ROUNDS.

Prints the numbers BENCHMARKS.md records.
"""

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless import browser as headless_browser, marks, serve_quietly  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "collector" / "tests" / "data" / "corpus"


def first_frame_ms(driver, url):
    """Navigates to `url` and waits for the first frame: ms since navigation."""
    driver.get("about:blank")
    driver.get(url)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for name, detail, at in marks(driver):
            if name == "tidemark:shown":
                return at
            if name == "tidemark:failed":
                raise SystemExit(f"{url}: {detail}")
        time.sleep(0.02)
    raise SystemExit(f"{url}: never shown")


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    collector, dist, recording = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        runs.mkdir()
        # A copy: a symbolic link leading out of the folder is not served.
        shutil.copyfile(recording, runs / "big.msgpack")
        static = Path(tmp) / "static"
        shutil.copytree(dist, static)
        (static / "big.msgpack").symlink_to(recording.resolve())
        files = serve_quietly(static)
        server = subprocess.Popen(
            [str(collector), "serve", "--port", "0", "--web", str(dist), str(runs)],
            stdout=subprocess.PIPE,
            text=True,
        )
        driver = None
        try:
            port = None
            for line in server.stdout:
                found = re.search(r"open http://127\.0\.0\.1:(\d+)/", line)
                if found:
                    port = int(found.group(1))
                    break
            served = f"http://127.0.0.1:{port}/viewer/?url=..%2Fruns%2Fbig.msgpack"
            local = f"http://127.0.0.1:{files.server_address[1]}/?url=big.msgpack"
            driver = headless_browser(
                "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--window-size=1280,800"
            )
            size = recording.stat().st_size / 1e6
            print(f"first frame of {recording.name} ({size:.0f} MB), {rounds} alternated rounds")
            first_frame_ms(driver, local)  # the browser's caches warm, the wasm compiled once
            through, alone = [], []
            for _ in range(rounds):
                through.append(first_frame_ms(driver, served))
                alone.append(first_frame_ms(driver, local))
            ratio = statistics.median(through) / statistics.median(alone)
            print(f"  through collector serve: {statistics.median(through):.0f} ms median ({min(through):.0f}–{max(through):.0f})")
            print(f"  from a static file:      {statistics.median(alone):.0f} ms median ({min(alone):.0f}–{max(alone):.0f})")
            print(f"  ratio {ratio:.2f} (budget ≤ 1.5)")

            print(f"following a growing recording through the server, {rounds} rounds")
            whole = (CORPUS / "eval_keeps_predictions.msgpack").read_bytes()
            waits = []
            for i in range(rounds):
                live = runs / f"live{i}.msgpack"
                live.write_bytes(whole[: len(whole) // 2])
                driver.get("about:blank")
                driver.get(f"http://127.0.0.1:{port}/viewer/?url=..%2Fruns%2Flive{i}.msgpack&follow=1")
                deadline = time.monotonic() + 60
                first = None
                while first is None and time.monotonic() < deadline:
                    grew = [float(d) for n, d, _ in marks(driver) if n == "tidemark:grew"]
                    first = max(grew) if grew else None
                    time.sleep(0.02)
                time.sleep(0.5)  # somewhere in the viewer's poll cycle
                with open(live, "ab") as f:
                    f.write(whole[len(whole) // 2:])
                written = time.monotonic()
                shown = None
                while shown is None and time.monotonic() < written + 30:
                    if any(n == "tidemark:grew" and float(d) > first for n, d, _ in marks(driver)):
                        shown = time.monotonic() - written
                    time.sleep(0.02)
                waits.append(shown if shown is not None else float("inf"))
            print(
                f"  new data shown {statistics.median(waits) * 1e3:.0f} ms median after it was written "
                f"({min(waits) * 1e3:.0f}–{max(waits) * 1e3:.0f}; budget ≤ 1000 ms)"
            )
        finally:
            if driver is not None:
                driver.quit()
            server.kill()
            server.wait()
            files.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
