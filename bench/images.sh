#!/usr/bin/env bash
# An image-folder run: bench/fashion_folder_cnn.exp (Fashion-MNIST as 70,000 PNG files in
# `ImageFolder` layout, a random crop after padding 2 and a left-right flip every epoch) in
# interleaved rounds with experiments/fashion_mnist_cnn.exp (the same network on the IDX files,
# not augmented); prints each run's samples/s, data wait (the share of the training loop spent
# waiting for batches: decoding happens once, before it), the whole command's seconds (reading
# the data, training, evaluating the test split) and test accuracy.
#
#   ROUNDS=3 bash bench/images.sh     # EPOCHS=N (default 1); SKIP_BUILD=1 to reuse the build
#
# Needs data/fashion-mnist and data/fashion-mnist-png (bash scripts/setup.sh fetches the first
# and writes the second with bench/fashion_folder.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-3}
epochs=${EPOCHS:-1}
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
for d in data/fashion-mnist data/fashion-mnist-png; do
    [[ -f $d/.complete ]] || { echo "$d is missing: run bash scripts/setup.sh" >&2; exit 2; }
done
if [[ -z ${SKIP_BUILD:-} ]]; then
    cargo build --release --bins --quiet
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
for exp in bench/fashion_folder_cnn.exp experiments/fashion_mnist_cnn.exp; do
    sed -E "s/^(\s*)epochs 6\s*$/\1epochs $epochs/; s#\"\.\./data/#\"$root/data/#g" "$exp" >"$work/$(basename "$exp")"
done

run() {
    rm -rf "$work/runs"
    local t0 t1
    t0=$(date +%s.%N)
    target/release/kiln run "$work/$1.exp" --quiet --runs-dir "$work/runs" >/dev/null
    t1=$(date +%s.%N)
    "$PYTHON" - "$(find "$work/runs" -name report.yaml | head -n 1)" "$t0" "$t1" <<'PY'
import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
took = float(sys.argv[3]) - float(sys.argv[2])
print(f'{r["samples_per_s"]:.0f} {100 * r["data_wait_fraction"]:.2f} {took:.1f} {100 * r["test"]["accuracy"]:.2f}')
PY
}

programs=(fashion_folder_cnn fashion_mnist_cnn)
: >"$work/results"
echo "machine: $(nproc) CPUs; $rounds rounds of $epochs epochs" >&2
for ((r = 1; r <= rounds; r++)); do
    for ((k = 0; k < ${#programs[@]}; k++)); do
        p=${programs[$(((r + k) % ${#programs[@]}))]}
        got=$(run "$p")
        echo "round $r/$rounds  $p  samples/s, data wait %, seconds, test accuracy %: $got" >&2
        echo "$p $got" >>"$work/results"
    done
done
"$PYTHON" - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    p, *v = line.split()
    rows.setdefault(p, []).append([float(x) for x in v])
for p, vs in rows.items():
    med = [statistics.median(col) for col in zip(*vs)]
    print(f"{p:20s} samples/s {med[0]:7.0f}  data wait {med[1]:5.2f}%  command {med[2]:5.1f} s  test accuracy {med[3]:.2f}%")
PY
