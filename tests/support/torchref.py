"""What the PyTorch reference scripts of the parity tests share.

The scripts next to each test (`tests/*/reference.py`, `tests/parity/sequence.py`, ...) import it
with `sys.path.insert(0, <this folder>)`:
    save_safetensors  writes a state_dict or data file as Kiln reads it
    load_safetensors  reads one that Kiln (or tch) wrote
    permutation       Kiln's SplitMix64 Fisher-Yates permutation (src/runtime/data/split.rs)
    splits            Kiln's split of `n` samples into fractions (docs/language.md, Data)
    optimizer         the torch.optim optimizer of a spec
    cases             the spec file a Rust test wrote, with torch on one thread
"""

import json
import math
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8"}
MASK = (1 << 64) - 1
SPLIT_STREAM = 0x5EED5B1170000001


def save_safetensors(path, tensors):
    """Writes the safetensors format by hand: u64 LE header length, JSON header, raw LE bytes."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()
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


def load_safetensors(path):
    """Reads a safetensors file into a dict of tensors (the virtualenv has no `safetensors`)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    kinds = {v: k for k, v in DTYPES.items()}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        raw = bytearray(data[8 + n + a:8 + n + b])
        out[name] = torch.frombuffer(raw, dtype=kinds[h["dtype"]]).reshape(h["shape"])
    return out


class SplitMix64:
    """Kiln's PRNG (`src/runtime/data/split.rs`)."""

    def __init__(self, seed):
        self.x = seed & MASK

    def next(self):
        self.x = (self.x + 0x9E3779B97F4A7C15) & MASK
        z = self.x
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
    """A Fisher-Yates shuffle of range(n) drawn from SplitMix64(seed)."""
    order, rng = list(range(n)), SplitMix64(seed)
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def splits(n, fractions, seed):
    """The sample indices of each split, each in file order: floor-rounded counts taken in turn
    from the permutation seeded with `seed ^ SPLIT_STREAM`."""
    order = permutation(n, seed ^ SPLIT_STREAM)
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


def cases():
    """The cases of the spec file named by the first argument, with torch on one thread (the
    tests run Kiln on one thread too: the same kernels in the same order)."""
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        return json.load(f)


def kind_fuses(kind):
    """Whether Kiln fuses `kind` by default: ATen has fused kernels for these three."""
    return kind in ("sgd", "adam", "adamw")


def optimizer(params, o):
    """The torch.optim optimizer of spec `o`: {"kind": ..., "lr": ..., options named as in both
    Kiln and torch.optim}. Options left out take Kiln's defaults, which are torch's but for
    `fused`: Kiln fuses SGD, Adam and AdamW unless told `fused: false` (torch.optim's fused=True);
    unfused, both run the single-tensor rules (foreach=False), unless the spec asks torch for
    its multi-tensor rules (`"foreach": true`, which Kiln does not take)."""
    fused = o.get("fused", kind_fuses(o["kind"]))
    kind, common = o["kind"], dict(lr=o["lr"], weight_decay=o.get("weight_decay", 0.0), foreach=False)
    if fused:
        common.update(fused=True)
    elif o.get("foreach", False):
        common.update(foreach=True)
    if kind == "sgd":
        return torch.optim.SGD(params, momentum=o.get("momentum", 0.0), dampening=o.get("dampening", 0.0), nesterov=o.get("nesterov", False), **common)
    if kind == "adam":
        return torch.optim.Adam(params, betas=tuple(o.get("betas", (0.9, 0.999))), eps=o.get("eps", 1e-8), amsgrad=o.get("amsgrad", False), **common)
    if kind == "adamw":
        common["weight_decay"] = o.get("weight_decay", 1e-2)
        return torch.optim.AdamW(params, betas=tuple(o.get("betas", (0.9, 0.999))), eps=o.get("eps", 1e-8), amsgrad=o.get("amsgrad", False), **common)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, alpha=o.get("alpha", 0.99), eps=o.get("eps", 1e-8), momentum=o.get("momentum", 0.0), centered=o.get("centered", False), **common)
    raise ValueError(f"unknown optimizer {kind}")
