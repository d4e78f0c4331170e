#!/usr/bin/env bash
# Distributed data parallel on this machine (Gloo on loopback): for the 1000->1000 linear model
# (bench/linear.exp), the MNIST CNN (experiments/mnist_cnn.exp) and an MLP large enough for several
# gradient buckets (bench/ddp_mlp.exp), training samples/s with no
# strategy, with `parallel ddp` at world size 1 and at world size 2, and where the time of the
# gradient reduction goes at world size 2.
#
#   bash bench/ddp.sh                 # 3 rounds, 40 steps each
#   ROUNDS=5 STEPS=100 bash bench/ddp.sh
#
# samples/s is `samples_per_s` of the run's report.yaml (the training loop; every rank takes its
# share of each global batch, so it counts global samples). The reduction figures come from
# KILN_DDP_PROFILE, which makes rank 0 print, at the end of a run with `accumulate 2`: one
# all-reduce of every gradient alone (median of 9), and the mean backward time of the
# micro-batches that reduce (the Reducer's bucketed all-reduce, overlapped with backward) and
# of those that do not (no-sync); the difference is the exposed reduction time, and
# 1 - exposed / alone the fraction hidden behind backward. It also prints PyTorch's own measure
# from the Reducer's timestamps (DDP's logger, as `DistributedDataParallel._get_ddp_logging_data`
# reports it): backward compute time, communication time (first bucket's all-reduce to the last
# one's end) and the part of it overlapped with compute. Two ranks share this machine's cores
# (each gets cores/2 intra-op threads), so they compute more slowly than one process does.
# Needs the release build (cargo build --release) and python3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
steps=${STEPS:-40}
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
work=$(mktemp -d /tmp/kiln-bench-ddp.XXXXXX)
trap 'rm -rf "$work"' EXIT

# variant SRC NAME PARALLEL ACCUMULATE: SRC with the strategy PARALLEL (none: no line) and
# `accumulate`, as NAME.exp beside SRC's data paths.
variant() {
  local src=$1 name=$2 parallel=$3 acc=$4 out
  out="$(dirname "$src")/.bench-ddp-$name.exp"
  python3 - "$src" "$out" "$parallel" "$acc" "$steps" <<'PY'
import re, sys
src, out, parallel, acc, steps = sys.argv[1:]
text = open(src).read()
line = f"  parallel {parallel}\n" if parallel != "none" else ""
text = re.sub(r"\n(\s*)optimizer", "\n" + line + r"\1optimizer", text, count=1)
text = re.sub(r"\n\s*(epochs|steps) \d+", f"\n    steps {steps}\n    accumulate {acc}", text, count=1)
text = re.sub(r"\n\s*device \w+", "\n  device cpu", text, count=1)
open(out, "w").write(text)
PY
  echo "$out"
}

# samples/s of one run of EXP (extra environment in ENV...).
speed() {
  local exp=$1 dir
  dir="$work/run-$RANDOM$RANDOM"
  "$bin" run "$exp" --quiet --run-dir "$dir" >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  grep -h 'ddp profile\|ddp overlap' "$work/log" || true
  python3 -c "import sys,yaml;print(round(yaml.safe_load(open(sys.argv[1]))['samples_per_s']))" "$dir/report.yaml" 2>/dev/null \
    || grep -o 'samples_per_s: [0-9.]*' "$dir/report.yaml" | awk '{printf "%d\n", $2}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for src in ${MODELS:-bench/linear.exp experiments/mnist_cnn.exp bench/ddp_mlp.exp}; do
  none=$(variant "$src" none none 1)
  one=$(variant "$src" one "ddp(backend: gloo, world_size: 1)" 1)
  two=$(variant "$src" two "ddp(backend: gloo, world_size: 2)" 1)
  prof=$(variant "$src" prof "ddp(backend: gloo, world_size: 2)" 2)
  : >"$work/none"; : >"$work/one"; : >"$work/two"
  for ((r = 1; r <= rounds; r++)); do
    speed "$none" | tail -1 >>"$work/none"
    speed "$one" | tail -1 >>"$work/one"
    speed "$two" | tail -1 >>"$work/two"
  done
  n=$(median <"$work/none"); o=$(median <"$work/one"); t=$(median <"$work/two")
  echo "== $src: $steps steps, median of $rounds rounds"
  echo "no strategy        $n samples/s"
  echo "ddp world size 1   $o samples/s ($(python3 -c "import sys; n, o = map(float, sys.argv[1:]); print(f'{100 * (n - o) / n:.1f}')" "$n" "$o")% below no strategy)"
  echo "ddp world size 2   $t samples/s"
  KILN_DDP_PROFILE=1 speed "$prof" | grep 'ddp '
  rm -f "$none" "$one" "$two" "$prof"
done
