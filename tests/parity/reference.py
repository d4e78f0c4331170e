"""PyTorch reference runs for `tests/parity.rs`.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "mnist": DIR, "model": "mlp"|"cnn", "seed": int, "batch": int, "steps": int,
     "warmup": int, "min_lr": float, "clip_norm": float,
     "optimizer": {"kind": "sgd"|"adam"|"adamw"|"rmsprop", "lr": float, ...}}

For each case it writes into `dir`:
    init.safetensors  the model's initial state_dict (F32)
    data.safetensors  `inputs` [steps*batch, ...] float32, `targets` [steps*batch] int64: the
                      first steps*batch digits of `mnist/images.idx.gz`, normalised, and their
                      labels, so that the loss falls and the optimizer's work shows in it
    reference.json    {"losses": [...], "grad_norms": [...], "lrs": [...]}, one entry per step:
                      the mean training loss before the update, the total gradient norm before
                      clipping, and the learning rate of the step

Training follows the loop of Kiln's `train.rs`: zero the gradients, forward, mean cross entropy,
backward, `clip_grad_norm_`, then the optimizer step (torch.optim's single-tensor implementations,
`foreach=False`) with the learning rate of Kiln's cosine schedule (`Lr::at` in `optim.rs`).
"""

import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, optimizer, save_safetensors  # noqa: E402


class Mlp(nn.Module):
    """input [784]; fc1: linear(256); relu; fc2: linear(10)"""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Cnn(nn.Module):
    """input [1, 28, 28]; conv1: conv2d(16, 3, padding 1); relu; max_pool2d(2);
    conv2: conv2d(32, 3, padding 1); relu; max_pool2d(2); flatten; head: linear(10)"""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.head = nn.Linear(1568, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(torch.flatten(x, 1))


MODELS = {"mlp": (Mlp, [784]), "cnn": (Cnn, [1, 28, 28])}


def read_idx(path):
    """An IDX file (gzipped) as a numpy array."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(f">{dims}I", raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def mnist(directory, n, shape):
    """The first `n` digits, normalised as `(x / 255 - 0.1307) / 0.3081`, and their labels."""
    images = read_idx(f"{directory}/images.idx.gz")[:n].astype(np.float32) / 255.0
    labels = read_idx(f"{directory}/labels.idx.gz")[:n].astype(np.int64)
    if len(labels) < n:
        raise ValueError(f"{directory} has {len(labels)} digits, {n} are needed")
    inputs = torch.from_numpy((images - np.float32(0.1307)) / np.float32(0.3081)).reshape([n, *shape])
    return inputs.contiguous(), torch.from_numpy(labels.copy())


def cosine_lr(base, step, total, warmup, min_lr):
    """Kiln's `Lr::at` for `cosine(warmup: W steps, min_lr: M)`, step 0-based."""
    if step < warmup:
        return base * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return min_lr + (base - min_lr) * (1.0 + math.cos(math.pi * progress)) / 2.0


def run(case):
    torch.manual_seed(case["seed"])
    cls, shape = MODELS[case["model"]]
    model = cls()
    save_safetensors(f"{case['dir']}/init.safetensors", model.state_dict())

    n = case["steps"] * case["batch"]
    inputs, targets = mnist(case["mnist"], n, shape)
    save_safetensors(f"{case['dir']}/data.safetensors", {"inputs": inputs, "targets": targets})

    opt = optimizer(model.parameters(), case["optimizer"])
    params = [p for p in model.parameters()]
    losses, norms, lrs = [], [], []
    b = case["batch"]
    for step in range(case["steps"]):
        lr = cosine_lr(case["optimizer"]["lr"], step, case["steps"], case["warmup"], case["min_lr"])
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=False)
        x, y = inputs[step * b:(step + 1) * b], targets[step * b:(step + 1) * b]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, case["clip_norm"], foreach=False)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(lr)
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses, "grad_norms": norms, "lrs": lrs}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
