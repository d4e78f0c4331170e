#!/usr/bin/env bash
# Fused optimizers (Kiln's default) against the single-tensor rules (`fused: false`) on the CPU:
# bench/{mlp,linear,cnn,transformer}.exp as they are and with `fused: false` added to their
# optimizer, in interleaved pairs (the order alternating each round); prints each model's
# per-pair ratios of steps/s (fused over single-tensor) and their median.
#
#   ROUNDS=5 bash bench/fused.sh     # STEPS=N to shorten every run; SKIP_BUILD=1 to skip the build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-5}
[[ -n ${SKIP_BUILD:-} ]] || cargo build --release --bins --quiet
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fused.XXXXXX")
trap 'rm -rf "$work"' EXIT
declare -A batch=([mlp]=100 [linear]=1000 [cnn]=64 [transformer]=128)
for m in "${!batch[@]}"; do
    if [[ -n ${STEPS:-} ]]; then
        sed -E "s/^(\s*)steps [0-9_]+\s*$/\1steps $STEPS/" "bench/$m.exp" >"$work/$m-fused.exp"
    else
        cp "bench/$m.exp" "$work/$m-fused.exp"
    fi
    sed -E 's/optimizer (adam|adamw|sgd)\(([^)]*)\)/optimizer \1(\2, fused: false)/' "$work/$m-fused.exp" >"$work/$m-single.exp"
    grep -q 'fused: false' "$work/$m-single.exp" || { echo "bench/$m.exp: no optimizer to unfuse" >&2; exit 2; }
done
sps() { # model variant -> steps/s
    rm -rf "$work/runs"
    target/release/kiln run "$work/$1-$2.exp" --quiet --runs-dir "$work/runs" >/dev/null
    awk -v b="${batch[$1]}" '/^samples_per_s:/ { print $2 / b }' "$(find "$work/runs" -name report.yaml | head -n 1)"
}
for ((r = 1; r <= rounds; r++)); do
    for m in mlp linear cnn transformer; do
        if ((r % 2)); then f=$(sps "$m" fused); s=$(sps "$m" single); else s=$(sps "$m" single); f=$(sps "$m" fused); fi
        echo "$m $f $s" | tee -a "$work/pairs" >&2
    done
done
python3 - "$work/pairs" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    m, f, s = line.split()
    by.setdefault(m, []).append(float(f) / float(s))
for m, r in by.items():
    print(f"{m:<12} fused / single-tensor: median {statistics.median(r):.3f} over {len(r)} pairs [{min(r):.3f}-{max(r):.3f}]")
PY
