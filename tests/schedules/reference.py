"""PyTorch reference runs for `tests/schedules.rs`: torch.optim with torch's own lr_scheduler classes.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "seed": int, "samples": int, "train": int, "batch": int, "steps": int,
     "eval_every": int or null, "optimizer": {"kind": ..., "lr": ..., ...},
     "scheduler": {"kind": "one_cycle"|"linear"|"sequential"|"plateau"|"linear_warmup", ...}}

For each case it writes into `dir`:
    init.safetensors  the model's initial state_dict (F32)
    data.safetensors  `inputs` [samples, 8] float32 and `targets` [samples] int64: points labelled
                      by a random linear teacher, with some labels flipped
    reference.json    {"losses": [...], "lrs": [...], "momenta": [...], "val_losses": [...]}: per
                      step the mean training loss before the update, the learning rate and the
                      momentum (or beta1) the step used; and each validation loss

The training and validation splits are Kiln's: a SplitMix64 permutation of the samples seeded with
`seed ^ 0x5EED5B1170000001`, the first `train` of it for training and the rest for validation, each
in file order. Batches are taken in order (no shuffle), epoch after epoch. The scheduler steps after
every optimizer step; ReduceLROnPlateau steps with the validation loss (or accuracy) after each
evaluation, every `eval_every` steps.
"""

import json
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import lr_scheduler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, optimizer, permutation, save_safetensors, SPLIT_STREAM  # noqa: E402


class Mlp(nn.Module):
    """input [8]; fc1: linear(8 -> 32); relu; fc2: linear(32 -> 4)"""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def scheduler(opt, s, steps):
    kind, args = s["kind"], {k: v for k, v in s.items() if k != "kind"}
    if kind == "one_cycle":
        return lr_scheduler.OneCycleLR(opt, total_steps=steps, **args)
    if kind == "linear":
        return lr_scheduler.LinearLR(opt, **args)
    if kind == "plateau":
        return lr_scheduler.ReduceLROnPlateau(opt, **args)
    if kind == "sequential":
        parts = [scheduler(opt, p, steps) for p in args["schedulers"]]
        return lr_scheduler.SequentialLR(opt, parts, milestones=args["milestones"])
    if kind == "cosine":
        return lr_scheduler.CosineAnnealingLR(opt, **args)
    raise ValueError(f"unknown scheduler {kind}")


def momentum_of(group):
    return group["betas"][0] if "betas" in group else group.get("momentum", 0.0)


def evaluate(model, inputs, targets, batch):
    """Kiln's evaluation: the batch means weighted by batch size, and the accuracy."""
    model.eval()
    total, correct, n = 0.0, 0.0, len(targets)
    with torch.no_grad():
        for i in range(0, n, batch):
            x, y = inputs[i:i + batch], targets[i:i + batch]
            out = model(x)
            total += F.cross_entropy(out, y).item() * len(y)
            correct += (out.argmax(-1) == y).sum().item()
    model.train()
    return total / n, correct / n


def run(case):
    torch.manual_seed(case["seed"])
    model = Mlp()
    save_safetensors(f"{case['dir']}/init.safetensors", model.state_dict())
    n = case["samples"]
    inputs = torch.randn(n, 8)
    teacher = torch.randn(8, 4)
    targets = (inputs @ teacher + 0.8 * torch.randn(n, 4)).argmax(-1)
    save_safetensors(f"{case['dir']}/data.safetensors", {"inputs": inputs, "targets": targets})

    order = permutation(n, case["seed"] ^ SPLIT_STREAM)
    train_idx, val_idx = sorted(order[:case["train"]]), sorted(order[case["train"]:])
    tx, ty = inputs[train_idx], targets[train_idx]
    vx, vy = inputs[val_idx], targets[val_idx]

    opt = optimizer(model.parameters(), case["optimizer"])
    sched = scheduler(opt, case["scheduler"], case["steps"])
    plateau = isinstance(sched, lr_scheduler.ReduceLROnPlateau)
    watch = case["scheduler"].get("mode", "min") == "max"
    b, per_epoch = case["batch"], case["train"] // case["batch"]
    losses, lrs, momenta, val_losses = [], [], [], []
    for step in range(case["steps"]):
        group = opt.param_groups[0]
        lrs.append(group["lr"])
        momenta.append(momentum_of(group))
        i = step % per_epoch
        x, y = tx[i * b:(i + 1) * b], ty[i * b:(i + 1) * b]
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if plateau:
            if (step + 1) % case["eval_every"] == 0:
                val_loss, val_acc = evaluate(model, vx, vy, b)
                val_losses.append(val_loss)
                sched.step(val_acc if watch else val_loss)
        else:
            sched.step()
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses, "lrs": lrs, "momenta": momenta, "val_losses": val_losses}, f)


def main():
    warnings.simplefilter("ignore")
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
