"""PyTorch reference for `tests/layer_training.rs`: 50 training steps of small models that use
the layer options PyTorch users set (pooling's `ceil_mode` and `count_include_pad`, batch norm's
`affine` and `track_running_stats`, `nn.TransformerEncoderLayer`'s `norm_first`, `activation`,
`layer_norm_eps` and `bias`).

Usage: training.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "model": NAME, "seed": int, "batch": int, "steps": int, "classes": int, "lr": float,
     "momentum": float}

For each case it writes into `dir`:
    init.safetensors  the model's initial state_dict (F32 tensors only)
    data.safetensors  `inputs` [steps*batch, ...] float32 and `targets` [steps*batch] int64: normal
                      inputs labelled by a fixed random linear teacher, so that the loss falls
    reference.json    {"losses": [...], "params": int}: the mean cross entropy of every step,
                      before its update, and the model's number of parameters

Training is plain PyTorch: zero the gradients, forward in training mode, mean cross entropy,
backward, `torch.optim.SGD(momentum=..., foreach=False)` step, one batch per step in file order.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, save_safetensors  # noqa: E402


class Transformer(nn.Module):
    """input [6, 8]; l: transformer_block(...); mean(0); head: linear(4)"""

    def __init__(self, **options):
        super().__init__()
        self.l = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, **options)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.l(x).mean(1))


class Norms(nn.Module):
    """input [16]; a: linear(16 -> 12, bias: false); bn: batchnorm1d(momentum: 0.3, affine: false); relu;
    b: linear(8); bn2: batchnorm1d(track_running_stats: false); tanh; head: linear(4)"""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 12, bias=False)
        self.bn = nn.BatchNorm1d(12, affine=False, momentum=0.3)
        self.b = nn.Linear(12, 8)
        self.bn2 = nn.BatchNorm1d(8, track_running_stats=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.bn(self.a(x)))
        return self.head(torch.tanh(self.bn2(self.b(x))))


class Pools2d(nn.Module):
    """input [2, 9, 10]; c: conv2d(2 -> 4, 3, padding: 1); max_pool2d(2, ceil_mode: true); relu;
    avg_pool2d(2, padding: 1, ceil_mode: true, count_include_pad: false); flatten; head: linear(4)"""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(2, 4, 3, padding=1)
        self.head = nn.Linear(4 * 3 * 3, 4)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.c(x), 2, ceil_mode=True))
        x = F.avg_pool2d(x, 2, padding=1, ceil_mode=True, count_include_pad=False)
        return self.head(torch.flatten(x, 1))


class Pools1d(nn.Module):
    """input [3, 17]; c: conv1d(3 -> 4, 3); max_pool1d(2, ceil_mode: true);
    avg_pool1d(3, stride: 2, padding: 1, ceil_mode: true); avg_pool1d(2, padding: 1,
    count_include_pad: false); flatten; head: linear(4)"""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(3, 4, 3)
        self.head = nn.Linear(4 * 3, 4)

    def forward(self, x):
        x = F.max_pool1d(self.c(x), 2, ceil_mode=True)
        x = F.avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True)
        x = F.avg_pool1d(x, 2, padding=1, count_include_pad=False)
        return self.head(torch.flatten(x, 1))


MODELS = {
    "transformer-post": (lambda: Transformer(norm_first=False, activation="relu", layer_norm_eps=1e-6, bias=False), [6, 8]),
    "transformer-pre": (lambda: Transformer(norm_first=True, activation=F.silu, layer_norm_eps=1e-4), [6, 8]),
    "norms": (Norms, [16]),
    "pools2d": (Pools2d, [2, 9, 10]),
    "pools1d": (Pools1d, [3, 17]),
}


def run(case):
    torch.manual_seed(case["seed"])
    make, shape = MODELS[case["model"]]
    model = make()
    state = {k: v for k, v in model.state_dict().items() if v.dtype == torch.float32}
    save_safetensors(f"{case['dir']}/init.safetensors", state)

    n, b = case["steps"] * case["batch"], case["batch"]
    inputs = torch.randn([n, *shape])
    teacher = torch.randn(inputs[0].numel(), case["classes"])
    targets = (inputs.reshape(n, -1) @ teacher).argmax(1)
    save_safetensors(f"{case['dir']}/data.safetensors", {"inputs": inputs, "targets": targets})

    opt = torch.optim.SGD(model.parameters(), lr=case["lr"], momentum=case["momentum"], foreach=False)
    model.train()
    losses = []
    for step in range(case["steps"]):
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(inputs[step * b:(step + 1) * b]), targets[step * b:(step + 1) * b])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses, "params": sum(p.numel() for p in model.parameters())}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
