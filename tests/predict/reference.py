"""PyTorch's predictions for tests/predict.rs: the run's weights (`weights.safetensors`) in a
linear-ReLU-linear module, softmax over the classes, for the samples of `x.npy`; writes them to
`torch.npy`.

    python tests/predict/reference.py DIR
"""

import json
import struct
import sys

import numpy as np
import torch


def load_file(path):
    """A safetensors file's float32 tensors (8-byte header length, JSON header, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32", t
        out[name] = torch.from_numpy(np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=np.float32).reshape(t["shape"]).copy())
    return out


d = sys.argv[1]
w = load_file(f"{d}/run/weights.safetensors")
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
model.load_state_dict({"0.weight": w["fc1.weight"], "0.bias": w["fc1.bias"], "2.weight": w["fc2.weight"], "2.bias": w["fc2.bias"]})
model.eval()
with torch.no_grad():
    p = torch.softmax(model(torch.from_numpy(np.load(f"{d}/x.npy"))), dim=-1)
np.save(f"{d}/torch.npy", p.numpy())
