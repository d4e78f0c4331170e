#!/usr/bin/env bash
# Speed benchmark (d): bench/transformer.exp (experiments/sequence_transformer.exp's shape, fp32,
# on the CPU) in Kiln against the same model in PyTorch eager (bench/torch_transformer.py), with
# torch.optim's default AdamW on the CPU (single-tensor) and with fused=True (Kiln's default),
# in interleaved rounds; prints each program's median steps/s and the ratios.
#
#   ROUNDS=5 bash bench/transformer.sh        # SKIP_BUILD=1 to use the binaries already built
#
# Kiln's steps/s is the report's samples_per_s over the batch (the training loop); PyTorch's
# times its loop. Both use libtorch's intra-op thread count of the Rust programs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-5}
steps=300
batch=128
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
grep -Eq "^\s*steps $steps\s*$" bench/transformer.exp || { echo "bench/transformer.exp does not train for $steps steps" >&2; exit 2; }
grep -Eq "^\s*batch $batch\s*$" bench/transformer.exp || { echo "bench/transformer.exp does not use batch $batch" >&2; exit 2; }
if [[ -z ${SKIP_BUILD:-} ]]; then
    cargo build --release --bins --examples --quiet
fi
threads=$(target/release/examples/tch_bench mlp 0 | awk '$1 == "threads" { print $2 }')
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-transformer.XXXXXX")
trap 'rm -rf "$work"' EXIT

run_kiln() {
    rm -rf "$work/runs"
    target/release/kiln run bench/transformer.exp --quiet --runs-dir "$work/runs" >/dev/null
    awk -v b=$batch '/^samples_per_s:/ { print $2 / b }' "$(find "$work/runs" -name report.yaml | head -n 1)"
}
run_torch() { "$PYTHON" bench/torch_transformer.py $steps --threads "$threads" | awk '$1 == "steps_per_s" { print $2 }'; }
run_torch_fused() { "$PYTHON" bench/torch_transformer.py $steps --threads "$threads" --fused | awk '$1 == "steps_per_s" { print $2 }'; }

programs=(kiln torch torch_fused)
: >"$work/results"
echo "machine: $(nproc) CPUs; libtorch intra-op threads: $threads; $rounds rounds" >&2
for ((r = 1; r <= rounds; r++)); do
    for ((k = 0; k < ${#programs[@]}; k++)); do
        p=${programs[$(((r + k) % ${#programs[@]}))]}
        sps=$("run_$p")
        echo "round $r/$rounds  $p  $sps steps/s  (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        echo "$p $sps" >>"$work/results"
    done
done
python3 - "$work/results" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    p, v = line.split()
    by.setdefault(p, []).append(float(v))
med = {p: statistics.median(v) for p, v in by.items()}
for p in ("kiln", "torch", "torch_fused"):
    print(f"{p:<12} median {med[p]:8.2f} steps/s  [{min(by[p]):.2f}-{max(by[p]):.2f}]")
print(f"kiln / PyTorch eager (default AdamW): {med['kiln'] / med['torch']:.3f}  (target >= 1.2)")
print(f"kiln / PyTorch eager (AdamW fused=True): {med['kiln'] / med['torch_fused']:.3f}")
PY
