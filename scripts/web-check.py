#!/usr/bin/env python3
"""The web build in a real browser: serves dist/ from a sub-path of 127.0.0.1, opens it in headless
Chromium, and checks what a user sees.

  scripts/web-check.py DIST BIG_RECORDING [OUT]     (OUT default: test-output/web)

- `?url=` a leaking recording: the curves and the verdict are drawn (pixels of their colours in
  the screenshot), the console has no error, and no request left 127.0.0.1;
- no `?url=`: the embedded example is shown;
- `?url=` a real snapshot: its Memory timeline tab draws the allocations and then the segments
  (pixels of the largest site's colour, and of free segment bytes), with no console error; the
  time of each frame the app draws while the pointer moves over them is reported (and with
  WEB_CHECK_SNAPSHOT=FILE, that of the big snapshot's views);
- `?url=` two real PyTorch profiler traces (one gzipped): shown, the allocated curve drawn
  (with WEB_CHECK_TRACE=FILE, a big trace is timed too);
- the fetch worker's parts (`web/fetch-worker.js`): filled from a byte stream and from a stream
  of pieces cut unlike them, 4 MiB each, the stream's bytes in order;
- `?url=` a missing file (404), a file that is not a recording, another origin: the page shows
  why (the app's `tidemark:failed` performance mark names the cause, and red text is drawn);
- `?url=` BIG_RECORDING (1 million samples): the time from navigation to its first drawn frame
  is measured and reported (a number for BENCHMARKS.md, not a pass/fail: timing is a benchmark).

Screenshots and a summary (timings.json) go to OUT. Needs /usr/bin/chromium and
/usr/bin/chromedriver (Debian packages chromium, chromium-driver), and Python selenium and pillow.
"""

import functools
import http.server
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from PIL import Image
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless import browser as headless_browser, check, count_near, failures, marks, pixels, requested_urls  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "collector" / "tests" / "data" / "corpus"
SUBPATH = "some/dir/"  # the site must work from any folder, not only from the host's root

# Colours the viewer draws with (collector/src/palette.rs).
HOST_MEMORY = (0xCC, 0x79, 0xA7)
DEVICE_USED = (0x00, 0x9E, 0x73)
ALLOCATED = (0xD5, 0x5E, 0x00)
RESERVED = (0x00, 0x72, 0xB2)

# Where the "Open…" and "Save image" buttons are laid out in the canvas (CSS pixels from its
# top left); a snapshot's "Memory timeline" tab, and its "Segments" toggle.
OPEN_BUTTON = (98, 12)
SAVE_BUTTON = (177, 12)
MEMORY_TAB = (340, 37)
SEGMENTS_TOGGLE = (132, 68)
# The largest site's colour (collector::palette::site(0)), and a segment's free bytes.
SITE_0 = (0x4E, 0x79, 0xA7)
SEGMENT_FREE = (0xD8, 0xE0, 0xE8)

# Times each animation-frame callback of the page (where the app draws its frames): installed
# before the app starts, so the time of every frame the app draws is in `window.__frames`.
FRAME_SHIM = """
window.__frames = [];
const raf = window.requestAnimationFrame.bind(window);
window.requestAnimationFrame = (callback) => raf((t) => {
  const start = performance.now();
  try { callback(t); } finally { window.__frames.push(performance.now() - start); }
});
"""

# The pointer moving over the canvas for `ms` (a move every 20 ms, so that the app draws a frame
# for each): the times of the frames drawn meanwhile, in ms.
FRAME_TIMES = """
const [ms, done] = arguments;
const canvas = document.getElementById("tidemark_canvas");
const box = canvas.getBoundingClientRect();
window.__frames = [];
let k = 0;
const move = setInterval(() => {
  k += 1;
  const x = box.left + 120 + (k * 37) % (box.width - 200), y = box.top + 200 + (k * 13) % 400;
  canvas.dispatchEvent(new PointerEvent("pointermove", {clientX: x, clientY: y, bubbles: true, pointerType: "mouse"}));
  canvas.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
}, 20);
setTimeout(() => { clearInterval(move); done(window.__frames.slice()); }, ms);
"""


def frame_times(driver, ms=3000):
    """How many frames the app drew while the pointer moved over it, and their median and 95th
    percentile time (ms)."""
    times = sorted(driver.execute_async_script(FRAME_TIMES, ms))
    if not times:
        return 0, None, None
    at = lambda p: times[round((len(times) - 1) * p)]  # noqa: E731
    return len(times), at(0.5), at(0.95)


class Handler(http.server.SimpleHTTPRequestHandler):
    requests = []
    sent = {}  # path -> bytes of its body written, once its answer ended

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        Handler.requests.append(self.path)

    def copyfile(self, source, outputfile):
        # What went out of each file, so that a refused one can be shown not downloaded.
        sent = 0
        try:
            while chunk := source.read(1 << 20):
                outputfile.write(chunk)
                sent += len(chunk)
        finally:
            Handler.sent[self.path] = Handler.sent.get(self.path, 0) + sent


def sent_of(path, timeout_s=20):
    """The bytes of `path`'s body the server wrote, once its answer ended (None: it did not)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for key, sent in Handler.sent.items():
            if key.split("?")[0].endswith(path):
                return sent
        time.sleep(0.1)
    return None


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A page that stops reading (the too-big snapshot: refused from its size) is not news.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(directory):
    handler = functools.partial(Handler, directory=str(directory))
    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def browser():
    return headless_browser(
        "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--window-size=1280,800"
    )


def wait_for_mark(driver, timeout_s=90, skip=0):
    """Waits for the app's `tidemark:shown` or `tidemark:failed` mark (after the first `skip`):
    (name, detail, ms since navigation)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        marks = driver.execute_script(
            "return performance.getEntriesByType('mark')"
            ".filter(m => m.name.startsWith('tidemark:') && m.name !== 'tidemark:opened')"
            ".map(m => [m.name, String(m.detail), m.startTime]);"
        )
        if len(marks) > skip:
            return tuple(marks[skip])
        failed = driver.execute_script(
            "const s = document.getElementById('status');"
            "return s && s.className === 'failed' ? s.innerText : null;"
        )
        if failed:
            return ("page:failed", failed, None)
        time.sleep(0.1)
    return (None, None, None)


# Drops a file on the canvas the way a browser does: a DataTransfer holding a File, sent with
# dragenter, dragover and drop events. Arguments: the URL to take the bytes from, the file's name.
DROP_FILE = """
const [url, name, done] = arguments;
fetch(url).then(r => r.arrayBuffer()).then(bytes => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name));
  const canvas = document.getElementById("tidemark_canvas");
  for (const type of ["dragenter", "dragover", "drop"]) {
    canvas.dispatchEvent(new DragEvent(type, {dataTransfer: transfer, bubbles: true, cancelable: true}));
  }
  done(true);
});
"""


def click_canvas(driver, at):
    """Clicks at `at` (CSS pixels from the canvas' top left): the buttons are drawn in it. A
    pause between each event: egui sees the hover, the press and the release in separate
    frames, as from a hand on a mouse."""
    canvas = driver.find_element(By.ID, "tidemark_canvas")
    ActionChains(driver).move_to_element_with_offset(
        canvas,
        at[0] - canvas.size["width"] // 2,
        at[1] - canvas.size["height"] // 2,
    ).pause(0.3).click_and_hold().pause(0.3).release().perform()


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def elsewhere(urls):
    """The requests that left 127.0.0.1 (data: and blob: URLs stay in the page)."""
    return [u for u in urls if not u.startswith(("http://127.0.0.1:", "data:", "blob:"))]


def count_red(image, box):
    """Pixels of red text (egui's error colour), inside `box`."""
    return sum(1 for r, g, b in pixels(image, box) if r > 170 and g < 110 and b < 110)


def open_page(driver, base, query, shot):
    driver.get(base + query)
    name, detail, at_ms = wait_for_mark(driver)
    time.sleep(1.5)  # let the frame after the mark reach the screen
    driver.save_screenshot(str(shot))
    image = Image.open(shot).convert("RGB")
    return name, detail, at_ms, image


# The fetch worker's `filler` (web/fetch-worker.js) in a worker of its own, over a byte stream (read
# by a BYOB reader, as Chromium's fetch bodies are) and over a stream of pieces (copied, as a
# browser without byte streams hands them over), each cut in pieces unlike its parts: the parts
# it fills, and whether they hold the stream's bytes in order.
WORKER_PIECES = [3 << 20, 5 << 20, 1, (2 << 20) + 7, 65536]
WORKER_PARTS_EXPECTED = [[4 << 20, False], [4 << 20, False], [sum(WORKER_PIECES) - (8 << 20), True]]
WORKER_PARTS = """
const done = arguments[arguments.length - 1];
const script = new URL("fetch-worker.js", location.href).href;
const source = `importScripts(${JSON.stringify(script)});
self.onmessage = async (event) => {
  const pieces = event.data;
  const byte = (i) => (i * 7 + 3) & 255;
  const answer = {};
  for (const kind of ["bytes", "pieces"]) {
    let at = 0, k = 0;
    const pull = (c) => {
      if (k === pieces.length) {
        c.close();
        if (c.byobRequest) c.byobRequest.respond(0);
        return;
      }
      const piece = new Uint8Array(pieces[k++]);
      for (let j = 0; j < piece.length; j++) piece[j] = byte(at + j);
      at += piece.length;
      c.enqueue(piece);
    };
    const stream = new ReadableStream(kind === "bytes" ? { type: "bytes", pull } : { pull });
    const fill = filler(stream);
    const sizes = [];
    let same = true, offset = 0;
    for (let end = false; !end;) {
      const [buffer, filled, ended] = await fill(new ArrayBuffer(PART));
      end = ended;
      sizes.push([filled, ended]);
      const part = new Uint8Array(buffer, 0, filled);
      for (let j = 0; j < filled; j++) if (part[j] !== byte(offset + j)) { same = false; break; }
      offset += filled;
    }
    answer[kind] = { sizes, same: same && offset === at };
  }
  postMessage(answer);
};`;
const worker = new Worker(URL.createObjectURL(new Blob([source], { type: "text/javascript" })));
worker.onmessage = (event) => done(event.data);
worker.onerror = (event) => done(String(event.message));
worker.postMessage(%s);
""" % json.dumps(WORKER_PIECES)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    dist, big = Path(sys.argv[1]), Path(sys.argv[2])
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT / "test-output" / "web"
    out.mkdir(parents=True, exist_ok=True)
    if not (dist / "index.html").is_file():
        print(f"{dist}: no index.html (run trunk build --release first)")
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / SUBPATH
        shutil.copytree(dist, site)
        shutil.copy(CORPUS / "forward_keeps_losses.msgpack", site / "leak.msgpack")
        shutil.copy(big, site / "big.msgpack")
        shutil.copy(ROOT / "collector/tests/data/snapshots/mini_snapshot.pickle", site / "snap.pickle")
        real = ROOT.parent / "shared/fixtures/real-snapshots/bcrafton_cs336_training_step.pickle"
        shutil.copy(real, site / "real.pickle")
        extra_snapshot = os.environ.get("WEB_CHECK_SNAPSHOT")  # a big pickle to time, optional
        if extra_snapshot:
            shutil.copy(extra_snapshot, site / "big-snapshot.pickle")
        traces = ROOT / "collector/tests/data/traces/real"
        shutil.copy(traces / "particle_transformer_a100.json", site / "a100.pt.trace.json")
        shutil.copy(traces / "kineto_resnet50_2021.pt.trace.json.gz", site / "resnet.pt.trace.json.gz")
        extra_trace = os.environ.get("WEB_CHECK_TRACE")  # a big profiler trace to time, optional
        if extra_trace:
            try:  # a hard link where it can: the file may be a gigabyte
                os.link(extra_trace, site / "big.pt.trace.json")
            except OSError:
                shutil.copy(extra_trace, site / "big.pt.trace.json")
        (site / "notes.msgpack").write_text("these are notes, not a recording\n")
        # A 3 GB snapshot that takes no disk (sparse): too big for a tab, said from its size.
        with open(site / "huge.pickle", "wb") as f:
            f.truncate(3 << 30)
        broken = Path(tmp) / "broken"  # a copy whose .wasm is damaged: the app cannot start
        shutil.copytree(dist, broken)
        for wasm in broken.glob("*.wasm"):
            wasm.write_bytes(b"\0asm" + b"\xff" * 64)
        noworker = Path(tmp) / "noworker"  # a copy without the worker that fetches files
        shutil.copytree(dist, noworker)
        (noworker / "fetch-worker.js").unlink()
        shutil.copy(CORPUS / "forward_keeps_losses.msgpack", noworker / "leak.msgpack")
        server = serve(tmp)
        base = f"http://127.0.0.1:{server.server_address[1]}/{SUBPATH}"
        print(f"serving {dist} at {base}")
        driver = browser()
        timings = {}
        try:
            print("a leaking recording by ?url=")
            name, detail, at_ms, image = open_page(driver, base, "?url=leak.msgpack", out / "leak.png")
            check(name == "tidemark:shown" and detail == "leak.msgpack", f"shown: {name} {detail}")
            w, h = image.size
            plot = (0, 100, w, h)
            curve = count_near(image, HOST_MEMORY, plot) + count_near(image, DEVICE_USED, plot)
            check(curve > 400, f"curves drawn: {curve} pixels of their colours in the plot")
            red = count_red(image, (0, 0, w, 60))
            check(red > 40, f"verdict drawn: {red} red pixels of the leak headline")
            errors = console_errors(driver)
            check(not errors, f"console errors: {errors}")
            urls = requested_urls(driver)
            foreign = elsewhere(urls)
            check(len(urls) > 0 and not foreign, f"{len(urls)} requests, none elsewhere: {foreign}")
            # The file is fetched by a worker that reads the network while the page parses.
            check(any(u.endswith("/fetch-worker.js") for u in urls), "fetched by the page's worker (fetch-worker.js)")

            print("the fetch worker's parts, from a byte stream and from a stream of pieces")
            parts = driver.execute_async_script(WORKER_PARTS)
            for kind in ("bytes", "pieces"):
                got = parts.get(kind) if isinstance(parts, dict) else parts
                check(
                    isinstance(got, dict) and got.get("sizes") == WORKER_PARTS_EXPECTED and got.get("same"),
                    f"{kind}: parts of 4 MiB with the stream's bytes in order, the last one ending it: {got}",
                )

            print("a site without its fetch worker: ?url= still opens (the page fetches it itself)")
            name, detail, _, image = open_page(
                driver, f"http://127.0.0.1:{server.server_address[1]}/noworker/", "?url=leak.msgpack", out / "noworker.png"
            )
            check(name == "tidemark:shown" and detail == "leak.msgpack", f"shown: {name} {detail}")
            driver.get_log("browser")  # the worker's 404 is logged

            print("a PyTorch memory snapshot by ?url=")
            name, detail, at_ms, image = open_page(driver, base, "?url=snap.pickle", out / "snapshot.png")
            check(name == "tidemark:shown" and detail == "snap.pickle", f"shown: {name} {detail}")
            check(count_near(image, ALLOCATED, (0, 100, w, h)) > 300, "the allocated curve is drawn")
            errors = console_errors(driver)
            check(not errors, f"console errors: {errors}")
            # Its fetch began in the page's script, before the .wasm was compiled; the app took
            # the worker over.
            begun = marks(driver, "stage:fetch-begun-by-the-page")
            check([m[1] for m in begun] == ["snap.pickle"], f"fetch begun by the page: {begun}")
            print("a real snapshot's memory timeline and segments (the Memory timeline tab)")
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FRAME_SHIM})
            name, detail, at_ms, image = open_page(driver, base, "?url=real.pickle", out / "real-snapshot.png")
            check(name == "tidemark:shown" and detail == "real.pickle", f"shown: {name} {detail}")
            for view, button, colours in (
                ("memory-timeline", MEMORY_TAB, (SITE_0,)),
                ("segment-timeline", SEGMENTS_TOGGLE, (SITE_0, SEGMENT_FREE)),
            ):
                click_canvas(driver, button)
                time.sleep(1.5)
                driver.save_screenshot(str(out / f"{view}.png"))
                image = Image.open(out / f"{view}.png").convert("RGB")
                for colour in colours:
                    drawn = count_near(image, colour, (80, 120, w, h))
                    check(drawn > 5000, f"{view}: {drawn} pixels of {colour} in the plot")
                errors = console_errors(driver)
                check(not errors, f"{view}: console errors: {errors}")
                n, median, p95 = frame_times(driver)
                check(n > 0, f"{view}: {n} frames drawn while the pointer moved")
                timings[f"{view}_frame_ms"] = [n, median, p95]
                if n:
                    print(f"  {view}: {n} frames while the pointer moves: median {median:.2f} ms, p95 {p95:.2f} ms a frame")
            if extra_snapshot:
                name, detail, at_ms, image = open_page(
                    driver, base, "?url=big-snapshot.pickle", out / "big-snapshot.png"
                )
                check(name == "tidemark:shown", f"big snapshot shown: {name} {detail}")
                timings["big_snapshot_first_frame_ms"] = at_ms
                # Where the time went: the bytes read (and a snapshot parsed as they came), the
                # run judged and its views made, then the first frame (`at_ms`).
                stages = driver.execute_script(
                    "return performance.getEntriesByType('mark')"
                    ".filter(m => m.name.startsWith('stage:')).map(m => [m.name, m.startTime, String(m.detail)]);"
                )
                timings["big_snapshot_stages_ms"] = {n: t for n, t, _ in stages}
                print("  stages: " + ", ".join(f"{n} {t:.0f} ms ({d})" for n, t, d in stages))
                heap = driver.execute_script("return performance.memory && performance.memory.usedJSHeapSize")
                wasm = driver.execute_script(
                    "const m = performance.getEntriesByName('wasm-memory'); return m.length ? m[m.length - 1].detail : null;"
                )
                timings["big_snapshot_wasm_memory_bytes"] = wasm
                print(
                    f"  {extra_snapshot}: first frame after {at_ms:.0f} ms (wasm memory {wasm / 1e6:.0f} MB, JS heap {heap / 1e6:.0f} MB)"
                    if wasm and heap
                    else f"  {extra_snapshot}: first frame after {at_ms:.0f} ms"
                )
                for view, button in (("memory-timeline", MEMORY_TAB), ("segment-timeline", SEGMENTS_TOGGLE)):
                    click_canvas(driver, button)
                    time.sleep(5)  # the layout, then the picture
                    driver.save_screenshot(str(out / f"big-snapshot-{view}.png"))
                    n, median, p95 = frame_times(driver)
                    timings[f"big_snapshot_{view}_frame_ms"] = [n, median, p95]
                    if n:
                        print(f"  {view}: {n} frames while the pointer moves: median {median:.2f} ms, p95 {p95:.2f} ms a frame")

            for trace in ("a100.pt.trace.json", "resnet.pt.trace.json.gz"):
                print(f"a PyTorch profiler trace by ?url= ({trace})")
                name, detail, at_ms, image = open_page(driver, base, f"?url={trace}", out / f"{trace}.png")
                check(name == "tidemark:shown" and detail == trace, f"shown: {name} {detail}")
                # Without the totals (the 2021 trace), reserved is drawn equal to allocated, over it.
                drawn = count_near(image, ALLOCATED, (0, 100, w, h)) + count_near(image, RESERVED, (0, 100, w, h))
                check(drawn > 300, f"the allocated (or reserved, over it) curve is drawn: {drawn} pixels")
                errors = console_errors(driver)
                check(not errors, f"console errors: {errors}")
            if extra_trace:
                name, detail, at_ms, image = open_page(driver, base, "?url=big.pt.trace.json", out / "big-trace.png")
                check(name == "tidemark:shown", f"big trace shown: {name} {detail}")
                timings["big_trace_first_frame_ms"] = at_ms
                wasm = driver.execute_script(
                    "const m = performance.getEntriesByName('wasm-memory'); return m.length ? m[m.length - 1].detail : null;"
                )
                timings["big_trace_wasm_memory_bytes"] = wasm
                print(f"  {extra_trace}: first frame after {at_ms:.0f} ms" + (f" (wasm memory {wasm / 1e6:.0f} MB)" if wasm else ""))

            print("no ?url=: the embedded example")
            name, detail, at_ms, image = open_page(driver, base, "", out / "example.png")
            check(name == "tidemark:shown" and detail.startswith("example:"), f"shown: {name} {detail}")
            check(count_near(image, HOST_MEMORY, (0, 100, w, h)) > 400, "example curves drawn")

            print("a file dropped onto the page")
            driver.execute_async_script(DROP_FILE, "leak.msgpack", "dropped.msgpack")
            name, detail, _ = wait_for_mark(driver, skip=1)
            time.sleep(1.5)
            driver.save_screenshot(str(out / "dropped.png"))
            check(name == "tidemark:shown" and detail == "dropped.msgpack", f"shown: {name} {detail}")
            image = Image.open(out / "dropped.png").convert("RGB")
            check(count_red(image, (0, 0, w, 60)) > 40, "the dropped file's verdict is drawn")

            print("Save image: the view downloads as a PNG")
            downloads = Path(tmp) / "downloads"
            downloads.mkdir()
            driver.execute_cdp_cmd(
                "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
            )
            saved = None
            for _ in range(3):
                click_canvas(driver, SAVE_BUTTON)
                for _ in range(50):
                    done = [p for p in downloads.glob("*.png") if p.stat().st_size > 0]
                    if done:
                        saved = done[0]
                        break
                    time.sleep(0.1)
                if saved:
                    break
            check(saved is not None and saved.name == "tidemark.png", f"downloaded: {saved}")
            if saved:
                time.sleep(0.5)  # the download's last bytes
                picture = Image.open(saved).convert("RGB")
                check(picture.size[0] >= 1000, f"the PNG is the view: {picture.size}")
                drawn = count_red(picture, (0, 0, picture.size[0], 60 * picture.size[0] // w))
                check(drawn > 40, f"the PNG shows the verdict: {drawn} red pixels")
            check(not elsewhere(requested_urls(driver)), "the download made no request elsewhere")

            print("a file opened with Open… (the browser's file picker)")
            driver.get(base)
            wait_for_mark(driver)
            # Headless Chromium cancels a file chooser at once; intercepted, the page keeps its
            # <input type=file> waiting, and the test fills it as a user's choice would.
            driver.execute_cdp_cmd("Page.enable", {})
            driver.execute_cdp_cmd("Page.setInterceptFileChooserDialog", {"enabled": True})
            picked = []
            for _ in range(3):
                click_canvas(driver, OPEN_BUTTON)
                for _ in range(30):
                    picked = driver.find_elements(By.CSS_SELECTOR, "#rfd-overlay input[type=file]")
                    if picked:
                        break
                    time.sleep(0.1)
                if picked:
                    break
            check(bool(picked), "Open… shows the browser's file picker")
            if picked:
                picked[0].send_keys(str(site / "leak.msgpack"))  # what choosing a file does
                name, detail, _ = wait_for_mark(driver, skip=1)
                check(name == "tidemark:shown" and detail == "leak.msgpack", f"picked: {name} {detail}")

            for query, expect, shot in (
                ("?url=missing.msgpack", "404", "missing.png"),
                ("?url=notes.msgpack", "notes.msgpack", "not-a-recording.png"),
                ("?url=https://example.com/run.msgpack", "only recordings hosted next to", "other-origin.png"),
                ("?url=huge.pickle", "is more than a browser tab can open", "too-big.png"),
            ):
                print(f"a bad {query}")
                name, detail, _, image = open_page(driver, base, query, out / shot)
                check(name == "tidemark:failed" and expect in detail, f"failed: {name} {detail!r}")
                red = count_red(image, (0, 0, w, h))
                check(red > 40, f"the error is drawn in the page: {red} red pixels")
                foreign = elsewhere(requested_urls(driver))
                check(not foreign, f"no request left 127.0.0.1: {foreign}")
                if query == "?url=huge.pickle":
                    # Refused from its size, also by the fetch the page begins before the app
                    # runs: what went out is what the sockets hold, not the 64 MiB read ahead.
                    sent = sent_of("/huge.pickle")
                    check(sent is not None and sent < 32 << 20, f"not downloaded: {sent} bytes of it sent")
                driver.get_log("browser")

            print("a site whose .wasm is damaged: the page says so")
            driver.get(f"http://127.0.0.1:{server.server_address[1]}/broken/")
            name, detail, _ = wait_for_mark(driver, timeout_s=30)
            driver.save_screenshot(str(out / "cannot-start.png"))
            check(name == "page:failed" and "could not run" in detail, f"start failure shown: {detail!r}")
            driver.get_log("browser")

            print("1 million samples: navigation to first drawn frame")
            runs = []
            for _ in range(3):
                name, detail, at_ms, image = open_page(driver, base, "?url=big.msgpack", out / "big.png")
                check(name == "tidemark:shown", f"shown: {name} {detail}")
                runs.append(at_ms)
            check(count_near(image, DEVICE_USED, (0, 100, w, h)) > 400, "big: curves drawn")
            errors = console_errors(driver)
            check(not errors, f"console errors: {errors}")
            timings["first_frame_1M_samples_ms"] = runs
            print(f"  navigation to first drawn frame, 1M samples: {', '.join(f'{t:.0f} ms' for t in runs if t)}")
        finally:
            driver.quit()
            server.shutdown()

    wasm = sorted(dist.glob("*.wasm"))
    if wasm:
        import gzip

        raw = wasm[0].read_bytes()
        timings["wasm_bytes"] = len(raw)
        timings["wasm_gzip_bytes"] = len(gzip.compress(raw, 9))
        print(f"  {wasm[0].name}: {len(raw) / 1e6:.2f} MB raw, {timings['wasm_gzip_bytes'] / 1e6:.2f} MB gzipped")
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    print(f"screenshots and timings in {out}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
