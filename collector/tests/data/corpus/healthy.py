"""A sawtooth: every step takes 32 MiB and gives it back."""
import tidemark
from common import allocate, work

for step in range(60):
    tidemark.step(step)
    with tidemark.phase("forward"):
        activations = allocate(32)
        work()
    with tidemark.phase("backward"):
        work()
        activations.close()
    with tidemark.phase("optimizer"):
        work()
