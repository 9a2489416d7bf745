"""Eval keeps its predictions (8 MiB per eval, every 3rd step); training phases are clean."""
import tidemark
from common import allocate, work

predictions = []
for step in range(60):
    tidemark.step(step)
    with tidemark.phase("forward"):
        activations = allocate(16)
        work()
    with tidemark.phase("backward"):
        work()
        activations.close()
    with tidemark.phase("optimizer"):
        work()
    if step % 3 == 2:
        with tidemark.phase("eval"):
            work()
            predictions.append(allocate(8))
            work()
