"""PyTorch reference runs for `tests/parity_tokens.rs`: a class per token.

Usage: reference.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "task": "copy"|"reverse"|"sort", "loss": "cross_entropy"|"nll",
     "args": {...the loss's keyword arguments...}, "seed": int, "vocab": int, "length": int,
     "count": int, "batch": int, "steps": int, "lr": float, "weight_decay": float}

For each case it draws the data as Kiln's `synthetic(inputs: randint(vocab, shape: [length]),
targets: TASK(), count)` does (`torch.manual_seed(seed)`, `torch.randint`, then the targets per
token), builds the model, and writes into `dir`:
    init.safetensors  the model's initial state_dict (F32)
    reference.json    {"losses": [...], "eval": {"loss": ..., "accuracy": ...},
                       "train_accuracy": ...}: the mean training loss of each step, before the
                      update; the initial model's loss over all the samples and its accuracy
                      over the tokens not ignored; the fraction of correct tokens not ignored
                      over the training steps (one epoch), each before its update

The model scores every token, `[B, S, V]`, and the loss is PyTorch's over the flattened tokens,
`F.cross_entropy(out.reshape(-1, V), y.reshape(-1), ...)`. Training takes the batches in order
(Kiln's `shuffle false`) and runs AdamW (`foreach=False`) at a constant learning rate.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, save_safetensors  # noqa: E402


class Tokens(nn.Module):
    """embed: embedding(V, 16); pos: positional(max_len: S);
    block: transformer_block(2, hidden: 32, dropout: 0); head: linear(V) [; log_softmax]"""

    def __init__(self, vocab, length, log_softmax):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.pos = nn.Module()
        self.pos.weight = nn.Parameter(torch.randn(length, 16))
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu",
                                                norm_first=True, batch_first=True)
        self.head = nn.Linear(16, vocab)
        self.log_softmax = log_softmax

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
        out = self.head(self.block(x))
        return F.log_softmax(out, -1) if self.log_softmax else out


TASKS = {
    "copy": lambda x: x.clone(),
    "reverse": lambda x: x.flip(1),
    "sort": lambda x: x.sort(1).values,
}


def run(case):
    torch.manual_seed(case["seed"])
    inputs = torch.randint(case["vocab"], (case["count"], case["length"]))
    targets = TASKS[case["task"]](inputs)
    torch.manual_seed(case["seed"] + 1)
    vocab = case["vocab"]
    model = Tokens(vocab, case["length"], case["loss"] == "nll")
    save_safetensors(f"{case['dir']}/init.safetensors", model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=case["lr"], weight_decay=case["weight_decay"],
                            foreach=False)
    args = dict(case["args"])
    if "weight" in args:
        args["weight"] = torch.tensor(args["weight"], dtype=torch.float32)
    loss_fn = F.nll_loss if case["loss"] == "nll" else F.cross_entropy
    with torch.no_grad():
        out = model(inputs)
        loss = loss_fn(out.reshape(-1, vocab), targets.reshape(-1), **args)
        kept = targets != args.get("ignore_index", -100)
        hits = (out.argmax(-1) == targets) & kept
        evaluation = {"loss": loss.item(), "accuracy": hits.sum().item() / kept.sum().item()}
    losses, b, hits, kept = [], case["batch"], 0, 0
    for step in range(case["steps"]):
        opt.zero_grad(set_to_none=False)
        x, y = inputs[step * b:(step + 1) * b], targets[step * b:(step + 1) * b]
        out = model(x)
        loss = loss_fn(out.reshape(-1, vocab), y.reshape(-1), **args)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        counted = y != args.get("ignore_index", -100)
        hits += ((out.argmax(-1) == y) & counted).sum().item()
        kept += counted.sum().item()
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses, "eval": evaluation, "train_accuracy": hits / kept}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
