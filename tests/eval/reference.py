"""PyTorch's evaluation for `tests/eval.rs`.

Usage: reference.py SPEC.json

SPEC.json, written by the Rust test: {"dir": ..., "seed": int, "count": int, "batch": int,
"split": [train, val, test] fractions}.

It builds the model of the test's experiment as a `torch.nn.Module` whose attribute names are the
Kiln layer names (so its `state_dict` names are Kiln's), gives it random weights and batch-norm
statistics, and writes into `dir`:
    weights.safetensors   the model's state_dict (F32; `num_batches_tracked` included, as
                          PyTorch saves it)
    data.safetensors      `inputs` [count, 12] float32, `targets` [count] int64
    reference.json        {"val": {...}, "test": {...}}: each split's mean cross-entropy loss,
                          top-1 and top-2 accuracy, evaluated in eval mode in batches of `batch`
                          as Kiln evaluates (the sum of each batch's mean loss times its size,
                          over the samples)

The split is Kiln's (docs/language.md, Data): a SplitMix64 Fisher-Yates permutation of the
samples seeded with `seed ^ 0x5EED5B1170000001`, `floor(fraction * count)` samples per split in
the order train, val, test, each split's samples kept in file order.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import save_safetensors, splits  # noqa: E402


class Net(nn.Module):
    """input [12]; fc1: linear(24); bn: batchnorm1d; relu; dropout(0.3); fc2: linear(5)"""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 24)
        self.bn = nn.BatchNorm1d(24)
        self.fc2 = nn.Linear(24, 5)

    def forward(self, x):
        return self.fc2(F.dropout(F.relu(self.bn(self.fc1(x))), 0.3, self.training))


def evaluate(model, inputs, targets, batch):
    loss, correct, top2, seen = 0.0, 0.0, 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(inputs), batch):
            x, y = inputs[start:start + batch], targets[start:start + batch]
            out = model(x)
            n = float(len(x))
            loss += F.cross_entropy(out, y).item() * n
            correct += (out.argmax(-1) == y).sum().item()
            top2 += (out.topk(2, -1).indices == y[:, None]).any(-1).sum().item()
            seen += n
    return {"loss": loss / seen, "accuracy": correct / seen, "top_2": top2 / seen}


def main():
    spec = json.load(open(sys.argv[1]))
    torch.manual_seed(spec["seed"])
    model = Net()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.2, 0.2)
    model.eval()
    count = spec["count"]
    inputs = torch.randn(count, 12)
    targets = torch.randint(0, 5, (count,))
    save_safetensors(f"{spec['dir']}/weights.safetensors", model.state_dict())
    save_safetensors(f"{spec['dir']}/data.safetensors", {"inputs": inputs, "targets": targets})
    _, val, test = splits(count, spec["split"], spec["seed"])
    result = {}
    for name, idx in (("val", val), ("test", test)):
        idx = torch.tensor(idx, dtype=torch.int64)
        result[name] = evaluate(model, inputs[idx], targets[idx], spec["batch"])
    json.dump(result, open(f"{spec['dir']}/reference.json", "w"))


if __name__ == "__main__":
    main()
