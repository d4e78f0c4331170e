#!/usr/bin/env bash
# Data parallel in one process against one device, on the CPU: the bench models (bench/mlp.exp,
# bench/cnn.exp) trained with no strategy, then with `parallel data(replicas: 2)` and
# `parallel data(replicas: 4)` (the same global batch, cut into 2 or 4 slices, each trained on
# its own thread), in interleaved rounds. The table gives the median samples/s of each over the
# rounds (`samples_per_s` of the run's report.yaml: the training loop only) and its ratio to no
# strategy. Every replica's thread runs libtorch's operations with libtorch's default intra-op
# thread count (nothing is set); OMP_NUM_THREADS changes it for all of them.
#
#   bash bench/data_parallel.sh             # 3 rounds, 200 steps a run
#   ROUNDS=5 STEPS=500 bash bench/data_parallel.sh
#
# Environment: ROUNDS (3), STEPS (200), SKIP_BUILD=1 to use the binaries already built
# (in CARGO_TARGET_DIR, else target/).

set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
steps=${STEPS:-200}
target=${CARGO_TARGET_DIR:-target}
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --bin kiln --bin kiln-runtime >&2
fi
kiln=$target/release/kiln

work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-dp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

strategies=("none" "data(replicas: 2)" "data(replicas: 4)")
for model in mlp cnn; do
  for i in "${!strategies[@]}"; do
    sed -e "s/^  device cpu$/  device cpu\n  parallel ${strategies[$i]}/" \
        -e "s/^    steps [0-9]*$/    steps $steps/" \
        "bench/$model.exp" > "$work/$model-$i.exp"
    "$kiln" check "$work/$model-$i.exp" > /dev/null
  done
done

for round in $(seq 1 "$rounds"); do
  for model in mlp cnn; do
    for i in "${!strategies[@]}"; do
      dir="$work/runs/$model-$i-$round"
      "$kiln" run "$work/$model-$i.exp" --quiet --run-dir "$dir" > /dev/null
      rate=$(sed -n 's/^samples_per_s: //p' "$dir/report.yaml")
      echo "$model $i $rate" >> "$work/rates"
      echo "round $round: $model, ${strategies[$i]}: $rate samples/s" >&2
    done
  done
done

echo
echo "machine: $(nproc) cores, $(uname -m); $rounds rounds of $steps steps"
printf '%-6s %-20s %14s %9s\n' model strategy "samples/s" "vs none"
for model in mlp cnn; do
  base=""
  for i in "${!strategies[@]}"; do
    median=$(awk -v m="$model" -v i="$i" '$1 == m && $2 == i { print $3 }' "$work/rates" |
      sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    base=${base:-$median}
    printf '%-6s %-20s %14.0f %8.2fx\n' "$model" "${strategies[$i]}" "$median" \
      "$(awk -v a="$median" -v b="$base" 'BEGIN { print a / b }')"
  done
done
