#!/usr/bin/env bash
# What activation checkpointing saves, measured, beside what the plan says it saves: one
# process on the CPU, a model of eight residual MLP blocks (512 -> 2048 -> 512, 16.8M
# parameters, AdamW), batch 1024, 3 steps, with and without `recompute` on every block.
#
#   bash bench/recompute_memory.sh
#
# Each run prints (KILN_MEMORY_PROFILE, src/runtime/host_memory.rs) its peak resident set over
# a baseline and the peak of its live tensors, beside the plan's total; the last line is the
# saving (without recompute minus with) of the plan's total and of both measures, with the
# plan's activations for comparison. Needs the release build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
kiln=${KILN:-${CARGO_TARGET_DIR:-target}/release/kiln}
work=$(mktemp -d /tmp/kiln-bench-recompute-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$root/bench/memory_lib.sh"
for name in kept recomputed; do
  mark=""
  [ "$name" = kept ] || mark=" recompute"
  blocks "$work/$name.exp" activations 512 2048 8 2048 1024 "$mark" ""
  profiled "$work/$name.exp" "$work/run-$name" "$work/$name.log" "$name"
  "$kiln" plan "$work/$name.exp" --format yaml >"$work/$name.yaml"
done
# MiB of the plan's activations and total, and of the measured resident and live peaks, for
# NAME.
activations() { awk '/^totals:/ {t = 1} t && /^  activation_bytes:/ {printf "%.1f", $2 / 1048576; exit}' "$work/$1.yaml"; }
planned() { awk '/^  total_bytes:/ {printf "%.1f", $2 / 1048576; exit}' "$work/$1.yaml"; }
resident() { grep -o 'peak [0-9.]* MiB' "$work/$1.log" | awk '{print $2}'; }
live() { grep -o 'at once: [0-9.]* MiB' "$work/$1.log" | awk '{print $3}'; }
awk -v pk="$(planned kept)" -v pr="$(planned recomputed)" \
  -v ak="$(activations kept)" -v ar="$(activations recomputed)" \
  -v rk="$(resident kept)" -v rr="$(resident recomputed)" \
  -v lk="$(live kept)" -v lr="$(live recomputed)" 'BEGIN {
    printf "saving: plan %.1f MiB (its activations: %.1f MiB); measured %.1f MiB of live tensors (%.1f%% of the plan), %.1f MiB resident (%.1f%%)\n",
      pk - pr, ak - ar, lk - lr, 100 * (lk - lr) / (pk - pr), rk - rr, 100 * (rk - rr) / (pk - pr)
  }'
