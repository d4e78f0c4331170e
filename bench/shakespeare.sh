#!/usr/bin/env bash
# Real data, real model: experiments/shakespeare_char.exp (nanoGPT's CPU "baby GPT" on the 42
# Shakespeare plays, 2,000 steps) in Kiln against its PyTorch eager twin
# (bench/torch_shakespeare.py: the same text, vocabulary, split, model and recipe), in
# interleaved rounds; prints each one's median steps/s and validation loss after the last step,
# and the ratios.
#
#   ROUNDS=3 bash bench/shakespeare.sh     # STEPS=N for a shorter run; SKIP_BUILD=1 to reuse the build
#
# Kiln's steps/s is the report's samples_per_s over the batch: the training loop with its
# validations (every 1000 steps, and so at the last one); PyTorch's times the same loop. Both
# validate on the same consecutive windows of the held-out tenth. Needs data/shakespeare (bash
# scripts/setup.sh fetches it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
steps=${STEPS:-2000}
batch=12
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
[[ -f data/shakespeare/.complete ]] || { echo "data/shakespeare is missing: run bash scripts/setup.sh" >&2; exit 2; }
grep -Eq "^\s*batch $batch\s*$" experiments/shakespeare_char.exp || { echo "experiments/shakespeare_char.exp does not use batch $batch" >&2; exit 2; }
if [[ -z ${SKIP_BUILD:-} ]]; then
    cargo build --release --bins --examples --quiet
fi
threads=$(target/release/examples/tch_bench mlp 0 | awk '$1 == "threads" { print $2 }')
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-shakespeare.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The experiment at `steps` steps (the schedule decays over the run, as the twin's).
sed -E "s/^(\s*)steps 2000\s*$/\1steps $steps/" \
    experiments/shakespeare_char.exp >"$work/shakespeare_char.exp"
sed -i "s#\"\.\./data/shakespeare\"#\"$root/data/shakespeare\"#" "$work/shakespeare_char.exp"

run_kiln() {
    rm -rf "$work/runs"
    target/release/kiln run "$work/shakespeare_char.exp" --quiet --runs-dir "$work/runs" >/dev/null
    local report
    report=$(find "$work/runs" -name report.yaml | head -n 1)
    local sps loss
    sps=$(awk -v b=$batch '/^samples_per_s:/ { print $2 / b }' "$report")
    loss=$("$PYTHON" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["val"]["loss"])' "$report")
    echo "$sps $loss"
}
run_torch() {
    "$PYTHON" bench/torch_shakespeare.py --steps "$steps" --eval-every 1000 --threads "$threads" |
        awk '$1 == "steps_per_s" { s = $2 } $1 == "val_loss" { l = $2 } END { print s, l }'
}

programs=(kiln torch)
: >"$work/results"
echo "machine: $(nproc) CPUs; libtorch intra-op threads: $threads; $rounds rounds of $steps steps" >&2
for ((r = 1; r <= rounds; r++)); do
    for ((k = 0; k < ${#programs[@]}; k++)); do
        p=${programs[$(((r + k) % ${#programs[@]}))]}
        got=$("run_$p")
        echo "round $r/$rounds  $p  steps/s, val loss: $got  (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        echo "$p $got" >>"$work/results"
    done
done
python3 - "$work/results" <<'PY'
import statistics, sys
sps, loss = {}, {}
for line in open(sys.argv[1]):
    p, s, l = line.split()
    sps.setdefault(p, []).append(float(s))
    loss.setdefault(p, []).append(float(l))
for p in ("kiln", "torch"):
    print(f"{p:<6} median {statistics.median(sps[p]):7.2f} steps/s [{min(sps[p]):.2f}-{max(sps[p]):.2f}]  "
          f"val loss median {statistics.median(loss[p]):.4f} [{min(loss[p]):.4f}-{max(loss[p]):.4f}]")
ratio = statistics.median(sps["kiln"]) / statistics.median(sps["torch"])
gap = statistics.median(loss["kiln"]) - statistics.median(loss["torch"])
print(f"kiln / PyTorch eager steps/s: {ratio:.3f}  (target >= 1.2)")
print(f"val loss, kiln - PyTorch: {gap:+.4f}  (target within 0.03)")
PY
