"""Writes the small data files of the mistakes corpus (run from this folder; checked in as written).

features.npy: 16 samples of 10 float32 features; labels.npy: their 16 int64 classes in [0, 3);
features-text.npy: the same features as `np.savetxt` writes them, a text file with an `.npy` name;
measurements.csv: a header row and 12 rows of a label and 4 features; the files below say what
they hold where they are written.
"""

import json
import struct

import numpy as np

rng = np.random.default_rng(0)
features = rng.standard_normal((16, 10)).astype(np.float32)
labels = rng.integers(0, 3, size=16).astype(np.int64)
np.save("features.npy", features)
np.save("labels.npy", labels)
np.savetxt("features-text.npy", features, fmt="%.4f")

# measurements.csv: a header row, then 12 rows of a class label in [0, 3) and 4 features.
with open("measurements.csv", "w") as out:
    out.write("label,a,b,c,d\n")
    for row in rng.standard_normal((12, 4)):
        out.write(f"{rng.integers(0, 3)}," + ",".join(f"{v:.3f}" for v in row) + "\n")

# images-hwc.npy: 16 colour images of 8x8 pixels stored channels last, [16, 8, 8, 3] float32.
np.save("images-hwc.npy", rng.standard_normal((16, 8, 8, 3)).astype(np.float32))
# sequences-lc.npy: 16 sequences of 20 steps of 4 channels, stored [16, 20, 4] float32.
np.save("sequences-lc.npy", rng.standard_normal((16, 20, 4)).astype(np.float32))
# values.npy: one real-valued target per sample, [16] float32 (a regression target).
np.save("values.npy", rng.standard_normal(16).astype(np.float32))
# regression.npz and regression.safetensors: `inputs` [16, 10] and `targets` [16], float32.
np.savez("regression.npz", inputs=features, targets=np.load("values.npy"))


def save_safetensors(path, arrays):
    """Writes float32 arrays as a safetensors file (a JSON header, then the bytes)."""
    header, offset, body = {}, 0, b""
    for name, a in arrays.items():
        data = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        body += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + body)


save_safetensors("regression.safetensors", {"inputs": features, "targets": np.load("values.npy")})
# tokens.npy and next-tokens.npy: 16 sequences of 12 token ids below 50, and the ids that follow
# each one (a language model's targets), int64.
ids = rng.integers(0, 50, size=(16, 13)).astype(np.int64)
np.save("tokens.npy", ids[:, :12])
np.save("next-tokens.npy", ids[:, 1:])
# houses.csv: a header row, then 12 rows of 3 features and a price (a regression target).
with open("houses.csv", "w") as out:
    out.write("area,rooms,age,price\n")
    for row in rng.uniform(0, 1, size=(12, 4)):
        out.write(",".join(f"{v:.3f}" for v in row) + "\n")
