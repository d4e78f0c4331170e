#!/usr/bin/env bash
# Compression, measured: the figures of BENCHMARKS.md's compression section.
#
# 1. Compressed linears against fp32: one 1000x1000 and one 4096x4096 linear layer
#    (bench/compress/linear.exp), each trained one step and compressed with int8 weight-only,
#    dynamic int8 (activations quantized per row), int4 (groups of 128; 4096 only, since no
#    group size divides 1000 input features) and bf16 weights; the
#    run's report times the uncompressed and the compressed model side by side at batch 1 and
#    256. PyTorch's own fp32 F.linear is timed next to them, in this process tree.
# 2. The MNIST MLP (experiments/mnist_mlp.exp, on the CPU) trained plain, then with int8
#    weights, gradual pruning to 90% and structured pruning of half its hidden neurons: accuracy
#    before and after, weight bytes, latency at batch 256.
#
#   bash bench/compress.sh            # both parts
#   PART=linears bash bench/compress.sh
#   PART=mnist bash bench/compress.sh
#
# Environment: PART (all), SKIP_BUILD=1 to use the binaries already built (in
# CARGO_TARGET_DIR, else target/).

set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
part=${PART:-all}
target=${CARGO_TARGET_DIR:-target}
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --bin kiln --bin kiln-runtime >&2
fi
kiln=$target/release/kiln
python=$root/.venv/bin/python

work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-compress-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ "$part" = all ] || [ "$part" = linears ]; then
  methods=(
    "int8(granularity: per_channel)"
    "int8(granularity: per_channel, activations: dynamic)"
    "int4(group_size: 128)"
    "bf16"
  )
  dirs=()
  for n in 1000 4096; do
    for i in "${!methods[@]}"; do
      # No int4 group size divides 1000 input features: the checker refuses it (K0212).
      if [ "$n" = 1000 ] && [[ ${methods[$i]} == int4* ]]; then
        continue
      fi
      exp="$work/linear-$n-$i.exp"
      sed -e "s/1000/$n/g" -e "s/quantize fc .*/quantize fc ${methods[$i]}/" \
        bench/compress/linear.exp > "$exp"
      dir="$work/runs/linear-$n-$i"
      echo "linear $n x $n, ${methods[$i]}" >&2
      "$kiln" run "$exp" --quiet --run-dir "$dir" > /dev/null
      dirs+=("$dir")
    done
  done
  echo
  echo "Compressed linears against fp32 (median ms per forward, eval mode)"
  "$python" bench/compress/report.py linears "${dirs[@]}"
fi

if [ "$part" = all ] || [ "$part" = mnist ]; then
  runs=(mnist_mlp mnist_mlp_int8 mnist_mlp_prune_gradual mnist_mlp_prune_structured)
  for name in "${runs[@]}"; do
    echo "$name" >&2
    "$kiln" run "experiments/$name.exp" --quiet --device cpu --run-dir "$work/runs/$name" > /dev/null
  done
  echo
  echo "MNIST MLP (validation accuracy on the 2,000 held-out digits; latency at batch 256)"
  "$python" bench/compress/report.py mnist "$work/runs/mnist_mlp" \
    "$work/runs/mnist_mlp_int8" "$work/runs/mnist_mlp_prune_gradual" "$work/runs/mnist_mlp_prune_structured"
fi
