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
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
import sequence  # noqa: E402
from torchref import save_safetensors  # noqa: E402


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
    save_safetensors(f"{d}/ids.safetensors",
                     {"inputs": torch.from_numpy(ids.astype(np.int32)), "targets": torch.from_numpy(labels)})
    bad = ids.astype(np.int64)
    bad[3, 0] = case["vocab"]
    np.save(f"{d}/bad.npy", bad)
    ordered = np.sort(ids, 1).astype(np.int64)
    np.save(f"{d}/sorted.npy", ordered)
    ordered[2, 5] = case["vocab"]
    np.save(f"{d}/bad_sorted.npy", ordered)


if __name__ == "__main__":
    main()
