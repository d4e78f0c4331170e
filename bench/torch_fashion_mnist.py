"""The PyTorch eager twin of experiments/fashion_mnist_cnn.exp.

    python bench/torch_fashion_mnist.py [--epochs N] [--threads N] [--data DIR] [--seed S]

The same data (the 60,000 training and 10,000 test images of data/fashion-mnist, bytes / 255,
normalised with mean 0.2860 and std 0.3530), the same model (conv3x3(32)-BN-ReLU-maxpool,
conv3x3(64)-BN-ReLU-maxpool, flatten, linear(128)-ReLU-dropout(0.3), linear(10)) and the same
recipe: Adam(lr 1e-3, fused=True as Kiln's), Kiln's `cosine()` schedule stepped per batch (lr *
(1 + cos(pi * t / T)) / 2 at step t of T), batch 128 of a fresh shuffle each epoch, the last
partial batch kept, 6 epochs; then the test accuracy. Prints `samples_per_s` (the training loop),
`train_seconds` and `test_accuracy`.
"""

import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(path):
    x = torch.from_numpy(idx(path).astype(np.float32) / 255.0).unsqueeze(1)
    return (x - 0.2860) / 0.3530


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "fashion-mnist"))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    d = args.data
    x = images(os.path.join(d, "train-images-idx3-ubyte.gz"))
    y = torch.from_numpy(idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    tx = images(os.path.join(d, "t10k-images-idx3-ubyte.gz"))
    ty = torch.from_numpy(idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))

    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 10),
    )
    lr = 1e-3
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    batch = 128
    per_epoch = math.ceil(len(x) / batch)
    total = per_epoch * args.epochs
    t = 0
    model.train()
    started = time.perf_counter()
    for _ in range(args.epochs):
        order = torch.randperm(len(x))
        for b in range(per_epoch):
            i = order[b * batch : (b + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = lr * (1 + math.cos(math.pi * t / total)) / 2
            loss = F.cross_entropy(model(x.index_select(0, i)), y.index_select(0, i))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if not math.isfinite(loss.item()):
                raise SystemExit(f"non-finite loss at step {t + 1}")
            t += 1
    seconds = time.perf_counter() - started
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, len(tx), 1000):
            correct += (model(tx[lo : lo + 1000]).argmax(1) == ty[lo : lo + 1000]).sum().item()
    print(f"samples_per_s {len(x) * args.epochs / seconds:.2f}")
    print(f"train_seconds {seconds:.2f}")
    print(f"test_accuracy {correct / len(tx):.4f}")


if __name__ == "__main__":
    main()
