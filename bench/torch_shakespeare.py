"""The PyTorch eager twin of experiments/shakespeare_char.exp (nanoGPT's CPU "baby GPT").

    python bench/torch_shakespeare.py [--steps N] [--threads N] [--data DIR] [--seed S]

The same text (every file of data/shakespeare in name order, concatenated), the same character
vocabulary (sorted(set(text))), the same split (the first 90% of the characters train, the next
10% validate) and the same recipe: embedding(84, 128) plus a learned N(0, 1) position table, four
pre-norm causal nn.TransformerEncoderLayer blocks (4 heads, MLP 512, GELU, dropout 0), a layer
norm and a linear head on every position; AdamW(lr 1e-3, betas (0.9, 0.99), weight decay 0.1,
fused=True as Kiln's), Kiln's cosine schedule (lr * (t + 1) / 100 for the first 100 steps, then
cosine to 1e-4 at the last step), clip_grad_norm_(1.0), batch 12 of random 64-character windows
drawn as nanoGPT's get_batch draws them (torch.randint over the offsets; x = data[i:i+64], y =
data[i+1:i+65]). Validation is Kiln's: every consecutive 64-character window of the held-out tail
(stride 64), the loss averaged over all their characters, every `--eval-every` steps (1000, as the
experiment's `eval_every`), and after the last step.

Prints `steps_per_s` and `train_seconds` over the loop with the validations every `--eval-every`
steps (as Kiln's report counts a run's `samples_per_s`: the validation after the last step is
outside the loop unless it falls on one of those), and `val_loss` after the last step.
"""

import argparse
import glob
import math
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

BLOCK, WIDTH, HEADS, HIDDEN, LAYERS, BATCH = 64, 128, 4, 512, 4, 12
LR, MIN_LR, WARMUP = 1e-3, 1e-4, 100


class Gpt(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tokens = nn.Embedding(vocab, WIDTH)
        self.pos = nn.Parameter(torch.randn(BLOCK, WIDTH))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, HEADS, HIDDEN, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
            for _ in range(LAYERS)
        )
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(BLOCK))

    def forward(self, x):
        h = self.tokens(x) + self.pos
        for b in self.blocks:
            h = b(h, src_mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


def lr_at(t, steps):
    if t < WARMUP:
        return LR * (t + 1) / WARMUP
    return MIN_LR + (LR - MIN_LR) * (1 + math.cos(math.pi * (t - WARMUP) / (steps - WARMUP))) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "shakespeare"))
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-every", type=int, default=1000)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    files = sorted(f for f in glob.glob(os.path.join(args.data, "*")) if os.path.isfile(f) and not os.path.basename(f).startswith("."))
    text = "".join(open(f, encoding="utf-8").read() for f in files)
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.int64)
    n = len(data)
    train, val = data[: int(0.9 * n)], data[int(0.9 * n) : int(0.9 * n) + int(0.1 * n)]

    def validate():
        model.eval()
        windows = (len(val) - BLOCK - 1) // BLOCK + 1
        total, count = 0.0, 0
        with torch.no_grad():
            for lo in range(0, windows, 256):
                o = torch.arange(lo, min(lo + 256, windows)) * BLOCK
                w = val[o.unsqueeze(1) + span]
                x, y = w[:, :-1], w[:, 1:]
                total += F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1), reduction="sum").item()
                count += y.numel()
        model.train()
        return total / count

    model = Gpt(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.99), weight_decay=0.1, fused=True)
    span = torch.arange(BLOCK + 1)
    model.train()
    started = time.perf_counter()
    for t in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(t, args.steps)
        i = torch.randint(len(train) - BLOCK, (BATCH,))
        w = train[i.unsqueeze(1) + span]
        x, y = w[:, :-1], w[:, 1:]
        loss = F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if not math.isfinite(loss.item()):
            raise SystemExit(f"non-finite loss at step {t + 1}")
        if (t + 1) % args.eval_every == 0:
            val_loss = validate()
    seconds = time.perf_counter() - started
    if args.steps % args.eval_every != 0:
        val_loss = validate()
    print(f"steps_per_s {args.steps / seconds:.4f}")
    print(f"train_seconds {seconds:.2f}")
    print(f"val_loss {val_loss:.6f}")


if __name__ == "__main__":
    main()
