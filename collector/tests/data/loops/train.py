"""One training loop, written each way PyTorch users write it, with or without a planted leak.

    python train.py ORDER LEAK

ORDER is where the gradients are cleared and how the step is driven:
  top        zero_grad(set_to_none=True) before the forward
  between    forward, zero_grad(set_to_none=True), backward, step (the most common order)
  end        forward, backward, step, zero_grad(set_to_none=True)
  in_place   forward, zero_grad(set_to_none=False), backward, step (the gradients stay allocated)
  module     forward, model.zero_grad(), backward, step
  grad_none  forward, `for p in model.parameters(): p.grad = None`, backward, step
  accumulate two backwards per optimizer step; zero_grad after the first forward of each
  scaler     torch.amp.GradScaler around backward and step; zero_grad between
  lbfgs      torch.optim.LBFGS, the closure clears, runs forward and backward
  closure    optimizer.step(closure), the closure runs the forward, clears, runs the backward (as
             Lightning's automatic optimisation does: the forward runs with the last step's
             gradients alive, and they are freed before the backward)
  two_optimizers the first layer's own optimizer and another for the rest, both stepped each
             step (as one optimizer for the matrices and another for the rest); zero_grad between
LEAK is what the job keeps, about 2 MiB a step, exactly:
  none         nothing
  forward_hook a forward hook keeps its output (`kept`)
  features     the model keeps detached features on itself (`model.features`)
  eval_logits  an eval pass under torch.no_grad() keeps its logits (`all_logits`)
  eval_graph   every 4th step, an evaluation without torch.no_grad() sums its loss as a tensor, and
               the loop keeps the sum (`history`, for early stopping): each batch's graph lives on,
               with the activations its forward saved, 8 MiB an evaluation (PyTorch's FAQ: "Don't
               accumulate history across your training loop")
  eval_no_grad the same evaluation under torch.no_grad(): the sum has no graph, nothing is kept
  backward_hook a Grad-CAM style backward hook keeps the gradient it sees (`grads`)
  between      the loop keeps each input batch's copy between the phases (`batches`)
  optimizer_state an optimizer step hook stores a copy of half a weight in `optimizer.state`
               under a new key each step (custom code that keeps snapshots in the state)

No tidemark calls: the phases are automatic. Gradients (8 MiB) outweigh what is kept each step, as
in real models, so a free of the gradients counted in the wrong place hides the leak.

With LOOPS_SCRIPTED_GPU=1 the job's `torch.cuda` reports the C heap in use as the allocator's
allocated bytes (`scripted_cuda.py`), so the probe's allocator path (the one a GPU job takes)
reads the same loop's real memory.
"""
import os
import sys

import torch
from torch import nn

if os.environ.get("LOOPS_SCRIPTED_GPU") == "1":
    import scripted_cuda  # collector/tests/data/scripted_cuda.py, written beside this job

    scripted_cuda.install(torch)

ORDER, LEAK = sys.argv[1], sys.argv[2]
# Enough for the leak's shape to show in both halves of the run (LOOPS_STEPS: more, so that the
# probe observes only a sample of them).
STEPS = int(os.environ.get("LOOPS_STEPS", "60"))
torch.manual_seed(0)
torch.set_num_threads(1)

WIDTH = 1024
BATCH = 64
KEEP_ROWS = 512  # 512 × 1024 float32 = 2 MiB a step


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))
        self.features = []

    def forward(self, x):
        hidden = self.body[1](self.body[0](x))
        if LEAK == "features" and self.training:
            self.features.append(hidden.detach().repeat(KEEP_ROWS // BATCH, 1))
        return self.body[2](hidden)


model = Net()
kept = []
all_logits = []
batches = []
grads = []
if LEAK == "forward_hook":
    model.body[1].register_forward_hook(
        lambda module, args, out: kept.append(out.detach().repeat(KEEP_ROWS // BATCH, 1))
        if module.training
        else None
    )
if LEAK == "backward_hook":
    model.body[1].register_full_backward_hook(
        lambda module, grad_in, grad_out: grads.append(grad_out[0].detach().repeat(KEEP_ROWS // BATCH, 1))
    )

others = None  # two_optimizers: the one for the layers after the first
if ORDER == "lbfgs":
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.01, max_iter=2, history_size=2)
elif ORDER == "two_optimizers":
    optimizer = torch.optim.SGD(model.body[0].parameters(), lr=0.001)
    others = torch.optim.SGD(model.body[2].parameters(), lr=0.001)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
scaler = torch.amp.GradScaler("cpu") if ORDER == "scaler" else None
if LEAK == "optimizer_state":
    def keep_in_state(opt, args, kwargs):
        weight = model.body[0].weight
        state = opt.state[weight]
        state[f"snapshot_{len(state)}"] = weight.detach()[:KEEP_ROWS].clone()

    optimizer.register_step_post_hook(keep_in_state)
x = torch.randn(BATCH, WIDTH)
y = torch.randn(BATCH, WIDTH)
x_eval = torch.randn(KEEP_ROWS, WIDTH)  # its logits: 2 MiB, made inside the eval pass
# The validation batches: each saves its hidden activations (2 MiB) for a backward that never
# comes, 8 MiB an evaluation, 2 MiB a step.
EVAL_EVERY = 4
val_batches = [torch.randn(KEEP_ROWS, WIDTH) for _ in range(EVAL_EVERY)]
history = []


def loss_of(batch):
    return (model(batch) - y).square().mean()


def evaluate():
    """The validation loss, summed as a tensor (as `val_loss += criterion(out, y)` does)."""
    model.eval()
    val_loss = 0
    for batch in val_batches:
        val_loss += model(batch).mean()
    return val_loss / len(val_batches)


def clear():
    if ORDER == "in_place":
        optimizer.zero_grad(set_to_none=False)
    elif ORDER == "module":
        model.zero_grad()
    elif ORDER == "grad_none":
        for p in model.parameters():
            p.grad = None
    else:
        optimizer.zero_grad(set_to_none=True)
        if others is not None:
            others.zero_grad(set_to_none=True)


def train_step():
    if ORDER == "top":
        clear()
        loss_of(x).backward()
        optimizer.step()
    elif ORDER == "end":
        loss_of(x).backward()
        optimizer.step()
        clear()
    elif ORDER == "accumulate":
        for micro in range(2):
            loss = loss_of(x) / 2
            if micro == 0:
                clear()
            loss.backward()
        optimizer.step()
    elif ORDER == "scaler":
        loss = loss_of(x)
        clear()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    elif ORDER == "lbfgs":

        def closure():
            clear()
            loss = loss_of(x)
            loss.backward()
            return loss

        optimizer.step(closure)
    elif ORDER == "closure":

        def closure():
            loss = loss_of(x)
            clear()
            loss.backward()
            return loss

        optimizer.step(closure)
    elif ORDER == "two_optimizers":
        loss = loss_of(x)
        clear()
        loss.backward()
        optimizer.step()
        others.step()
    else:  # between, in_place, module, grad_none
        loss = loss_of(x)
        clear()
        loss.backward()
        optimizer.step()


for step in range(STEPS):
    model.train()
    if LEAK == "between":
        batches.append(x.repeat(KEEP_ROWS // BATCH, 1))
    train_step()
    if LEAK == "eval_logits":
        model.eval()
        with torch.no_grad():
            all_logits.append(model(x_eval))
    if LEAK == "eval_graph" and step % EVAL_EVERY == EVAL_EVERY - 1:
        history.append(evaluate())
    if LEAK == "eval_no_grad" and step % EVAL_EVERY == EVAL_EVERY - 1:
        with torch.no_grad():
            history.append(evaluate())

print(len(kept) + len(model.features) + len(all_logits) + len(batches) + len(grads) + len(history))
