"""PyTorch references for `tests/regression.rs`: regression heads against numeric targets.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each of one kind:

{"kind": "sources", "dir", "seed", "batch", "steps", "lr", "losses": [{"name", "loss", "args"}]}
    One numeric target per sample, a head `linear(16 -> 1)`. Writes into `dir`:
        init.safetensors    the initial state_dict of `fc1: linear(4 -> 16); relu; out: linear(16 -> 1)`
        data.csv            the inputs as columns `a`..`d` and the target as `y`, each written with
                            nine significant digits (the float32 value exactly)
        whole.csv           the same inputs with whole-number targets (a count per sample)
        x.npy, y.npy        the inputs [N, 4] and targets [N] as float32
        data.npz            the same as members `inputs` and `targets`
        data.safetensors    the same as tensors `inputs` and `targets`
        reference.json      {"real": {name: [loss of each step]}, "whole": {...}}: the mean loss
                            of every step before the update, `F.<loss>(out.squeeze(-1), y)`
                            (the head's [B, 1] against the targets' [B], never broadcast), plain
                            SGD, batches in file order.

{"kind": "metrics", "dir", "seed", "batch", "steps", "lr", "count", "val_count", "test_count",
 "outputs", "loss", "args", "eval_every"}
    Targets of `outputs` values per sample, a head `linear(16 -> outputs)`. Writes into `dir`:
        init.safetensors                      as above, with `outputs` units
        train/val/test.safetensors            `inputs` [n, 4] and `targets` [n, outputs], float32;
                                              targets `x @ w + noise`, the
                                              last output 5 from 0
        reference.json  {"losses": [...], "val": {step: {"loss", "mae", "rmse", "r2"}},
                         "test": {...}, "val_batched_r2": {step: r2}}: every step's loss over the
                         WHOLE batch (batches in file order, an epoch's last batch smaller);
                         after every `eval_every` steps the validation split's mean loss and
                         metrics, as `metrics` below defines them; the test split's after the
                         last step; and, to show that the split's r2 is not a mean over batches
                         of 7 samples, that mean.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, save_safetensors  # noqa: E402


def loss_fn(name, args):
    """The torch.nn.functional loss of a spec, with its arguments named as in Kiln."""
    f = {"mse": F.mse_loss, "l1": F.l1_loss, "huber": F.huber_loss, "smooth_l1": F.smooth_l1_loss}[name]
    return lambda out, y: f(out, y, **args)


def model(seed, outputs):
    torch.manual_seed(seed)
    m = nn.Sequential()
    m.add_module("fc1", nn.Linear(4, 16))
    m.add_module("relu", nn.ReLU())
    m.add_module("out", nn.Linear(16, outputs))
    return m


def r2_score(t, p):
    """scikit-learn's `r2_score(t, p)` with multioutput="uniform_average" and force_finite=True
    (`sklearn.metrics._regression._assemble_r2_explained_variance`), in float64."""
    if t.shape[0] < 2:
        return float("nan")
    numerator = ((t - p) ** 2).sum(axis=0)
    denominator = ((t - t.mean(axis=0)) ** 2).sum(axis=0)
    scores = np.ones(t.shape[1])
    valid = (numerator != 0) & (denominator != 0)
    scores[valid] = 1 - numerator[valid] / denominator[valid]
    scores[(numerator != 0) & (denominator == 0)] = 0.0
    return float(scores.mean())


def metrics(pred, y):
    """mae, rmse and r2 over a whole split, as scikit-learn's `mean_absolute_error`,
    `root_mean_squared_error` and `r2_score` define them for [n, outputs] arrays
    (multioutput="uniform_average": each output's score, then their mean), in float64."""
    p = pred.detach().double().numpy().reshape(pred.shape[0], -1)
    t = y.double().numpy().reshape(y.shape[0], -1)
    e = p - t
    return {
        "mae": float(np.abs(e).mean(axis=0).mean()),
        "rmse": float(np.sqrt((e ** 2).mean(axis=0)).mean()),
        "r2": r2_score(t, p),
    }


def sources(case):
    m = model(case["seed"], 1)
    save_safetensors(f"{case['dir']}/init.safetensors", m.state_dict())
    init = {k: v.clone() for k, v in m.state_dict().items()}
    n, d = case["steps"] * case["batch"], case["dir"]
    x = torch.randn(n, 4)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0])
    y = x @ w + 0.5 + 0.1 * torch.randn(n)
    counts = torch.round(2.0 * y.abs())
    cells = lambda v: ",".join(f"{float(c):.9g}" for c in v)
    for name, t in (("data.csv", y), ("whole.csv", counts)):
        with open(f"{d}/{name}", "w") as f:
            f.write("a,b,c,d,y\n")
            for xi, yi in zip(x, t):
                f.write(f"{cells(xi)},{float(yi):.9g}\n")
    np.save(f"{d}/x.npy", x.numpy())
    np.save(f"{d}/y.npy", y.numpy())
    np.savez(f"{d}/data.npz", inputs=x.numpy(), targets=y.numpy())
    save_safetensors(f"{d}/data.safetensors", {"inputs": x, "targets": y})
    b, out = case["batch"], {}
    for targets, t in (("real", y), ("whole", counts)):
        out[targets] = {}
        for spec in case["losses"]:
            m.load_state_dict(init)
            opt = torch.optim.SGD(m.parameters(), lr=case["lr"])
            f, losses = loss_fn(spec["loss"], spec["args"]), []
            for step in range(case["steps"]):
                xb, yb = x[step * b:(step + 1) * b], t[step * b:(step + 1) * b]
                opt.zero_grad()
                loss = f(m(xb).squeeze(-1), yb)
                losses.append(loss.item())
                loss.backward()
                opt.step()
            out[targets][spec["name"]] = losses
    with open(f"{d}/reference.json", "w") as f:
        json.dump(out, f)


def split(n, w):
    x = torch.randn(n, 4)
    y = x @ w + 0.3 * torch.randn(n, w.shape[1])
    y[:, -1] = 5.0 + y[:, -1]
    return x, y


def evaluate(m, f, x, y):
    with torch.no_grad():
        out = m(x)
        return {"loss": f(out, y).item(), **metrics(out, y)}


def metrics_case(case):
    k, b, d = case["outputs"], case["batch"], case["dir"]
    m = model(case["seed"], k)
    save_safetensors(f"{d}/init.safetensors", m.state_dict())
    torch.manual_seed(case["seed"] + 1)
    w = torch.randn(4, k)
    data = {s: split(case[f"{s}_count"] if s != "train" else case["count"], w) for s in ("train", "val", "test")}
    for s, (x, y) in data.items():
        save_safetensors(f"{d}/{s}.safetensors", {"inputs": x, "targets": y})
    (x, y), (vx, vy) = data["train"], data["val"]
    f = loss_fn(case["loss"], case["args"])
    opt = torch.optim.SGD(m.parameters(), lr=case["lr"])
    starts = list(range(0, x.shape[0], b))
    losses, val, batched = [], {}, {}
    for step in range(case["steps"]):
        s = starts[step % len(starts)]
        opt.zero_grad()
        loss = f(m(x[s:s + b]), y[s:s + b])
        losses.append(loss.item())
        loss.backward()
        opt.step()
        if (step + 1) % case["eval_every"] == 0:
            val[step + 1] = evaluate(m, f, vx, vy)
            with torch.no_grad():
                parts = [metrics(m(vx[i:i + 7]), vy[i:i + 7])["r2"] for i in range(0, vx.shape[0], 7)]
            batched[step + 1] = float(np.mean(parts))
    test = evaluate(m, f, *data["test"])
    with open(f"{d}/reference.json", "w") as fh:
        json.dump({"losses": losses, "val": val, "test": test, "val_batched_r2": batched}, fh)


def main():
    for case in cases():
        if case["kind"] == "sources":
            sources(case)
        else:
            metrics_case(case)


if __name__ == "__main__":
    main()
