"""PyTorch reference runs for `tests/parity_masks.rs`: local (sliding-window) attention.

Usage: masks.py SPEC.json

SPEC.json is a list of cases written by the Rust test, each
    {"dir": ..., "model": "window"|"causal_padded"|"attention_padded", "seed": int,
     "vocab": int, "length": int, "count": int, "batch": int, "steps": int, "lr": float,
     "weight_decay": float}

For each case it draws the data as Kiln's `synthetic(inputs: randint(vocab, shape: [length]),
targets: argmax(), count)` does (`torch.manual_seed(seed)`, `torch.randint`, then the position of
the largest id), builds the model, and writes into `dir`:
    init.safetensors  the model's initial state_dict (F32)
    reference.json    {"losses": [...]}: the mean training loss of each step, before the update

Kiln's `window: K` is the boolean `attn_mask` (True = not allowed) of `|i - j| >= K`, and with
`causal: true` also of `j > i`; a padding id adds `key_padding_mask = tokens == pad`. Training
takes the batches in order (Kiln's `shuffle false`) and runs AdamW (`foreach=False`) at a constant
learning rate.
"""

import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import cases, save_safetensors  # noqa: E402


def local_mask(n, causal, window):
    """The boolean attn_mask of Kiln's `window: K` (True = not allowed)."""
    i = torch.arange(n)
    offset = i[:, None] - i[None, :]
    allowed = offset.abs() < window
    if causal:
        allowed &= offset >= 0
    return ~allowed


def sinusoids(length, width):
    """The PyTorch tutorial's PositionalEncoding table, without its dropout."""
    position = torch.arange(length).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
    pe = torch.zeros(length, width)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def masked_mean(x, pad):
    """Kiln's `mean(0)` after a padding mask: the mean over the tokens."""
    keep = (~pad).float().unsqueeze(-1)
    return (x * keep).sum(1) / keep.sum(1)


class Window(nn.Module):
    """embed: embedding(V, 16); pos: positional(max_len: S);
    block: transformer_block(2, hidden: 32, dropout: 0, window: 3); mean(0); head: linear(S)"""

    def __init__(self, vocab, length):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.pos = nn.Module()
        self.pos.weight = nn.Parameter(torch.randn(length, 16))
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu",
                                                norm_first=True, batch_first=True)
        self.head = nn.Linear(16, length)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
        x = self.block(x, src_mask=local_mask(tokens.shape[1], False, 3))
        return self.head(x.mean(1))


class CausalPadded(nn.Module):
    """embed: embedding(V, 16, pad: 0); sinusoidal; block: transformer_block(2, hidden: 32,
    dropout: 0, causal: true, norm: post, window: 2); mean(0); head: linear(S)"""

    def __init__(self, vocab, length):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16, padding_idx=0)
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu",
                                                norm_first=False, batch_first=True)
        self.head = nn.Linear(16, length)
        self.register_buffer("pe", sinusoids(length, 16), persistent=False)

    def forward(self, tokens):
        pad = tokens == 0
        x = self.embed(tokens) + self.pe[: tokens.shape[1]]
        mask = local_mask(tokens.shape[1], True, 2)
        x = self.block(x, src_mask=mask, src_key_padding_mask=pad)
        return self.head(masked_mean(x, pad))


class AttentionPadded(nn.Module):
    """embed: embedding(V, 16, pad: 0); pos: positional(max_len: S); attn: attention(2,
    window: 2); norm: layernorm; mean(0); head: linear(S)"""

    def __init__(self, vocab, length):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16, padding_idx=0)
        self.pos = nn.Module()
        self.pos.weight = nn.Parameter(torch.randn(length, 16))
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, length)

    def forward(self, tokens):
        pad = tokens == 0
        x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
        mask = local_mask(tokens.shape[1], False, 2)
        x = self.attn(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)[0]
        return self.head(masked_mean(self.norm(x), pad))


MODELS = {"window": Window, "causal_padded": CausalPadded, "attention_padded": AttentionPadded}


def run(case):
    torch.manual_seed(case["seed"])
    inputs = torch.randint(case["vocab"], (case["count"], case["length"]))
    targets = inputs.argmax(1)
    torch.manual_seed(case["seed"] + 1)
    model = MODELS[case["model"]](case["vocab"], case["length"])
    save_safetensors(f"{case['dir']}/init.safetensors", model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=case["lr"], weight_decay=case["weight_decay"],
                            foreach=False)
    losses, b = [], case["batch"]
    for step in range(case["steps"]):
        opt.zero_grad(set_to_none=False)
        x, y = inputs[step * b:(step + 1) * b], targets[step * b:(step + 1) * b]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(f"{case['dir']}/reference.json", "w") as f:
        json.dump({"losses": losses}, f)


def main():
    for case in cases():
        run(case)


if __name__ == "__main__":
    main()
