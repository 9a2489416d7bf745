#!/usr/bin/env python3
"""`collector serve` in a real browser: starts the collector's server on a folder of runs (with a
token, and the web viewer from DIST), opens its page in headless Chromium, and checks what a user
sees.

  scripts/serve-check.py COLLECTOR DIST [OUT]     (OUT default: test-output/serve)

- the page, opened by the printed URL (with its token): every run is listed, with its kind;
- a finished recording, opened from its link: the viewer draws its curves and verdict (pixels of
  their colours), with no console error and no request leaving 127.0.0.1;
- two runs picked on the page (their picks kept while the rows refresh) and opened together: the
  viewer opens both, to compare them;
- a recording still being written (a file that grows while the page is open), opened from its
  link (which asks the viewer to follow it): it is shown from its first bytes, then the viewer
  fetches what is added (`Range: bytes=N-`) and shows more samples (the app's `tidemark:grew`
  performance mark counts them), with no console error (nor one for a file that stopped growing);
- a folder of per-rank snapshots, opened from its link: each rank's file fetched, the ranks shown
  as one run with their traces drawn;
- a folder of two nodes' recordings, both being written by real `collector` processes, opened from
  its link (which asks the viewer to follow it whole): shown, then fetched whole again as the
  files change (`If-None-Match`) and shown with more samples, with no console error.

Screenshots go to OUT. Needs what scripts/web-check.py needs.
"""

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless import browser as headless_browser, check, count_near, failures, requested_urls, wait  # noqa: E402
from headless import marks as page_marks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "collector" / "tests" / "data" / "corpus"
TOKEN = "check-token-0123"

# Colours the viewer draws with (collector/src/palette.rs).
HOST_MEMORY = (0xCC, 0x79, 0xA7)
DEVICE_USED = (0x00, 0x9E, 0x73)
ALLOCATED = (0xD5, 0x5E, 0x00)
RESERVED = (0x00, 0x72, 0xB2)


def browser():
    return headless_browser(
        "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--window-size=1280,800"
    )


def marks(driver):
    """The app's marks: [name, detail as text]."""
    return [m[:2] for m in page_marks(driver)]


def on_fresh(driver, selector, act, timeout_s=30):
    """`act` on the element `selector` finds; found again if the page made its row anew meanwhile."""

    def attempt():
        try:
            found = driver.find_elements(By.CSS_SELECTOR, selector)
            return [act(found[0])] if found else None
        except StaleElementReferenceException:
            return None

    done = wait(attempt, timeout_s)
    return done[0] if done else None


def click(driver, selector):
    return on_fresh(driver, selector, lambda e: e.click() or True)


def link_of(driver, selector, timeout_s=90):
    return on_fresh(driver, selector, lambda e: e.get_attribute("href"), timeout_s) or ""


def curve_pixels(image):
    w, h = image.size
    plot = (0, 100, w, h)
    return count_near(image, HOST_MEMORY, plot) + count_near(image, DEVICE_USED, plot)


def trace_pixels(image):
    """Pixels of a snapshot trace's curves (allocated, reserved)."""
    w, h = image.size
    plot = (0, 100, w, h)
    return count_near(image, ALLOCATED, plot) + count_near(image, RESERVED, plot)


def shot(driver, path):
    time.sleep(1.5)  # the frame after the mark reaches the screen
    driver.save_screenshot(str(path))
    return Image.open(path).convert("RGB")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    collector, dist = Path(sys.argv[1]), Path(sys.argv[2])
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT / "test-output" / "serve"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        (runs / "job-a").mkdir(parents=True)
        finished = (CORPUS / "forward_keeps_losses.msgpack").read_bytes()
        (runs / "job-a" / "leak.msgpack").write_bytes(finished)
        (runs / "healthy.msgpack").write_bytes((CORPUS / "healthy.msgpack").read_bytes())
        # The growing run: half a recording now, the rest while the page shows it.
        whole = (CORPUS / "eval_keeps_predictions.msgpack").read_bytes()
        live = runs / "live.msgpack"
        live.write_bytes(whole[: len(whole) // 2])
        server = subprocess.Popen(
            [str(collector), "serve", "--port", "0", "--token", TOKEN, "--web", str(dist), str(runs)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            url = None
            for line in server.stdout:
                found = re.search(r"open (http://127\.0\.0\.1:\d+/\?token=\S+)", line)
                if found:
                    url = found.group(1)
                    break
            check(url is not None and url.endswith(f"?token={TOKEN}"), f"the URL printed: {url}")
            if url is None:
                return 1
            base = url.split("?")[0]
            driver = browser()
            try:
                print("the runs list")
                driver.get(url)
                rows = wait(lambda: driver.find_elements(By.CSS_SELECTOR, "tr[data-name]"))
                names = sorted(r.get_attribute("data-name") for r in rows or [])
                check(names == ["healthy.msgpack", "job-a/leak.msgpack", "live.msgpack"], f"listed: {names}")
                text = driver.find_element(By.ID, "runs").text
                check(text.count("recording") >= 3, "kinds shown")
                driver.save_screenshot(str(out / "list.png"))
                judged = wait(lambda: "judging" not in driver.find_element(By.ID, "runs").text, 60)
                check(judged is not None, "every run judged, the rows refreshed by the page")
                link = 'document.querySelector(\'tr[data-name="healthy.msgpack"] a.open\')'
                driver.execute_script(f"{link}.tidemarkKept = true")
                time.sleep(2.5)  # a refresh of the rows, the runs' ages changed
                unchanged = driver.execute_script(f"return {link}.tidemarkKept === true")
                check(unchanged, "a run's link is the same element after a refresh (a click on it is not lost)")

                print("a finished recording, opened from the list")
                click(driver, 'tr[data-name="job-a/leak.msgpack"] a.open')
                shown = wait(lambda: [m for m in marks(driver) if m[0] in ("tidemark:shown", "tidemark:failed")])
                check(shown and shown[0][0] == "tidemark:shown", f"shown: {shown}")
                image = shot(driver, out / "leak.png")
                curve = curve_pixels(image)
                check(curve > 400, f"curves drawn: {curve} pixels of their colours")
                errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
                check(not errors, f"console errors: {errors}")
                urls = requested_urls(driver)
                foreign = [u for u in urls if not u.startswith(("http://127.0.0.1:", "data:", "blob:"))]
                check(urls and not foreign, f"{len(urls)} requests, none elsewhere: {foreign}")

                print("two runs picked on the page, opened together to compare them")
                driver.get(url)
                boxes = wait(lambda: driver.find_elements(By.CSS_SELECTOR, "input.pick"))
                for name in ("healthy.msgpack", "job-a/leak.msgpack"):
                    click(driver, f'tr[data-name="{name}"] input.pick')
                time.sleep(2.5)  # the rows are made again: the picks stay
                kept = driver.execute_script(  # at once: a growing run's row may be made anew meanwhile
                    "return [...document.querySelectorAll('input.pick:checked')].map((b) => b.dataset.url)"
                )
                check(len(kept) == 2, f"picked, kept across the rows' refresh: {kept}")
                driver.find_element(By.ID, "together").click()
                both = wait(lambda: len({d for n, d in marks(driver) if n == "tidemark:opened"}) == 2 or None, 60)
                opened = sorted({d for n, d in marks(driver) if n == "tidemark:opened"})
                check(bool(both) and len(opened) == 2, f"both opened, each in its tab: {opened}")
                shown = wait(lambda: [d for n, d in marks(driver) if n == "tidemark:shown"], 30)
                check(bool(shown), f"one shown: {shown}")
                shot(driver, out / "together.png")
                errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
                check(not errors, f"console errors: {errors}")

                print("a growing recording, followed")
                live.write_bytes(whole[: len(whole) // 2])  # changed just now: growing
                driver.get(url)
                href = link_of(driver, 'tr[data-name="live.msgpack"] a.open')
                check("follow=1" in href, f"the link asks to follow: {href}")
                driver.get(href)
                shown = wait(lambda: [m for m in marks(driver) if m[0] in ("tidemark:shown", "tidemark:failed")])
                check(shown and shown[0][0] == "tidemark:shown", f"shown from its first bytes: {shown}")
                before = shot(driver, out / "live-before.png")
                check(curve_pixels(before) > 100, f"drawn from its first bytes: {curve_pixels(before)} pixels")
                first = max((float(d) for n, d in marks(driver) if n == "tidemark:grew"), default=0.0)
                with open(live, "ab") as f:
                    f.write(whole[len(whole) // 2:])
                grew = wait(
                    lambda: [float(d) for n, d in marks(driver) if n == "tidemark:grew" and float(d) > first],
                    30,
                )
                check(bool(grew), f"new samples shown: {first:.0f} → {max(grew or [0]):.0f}")
                after = shot(driver, out / "live-after.png")
                ranged = [u for u in requested_urls(driver) if "/runs/live.msgpack" in u]
                check(len(ranged) >= 2, f"fetched again as it grew: {len(ranged)} requests")
                check(curve_pixels(after) > 100, f"drawn as it grew: {curve_pixels(after)} pixels")
                errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
                check(not errors, f"console errors: {errors}")

                print("a folder of per-rank snapshots, opened as one run")
                ranks = runs / "ranks"
                ranks.mkdir()
                real = ROOT.parent / "shared" / "fixtures" / "real-snapshots"
                for rank, name in enumerate(["cs336_large_fw_bw_fp32.pickle", "cs336_large_fw_bw_bf16.pickle"]):
                    (ranks / f"rank{rank}_memory_snapshot.pickle").write_bytes((real / name).read_bytes())
                driver.get(url)
                href = link_of(driver, 'tr[data-name="ranks"] a.open', 30)
                check("ranks=ranks" in href and href.count("url=") == 2, f"the folder's link names its files: {href}")
                driver.get(href)
                shown = wait(lambda: [m for m in marks(driver) if m[0] in ("tidemark:shown", "tidemark:failed")], 60)
                check(shown and shown[0] == ["tidemark:shown", "ranks"], f"the ranks shown as one run: {shown}")
                image = shot(driver, out / "ranks.png")
                check(trace_pixels(image) > 100, f"their traces drawn: {trace_pixels(image)} pixels")
                # Fetched by the page's worker (not in the page's own network log): the app marks
                # each file it read.
                asked = driver.execute_script(
                    "return performance.getEntriesByName('stage:read').map(m => String(m.detail));"
                )
                asked = [u for u in asked if "/runs/ranks/rank" in u]
                check(len(asked) == 2, f"each rank's snapshot fetched: {asked}")
                errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
                check(not errors, f"console errors: {errors}")

                print("a folder of two nodes' recordings, both still written, followed")
                nodes = runs / "nodes"
                nodes.mkdir()
                jobs = [
                    subprocess.Popen(
                        [str(collector), "--no-probe", "--out", str(nodes / f"node-{rank}.msgpack"),
                         "--", sys.executable, "-c", "import time\nfor _ in range(400): time.sleep(0.05)"],
                        env={**os.environ, "TIDEMARK_HOSTNAME": f"node-{rank}"},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for rank in (0, 1)
                ]
                try:
                    driver.get(url)
                    href = link_of(driver, 'tr[data-name="nodes"] a.open', 30)
                    check("follow=whole" in href, f"the folder's link asks to follow it whole: {href}")
                    driver.get(href)
                    first = wait(lambda: [float(d) for n, d in marks(driver) if n == "tidemark:grew"], 30)
                    check(bool(first), f"shown with its first samples: {first}")
                    start = max(first or [0.0])
                    grew = wait(
                        lambda: [float(d) for n, d in marks(driver) if n == "tidemark:grew" and float(d) > start],
                        30,
                    )
                    check(bool(grew), f"the nodes' new samples shown: {start:.0f} → {max(grew or [0]):.0f}")
                    shot(driver, out / "nodes.png")
                    asked = [u for u in requested_urls(driver) if u.split("?")[0].endswith("/runs/nodes")]
                    check(len(asked) >= 2, f"the folder asked for again: {len(asked)} requests")
                    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
                    check(not errors, f"console errors: {errors}")
                finally:
                    for job in jobs:
                        job.kill()
                        job.wait()
            finally:
                driver.quit()
        finally:
            server.kill()
            server.wait()
    if failures:
        print(f"FAILED: {len(failures)} checks (screenshots in {out})")
        return 1
    print("serve check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
