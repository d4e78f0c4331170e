#!/usr/bin/env bash
# Fully sharded data parallel against ddp on this machine (Gloo on loopback, 2 ranks), on
# experiments/fsdp_blocks.exp (4.48M parameters in four blocks and a root, AdamW, accumulation
# 2): training samples/s of `parallel ddp`, of `parallel fsdp` without resharding after forward
# and with it, run side by side in interleaved rounds, with each fsdp variant's ratio to ddp.
#
#   bash bench/fsdp.sh                 # 3 rounds of 60 steps
#   ROUNDS=5 STEPS=100 bash bench/fsdp.sh
#
# samples/s is `samples_per_s` of the run's report.yaml (global samples: every rank takes its
# share of each batch). Needs the release build (cargo build --release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
steps=${STEPS:-60}
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
work=$(mktemp -d /tmp/kiln-bench-fsdp.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=experiments/fsdp_blocks.exp

# The example with the strategy PARALLEL, as NAME.exp in the scratch folder.
variant() {
  sed "s|^  parallel .*|  parallel $2|" "$src" >"$work/$1.exp"
}
variant ddp "ddp(backend: gloo, world_size: 2)"
variant kept "fsdp(backend: gloo, world_size: 2, reshard_after_forward: false)"
variant resharded "fsdp(backend: gloo, world_size: 2, reshard_after_forward: true)"

# samples/s of one run of NAME.
speed() {
  local dir="$work/run-$1-$RANDOM$RANDOM"
  "$bin" run "$work/$1.exp" --quiet --max-steps "$steps" --run-dir "$dir" >"$work/log" 2>&1 \
    || { cat "$work/log"; exit 1; }
  grep -m1 'samples_per_s:' "$dir/report.yaml" | awk '{printf "%.1f\n", $2}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for name in ddp kept resharded; do : >"$work/$name.speeds"; done
for round in $(seq "$rounds"); do
  for name in ddp kept resharded; do
    s=$(speed "$name")
    echo "round $round  $name  $s samples/s"
    echo "$s" >>"$work/$name.speeds"
  done
done
ddp=$(median <"$work/ddp.speeds")
for name in kept resharded; do
  s=$(median <"$work/$name.speeds")
  awk -v n="$name" -v s="$s" -v d="$ddp" \
    'BEGIN {printf "fsdp %-9s %8.1f samples/s, ddp %8.1f: %.3fx ddp'"'"'s speed\n", n, s, d, s / d}'
done
