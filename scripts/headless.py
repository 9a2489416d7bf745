"""What the browser checks and benches (web-check.py, html-check.py, serve-bench.py,
tab-profile.py) share: headless Debian Chromium driven by Selenium with no network of its own, a
quiet local server, the app's performance marks, the requests a page made, pixel counts, and the
ok/FAIL lines they print."""
import functools
import http.server
import json
import os
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

failures = []


def check(ok, what):
    print(("  ok   " if ok else "  FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def browser(*args):
    """Chromium with `args` added to the flags every check uses."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--force-color-profile=srgb",
        *args,
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    os.environ["SE_OFFLINE"] = "true"  # never let Selenium download a browser or a driver
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def requested_urls(driver):
    """Every URL the page requested since the last call (the performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def pixels(image, box=None):
    data = (image.crop(box) if box else image).tobytes()
    return zip(data[0::3], data[1::3], data[2::3])


def count_near(image, colour, box=None, tolerance=40):
    """Pixels within `tolerance` (per channel) of `colour`, inside `box` (l, t, r, b)."""
    r0, g0, b0 = colour
    return sum(
        1
        for r, g, b in pixels(image, box)
        if abs(r - r0) <= tolerance and abs(g - g0) <= tolerance and abs(b - b0) <= tolerance
    )


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def copyfile(self, source, outputfile):
        # A file's body handed to the kernel (sendfile), as a static web server sends it: copied
        # through Python 64 KiB at a time it took ~0.7 s of CPU for a 636 MB file, on the two
        # cores the browser under test has.
        try:
            self.wfile.flush()
            self.connection.sendfile(source)
        except (AttributeError, OSError, ValueError):
            super().copyfile(source, outputfile)


def serve_quietly(directory):
    """`directory` served on 127.0.0.1 (a free port) from a thread, logging nothing."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def marks(driver, *prefixes):
    """The page's performance marks whose names start with one of `prefixes` (default: the
    app's `tidemark:` marks): [name, detail as text, ms since navigation], in order."""
    return driver.execute_script(
        "const p = arguments[0];"
        "return performance.getEntriesByType('mark')"
        ".filter(m => p.some(x => m.name.startsWith(x)))"
        ".map(m => [m.name, String(m.detail), m.startTime]);",
        list(prefixes or ("tidemark:",)),
    )


def wait(what, timeout_s=90):
    """Waits until `what()` is true, asking every 0.2 s; what it returned (None when it never was)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    return None
