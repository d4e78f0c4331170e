"""PyTorch reference runs for `tests/losses.rs`.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "loss": "cross_entropy"|"nll"|"bce_with_logits"|"huber"|"smooth_l1", "args": {...}, "outputs": int,
     "seed": int, "batch": int, "steps": int, "lr": float, "ignore_fraction": float}

For each case it writes into `dir`:
    init.safetensors  the initial state_dict of `fc1: linear(8 -> 16); relu; fc2: linear(16 -> outputs)`
    data.safetensors  `inputs` [steps*batch, 8] float32 and `targets`: int64 class labels (some
                      of them `ignore_index`) or, for bce_with_logits, float32 0/1 [N, outputs],
                      or, for huber and smooth_l1, float32 values [N, outputs] (spread 2)
    reference.json    {"losses": [...]}: the mean loss of every step before the update, computed
                      by the torch.nn.functional loss with the case's arguments, trained with
                      plain SGD on the batches in order.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, save_safetensors  # noqa: E402


def run(case):
    torch.manual_seed(case["seed"])
    k, n = case["outputs"], case["steps"] * case["batch"]
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(8, 16))
    model.add_module("relu", nn.ReLU())
    model.add_module("fc2", nn.Linear(16, k))
    save_safetensors(f"{case['dir']}/init.safetensors", model.state_dict())
    x = torch.randn(n, 8)
    args = dict(case["args"])
    if case["loss"] in ("huber", "smooth_l1"):
        y = 2.0 * torch.randn(n, k)
    elif case["loss"] == "bce_with_logits":
        y = (torch.rand(n, k) < 0.3).float()
        if "pos_weight" in args:
            args["pos_weight"] = torch.tensor(args["pos_weight"], dtype=torch.float32)
    else:
        y = torch.randint(0, k, (n,))
        ignore = args.get("ignore_index", -100)
        y[torch.rand(n) < case["ignore_fraction"]] = ignore
        if "weight" in args:
            args["weight"] = torch.tensor(args["weight"], dtype=torch.float32)
    save_safetensors(f"{case['dir']}/data.safetensors", {"inputs": x, "targets": y})
    opt = torch.optim.SGD(model.parameters(), lr=case["lr"])
    losses = []
    b = case["batch"]
    for step in range(case["steps"]):
        xb, yb = x[step * b:(step + 1) * b], y[step * b:(step + 1) * b]
        opt.zero_grad()
        out = model(xb)
        if case["loss"] == "cross_entropy":
            loss = F.cross_entropy(out, yb, **args)
        elif case["loss"] == "nll":
            loss = F.nll_loss(F.log_softmax(out, -1), yb, **args)
        elif case["loss"] == "huber":
            loss = F.huber_loss(out, yb, **args)
        elif case["loss"] == "smooth_l1":
            loss = F.smooth_l1_loss(out, yb, **args)
        else:
            loss = F.binary_cross_entropy_with_logits(out, yb, **args)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
