"""Writes the small data files of the mistakes corpus (run from this folder; checked in as written).

features.npy: 16 samples of 10 float32 features; labels.npy: their 16 int64 classes in [0, 3);
features-text.npy: the same features as `np.savetxt` writes them, a text file with an `.npy` name;
measurements.csv: a header row and 12 rows of a label and 4 features.
"""

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
