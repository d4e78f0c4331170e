"""PyTorch reference runs for `tests/loss_exact.rs`.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "args": {...} (F.cross_entropy's weight, ignore_index, label_smoothing),
     "outputs": int, "seed": int, "batch": int, "steps": int, "count": int, "val_count": int,
     "ignore_fraction": float, "optimizer": {"kind": ..., "lr": float} (torchref.optimizer),
     "one_cycle": null | {"max_lr": float}}

For each case it writes into `dir`:
    init.safetensors   the initial state_dict of `fc1: linear(8 -> 16); relu; fc2: linear(16 -> outputs)`
    train.safetensors  `inputs` [count, 8] float32 and `targets` int64 class labels, some of them
                       `ignore_index`
    val.safetensors    the same for the validation split (`val_count` samples)
    reference.json     {"losses": [...], "lrs": [...], "train_accuracy": {step: acc},
                        "val": {step: [loss, accuracy]}}: every step's loss is F.cross_entropy
                       over the WHOLE batch (what gradient accumulation and data parallelism must
                       reproduce); batches run through the training samples in file order, the
                       last batch of an epoch smaller (as DataLoader without drop_last); the
                       training accuracy of each epoch counts the forward passes' predictions
                       of targets other than ignore_index; validation after every step gives the
                       weighted mean loss and the accuracy over targets other than ignore_index.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, optimizer, save_safetensors  # noqa: E402


def labels(n, k, ignore, fraction):
    y = torch.randint(0, k, (n,))
    y[torch.rand(n) < fraction] = ignore
    return y


def accuracy(out, y, ignore):
    kept = y != ignore
    return ((out.argmax(-1) == y) & kept).sum().item(), kept.sum().item()


def run(case):
    torch.manual_seed(case["seed"])
    k, n, b = case["outputs"], case["count"], case["batch"]
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(8, 16))
    model.add_module("relu", nn.ReLU())
    model.add_module("fc2", nn.Linear(16, k))
    save_safetensors(f"{case['dir']}/init.safetensors", model.state_dict())
    args = dict(case["args"])
    ignore = args.get("ignore_index", -100)
    if "weight" in args:
        args["weight"] = torch.tensor(args["weight"], dtype=torch.float32)
    x, y = torch.randn(n, 8), labels(n, k, ignore, case["ignore_fraction"])
    vx, vy = torch.randn(case["val_count"], 8), labels(case["val_count"], k, ignore, case["ignore_fraction"])
    save_safetensors(f"{case['dir']}/train.safetensors", {"inputs": x, "targets": y})
    save_safetensors(f"{case['dir']}/val.safetensors", {"inputs": vx, "targets": vy})
    opt = optimizer(model.parameters(), case["optimizer"])
    sched = None
    if case["one_cycle"]:
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=case["one_cycle"]["max_lr"], total_steps=case["steps"])
    starts = list(range(0, n, b))
    losses, lrs, train_acc, val = [], [], {}, {}
    hits, counted = 0, 0
    for step in range(case["steps"]):
        s = starts[step % len(starts)]
        xb, yb = x[s:s + b], y[s:s + b]
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        out = model(xb)
        loss = F.cross_entropy(out, yb, **args)
        losses.append(loss.item())
        h, c = accuracy(out, yb, ignore)
        hits, counted = hits + h, counted + c
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        if (step + 1) % len(starts) == 0:
            train_acc[step + 1] = hits / max(counted, 1)
            hits, counted = 0, 0
        with torch.no_grad():
            vout = model(vx)
            h, c = accuracy(vout, vy, ignore)
            val[step + 1] = [F.cross_entropy(vout, vy, **args).item(), h / max(c, 1)]
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses, "lrs": lrs, "train_accuracy": train_acc, "val": val}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
