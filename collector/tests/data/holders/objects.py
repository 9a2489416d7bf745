"""Leaks that are not tensors, in a real PyTorch training loop on the CPU, one per argument.

No tidemark calls: phases come from the probe's automatic hooks.

    python objects.py figures|closed|records [STEPS]

figures: an evaluation every third step draws the predictions with pyplot and saves the figure,
never closing it (pyplot keeps every figure it makes); closed: the same, closing each figure (a
reference cycle, freed when Python's cycle collector runs); records: each step keeps a record of
its statistics, Python objects and no tensors (50,000 numbers a step).
"""
import io
import sys

import torch
from torch import nn

CASE = sys.argv[1]
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 90
torch.manual_seed(0)
torch.set_num_threads(1)

if CASE in ("figures", "closed"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["figure.max_open_warning"] = 0  # (its warning is the job's, not the probe's)


class Record:
    """What a step kept of itself."""

    def __init__(self, step, loss, values):
        self.step = step
        self.loss = loss
        self.values = values


history = []


def main():
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(512, 256)
    target = torch.randn(512, 256)
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if CASE == "records":
            history.append(Record(step, losses[-1], [float(i) for i in range(50_000)]))
        if CASE in ("figures", "closed") and step % 3 == 2:
            model.eval()
            with torch.no_grad():
                pred = model(x)
            fig, axes = plt.subplots(1, 2, figsize=(16, 8))
            axes[0].plot(losses)
            axes[1].imshow(pred[:128, :128].numpy())
            fig.savefig(io.BytesIO(), format="png")
            if CASE == "closed":
                plt.close(fig)
            model.train()
    print(f"{CASE}: done, last loss {losses[-1]}")


main()
