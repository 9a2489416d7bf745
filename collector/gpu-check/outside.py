"""Device memory outside PyTorch's cache, on a real GPU: a training loop that makes a new NCCL
process group at every step (world size 1) and runs a collective in it, so that each group's
communicator allocates its own buffers outside PyTorch's caching allocator; the collector's
verdict should be "Device memory outside PyTorch's cache leaks on GPU 0", and the viewer's
"outside PyTorch" curve rises. `--no-leak` trains without groups (run.sh runs it beside
another process that holds memory on the GPU).

    python outside.py [--steps N] [--no-leak]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--no-leak", action="store_true")
args = parser.parse_args()

if not args.no_leak:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)

device = torch.device("cuda")
model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 10)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
groups = []
for step in range(args.steps):
    x = torch.randn(256, 1024, device=device)
    loss = model(x).square().mean()
    loss.backward()
    if not args.no_leak:
        group = dist.new_group([0])  # a new communicator every step, never destroyed
        groups.append(group)
        for p in model.parameters():
            dist.all_reduce(p.grad, group=group)
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    time.sleep(0.4)  # the driver's per-process count is read once a second
print("done", args.steps, "steps")
if dist.is_initialized():
    dist.destroy_process_group()
