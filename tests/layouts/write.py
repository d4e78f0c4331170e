"""Writes the data of tests/layouts.rs: samples stored channels last, and the same samples
permuted channels first by torch.permute, the reference for `layout: channels_last`."""

import json
import sys

import numpy as np
import torch

spec = json.load(open(sys.argv[1]))
out = spec["dir"]
g = np.random.default_rng(7)
n = 48

# Images [N, H, W, C] and the same images as [N, C, H, W].
hwc = g.standard_normal((n, 6, 6, 3)).astype(np.float32)
np.save(f"{out}/images_hwc.npy", hwc)
np.save(f"{out}/images_chw.npy", torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous().numpy())
# The images as flat CSV rows (H, W, C order), the label last.
labels = g.integers(0, 4, n).astype(np.int64)
np.save(f"{out}/labels.npy", labels)
with open(f"{out}/images_hwc.csv", "w") as f:
    f.write(",".join(f"p{i}" for i in range(6 * 6 * 3)) + ",label\n")
    for x, y in zip(hwc.reshape(n, -1), labels):
        f.write(",".join(repr(float(v)) for v in x) + f",{y}\n")

# Sequences [N, L, C] and the same sequences as [N, C, L], for a conv1d.
lc = g.standard_normal((n, 10, 2)).astype(np.float32)
np.save(f"{out}/seq_lc.npy", lc)
np.save(f"{out}/seq_cl.npy", torch.from_numpy(lc).permute(0, 2, 1).contiguous().numpy())
