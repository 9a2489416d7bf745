"""An example job for tidemark, with no dependencies: a training loop whose evaluation keeps its
"predictions" (host memory standing in for GPU memory), the way `preds.append(out)` leaks.

    collector --out run.msgpack -- python3 collector/examples/leaky_job.py
    collector report run.msgpack
"""
import mmap
import time

import tidemark  # put on the path by the collector (or `pip install ./collector`); a no-op without it


def tensor(mib):
    block = mmap.mmap(-1, mib << 20)
    block.write(b"\x01" * (mib << 20))  # touch it: resident memory, like a real tensor
    return block


predictions = []
for step in range(40):
    tidemark.step(step)
    with tidemark.phase("forward"):
        time.sleep(0.005)  # the forward pass computes, then holds its activations
        activations = tensor(24)
        time.sleep(0.005)
    with tidemark.phase("backward"):
        time.sleep(0.005)
        activations.close()  # freed after backward: the sawtooth
    with tidemark.phase("optimizer"):
        time.sleep(0.005)
    if step % 2 == 1:
        with tidemark.phase("eval"):
            time.sleep(0.005)
            predictions.append(tensor(6))  # the leak: kept for the whole run
print(f"trained 40 steps, kept {len(predictions)} predictions")
