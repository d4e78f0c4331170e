"""Writes Fashion-MNIST as two image folders in torchvision's `ImageFolder` layout, PNG files:

    OUT/train/<class>/<index>.png   60,000 training images
    OUT/test/<class>/<index>.png    10,000 test images

usage: fashion_folder.py IDX_DIR OUT     (IDX_DIR: data/fashion-mnist, from scripts/setup.sh)

The class folders are Fashion-MNIST's label names prefixed by the label (`0-t-shirt`), so that
sorted folder names give the dataset's own class indices. Writes OUT/.complete when done.
"""

import gzip
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat",
           "sandal", "shirt", "sneaker", "bag", "ankle-boot"]


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def write(images, labels, out):
    for k, name in enumerate(CLASSES):
        os.makedirs(f"{out}/{k}-{name}", exist_ok=True)
    for i, (x, y) in enumerate(zip(images, labels)):
        Image.fromarray(x).save(f"{out}/{y}-{CLASSES[y]}/{i:05d}.png", compress_level=1)


def main():
    src, out = sys.argv[1], sys.argv[2]
    for split, prefix in [("train", "train"), ("test", "t10k")]:
        write(idx(f"{src}/{prefix}-images-idx3-ubyte.gz"), idx(f"{src}/{prefix}-labels-idx1-ubyte.gz"),
              f"{out}/{split}")
    open(f"{out}/.complete", "w").close()


main()
