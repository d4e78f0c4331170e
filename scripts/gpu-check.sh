#!/usr/bin/env bash
# Checks Kiln on a CUDA machine (see ../shared/GPU.md); its figures are in BENCHMARKS.md
# ("On a GPU").
#
# Built here (`cargo build --release`), then run there from the repository root with
#   target/release/kiln and target/release/kiln-runtime carried over.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
TORCH_LIB=$("$PY" -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=${OUT:-/tmp/kiln-gpu}
mkdir -p "$OUT"
say() { printf '\n== %s\n$ %s\n' "$1" "$2"; }

say "libraries" "ldd target/release/kiln-runtime | grep -E 'torch|cuda'"
ldd target/release/kiln-runtime | grep -E 'torch|cuda'
say "CUDA detection" "target/release/kiln env"
target/release/kiln env

# The c10d binding's unit tests (built here with `cargo test --release --bin kiln-runtime
# --no-run`, copied to target/release/c10d-tests): on CUDA the NCCL test all-reduces CUDA
# tensors and drives PyTorch's Reducer at world size 1.
if [ -x target/release/c10d-tests ]; then
  say "c10d on CUDA: NCCL and the Reducer" "target/release/c10d-tests c10d --test-threads 1"
  timeout 120 target/release/c10d-tests c10d --test-threads 1 2>&1 | grep -E '^test |result'
fi

for exp in experiments/mnist_mlp.exp experiments/mnist_cnn.exp; do
  say "train on cuda:0" "kiln run $exp --device cuda:0 --quiet --runs-dir $OUT/runs"
  /usr/bin/time -f "wall %e s" timeout 180 target/release/kiln run "$exp" --device cuda:0 --quiet --runs-dir "$OUT/runs"
  grep -A3 '^val:' "$(ls -td "$OUT"/runs/*/*/ | head -1)report.yaml"
done

say "bf16 MLP 8192x8192, batch 8192: kiln" "kiln run bench/gpu/mlp_bf16.exp (nvidia-smi sampling utilisation)"
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > "$OUT/util.csv" &
SMI=$!
timeout 240 target/release/kiln run bench/gpu/mlp_bf16.exp --quiet --runs-dir "$OUT/runs"
kill $SMI 2>/dev/null
REPORT=$(ls -d "$OUT"/runs/gpu-mlp-bf16/*/ | tail -1)/report.yaml
"$PY" - "$REPORT" "$OUT/util.csv" <<'PYEOF'
import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
width, batch = 8192, 8192
sps = r["samples_per_s"]
flops = 3 * 2 * 3 * width * width  # per sample: 3 linears, forward + backward
tflops = sps * flops / 1e12
util = [float(x) for x in open(sys.argv[2]) if x.strip()]
busy = [u for u in util if u > 0]
print(f"kiln steps/s {sps / batch:.2f}  TFLOP/s {tflops:.1f}  MFU {100 * tflops / 790:.1f}% of 790")
print(f"GPU busy (samples > 0%): mean {sum(busy) / max(len(busy), 1):.1f}% over {len(busy)} samples")
PYEOF
say "bf16 MLP: PyTorch eager on the same GPU" "$PY bench/gpu/torch_mlp_bf16.py"
timeout 120 "$PY" bench/gpu/torch_mlp_bf16.py
say "plan estimate" "kiln plan bench/gpu/mlp_bf16.exp | tail -3"
target/release/kiln plan bench/gpu/mlp_bf16.exp | tail -3
