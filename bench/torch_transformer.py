"""The PyTorch eager baseline of bench/transformer.sh: the model of bench/transformer.exp.

    python bench/torch_transformer.py STEPS [--threads N] [--fused] [--device D] [--compile]

Embedding, fixed sinusoidal positions, two pre-norm nn.TransformerEncoderLayer blocks (width 64,
4 heads, MLP 256, dropout 0.1, GELU), a layer norm, the mean over the sequence and a linear head;
cross-entropy with label smoothing 0.1, clip_grad_norm_(1.0), AdamW (lr 3e-4, weight decay 0.01)
under a cosine schedule with 20 warm-up steps. Each step gathers a batch from a shuffled data set
with index_select (as Kiln's loader does) and reads the loss as a float (the usual training
loop's NaN check). Only the loop is timed. Prints `steps_per_s <value>`. `--fused` gives AdamW
fused=True (Kiln's default); without it, torch.optim's default (on the CPU the single-tensor
rules, on CUDA foreach). `--device` puts the model and data there (scripts/gpu-check.sh);
`--compile` runs the model through torch.compile after three untimed warm-up steps.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HEADS, HIDDEN, TOKENS, VOCAB, CLASSES = 64, 4, 256, 32, 16, 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        pos = torch.arange(TOKENS).unsqueeze(1)
        div = torch.exp(torch.arange(0, WIDTH, 2) * (-math.log(10000.0) / WIDTH))
        table = torch.zeros(TOKENS, WIDTH)
        table[:, 0::2] = torch.sin(pos * div)
        table[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pos", table)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, HEADS, HIDDEN, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)
            for _ in range(2)
        )
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        h = self.embed(x) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h).mean(dim=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(7)
    dev = torch.device(args.device)
    net = Model().to(dev)
    n, batch = 20_000, 128
    x = torch.randint(VOCAB, (n, TOKENS)).to(dev)
    y = x.argmax(dim=1)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.01, **({"fused": True} if args.fused else {}))
    warmup = 20
    per_epoch = n // batch + (n % batch > 0)

    def lr_at(step):
        if step < warmup:
            return 3e-4 * (step + 1) / warmup
        return 3e-4 * (1 + math.cos(math.pi * (step - warmup) / (args.steps - warmup))) / 2

    model = torch.compile(net) if args.compile else net
    warm = 3 if args.compile else 0
    net.train()
    perm = torch.randperm(n, device=dev)
    for step in range(args.steps + warm):
        if step == warm:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            started = time.perf_counter()
        i = step % per_epoch
        if i == 0 and step > 0:
            perm = torch.randperm(n, device=dev)
        index = perm[i * batch:(i + 1) * batch]
        xb, yb = x.index_select(0, index), y.index_select(0, index)
        for g in opt.param_groups:
            g["lr"] = lr_at(min(step, args.steps - 1))
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        if not math.isfinite(loss.item()):
            raise SystemExit(f"non-finite loss at step {step}")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elapsed = time.perf_counter() - started
    print(f"steps_per_s {args.steps / elapsed:.3f}")


if __name__ == "__main__":
    main()
