"""The reference of the token-stream tests: writes a uint16 token file (nanoGPT's `train.bin`,
`np.array(ids, dtype=np.uint16).tofile(path)`), a uint32 one, and a text in two files, and prints
as JSON what the Python ecosystem reads from them: the ids, nanoGPT's `get_batch` windows
(`x = data[i:i+block]`, `y = data[i+1:i+1+block]`) at given offsets, and the text's vocabulary
`sorted(set(text))` with its ids.

    python tests/streams/nanogpt.py DIR BLOCK OFFSET...
"""

import json
import os
import sys

import numpy as np

out, block, offsets = sys.argv[1], int(sys.argv[2]), [int(a) for a in sys.argv[3:]]
rng = np.random.default_rng(7)
ids16 = rng.integers(0, 60000, size=1000)
np.array(ids16, dtype=np.uint16).tofile(os.path.join(out, "train.bin"))
ids32 = rng.integers(0, 2**32 - 1, size=300, dtype=np.uint64)
np.array(ids32, dtype=np.uint32).tofile(os.path.join(out, "wide.bin"))
data = np.memmap(os.path.join(out, "train.bin"), dtype=np.uint16, mode="r")
wide = np.fromfile(os.path.join(out, "wide.bin"), dtype=np.uint32)

os.makedirs(os.path.join(out, "text"))
parts = ["First Citizen:\nBefore we proceed any further, hear me speak.\n", "Tout est bien — « déjà vu », naïve café.\n" * 3]
for name, part in zip(["b.txt", "a.txt"], parts):
    with open(os.path.join(out, "text", name), "w", encoding="utf-8") as f:
        f.write(part)
# Kiln reads a directory's files in name order: a.txt, then b.txt.
text = parts[1] + parts[0]
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
encoded = [stoi[c] for c in text]

windows = [
    {"offset": i, "x": data[i : i + block].astype(np.int64).tolist(), "y": data[i + 1 : i + 1 + block].astype(np.int64).tolist()}
    for i in offsets
]
json.dump(
    {
        "ids": data.astype(np.int64).tolist(),
        "wide": wide.astype(np.int64).tolist(),
        "windows": windows,
        "vocab": chars,
        "text_ids": encoded,
    },
    sys.stdout,
)
