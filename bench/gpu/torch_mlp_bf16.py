"""The same bf16 MLP as mlp_bf16.exp in PyTorch eager (autocast), for steps/s on the same GPU."""
import time

import torch

torch.manual_seed(0)
dev = "cuda:0"
width, batch, steps = 8192, 8192, 60
model = torch.nn.Sequential(
    torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width)
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=dev)
y = torch.randint(0, width, (batch,), device=dev)
for i in range(steps + 10):
    if i == 10:
        torch.cuda.synchronize()
        start = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    loss.backward()
    opt.step()
    loss.item()
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
flops = 3 * 2 * 3 * width * width * batch
print(f"pytorch steps/s {steps / elapsed:.2f}  TFLOP/s {flops * steps / elapsed / 1e12:.1f}  peak MiB {torch.cuda.max_memory_allocated() / 2**20:.0f}")
