#!/usr/bin/env bash
# The mesh against the strategies it stands for, on this machine (Gloo on loopback): the same
# experiments/fsdp_blocks.exp as `parallel fsdp(world_size: 2)` and as `parallel mesh(fsdp: 2)`
# (a degree of 1 for data and tensor must cost nothing), then tensor parallel on
# experiments/tensor_parallel.exp: `mesh(tensor: 2)` against one process (2 threads) and against
# `ddp(world_size: 2)`, each with one thread a rank. Run side by side in interleaved rounds; each
# variant's median samples/s and its ratio to the first of its pair.
#
#   bash bench/mesh.sh                 # 3 rounds of 40 steps
#   ROUNDS=5 STEPS=60 bash bench/mesh.sh
#
# samples/s is `samples_per_s` of the run's report.yaml. Needs the release build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
steps=${STEPS:-40}
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
work=$(mktemp -d /tmp/kiln-bench-mesh.XXXXXX)
trap 'rm -rf "$work"' EXIT

# SRC with the strategy PARALLEL (empty: none), as NAME.exp in the scratch folder.
variant() {
  if [ -z "$3" ]; then
    grep -v '^  parallel ' "$2" >"$work/$1.exp"
  else
    sed "s|^  parallel .*|  parallel $3|" "$2" >"$work/$1.exp"
  fi
}
variant fsdp experiments/fsdp_blocks.exp "fsdp(backend: gloo, world_size: 2)"
variant mesh-fsdp experiments/fsdp_blocks.exp "mesh(fsdp: 2, backend: gloo)"
variant one experiments/tensor_parallel.exp ""
variant ddp experiments/tensor_parallel.exp "ddp(backend: gloo, world_size: 2)"
variant tensor experiments/tensor_parallel.exp "mesh(tensor: 2, backend: gloo)"

# samples/s of one run of NAME, with THREADS threads a process.
speed() {
  local dir="$work/run-$1-$RANDOM$RANDOM"
  "$bin" run "$work/$1.exp" --quiet --threads "$2" --max-steps "$steps" --run-dir "$dir" \
    >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  grep -m1 'samples_per_s:' "$dir/report.yaml" | awk '{printf "%.1f\n", $2}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

names="fsdp mesh-fsdp one ddp tensor"
for name in $names; do : >"$work/$name.speeds"; done
for round in $(seq "$rounds"); do
  for name in $names; do
    threads=1
    [ "$name" = one ] && threads=2
    s=$(speed "$name" "$threads")
    echo "round $round  $name  $s samples/s"
    echo "$s" >>"$work/$name.speeds"
  done
done
ratio() {
  local a b
  a=$(median <"$work/$1.speeds")
  b=$(median <"$work/$2.speeds")
  awk -v n="$2" -v m="$1" -v a="$a" -v b="$b" \
    'BEGIN {printf "%-10s %8.1f samples/s against %-5s %8.1f: %.3fx\n", n, b, m, a, b / a}'
}
ratio fsdp mesh-fsdp
ratio one tensor
ratio ddp tensor
