"""PyTorch reference for the layer parity test (`src/runtime/layer_parity.rs`).

Usage: reference.py SPEC.json RESULTS.json

SPEC.json is a list of runs written by the Rust test, each
    {"name": str, "path": FILE, "layers": [[name, torch_expression], ...],
     "input": {"shape": [...], "int_high": int or null}, "batch": int,
     "train": bool, "bf16": bool, "seed": int}

For each run it builds `nn.Sequential` of the layers (so a layer named `l` has the state_dict keys
`l.weight` and so on, as Kiln names them), moves every parameter and buffer away from its default
(so that a bias or a running statistic that is ignored shows), makes a batch of input and a random
upstream gradient, and runs forward (under `torch.autocast("cpu", dtype=torch.bfloat16)` when
`bf16`) and backward. It writes FILE, a safetensors file holding

    <state_dict key>     every parameter and buffer before the forward pass (F32)
    input                the batch (F32, or I64 when `int_high` is given)
    upstream             dL/d(output) (F32): the backward pass is that of sum(output * upstream)
    output               the output, widened to F32 when it is BF16
    grad.input           the input's gradient (float inputs only)
    grad.<param>         each parameter's gradient
    after.<buffer>       each buffer after the forward pass (running statistics)

and RESULTS.json, {name: {"output_dtype": "float32" | "bfloat16"}}. The global generator is seeded
with `seed` right before the forward pass, as the Rust side does, so that dropout draws the same
masks on both sides: libtorch's own for bf16 (both link the same libtorch), and for fp32 Kiln's
CPU dropout (`src/runtime/model/dropout.rs`), whose key comes from the same generator and whose
mask `kiln_mask` computes here in NumPy.
"""

import json
import math
import os
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "support"))
from torchref import save_safetensors  # noqa: E402


GAMMA = np.uint64(0x9E3779B97F4A7C15)


def mix(z):
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def kiln_mask(shape, p):
    """Kiln's CPU dropout mask of `shape` (`src/runtime/model/dropout.rs`): a key drawn from the
    global generator, then element i kept when the 24 bits of SplitMix64(key + (i // 2 + 1) γ)
    for it (the high half for even i, the low for odd) over 2^24 are at least p; kept elements
    are 1 / (1 - p) in fp32."""
    key = np.uint64(int(torch.randint(2**63 - 1, (1,)).item()))
    n = math.prod(shape)
    j = np.arange((n + 1) // 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = mix(key + (j + np.uint64(1)) * GAMMA)
    bits = np.empty(2 * len(j), dtype=np.uint64)
    bits[0::2] = z >> np.uint64(40)
    bits[1::2] = (z >> np.uint64(8)) & np.uint64(0xFFFFFF)
    keep = bits[:n].astype(np.float64) / float(1 << 24) >= p
    scale = np.float32(1.0) / np.float32(1.0 - p)
    return torch.from_numpy(np.where(keep, scale, np.float32(0.0)).astype(np.float32)).reshape(shape)


def kiln_dropout(x, p, training):
    """Kiln's dropout: its own mask for fp32 (on the CPU), libtorch's for other dtypes."""
    if not training or p == 0.0:
        return x
    if x.dtype != torch.float32 or p >= 1.0:
        return F.dropout(x, p, True)
    return x * kiln_mask(x.shape, p)


class Dropout(nn.Module):
    """nn.Dropout with Kiln's fp32 masks."""

    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return kiln_dropout(x, self.p, self.training)


def local_mask(n, causal, window):
    """Kiln's `window: K` as a boolean `attn_mask` (True = not allowed): query i attends to the
    keys j with |i - j| < K, and with `causal` to those with i - K < j <= i."""
    i = torch.arange(n)
    offset = i[:, None] - i[None, :]
    allowed = offset.abs() < window
    if causal:
        allowed &= offset >= 0
    return ~allowed


class SelfAttention(nn.MultiheadAttention):
    """Kiln's `attention(heads, dropout, causal, window)` on [batch, S, E]: nn.MultiheadAttention
    with query = key = value, so its parameters keep their names (`in_proj_weight`,
    `out_proj.bias`). The causal mask is the explicit additive one, not a flag; a `window` gives
    the boolean mask of `local_mask`."""

    def __init__(self, width, heads, dropout=0.0, causal=False, bias=True, window=None):
        super().__init__(width, heads, dropout=dropout, bias=bias, batch_first=True)
        self.causal = causal
        self.window = window

    def forward(self, x, key_padding_mask=None):
        if self.training and self.dropout > 0 and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            return self.dropped(x, key_padding_mask)
        if self.window is not None:
            mask = local_mask(x.shape[1], self.causal, self.window)
        elif self.causal:
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        else:
            mask = None
        out = super().forward(x, x, x, attn_mask=mask, key_padding_mask=key_padding_mask,
                              need_weights=False)[0]
        # With batch_first, the output is a transposed view. Kiln's is contiguous; so that a
        # dropout after it draws its mask in the same memory order, this one is made so too.
        return out.contiguous()

    def dropped(self, x, key_padding_mask):
        """Training with dropout in fp32: SDPA's math path written out (q and k each scaled by
        d^(-1/4), forbidden keys at -inf, its safe softmax, dropout, values), with Kiln's dropout
        on the attention weights, as Kiln computes it."""
        b, n, e = x.shape
        h = self.num_heads
        d = e // h
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4)
        scale = math.sqrt(1.0 / math.sqrt(d))
        att = (q * scale) @ (k.transpose(-2, -1) * scale)
        allowed = torch.ones(n, n, dtype=torch.bool)
        if self.window is not None:
            allowed = ~local_mask(n, self.causal, self.window)
        elif self.causal:
            allowed = allowed.tril()
        allowed = allowed.expand(b, 1, n, n)
        if key_padding_mask is not None:
            allowed = allowed & ~key_padding_mask.view(b, 1, 1, n)
        att = torch._safe_softmax(att.masked_fill(~allowed, float("-inf")), -1)
        att = kiln_dropout(att, self.dropout, True)
        o = (att @ v).transpose(1, 2).reshape(b, n, e)
        return F.linear(o, self.out_proj.weight, self.out_proj.bias)


ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}


class TransformerBlock(nn.Module):
    """Kiln's `transformer_block(heads, hidden, dropout, causal, norm, activation, eps, bias,
    window)` from primitives, with nn.TransformerEncoderLayer's parameter names. Pre-norm:
    x + dropout(attention(norm1(x))), then x + dropout(linear2(dropout(act(linear1(norm2(x)))))).
    Post-norm: norm1(x + dropout(attention(x))), then norm2(x + dropout(linear2(...(x))))."""

    def __init__(self, width, heads, hidden, dropout=0.1, causal=False, norm="pre",
                 activation="gelu", eps=1e-5, bias=True, window=None):
        super().__init__()
        self.self_attn = SelfAttention(width, heads, dropout, causal, bias, window)
        self.linear1 = nn.Linear(width, hidden, bias=bias)
        self.linear2 = nn.Linear(hidden, width, bias=bias)
        self.norm1 = nn.LayerNorm(width, eps=eps, bias=bias)
        self.norm2 = nn.LayerNorm(width, eps=eps, bias=bias)
        self.dropout = Dropout(dropout)
        self.pre = norm == "pre"
        self.activation = ACTIVATIONS[activation]

    def attend(self, x):
        return self.dropout(self.self_attn(x))

    def mlp(self, x):
        h = self.dropout(self.activation(self.linear1(x)))
        return self.dropout(self.linear2(h))

    def forward(self, x):
        if self.pre:
            x = x + self.attend(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attend(x))
        return self.norm2(x + self.mlp(x))


def EncoderLayer(width, heads, hidden, **options):
    """nn.TransformerEncoderLayer itself on [batch, S, E], for cases without dropout (its
    dropout after attention draws from a transposed view, Kiln's from a contiguous tensor)."""
    return nn.TransformerEncoderLayer(width, heads, hidden, batch_first=True, **options)


class LocalEncoderLayer(nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer on [batch, S, E] given Kiln's `window` (and `causal`) as its
    boolean `src_mask`, for cases without dropout."""

    def __init__(self, width, heads, hidden, window, causal=False, **options):
        super().__init__(width, heads, hidden, batch_first=True, **options)
        self.window = window
        self.causal = causal

    def forward(self, x, src_key_padding_mask=None):
        mask = local_mask(x.shape[1], self.causal, self.window)
        return super().forward(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask)


class Reshape(nn.Module):
    """Kiln's `reshape(shape)`: each sample to `shape`."""

    def __init__(self, *shape):
        super().__init__()
        self.shape = shape

    def forward(self, x):
        return x.reshape(x.shape[0], *self.shape)


class Mean(nn.Module):
    """Kiln's `mean(dim)`: the mean over a per-sample dimension (counted without the batch)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim if dim < 0 else dim + 1

    def forward(self, x):
        return x.mean(self.dim)


class Positional(nn.Module):
    """Kiln's `positional(max_len)`: a learned table added to [batch, S, E], as GPT-2's wpe."""

    def __init__(self, max_len, width):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, width))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class Sinusoidal(nn.Module):
    """Kiln's `sinusoidal`: the PyTorch tutorial's PositionalEncoding without its dropout."""

    def __init__(self, width, max_len=64):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
        pe = torch.zeros(max_len, width)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.pe = pe  # a plain attribute: Kiln keeps no tensor for it, so no buffer to compare

    def forward(self, x):
        return x + self.pe[: x.shape[1]]


class Padded(nn.Sequential):
    """Layers after an embedding with `padding_idx`: ids equal to it are keys no attention
    attends to (`key_padding_mask`, `src_key_padding_mask`), and `Mean(0)` averages the other
    positions, as Kiln's `embedding(..., pad: id)` makes them."""

    def __init__(self, layers, pad):
        super().__init__(layers)
        self.pad = pad

    def forward(self, x):
        mask = x == self.pad
        for m in self:
            if isinstance(m, nn.TransformerEncoderLayer):
                x = m(x, src_key_padding_mask=mask)
            elif isinstance(m, SelfAttention):
                x = m(x, key_padding_mask=mask)
            elif isinstance(m, Mean) and m.dim == 1 and mask is not None:
                keep = (~mask).to(x.dtype).unsqueeze(-1)
                x = (x * keep).sum(1) / keep.sum(1)
                mask = None
            else:
                x = m(x)
        return x


NAMESPACE = {"nn": nn, "torch": torch, "F": F, "Dropout": Dropout, "SelfAttention": SelfAttention,
             "TransformerBlock": TransformerBlock, "EncoderLayer": EncoderLayer,
             "LocalEncoderLayer": LocalEncoderLayer,
             "Reshape": Reshape, "Mean": Mean, "Positional": Positional, "Sinusoidal": Sinusoidal}


def perturb(model):
    """Moves parameters and buffers off their defaults: weights by 10% noise, and running
    statistics to a mean near 0 and a variance in [1, 1.5)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn_like(b))
            elif name.endswith("running_var"):
                b.copy_(1.0 + 0.5 * torch.rand_like(b))


def run(spec):
    torch.manual_seed(spec["seed"])
    layers = OrderedDict((name, eval(expr, NAMESPACE)) for name, expr in spec["layers"])
    pads = [m.padding_idx for m in layers.values()
            if isinstance(m, nn.Embedding) and m.padding_idx is not None]
    model = Padded(layers, pads[0]) if pads else nn.Sequential(layers)
    perturb(model)
    out = {k: v.clone() for k, v in model.state_dict().items() if v.dtype == torch.float32}
    shape = [spec["batch"], *spec["input"]["shape"]]
    high = spec["input"]["int_high"]
    if high is None:
        x = torch.randn(shape, requires_grad=True)
    else:
        x = torch.randint(0, high, shape)
    out["input"] = x.detach().clone()

    model.train(spec["train"])
    torch.manual_seed(spec["seed"])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec["bf16"]):
        y = model(x)
    generator = torch.Generator().manual_seed(spec["seed"] + 1)
    upstream = torch.randn(y.shape, generator=generator)
    (y.float() * upstream).sum().backward()

    out["upstream"] = upstream
    out["output"] = y.detach().float()
    if high is None:
        out["grad.input"] = x.grad
    for name, p in model.named_parameters():
        if p.grad is not None:
            out[f"grad.{name}"] = p.grad
    for name, b in model.named_buffers():
        if b.dtype == torch.float32:
            out[f"after.{name}"] = b
    save_safetensors(spec["path"], out)
    return {"output_dtype": str(y.dtype).removeprefix("torch.")}


def main():
    with open(sys.argv[1]) as f:
        specs = json.load(f)
    results = {spec["name"]: run(spec) for spec in specs}
    with open(sys.argv[2], "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
