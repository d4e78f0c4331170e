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
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {torch.float32: "F32", torch.int64: "I64"}
MASK = (1 << 64) - 1


def save_safetensors(path, tensors):
    """Writes the safetensors format by hand: u64 LE header length, JSON header, raw LE bytes."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, bound):
        """Uniform on [0, bound) without bias (Lemire)."""
        m = self.next() * bound
        if (m & MASK) < bound:
            threshold = ((-bound) & MASK) % bound
            while (m & MASK) < threshold:
                m = self.next() * bound
        return m >> 64


def permutation(n, seed):
    order = list(range(n))
    rng = SplitMix64(seed)
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def splits(n, fractions, seed):
    order = permutation(n, seed ^ 0x5EED5B1170000001)
    counts, left = [], n
    for f in fractions:
        c = min(int(math.floor(f * n * (1.0 + 1e-12))), left)
        counts.append(c)
        left -= c
    out, start = [], 0
    for c in counts:
        out.append(sorted(order[start:start + c]))
        start += c
    return out


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
