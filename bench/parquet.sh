#!/usr/bin/env bash
# Reading Parquet against reading the same arrays from `.npy`: 2,000,000 rows of 32 float32
# features (a fixed-size list column) and an int64 label, as 4 snappy shards written by pyarrow,
# and as two `.npy` files; each loaded by `kiln run` of a linear model for one step, in
# interleaved rounds. Prints the median wall seconds of each and, less a run of the same model on
# 10 rows (what a run costs besides reading the data), the ratio of the reading times.
#
#   ROUNDS=5 bash bench/parquet.sh            # SKIP_BUILD=1 to reuse the build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-5}
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if [[ -z ${SKIP_BUILD:-} ]]; then
    cargo build --release --bins --quiet
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-parquet.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$PYTHON" - "$work" <<'PY'
import os, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
rng = np.random.default_rng(0)
n, k = 2_000_000, 32
x = rng.standard_normal((n, k), dtype=np.float32)
y = rng.integers(0, 10, size=n)
np.save(f"{d}/x.npy", x); np.save(f"{d}/y.npy", y)
np.save(f"{d}/x10.npy", x[:10]); np.save(f"{d}/y10.npy", y[:10])
os.makedirs(f"{d}/shards")
for s in range(4):
    lo, hi = s * n // 4, (s + 1) * n // 4
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x[lo:hi].reshape(-1)), k), "label": pa.array(y[lo:hi])})
    pq.write_table(t, f"{d}/shards/part-{s}.parquet")
PY
experiment() {
    printf 'experiment "%s" {\n  data { source %s; batch 100 }\n  model { input [32]; linear(10) }\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train { steps 1; loss cross_entropy }\n}\n' "$1" "$2" >"$work/$1.exp"
}
experiment parquet 'parquet("shards", inputs: "x", target: "label", classes: 10)'
experiment npy 'npy("x.npy", "y.npy", classes: 10)'
experiment small 'npy("x10.npy", "y10.npy", classes: 10)'
timed() {
    local t0 t1
    t0=$(date +%s.%N)
    target/release/kiln run "$work/$1.exp" --quiet --runs-dir "$work/runs" >/dev/null
    t1=$(date +%s.%N)
    python3 -c "print($t1 - $t0)"
}
: >"$work/results"
programs=(parquet npy small)
for ((r = 1; r <= rounds; r++)); do
    for ((k = 0; k < ${#programs[@]}; k++)); do
        p=${programs[$(((r + k) % ${#programs[@]}))]}
        s=$(timed "$p")
        echo "round $r/$rounds  $p  ${s}s  (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        echo "$p $s" >>"$work/results"
    done
done
python3 - "$work/results" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    p, v = line.split()
    by.setdefault(p, []).append(float(v))
m = {p: statistics.median(v) for p, v in by.items()}
for p in ("parquet", "npy", "small"):
    print(f"{p:<8} median {m[p]:.3f} s  [{min(by[p]):.3f}-{max(by[p]):.3f}]")
print(f"reading 2,000,000 rows: parquet {m['parquet'] - m['small']:.3f} s, npy {m['npy'] - m['small']:.3f} s, "
      f"parquet / npy {(m['parquet'] - m['small']) / (m['npy'] - m['small']):.3f}  (target <= 1.10)")
PY
