"""Forward keeps every loss with its graph (4 MiB a step); eval every 5th step is clean."""
import tidemark
from common import allocate, work

losses = []
for step in range(60):
    tidemark.step(step)
    with tidemark.phase("forward"):
        activations = allocate(16)
        work()
        losses.append(allocate(4))
    with tidemark.phase("backward"):
        work()
        activations.close()
    with tidemark.phase("optimizer"):
        work()
    if step % 5 == 4:
        with tidemark.phase("eval"):
            scratch = allocate(8)
            work()
            scratch.close()
