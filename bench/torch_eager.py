"""The PyTorch eager baseline of bench/run.sh: the models of bench/{mlp,linear,cnn}.exp.

    python bench/torch_eager.py MODEL STEPS [--threads N] [--device D] [--compile]

MODEL is mlp, linear or cnn. Each step gathers a batch from a shuffled synthetic data set with
index_select (as Kiln's loader does), then zero_grad, forward, the loss, backward and
torch.optim.Adam's step (PyTorch's defaults), and reads the loss as a Python float (the usual
training loop's NaN check). Only the loop is timed. Prints `steps_per_s <value>`.

--device puts the model and the data set on that device (scripts/gpu-check.sh: `cuda:0`);
--compile runs the model through torch.compile, with three untimed warm-up steps first.

--threads sets torch.set_num_threads; bench/run.sh passes what libtorch uses by default in the
Rust programs (examples/tch_bench.rs prints it), so all three run with the same thread count.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


def build(model):
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        x = torch.randn(10_000, 784)
        y = torch.randint(10, (10_000,))
        return net, x, y, 100, F.cross_entropy
    if model == "linear":
        net = nn.Linear(1000, 1000)
        x = torch.randn(10_000, 1000)
        y = torch.randn(10_000, 1000)
        return net, x, y, 1000, F.mse_loss
    if model == "cnn":
        net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 10),
        )
        x = torch.randn(6_400, 1, 28, 28)
        y = torch.randint(10, (6_400,))
        return net, x, y, 64, F.cross_entropy
    raise SystemExit(f"unknown model `{model}`: use mlp, linear or cnn")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("steps", type=int)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net, x, y, batch, loss_fn = build(args.model)
    dev = torch.device(args.device)
    net, x, y = net.to(dev), x.to(dev), y.to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    model = torch.compile(net) if args.compile else net
    n = x.shape[0]
    per_epoch = n // batch
    warm = 3 if args.compile else 0

    perm = torch.randperm(n, device=dev)
    last = 0.0
    for step in range(args.steps + warm):
        if step == warm:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            started = time.perf_counter()
        i = step % per_epoch
        if i == 0 and step > 0:
            perm = torch.randperm(n, device=dev)
        index = perm[i * batch:(i + 1) * batch]
        xb = x.index_select(0, index)
        yb = y.index_select(0, index)
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        last = loss.item()
        if not math.isfinite(last):
            raise SystemExit(f"the loss became {last} at step {step + 1}")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - started
    print(f"threads {torch.get_num_threads()}")
    print(f"final_loss {last}")
    print(f"steps_per_s {args.steps / seconds}")


if __name__ == "__main__":
    main()
