#!/usr/bin/env python3
"""Where a browser tab's time goes when it opens a big file: the web build in headless Chromium
opens FILE by `?url=`, with the browser's CPU profiler on, and prints the time to the first frame,
the app's stages (the bytes read and a snapshot parsed as they came, the run judged) and the
functions that took the most time themselves.

  scripts/tab-profile.py DIST FILE [--runs N] [--top K] [--no-profile]

For function names, build the site without stripping them:
  CARGO_PROFILE_WEB_RELEASE_STRIP=false trunk build --release --dist /tmp/dist-names
(`--no-profile` times the runs without the profiler, which slows the page a little.)
"""

import argparse
import collections
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dist", type=Path)
    parser.add_argument("file", type=Path)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    if not (args.dist / "index.html").is_file():
        print(f"{args.dist}: no index.html (run trunk build --release first)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        shutil.copytree(args.dist, site, dirs_exist_ok=True)
        name = "opened" + "".join(args.file.suffixes)
        (site / name).symlink_to(args.file.resolve())
        server = serve_quietly(site)
        driver = browser("--window-size=1280,800")
        try:
            for run in range(args.runs):
                driver.get("about:blank")
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
