#!/usr/bin/env bash
# Real data: experiments/fashion_mnist_cnn.exp (60,000 training images, 6 epochs, the 10,000
# test images evaluated after) in Kiln against its PyTorch eager twin
# (bench/torch_fashion_mnist.py: the same data, model and recipe), in interleaved rounds; prints
# each one's median samples/s and test accuracy, and the ratios.
#
#   ROUNDS=1 bash bench/fashion_mnist.sh     # EPOCHS=N for a shorter run; SKIP_BUILD=1 to reuse the build
#
# Kiln's figure is the report's samples_per_s (the training loop); PyTorch's times its loop.
# Needs data/fashion-mnist (bash scripts/setup.sh fetches it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-1}
epochs=${EPOCHS:-6}
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
[[ -f data/fashion-mnist/.complete ]] || { echo "data/fashion-mnist is missing: run bash scripts/setup.sh" >&2; exit 2; }
grep -Eq "^\s*epochs 6\s*$" experiments/fashion_mnist_cnn.exp || { echo "experiments/fashion_mnist_cnn.exp does not train 6 epochs" >&2; exit 2; }
if [[ -z ${SKIP_BUILD:-} ]]; then
    cargo build --release --bins --examples --quiet
fi
threads=$(target/release/examples/tch_bench mlp 0 | awk '$1 == "threads" { print $2 }')
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fashion.XXXXXX")
trap 'rm -rf "$work"' EXIT
sed -E "s/^(\s*)epochs 6\s*$/\1epochs $epochs/; s#\"\.\./data/fashion-mnist/#\"$root/data/fashion-mnist/#g" \
    experiments/fashion_mnist_cnn.exp >"$work/fashion_mnist_cnn.exp"

run_kiln() {
    rm -rf "$work/runs"
    target/release/kiln run "$work/fashion_mnist_cnn.exp" --quiet --runs-dir "$work/runs" >/dev/null
    local report
    report=$(find "$work/runs" -name report.yaml | head -n 1)
    "$PYTHON" -c 'import sys, yaml; r = yaml.safe_load(open(sys.argv[1])); print(r["samples_per_s"], r["test"]["accuracy"])' "$report"
}
run_torch() {
    "$PYTHON" bench/torch_fashion_mnist.py --epochs "$epochs" --threads "$threads" |
        awk '$1 == "samples_per_s" { s = $2 } $1 == "test_accuracy" { a = $2 } END { print s, a }'
}

programs=(kiln torch)
: >"$work/results"
echo "machine: $(nproc) CPUs; libtorch intra-op threads: $threads; $rounds rounds of $epochs epochs" >&2
for ((r = 1; r <= rounds; r++)); do
    for ((k = 0; k < ${#programs[@]}; k++)); do
        p=${programs[$(((r + k) % ${#programs[@]}))]}
        got=$("run_$p")
        echo "round $r/$rounds  $p  samples/s, test accuracy: $got  (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        echo "$p $got" >>"$work/results"
    done
done
python3 - "$work/results" <<'PY'
import statistics, sys
sps, acc = {}, {}
for line in open(sys.argv[1]):
    p, s, a = line.split()
    sps.setdefault(p, []).append(float(s))
    acc.setdefault(p, []).append(float(a))
for p in ("kiln", "torch"):
    print(f"{p:<6} median {statistics.median(sps[p]):8.1f} samples/s [{min(sps[p]):.1f}-{max(sps[p]):.1f}]  "
          f"test accuracy median {100 * statistics.median(acc[p]):.2f}% [{100 * min(acc[p]):.2f}-{100 * max(acc[p]):.2f}]")
print(f"kiln / PyTorch eager samples/s: {statistics.median(sps['kiln']) / statistics.median(sps['torch']):.3f}")
gap = 100 * (statistics.median(acc["kiln"]) - statistics.median(acc["torch"]))
print(f"test accuracy, kiln - PyTorch: {gap:+.2f} points  (targets: kiln >= 91%, within 0.5 points)")
PY
