#!/usr/bin/env bash
# The plan's memory against what a transformer's run holds, on the CPU: the two causal
# transformers of issue 36 (4 blocks of width 512, MLP 2048, 8 heads over 512 positions, batch
# 16, fp32; 3 blocks of width 384, MLP 1536, 8 heads over 256 positions, batch 8, bf16, the first
# block recomputed), each with dropout 0.1 (the CPU's math path for attention, which keeps the
# scores) and without (flash attention), 3 steps, AdamW.
#
#   bash bench/transformer_memory.sh
#
# Each run prints (KILN_MEMORY_PROFILE, src/runtime/host_memory.rs) its peak resident set over a
# baseline against the plan's total, and its peak of live tensors against the plan's tensors
# (the total less the allocator's margin). Needs the release build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
work=$(mktemp -d /tmp/kiln-bench-transformer-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$root/bench/memory_lib.sh"

# Writes FILE: experiment NAME, BLOCKS transformer blocks of WIDTH over SEQ positions (HEADS
# heads, MLP HIDDEN, DROPOUT, causal), the first one recomputed when RECOMPUTE is `yes`, batch
# BATCH in PRECISION.
stack() {
  local file=$1 name=$2 width=$3 seq=$4 batch=$5 blocks=$6 heads=$7 hidden=$8 precision=$9
  local dropout=${10} recompute=${11}
  {
    printf 'experiment "%s" {\n  seed 1\n  data {\n' "$name"
    printf '    source synthetic(inputs: normal([%s, %s]), targets: randint(10), count: %s)\n' \
      "$seq" "$width" $((batch * 4))
    printf '    batch %s\n  }\n  model {\n    input [%s, %s]\n' "$batch" "$seq" "$width"
    for i in $(seq 0 $((blocks - 1))); do
      local mark=""
      [ "$recompute" = yes ] && [ "$i" = 0 ] && mark=" recompute"
      printf '    b%s: transformer_block(heads: %s, hidden: %s, dropout: %s, causal: true)%s\n' \
        "$i" "$heads" "$hidden" "$dropout" "$mark"
    done
    printf '    mean(dim: 0)\n    head: linear(10)\n  }\n  device cpu\n'
    printf '  optimizer adamw(lr: 1e-4)\n  train {\n    steps 3\n    loss cross_entropy\n'
    printf '    precision %s\n  }\n}\n' "$precision"
  } >"$file"
}

for dropout in 0.1 0; do
  stack "$work/first.exp" "first-dropout-$dropout" 512 512 16 4 8 2048 fp32 "$dropout" no
  profiled "$work/first.exp" "$work/run-first-$dropout" "$work/first-$dropout.log" \
    "first (fp32, dropout $dropout)"
  stack "$work/second.exp" "second-dropout-$dropout" 384 256 8 3 8 1536 bf16 "$dropout" yes
  profiled "$work/second.exp" "$work/run-second-$dropout" "$work/second-$dropout.log" \
    "second (bf16, recompute, dropout $dropout)"
done
