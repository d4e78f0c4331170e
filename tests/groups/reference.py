"""PyTorch reference runs for `tests/groups.rs`: torch.optim with parameter groups.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "case": "adamw"|"sgd", "seed": int, "batch": int, "steps": int}

For each case it draws the synthetic data as `kiln run` does (`torch.manual_seed(seed)`, then the
inputs, then the targets), builds the model with other random weights and writes into `dir`:
    init.safetensors  the model's initial state_dict (F32)
    reference.json    {"losses": [...], "ungrouped": [...]}: the mean training loss of every step
                      before the update, with the case's parameter groups and, to show that the
                      groups matter, with the optimizer's own settings for every parameter

The groups are built the way PyTorch users build them, not from Kiln's lists:
    adamw  the transformer recipe: no weight decay on biases, norm and embedding parameters
    sgd    `fc1` with its own lr and momentum, `fc2.bias` with its own lr and no weight decay,
           under StepLR(step_size=20, gamma=0.5), which scales every group's rate alike
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, save_safetensors  # noqa: E402

VOCAB, TOKENS, CLASSES, FEATURES = 16, 8, 4, 16


class Tokens(nn.Module):
    """input [8]; embed: embedding(16, 12); norm: layernorm; mean(dim: 0); fc: linear(24); relu;
    head: linear(4)"""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 12)
        self.norm = nn.LayerNorm(12)
        self.fc = nn.Linear(12, 24)
        self.head = nn.Linear(24, CLASSES)

    def forward(self, x):
        return self.head(F.relu(self.fc(self.norm(self.embed(x)).mean(dim=1))))


class Mlp(nn.Module):
    """input [16]; fc1: linear(32); relu; fc2: linear(4)"""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 32)
        self.fc2 = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def adamw(model, grouped):
    if not grouped:
        return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5, foreach=False), None
    no_decay = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name.endswith("bias") or isinstance(module, (nn.LayerNorm, nn.Embedding)):
                no_decay.add(id(p))
    groups = [
        {"params": [p for p in model.parameters() if id(p) not in no_decay]},
        {"params": [p for p in model.parameters() if id(p) in no_decay], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.5, foreach=False), None


def sgd(model, grouped):
    if grouped:
        params = [
            {"params": model.fc1.parameters(), "lr": 0.02, "momentum": 0.5},
            {"params": [model.fc2.bias], "lr": 0.3, "weight_decay": 0.0},
            {"params": [model.fc2.weight]},
        ]
    else:
        params = model.parameters()
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-2, foreach=False)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.5)


CASES = {"adamw": (Tokens, adamw), "sgd": (Mlp, sgd)}


def train(case, model, inputs, targets, grouped):
    opt, schedule = CASES[case["case"]][1](model, grouped)
    losses, b = [], case["batch"]
    for step in range(case["steps"]):
        opt.zero_grad(set_to_none=False)
        x, y = inputs[step * b:(step + 1) * b], targets[step * b:(step + 1) * b]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if schedule is not None:
            schedule.step()
        losses.append(loss.item())
    return losses


def run(case):
    n = case["steps"] * case["batch"]
    torch.manual_seed(case["seed"])
    if case["case"] == "adamw":
        inputs = torch.randint(VOCAB, (n, TOKENS))
    else:
        inputs = torch.randn(n, FEATURES)
    targets = torch.randint(CLASSES, (n,))
    torch.manual_seed(case["seed"] + 1)
    model = CASES[case["case"]][0]()
    init = {k: v.clone() for k, v in model.state_dict().items()}
    save_safetensors(f"{case['dir']}/init.safetensors", init)
    losses = train(case, model, inputs, targets, True)
    model.load_state_dict(init)
    ungrouped = train(case, model, inputs, targets, False)
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses, "ungrouped": ungrouped}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
