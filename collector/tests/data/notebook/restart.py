"""Restarts a real Jupyter kernel (ipykernel, driven by jupyter_client) while it records itself,
as Jupyter's "Restart kernel" does (the kernel killed, a new one started), then runs a cell in
the new kernel; prints the old kernel's pid and what the new one printed, as JSON.

    python restart.py RECORDING

The kernel finds `tidemark` and the collector through PYTHONPATH and TIDEMARK_COLLECTOR.
"""
import json
import sys

from jupyter_client.manager import KernelManager


def run(client, code):
    """Runs `code`; what it printed."""
    reply = client.execute_interactive(code, timeout=120, output_hook=lambda m: printed.append(m))
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{code!r}: {reply['content']}")
    return "".join(
        m["content"].get("text", "") for m in printed if m["msg_type"] == "stream"
    )


printed = []
kernel = KernelManager(kernel_name="python3")
kernel.start_kernel()
client = kernel.client()
client.start_channels()
try:
    client.wait_for_ready(timeout=60)
    run(client, "%load_ext tidemark")
    run(client, f"%tidemark start {sys.argv[1]}")
    printed.clear()
    pid = run(client, "import os, torch\nkept = [torch.ones(1 << 20) for _ in range(8)]\nprint(os.getpid())").strip()
    kernel.restart_kernel(now=True)
    client.wait_for_ready(timeout=60)
    printed.clear()
    after = run(client, "import os\nprint(os.getpid())").strip()
finally:
    client.stop_channels()
    kernel.shutdown_kernel(now=True)
print(json.dumps({"old": int(pid), "new": int(after)}))
