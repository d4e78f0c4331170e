"""The same bf16 MLP as mlp_bf16.exp in PyTorch eager (autocast), for steps/s on the same device.

    python bench/gpu/torch_mlp_bf16.py [--device cuda:0] [--width 8192] [--batch 8192]
                                       [--steps 60] [--compile]

Three linears of `width` with GELU between them, AdamW (lr 1e-4), cross-entropy over `width`
classes, one batch kept on the device; ten untimed warm-up steps. Prints steps/s, the achieved
TFLOP/s (forward and backward of the three linears) and, on CUDA, the peak memory allocated.
"""
import argparse
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda:0")
ap.add_argument("--width", type=int, default=8192)
ap.add_argument("--batch", type=int, default=8192)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--compile", action="store_true", help="torch.compile the model")
args = ap.parse_args()
torch.manual_seed(0)
dev = torch.device(args.device)
width, batch, steps = args.width, args.batch, args.steps
model = torch.nn.Sequential(
    torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width)
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
run = torch.compile(model) if args.compile else model
x = torch.randn(batch, width, device=dev)
y = torch.randint(0, width, (batch,), device=dev)
cuda = dev.type == "cuda"
for i in range(steps + 10):
    if i == 10:
        if cuda:
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
    opt.zero_grad()
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(run(x).float(), y)
    loss.backward()
    opt.step()
    loss.item()
if cuda:
    torch.cuda.synchronize(dev)
elapsed = time.perf_counter() - start
flops = 3 * 2 * 3 * width * width * batch
peak = f"  peak MiB {torch.cuda.max_memory_allocated(dev) / 2**20:.0f}" if cuda else ""
print(f"pytorch steps/s {steps / elapsed:.2f}  TFLOP/s {flops * steps / elapsed / 1e12:.3f}{peak}")
