"""A small PyTorch training loop for checking the collector on a real GPU.

    python train.py [--leak none|losses|eval|oom] [--steps N]

--leak losses   keeps every loss with its graph (`losses.append(loss)`): forward/backward leak
--leak eval     keeps every eval prediction on the GPU: an eval-only leak
--leak oom      keeps 256 MiB of activations per step until the device is full: a leak-driven
                out-of-memory error (run it with `collector --history` for the snapshot)
"""
import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--leak", choices=["none", "losses", "eval", "oom"], default="none")
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()

device = torch.device("cuda")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 10)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
loss_fn = nn.CrossEntropyLoss()
kept_losses, kept_predictions, kept_activations = [], [], []
started = time.perf_counter()
for step in range(args.steps):
    x = torch.randn(256, 1024, device=device)
    y = torch.randint(0, 10, (256,), device=device)
    loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if args.leak == "losses":
        kept_losses.append(loss)  # the graph's saved tensors stay alive
    if args.leak == "oom":
        kept_activations.append(torch.empty(64 << 20, device=device))  # 256 MiB a step, never freed
    if step % 20 == 19:
        model.eval()
        with torch.no_grad():
            for _ in range(4):
                out = model(torch.randn(1024, 1024, device=device))
                if args.leak == "eval":
                    kept_predictions.append(out)  # predictions kept on the GPU
                else:
                    kept_predictions.append(out.argmax(1).cpu())
        model.train()
torch.cuda.synchronize()
print(f"{args.steps / (time.perf_counter() - started):.1f} steps/s")
print(f"done: allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB, peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
