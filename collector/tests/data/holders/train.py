"""The leak patterns users hit, in a real PyTorch training loop on the CPU, one per argument.

No tidemark calls: phases come from the probe's automatic hooks. Each leaking case keeps
2 MiB a step (a 512 × 1024 float32 tensor) in one place; the others keep nothing.

    python train.py losses|hook|detach|eval_logits|attention|buffer|zero_grad_keep|healthy|hostile|growing_state|oom_errors|oom_messages

(hostile: the detach leak, with objects that error when looked at and threads that mutate a
list and a dict while the census walks them; oom_errors: the forward of a whole batch runs out of
memory, the loop falls back to half batches and keeps each caught error for a summary, and each
error's traceback keeps the failed forward's frame with its activations; oom_messages: the same
loop keeping only `str(err)`)
"""
import sys

import torch
from torch import nn

CASE = sys.argv[1]
STEPS = 70
HALF = 256  # oom_*: the most rows a forward can take
torch.manual_seed(0)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(256, 1024)
        self.head = nn.Linear(1024, 256)
        self.feature_cache = []
        self.register_buffer("running", torch.zeros(1024))
        self.extra = nn.ModuleList()  # growing_state: a layer added every other step

    def forward(self, x):
        h = torch.relu(self.body(x))
        if CASE.startswith("oom_") and self.training and x.shape[0] > HALF:
            # What a GPU says when the whole batch does not fit; `h` (2 MiB) is alive here.
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
        if CASE == "detach" and self.training:
            self.feature_cache.append(h.detach())  # detach() without clone(): kept
        if CASE == "attention":
            self.attn_weights = torch.softmax(h, dim=1)  # overwritten every step: no leak
        if CASE == "buffer":
            self.running = h.mean(0).detach()  # a buffer reassigned every step: no leak
        for layer in self.extra:
            h = h + layer(h[:1])
        return self.head(h)


def make_hook():
    outputs = []

    def hook(module, inputs, output):
        if module.training:
            outputs.append(output)  # every training output kept, with its graph

    return hook


def main():
    model = Net()
    if CASE == "hook":
        model.body.register_forward_hook(make_hook())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    x = torch.randn(512, 256)
    target = torch.randn(512, 256)
    # eval_logits: a big eval batch, 8 MiB of logits kept every fifth step.
    x_eval = torch.randn(8192 if CASE == "eval_logits" else 512, 256)
    train_losses = []
    val_losses = []
    oom_errors = []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=CASE != "zero_grad_keep")
        try:
            out = model(x)
        except torch.OutOfMemoryError as err:
            # Fall back to half batches; keep the error for a summary at the end.
            oom_errors.append(err if CASE == "oom_errors" else str(err))
            out = torch.cat([model(x[:HALF]), model(x[HALF:])])
        loss = loss_fn(out, target)
        loss.backward()
        optimizer.step()
        if CASE == "growing_state" and step % 2 == 1:
            # A layer added to the model and to the optimizer every other step (4 MiB of
            # parameters, 8 MiB of Adam state once it steps): state that grows, kept by design.
            layer = nn.Linear(1024, 1024)
            nn.init.zeros_(layer.weight)
            model.extra.append(layer)
            optimizer.add_param_group({"params": layer.parameters()})
        train_losses.append(loss.item())
        if CASE == "losses":
            # A validation loss without torch.no_grad(), kept in a list: every one keeps its
            # graph, and the graph keeps the activations it saved.
            model.eval()
            val_losses.append(loss_fn(model(x), target))
            model.train()
        if step % 5 == 4:
            model.eval()
            with torch.no_grad():
                logits = model(x_eval)
                if CASE == "eval_logits":
                    all_logits.append(logits)  # kept on the device it lives on: never freed
            model.train()
    print(f"{CASE}: done, last loss {train_losses[-1]}, {len(oom_errors)} batches split")


all_logits = []


class Hostile(torch.Tensor):
    """A tensor subclass that errors whenever anything looks at it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("do not look at me")


class Raises:
    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")

    def __getattribute__(self, name):
        raise RuntimeError(f"no {name}")


class Slotted:
    __slots__ = ("tensor", "missing")

    def __init__(self):
        self.tensor = torch.zeros(256)


if CASE == "hostile":
    # The census must skip and count what it cannot look at, and the job must run on.
    import threading

    hostile = torch.zeros(1024).as_subclass(Hostile)
    raises = Raises()
    slotted = Slotted()
    churn = [torch.zeros(16) for _ in range(1000)]
    churn_map = {i: torch.zeros(16) for i in range(1000)}

    stop = threading.Event()

    def mutate():
        i = 0
        while not stop.is_set():
            churn.append(torch.zeros(16))
            churn.pop(0)
            churn_map[i + 1000] = churn_map.pop(i)
            i += 1

    mutator = threading.Thread(target=mutate)
    mutator.start()
    CASE = "detach"

if __name__ == "__main__":
    try:
        main()
    finally:
        if "mutator" in globals():
            stop.set()
            mutator.join()
