# PyTorch's numbers for the quantization tests in quant_tests.rs: observers, quantizers, fake
# quantization, moving-average observers and torchao's int4 convention, computed from the
# tensors in the safetensors file argv[1] and written to the safetensors file argv[2]. It runs
# with tests/support on its path, for the shared `torchref` module.
import sys

import torch
from torch.ao.quantization.observer import (
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchref import load_safetensors, save_safetensors

inputs = load_safetensors(sys.argv[1])
out = {}
w = inputs["w"]

# (name, dtype, symmetric, reduce_range), named as quant_tests.rs names them. PyTorch refuses
# reduce_range with symmetric quint8.
CONFIGS = [
    (f"{d}_{'sym' if s else 'aff'}{'_rr' if r else ''}", dt, s, r)
    for d, dt in (("qint8", torch.qint8), ("quint8", torch.quint8))
    for s in (True, False)
    for r in (False, True)
    if not (dt == torch.quint8 and s and r)
]

for name, dtype, symmetric, reduce_range in CONFIGS:
    for granularity in ("channel", "tensor"):
        key = f"{granularity}_{name}"
        if granularity == "channel":
            scheme = torch.per_channel_symmetric if symmetric else torch.per_channel_affine
            obs = PerChannelMinMaxObserver(
                ch_axis=0, dtype=dtype, qscheme=scheme, reduce_range=reduce_range
            )
        else:
            scheme = torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine
            obs = MinMaxObserver(dtype=dtype, qscheme=scheme, reduce_range=reduce_range)
        obs(w)
        scale, zp = obs.calculate_qparams()
        qmin, qmax = obs.quant_min, obs.quant_max
        if granularity == "channel":
            q = torch.quantize_per_channel(w, scale, zp, 0, dtype).int_repr()
            fq = torch.fake_quantize_per_channel_affine(w, scale, zp.int(), 0, qmin, qmax)
        else:
            q = torch.quantize_per_tensor(w, float(scale), int(zp), dtype).int_repr()
            fq = torch.fake_quantize_per_tensor_affine(w, float(scale), int(zp), qmin, qmax)
        out[f"{key}.scale"] = scale
        out[f"{key}.zero_point"] = zp
        out[f"{key}.q"] = q
        out[f"{key}.fq"] = fq

# Moving averages over the observations obs.0, obs.1, ...
observations = [inputs[f"obs.{i}"] for i in range(sum(k.startswith("obs.") for k in inputs))]
for name, dtype, symmetric, reduce_range in CONFIGS:
    if reduce_range:
        continue
    for granularity in ("channel", "tensor"):
        if granularity == "channel":
            scheme = torch.per_channel_symmetric if symmetric else torch.per_channel_affine
            obs = MovingAveragePerChannelMinMaxObserver(ch_axis=0, dtype=dtype, qscheme=scheme)
        else:
            scheme = torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine
            obs = MovingAverageMinMaxObserver(dtype=dtype, qscheme=scheme)
        for x in observations:
            obs(x)
        scale, zp = obs.calculate_qparams()
        out[f"moving_{granularity}_{name}.scale"] = scale
        out[f"moving_{granularity}_{name}.zero_point"] = zp

# torchao's int4 groupwise quantization (get_groupwise_affine_qparams and
# groupwise_affine_quantize_tensor_from_qparams, n_bit 4, fp32 qparams), dequantized.
w4 = inputs["w4"]
for gs in (32, 64, 128, 256):
    if w4.shape[1] % gs:
        continue
    g = w4.reshape(-1, gs)
    mx, mn = g.amax(dim=1, keepdim=True), g.amin(dim=1, keepdim=True)
    scales = (mx - mn).clamp(min=1e-6) / 15
    zeros = mn + scales * 8
    low = zeros - scales * 8
    q = g.sub(low).div(scales).round().clamp_(0, 15)
    out[f"int4_g{gs}.dequantized"] = ((q - 8) * scales + zeros).reshape(w4.shape)

save_safetensors(sys.argv[2], out)
