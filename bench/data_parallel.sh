#!/usr/bin/env bash
# Data parallel in one process against one device. On the CPU (the default): the bench models
# bench/mlp.exp and bench/cnn.exp trained with no strategy, then with `parallel data(replicas: 2)`
# and `parallel data(replicas: 4)`: the same global batch, cut into 2 or 4 slices, each trained on
# its own thread (the CPU replicas split libtorch's intra-op threads between them). With
# DEVICE=cuda:0: bench/gpu/mlp_dp.exp, with no strategy, two replicas on that one GPU and four.
# Runs are interleaved over the rounds; the table gives the median samples/s of each
# (`samples_per_s` of the run's report.yaml: the training loop only) and its ratio to no strategy.
#
#   bash bench/data_parallel.sh                      # CPU, 3 rounds, 200 steps a run
#   ROUNDS=5 STEPS=500 bash bench/data_parallel.sh
#   DEVICE=cuda:0 bash bench/data_parallel.sh        # one GPU
#
# Environment: ROUNDS (3), STEPS (200 on the CPU, the file's 60 on a GPU), DEVICE (cpu),
# SKIP_BUILD=1 to use the binaries already built (in CARGO_TARGET_DIR, else target/).

set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
device=${DEVICE:-cpu}
target=${CARGO_TARGET_DIR:-target}
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release --bin kiln --bin kiln-runtime >&2
fi
kiln=$target/release/kiln

work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-dp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ "$device" = cpu ]; then
  models=(mlp cnn)
  strategies=("none" "data(replicas: 2)" "data(replicas: 4)")
  steps=${STEPS:-200}
else
  models=(gpu/mlp_dp)
  strategies=("none" "data(devices: [$device, $device])" "data(replicas: 4)")
  steps=${STEPS:-60}
fi
for model in "${models[@]}"; do
  for i in "${!strategies[@]}"; do
    sed -e "s/^  device .*$/  device $device\n  parallel ${strategies[$i]}/" \
        -e "s/^    steps [0-9]*$/    steps $steps/" \
        "bench/$model.exp" > "$work/${model//\//-}-$i.exp"
    "$kiln" check "$work/${model//\//-}-$i.exp" > /dev/null
  done
done

for round in $(seq 1 "$rounds"); do
  for model in "${models[@]}"; do
    for i in "${!strategies[@]}"; do
      name=${model//\//-}
      dir="$work/runs/$name-$i-$round"
      "$kiln" run "$work/$name-$i.exp" --quiet --run-dir "$dir" > /dev/null
      rate=$(sed -n 's/^samples_per_s: //p' "$dir/report.yaml")
      echo "$name $i $rate" >> "$work/rates"
      echo "round $round: $name, ${strategies[$i]}: $rate samples/s" >&2
    done
  done
done

echo
echo "machine: $(nproc) cores, $(uname -m), device $device; $rounds rounds of $steps steps"
printf '%-10s %-28s %12s %9s\n' model strategy "samples/s" "vs none"
for model in "${models[@]}"; do
  name=${model//\//-}
  base=""
  for i in "${!strategies[@]}"; do
    median=$(awk -v m="$name" -v i="$i" '$1 == m && $2 == i { print $3 }' "$work/rates" |
      sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    base=${base:-$median}
    printf '%-10s %-28s %12.0f %8.2fx\n' "$name" "${strategies[$i]}" "$median" \
      "$(awk -v a="$median" -v b="$base" 'BEGIN { print a / b }')"
  done
done
