#!/usr/bin/env bash
# Per-rank peak host memory of fully sharded data parallel against ddp, measured, beside the
# plan: a model of 101.8M parameters (an input linear, twelve blocks of a residual MLP 1024 ->
# 4096 -> 1024, a head; AdamW), batch 16, 3 steps, at 4 ranks on this machine (Gloo on
# loopback), under `parallel fsdp` (resharding after forward) and `parallel ddp`.
#
#   bash bench/fsdp_memory.sh
#
# Each rank prints (KILN_MEMORY_PROFILE, src/runtime/host_memory.rs) its peak resident set over
# a baseline, from the start of training to its last step: the baseline is the resident set
# before the model is built, plus what loading the data adds; when training starts, the
# allocator's free memory is returned to the system and the kernel's high-water mark restarted
# (fsdp's ranks each build the whole model before sharding it). The plan's total per rank
# (`kiln plan`) is printed beside it. Needs the release build and about 12 GiB of memory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
work=$(mktemp -d /tmp/kiln-bench-fsdp-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$root/bench/memory_lib.sh"
for name in fsdp ddp; do
  blocks "$work/$name.exp" memory 1024 4096 12 256 16 "" "$name(backend: gloo, world_size: 4)"
  profiled "$work/$name.exp" "$work/run-$name" "$work/$name.log" "$name"
done
peak() { grep -o 'peak [0-9.]* MiB' "$work/$1.log" | awk '{print $2}' | sort -n | tail -1; }
awk -v f="$(peak fsdp)" -v d="$(peak ddp)" \
  'BEGIN {printf "largest rank peak: fsdp %.1f MiB, ddp %.1f MiB: fsdp is %.1f%% of ddp\n", f, d, 100 * f / d}'
