#!/usr/bin/env python3
"""`%tidemark view` in a real browser: a real Jupyter kernel (ipykernel, driven by jupyter_client)
records itself, and `%tidemark view` puts the viewer in the cell's output. That output's HTML,
as a notebook page shows it, opened in headless Chromium: the frame draws the kernel's memory
curve, then follows the recording as the kernel runs more cells; the viewer's server ends with
the kernel.

  scripts/notebook-check.py COLLECTOR DIST [OUT]     (OUT default: test-output/notebook)

COLLECTOR is the collector binary (its viewer is DIST, `trunk build --release`'s folder, given to
the kernel as TIDEMARK_WEB). Screenshots go to OUT. Needs what scripts/web-check.py needs, and
Python ipykernel and jupyter_client.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import KernelManager
from PIL import Image
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless import browser as headless_browser, check, count_near, failures, wait  # noqa: E402
from headless import marks as page_marks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The colour the viewer draws host memory with (collector/src/palette.rs).
HOST_MEMORY = (0xCC, 0x79, 0xA7)


def execute(client, code, timeout_s=120):
    """Runs `code` in the kernel; its outputs as (message type, content), in order."""
    msg_id = client.execute(code)
    outputs = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = client.get_iopub_msg(timeout=deadline - time.monotonic())
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "status" and content["execution_state"] == "idle":
            return outputs
        if kind in ("stream", "display_data", "execute_result", "error"):
            outputs.append((kind, content))
    raise TimeoutError(f"the kernel did not finish {code!r}")


def marks(driver):
    """The app's marks: [name, detail as text]."""
    return [m[:2] for m in page_marks(driver)]


def frames_of(outputs):
    """The HTML of the displays among a cell's outputs."""
    return [c["data"].get("text/html", "") for k, c in outputs if k == "display_data"]


def show_cell(driver, page, label, frame):
    """Opens a page holding `frame` (a cell's output HTML) as a notebook shows it, and waits in the
    frame for the viewer to show its run: its first mark, and the seconds since the page opened.
    The driver is left in the frame."""
    page.write_text(f"<!DOCTYPE html><html><body><p>{label}</p>{frame}</body></html>")
    started = time.monotonic()
    driver.get(page.as_uri())
    driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
    drawn = wait(lambda: [m for m in marks(driver) if m[0] in ("tidemark:shown", "tidemark:failed")])
    return drawn, time.monotonic() - started


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    collector, dist = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    out = Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT / "test-output" / "notebook"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "collector" / "probe"),
            "TIDEMARK_COLLECTOR": str(collector),
            "TIDEMARK_WEB": str(dist),
            "OMP_NUM_THREADS": "1",
        }
        kernel = KernelManager(kernel_name="python3")
        kernel.start_kernel(env=env, cwd=tmp)
        client = kernel.client()
        client.start_channels()
        driver, pid = None, 0
        try:
            client.wait_for_ready(timeout=60)
            print("a kernel records itself and shows the viewer in a cell")
            execute(client, "%load_ext tidemark")
            execute(client, f"%tidemark start {tmp}/nb.msgpack")
            execute(client, "import torch\nkept = [torch.ones(1 << 22) for _ in range(8)]\nimport time; time.sleep(1)")
            shown = execute(client, "%tidemark view")
            frames = frames_of(shown)
            check(len(frames) == 1 and "<iframe" in frames[0], f"the cell's output holds a frame: {shown}")
            if not frames:
                return 1
            page = Path(tmp) / "notebook.html"
            driver = headless_browser(
                "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--window-size=1280,800"
            )
            drawn, took = show_cell(driver, page, "Out[4]:", frames[0])
            check(drawn and drawn[0][0] == "tidemark:shown", f"the viewer in the frame shows the recording: {drawn}")
            print(f"  the frame drawn {took:.1f} s after the page was opened")
            time.sleep(1.5)  # the frame after the mark reaches the screen
            driver.switch_to.default_content()
            driver.save_screenshot(str(out / "cell.png"))
            image = Image.open(out / "cell.png").convert("RGB")
            curve = count_near(image, HOST_MEMORY, (0, 60, image.size[0], image.size[1]))
            check(curve > 100, f"the kernel's memory drawn in the frame: {curve} pixels of its colour")

            print("the kernel runs on: the frame follows its recording")
            driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
            first = max((float(d) for n, d in marks(driver) if n == "tidemark:grew"), default=0.0)
            execute(client, "more = [torch.ones(1 << 22) for _ in range(8)]\ntime.sleep(3)")
            grew = wait(lambda: [float(d) for n, d in marks(driver) if n == "tidemark:grew" and float(d) > first], 60)
            check(bool(grew), f"new samples shown: {first:.0f} → {max(grew or [0]):.0f}")
            errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            check(not errors, f"console errors: {errors}")
            driver.switch_to.default_content()
            driver.save_screenshot(str(out / "cell-grown.png"))

            # The budget's measure (said, not judged: budgets are benchmarks' to check): a
            # 1-million-sample recording in the kernel's folder, viewed in a cell.
            synthetic = collector.parent / "examples" / "synthetic"
            if synthetic.exists():
                big = Path(tmp) / "big.msgpack"
                subprocess.run([str(synthetic), str(big), "1000000"], check=True, stdout=subprocess.DEVNULL)
                frames = frames_of(execute(client, f"%tidemark view {big}"))
                drawn, took = show_cell(driver, page, "Out[8]:", frames[0] if frames else "")
                check(drawn and drawn[0][0] == "tidemark:shown", f"a 1-million-sample recording shown in a cell: {drawn}")
                print(f"  measured: the 1-million-sample recording drawn {took:.2f} s after the page was opened")
                driver.switch_to.default_content()
                driver.save_screenshot(str(out / "cell-1M.png"))
            server = execute(client, "import tidemark.notebook as nb\nprint(nb._server[0].pid)")
            pid = int("".join(c.get("text", "") for k, c in server if k == "stream").strip() or 0)
            execute(client, "%tidemark stop")
        finally:
            if driver is not None:
                driver.quit()
            client.stop_channels()
            kernel.shutdown_kernel(now=False)
        gone = wait(lambda: not Path(f"/proc/{pid}").exists(), 15)
        check(pid > 0 and bool(gone), f"the viewer's server ({pid}) ended with the kernel")
    if failures:
        print(f"FAILED: {len(failures)} checks (screenshots in {out})")
        return 1
    print("notebook check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
