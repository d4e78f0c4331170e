#!/usr/bin/env bash
# What `parallel ddp(backend: gloo, world_size: 1)` costs against no strategy, on the CPU, side by
# side in one run: for each model, the same experiment with no strategy and with DDP at world
# size 1 (one process, its own store and Gloo group on loopback), run one after the other in an
# order that alternates from round to round.
#
#   bash bench/ddp_world1.sh                          # bench/mlp.exp, 9 rounds, its 1000 steps
#   ROUNDS=15 STEPS=300 bash bench/ddp_world1.sh
#   MODELS="bench/mlp.exp bench/linear.exp" bash bench/ddp_world1.sh
#   BASELINE=/path/to/other/kiln-runtime bash bench/ddp_world1.sh
#       also runs another build's DDP at world size 1 in the same rotation (say one built from an
#       earlier commit; its ratio is to this build's no-strategy run): before and after, side by
#       side.
#
# Prints, per variant, the median of the rounds' samples/s (`samples_per_s` of the run's
# report.yaml: the training loop only, not process start, rendezvous or data generation), the
# ratio of that median to no strategy's, the median of the per-round ratios, and the 1-minute
# load average after each round. libtorch uses its default intra-op thread count unless
# OMP_NUM_THREADS is set; on a machine with other work on it, OMP_NUM_THREADS=1 keeps the OpenMP
# threads from being slowed down by the other processes (see bench/run.sh).
#
# Environment: ROUNDS (9), STEPS (the experiment's own), MODELS (bench/mlp.exp), BASELINE,
# KILN_RUNTIME (this build's kiln-runtime; target/release/kiln-runtime).
# Needs the release build (cargo build --release) and python3 (standard library only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-9}
steps=${STEPS:-}
bin=${KILN_RUNTIME:-${CARGO_TARGET_DIR:-target}/release/kiln-runtime}
work=$(mktemp -d /tmp/kiln-bench-ddp1.XXXXXX)
made=()
cleanup() {
  rm -rf "$work"
  if ((${#made[@]})); then rm -f "${made[@]}"; fi
}
trap cleanup EXIT

# variant SRC NAME PARALLEL: SRC with the strategy PARALLEL (none: no line) and STEPS steps when
# set, as a file beside SRC (so that its data paths still hold).
variant() {
  local src=$1 name=$2 parallel=$3 out
  out="$(dirname "$src")/.bench-ddp1-$name.exp"
  python3 - "$src" "$out" "$parallel" "$steps" <<'PY'
import re, sys
src, out, parallel, steps = sys.argv[1:]
text = open(src).read()
line = f"  parallel {parallel}\n" if parallel != "none" else ""
text = re.sub(r"\n(\s*)optimizer", "\n" + line + r"\1optimizer", text, count=1)
if steps:
    text = re.sub(r"\n(\s*)(epochs|steps) \d+", rf"\n\1steps {steps}", text, count=1)
open(out, "w").write(text)
PY
  echo "$out"
}

# samples/s of one run of EXP with the runtime BIN.
speed() {
  local bin=$1 exp=$2 dir
  dir="$work/run-$RANDOM$RANDOM"
  "$bin" run "$exp" --quiet --run-dir "$dir" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  sed -n 's/^samples_per_s: //p' "$dir/report.yaml"
  rm -rf "$dir"
}

for src in ${MODELS:-bench/mlp.exp}; do
  none=$(variant "$src" none none)
  one=$(variant "$src" one "ddp(backend: gloo, world_size: 1)")
  made+=("$none" "$one")
  labels=(none ddp1)
  bins=("$bin" "$bin")
  exps=("$none" "$one")
  if [[ -n ${BASELINE:-} ]]; then
    labels+=(baseline-ddp1)
    bins+=("$BASELINE")
    exps+=("$one")
  fi
  n=${#labels[@]}
  : >"$work/table"
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < n; k++)); do
      i=$(((r + k) % n))
      v=$(speed "${bins[$i]}" "${exps[$i]}")
      echo "$r ${labels[$i]} $v" >>"$work/table"
    done
    echo "$r load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo nan)" >>"$work/table"
  done
  echo "== $src: ${steps:-its own} steps, $rounds rounds, OMP_NUM_THREADS=${OMP_NUM_THREADS:-default}"
  python3 - "$work/table" "${labels[@]}" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
labels = sys.argv[2:]
by = {l: {int(r): float(v) for r, k, v in rows if k == l} for l in labels}
base = by["none"]
for l in labels:
    m = statistics.median(by[l].values())
    ratios = [by[l][r] / base[r] for r in by[l]]
    print(f"{l:14s} median {m:9.0f} samples/s   {m / statistics.median(base.values()):.3f}x no strategy"
          f" (median of per-round ratios {statistics.median(ratios):.3f}, "
          f"{min(ratios):.2f}-{max(ratios):.2f})")
loads = [v for r, k, v in rows if k == "load"]
print("load average (1 min) after each round:", " ".join(loads))
PY
done
