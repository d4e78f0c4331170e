"""Data files for `tests/token_files.rs`: the token ids of Kiln's synthetic source, stored.

Usage: write.py SPEC.json

SPEC.json is one case, as `tests/parity/sequence.py` reads it (its `dir`, `seed`, `vocab`,
`length`, `count`, `batch`, `steps`, `lr`, `weight_decay` and `model`). This script runs that
reference first (it writes `init.safetensors` and `reference.json` into `dir`), then draws the
same ids again, as Kiln's `synthetic(inputs: randint(vocab, shape: [length]), targets:
argmax(), count)` does, and writes into `dir`:
    ids.npy           the ids, int64
    labels.npy        the argmax labels, int64
    ids.safetensors   the ids as I32 (`inputs`) and the labels as I64 (`targets`)
    bad.npy           the ids, int64, with sample 3's first id set to `vocab` (out of range)
    sorted.npy        the ids sorted along each sequence, int64: `sort()`'s per-token classes
    bad_sorted.npy    those, with sample 2's token 5 set to `vocab` (out of range)
"""

import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import sequence  # noqa: E402

SAFETENSORS = {np.dtype("int32"): "I32", np.dtype("int64"): "I64"}


def save_safetensors(path, arrays):
    """Writes the safetensors format by hand: u64 LE header length, JSON header, raw LE bytes."""
    header, blobs, offset = {}, [], 0
    for name, a in arrays.items():
        data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": SAFETENSORS[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    with open(sys.argv[1]) as f:
        case = json.load(f)
    sequence.run(case)
    torch.manual_seed(case["seed"])
    ids = torch.randint(case["vocab"], (case["count"], case["length"])).numpy()
    labels = ids.argmax(1).astype(np.int64)
    d = case["dir"]
    np.save(f"{d}/ids.npy", ids.astype(np.int64))
    np.save(f"{d}/labels.npy", labels)
    save_safetensors(f"{d}/ids.safetensors", {"inputs": ids.astype(np.int32), "targets": labels})
    bad = ids.astype(np.int64)
    bad[3, 0] = case["vocab"]
    np.save(f"{d}/bad.npy", bad)
    ordered = np.sort(ids, 1).astype(np.int64)
    np.save(f"{d}/sorted.npy", ordered)
    ordered[2, 5] = case["vocab"]
    np.save(f"{d}/bad_sorted.npy", ordered)


if __name__ == "__main__":
    main()
