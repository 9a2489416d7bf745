#!/usr/bin/env python3
"""The HTML report in a real browser: `collector report --html` of the corpus recordings, opened
in headless Chromium from file:// and served from 127.0.0.1, checked the way a user sees it.

  scripts/html-check.py COLLECTOR [OUT]     (OUT default: test-output/html)

For each recording: the page shows the verdict (the headline of `collector report --json`), the
picture is drawn (pixels of the curves' colours in the screenshot), the console is clean, and no
request is made at all (file://) or none but the page itself (served). Screenshots go to OUT.
Needs /usr/bin/chromium, /usr/bin/chromedriver, and Python selenium and pillow.
"""

import functools
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from PIL import Image
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless import browser as headless_browser, check, count_near, failures, requested_urls  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "collector" / "tests" / "data"
# The palette (collector/src/palette.rs): the curves' colours.
CURVES = {"host memory": (0xCC, 0x79, 0xA7), "allocated": (0xD5, 0x5E, 0x00)}
RECORDINGS = [
    (DATA / "corpus" / "eval_keeps_predictions.msgpack", "host memory"),
    (DATA / "corpus" / "healthy.msgpack", "host memory"),
    (DATA / "golden_v1_2.msgpack", "allocated"),
]

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def browser():
    return headless_browser("--window-size=1200,1400", "--allow-file-access-from-files")


def main():
    collector = sys.argv[1]
    out = Path(sys.argv[2] if len(sys.argv) > 2 else ROOT / "test-output" / "html").resolve()
    out.mkdir(parents=True, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    driver = browser()
    try:
        for recording, curve in RECORDINGS:
            name = recording.stem
            page = out / f"{name}.html"
            run = subprocess.run([collector, "report", str(recording), "--html", str(page)],
                                 capture_output=True, text=True)
            check(run.returncode == 0, f"{name}: report --html ran ({run.stderr.strip()[:200]})")
            report = json.loads(subprocess.run([collector, "report", str(recording), "--json"],
                                               capture_output=True, text=True, check=True).stdout)
            findings = report["analysis"]["findings"]
            problems = [f["title"] for f in findings if f["kind"] in
                        ("oom", "failed", "leak", "fragmentation", "peak_creep", "capacity_pressure", "state_growth")]
            for how, url in (("file://", page.as_uri()), ("served", base + page.name)):
                driver.get_log("performance")  # forget earlier requests
                driver.get(url)
                time.sleep(0.5)
                shot = out / f"{name}-{how.strip(':/')}.png"
                driver.save_screenshot(str(shot))
                image = Image.open(shot).convert("RGB")
                verdict = driver.find_element(By.CLASS_NAME, "verdict").text
                if problems:
                    check(verdict == problems[0], f"{name} ({how}): the verdict reads {verdict!r}")
                else:
                    check(bool(verdict), f"{name} ({how}): a verdict is shown: {verdict!r}")
                drawn = count_near(image, CURVES[curve], tolerance=30)
                check(drawn > 200, f"{name} ({how}): the {curve} curve is drawn ({drawn} pixels)")
                errors = [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "WARNING")]
                check(not errors, f"{name} ({how}): the console is clean {errors[:2]}")
                urls = [u for u in requested_urls(driver) if u != url]
                check(not urls, f"{name} ({how}): no request made {urls[:3]}")
    finally:
        driver.quit()
        server.shutdown()
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("the HTML report: all checks passed")


if __name__ == "__main__":
    main()
