#!/usr/bin/env bash
# Kiln's one GPU check: speed side by side with PyTorch on the same machine, and every CUDA path
# run and compared with the CPU's result, printed as one table. Its figures go to BENCHMARKS.md.
#
#   bash scripts/gpu-check.sh          # on the GPU machine (../shared/GPU.md): cuda:0, full sizes
#   bash scripts/gpu-check.sh --cpu    # the same checks on the CPU, small (CI runs it: it cannot rot)
#
# Built here (`cargo build --release`), run there from the repository root with target/release/kiln
# and target/release/kiln-runtime carried over (`target/release/c10d-tests` too, from
# `cargo test --release --bin kiln-runtime --no-run`, for NCCL and the Reducer on CUDA). One call
# on one H200 takes well under 8 minutes; COMPILE=0 leaves torch.compile out.
#
# Speed rows (kiln, PyTorch eager, torch.compile, in steps/s; kiln's from its report):
#   the bf16 8192-wide MLP (bench/gpu/mlp_bf16.exp, with its report's TFLOP/s, GPU busy fraction
#   (NVML) and peak memory beside the plan's, and nvidia-smi's view of the same run), the
#   MNIST-shaped MLP and CNN (bench/{mlp,cnn}.exp), the example transformer (bench/transformer.exp).
# Path rows: each experiment trains on the device; its final weights are then evaluated on the
#   device and on the CPU (`kiln eval RUN --device`) and the losses must agree within the path's
#   tolerance: int8 weight-only, int4, dynamic int8, FP8 (CUDA only: against the unquantized
#   model), pipeline stage threads, windowed attention with a class per token, DDP over NCCL at
#   world size 1 (Gloo on the CPU) ending cleanly; and activation checkpointing
#   (bench/gpu/recompute.exp) and fsdp at world size 1 (bench/gpu/fsdp.exp), whose every step's
#   loss must equal the same run's without `recompute` (without the strategy) within 1e-4. Exit
#   status 1 when a path fails.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=gpu
if [ "${1:-}" = "--cpu" ]; then MODE=cpu; fi
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=/opt/torch/.venv/bin/python3; fi
fi
TORCH_LIB=$("$PYTHON" -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
KILN=${KILN:-target/release/kiln}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu-check.XXXXXX")}
mkdir -p "$OUT"
ROWS="$OUT/rows.tsv"
: >"$ROWS"
LOG="$OUT/log.txt"
: >"$LOG"
echo "gpu-check: mode $MODE, output in $OUT (the log of every command: $LOG)"

if [ "$MODE" = gpu ]; then
  DEV=cuda:0
  COMPILE=${COMPILE:-1}
else
  DEV=cpu
  COMPILE=0
fi

# `row KIND NAME FIELDS...`: one line of the final table.
row() { (IFS=$'\t'; echo "$*") >>"$ROWS"; }

row figure "kiln env" "$("$KILN" env 2>&1 | awk '{ $1 = $1 ": " $1; sub(/^[^:]*: /, ""); printf "%s%s", sep, $0; sep = "; " }')"

# `report RUN_DIR KEY`: a value of the run's report.yaml (samples_per_s, train_loss, ...).
report() {
  "$PYTHON" - "$1/report.yaml" "$2" <<'PY'
import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
o = r.get("outcome", r)
print(o.get(sys.argv[2], r.get(sys.argv[2], "")))
PY
}

# `kiln_run NAME EXP BATCH [ARGS...]`: trains EXP into $OUT/runs/NAME; prints kiln's steps/s.
kiln_run() {
  local name=$1 exp=$2 batch=$3
  shift 3
  local dir="$OUT/runs/$name"
  echo "\$ kiln run $exp --device $DEV $* --run-dir $dir" >>"$LOG"
  if timeout 300 "$KILN" run "$exp" --device "$DEV" --quiet --run-dir "$dir" "$@" >>"$LOG" 2>&1; then
    local sps
    sps=$(report "$dir" samples_per_s)
    awk -v s="$sps" -v b="$batch" 'BEGIN { printf "%.2f", s / b }'
  else
    echo "failed"
  fi
}

# `torch_run ARGS...`: a PyTorch baseline; prints its steps/s ("failed" when it did not finish).
torch_run() {
  echo "\$ $PYTHON $*" >>"$LOG"
  local out
  if out=$(timeout 180 "$PYTHON" "$@" 2>>"$LOG"); then
    echo "$out" >>"$LOG"
    echo "$out" | awk '$1 == "steps_per_s" { printf "%.2f", $2; found = 1 } $2 == "steps/s" { printf "%.2f", $3; found = 1 } END { if (!found) print "failed" }'
  else
    echo "failed"
  fi
}

# `speed_row NAME KILN EAGER COMPILED RATIO`: Kiln's or PyTorch eager's figure missing fails the
# check (torch.compile may not work on a machine: its row then says "failed").
FAILED=0
speed_row() {
  if [ "$2" = failed ] || [ "$3" = failed ]; then FAILED=1; fi
  row speed "$@"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-" }'; }

# --- Speed -----------------------------------------------------------------------------------
speed() {
  local name=$1 exp=$2 batch=$3 steps=$4
  shift 4
  local kiln eager compiled=-
  kiln=$(kiln_run "$name" "$exp" "$batch" --max-steps "$steps")
  eager=$(torch_run "$@" --device "$DEV")
  if [ "$COMPILE" = 1 ]; then compiled=$(torch_run "$@" --device "$DEV" --compile); fi
  speed_row "$name" "$kiln" "$eager" "$compiled" "$(ratio "$kiln" "$eager")"
}

# The bf16 MLP: full size on the GPU (8192 wide, batch 8192); 256 on the CPU.
if [ "$MODE" = gpu ]; then
  width=8192 mlp_steps=60
  mlp_exp=bench/gpu/mlp_bf16.exp
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/smi.csv" 2>>"$LOG" &
  SMI=$!
else
  width=256 mlp_steps=20
  mlp_exp="$OUT/mlp_bf16_small.exp"
  sed -e 's/8192/256/g' -e 's/65_536/4_096/' -e 's/batch 256/batch 256/' bench/gpu/mlp_bf16.exp >"$mlp_exp"
  SMI=
fi
kiln=$(kiln_run mlp_bf16 "$mlp_exp" "$width" --max-steps "$mlp_steps")
if [ -n "$SMI" ]; then kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null; fi
eager=$(torch_run bench/gpu/torch_mlp_bf16.py --device "$DEV" --width "$width" --batch "$width" --steps "$mlp_steps")
compiled=-
if [ "$COMPILE" = 1 ]; then
  compiled=$(torch_run bench/gpu/torch_mlp_bf16.py --device "$DEV" --width "$width" --batch "$width" --steps "$mlp_steps" --compile)
fi
speed_row "bf16 MLP $width" "$kiln" "$eager" "$compiled" "$(ratio "$kiln" "$eager")"
# The report's own figures (`compute`: TFLOP/s against the plan's FLOPs; on CUDA the busy
# fraction sampled through NVML and the caching allocator's peak beside the plan's estimate).
if [ -f "$OUT/runs/mlp_bf16/report.yaml" ]; then
  if "$PYTHON" - "$OUT/runs/mlp_bf16/report.yaml" "$width" >>"$ROWS" <<'PY'
import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
c = (r.get("outcome") or r).get("compute") or {}
name = f"bf16 MLP {sys.argv[2]}"
mib = lambda b: "-" if b is None else f"{b / 2**20:,.0f} MiB"
busy = c.get("gpu_busy")
print(f"figure\t{name}: kiln TFLOP/s (report)\t{c.get('tflop_per_s', 0):.3f} on {c.get('device', '?')}")
print(f"figure\t{name}: GPU busy (report, NVML)\t" + ("-" if busy is None else f"{100 * busy:.1f}% over {c.get('gpu_busy_samples')} samples"))
print(f"figure\t{name}: peak memory (report)\t{mib(c.get('peak_memory_bytes'))}; plan {mib(c.get('plan_memory_bytes'))}")
if c.get("note"):
    print(f"figure\t{name}: report's note\t{c['note']}")
sys.exit(0 if c.get("tflop_per_s", 0) > 0 else 1)
PY
  then :; else
    row figure "bf16 MLP $width: report" "FAILED: no compute figures in report.yaml"
    FAILED=1
  fi
fi
if [ -n "$SMI" ] && [ -s "$OUT/smi.csv" ]; then
  row figure "bf16 MLP $width: GPU busy (nvidia-smi)" "$(awk -F', ' '$1 > 0 { n++; u += $1 } END { if (n) printf "%.1f%% over %d samples above 0", u / n, n; else print "-" }' "$OUT/smi.csv")"
  row figure "bf16 MLP $width: memory used (nvidia-smi)" "$(awk -F', ' '$2 > m { m = $2 } END { printf "%d MiB at most, CUDA context included", m }' "$OUT/smi.csv")"
fi

if [ "$MODE" = gpu ]; then
  speed "MNIST MLP" bench/mlp.exp 100 1000 bench/torch_eager.py mlp 1000
  speed "MNIST CNN" bench/cnn.exp 64 300 bench/torch_eager.py cnn 300
  speed "transformer" bench/transformer.exp 128 300 bench/torch_transformer.py 300
else
  speed "MNIST MLP" bench/mlp.exp 100 100 bench/torch_eager.py mlp 100
  speed "MNIST CNN" bench/cnn.exp 64 20 bench/torch_eager.py cnn 20
  speed "transformer" bench/transformer.exp 128 20 bench/torch_transformer.py 20
fi

# --- CUDA paths ------------------------------------------------------------------------------

# `loss_of RUN_DIR DEVICE [--uncompressed]`: the loss of the run's final weights on its training
# split (every experiment has one) evaluated there.
loss_of() {
  local dir=$1 dev=$2
  shift 2
  echo "\$ kiln eval $dir --device $dev --split train $* --format json" >>"$LOG"
  timeout 120 "$KILN" eval "$dir" --device "$dev" --split train --format json "$@" 2>>"$LOG" | tee -a "$LOG" |
    "$PYTHON" -c '
import json, sys
try:
    doc = json.load(sys.stdin)
    print((doc["uncompressed"] if sys.argv[1:] else doc)["loss"])
except (ValueError, KeyError, TypeError):
    print("failed")
' "$@"
}

# `path NAME EXP TOLERANCE [--against-uncompressed] [RUN ARGS...]`: trains EXP on the device,
# then compares the loss of its weights on the device with the CPU's (relative tolerance).
path() {
  local name=$1 exp=$2 tol=$3
  shift 3
  local against=cpu
  if [ "${1:-}" = --against-uncompressed ]; then against=uncompressed; shift; fi
  local dir="$OUT/runs/path-${name// /-}"
  echo "\$ kiln run $exp --device $DEV $* --run-dir $dir" >>"$LOG"
  if ! timeout 300 "$KILN" run "$exp" --device "$DEV" --quiet --run-dir "$dir" "$@" >>"$LOG" 2>&1; then
    row path "$name" FAILED "training on $DEV failed (see $LOG)"
    FAILED=1
    return
  fi
  if pgrep -f "kiln-runtime.*$dir" >/dev/null; then
    row path "$name" FAILED "a process of the run is still alive after it ended"
    FAILED=1
    return
  fi
  local here there
  here=$(loss_of "$dir" "$DEV")
  if [ "$against" = uncompressed ]; then
    there=$(loss_of "$dir" "$DEV" --uncompressed)
  else
    there=$(loss_of "$dir" cpu)
  fi
  local verdict
  verdict=$(awk -v a="$here" -v b="$there" -v t="$tol" 'BEGIN {
    if (a == "failed" || b == "failed" || a == "" || b == "") { print "FAILED"; exit }
    d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); if (m < 1e-12) m = 1e-12
    if (d / m <= t) print "ok"; else print "FAILED" }')
  [ "$verdict" = ok ] || FAILED=1
  row path "$name" "$verdict" "loss on $DEV $here, on $against $there (relative tolerance $tol)"
}

if [ "$MODE" = gpu ]; then steps=(); else steps=(--max-steps 30); fi
path "int8 weight-only" experiments/mnist_mlp_int8.exp 1e-3 "${steps[@]}"
path "int4" experiments/mnist_mlp_int4.exp 1e-3 "${steps[@]}"
path "dynamic int8" experiments/mnist_mlp_dynamic_int8.exp 1e-3 "${steps[@]}"
if [ "$MODE" = gpu ]; then
  path "FP8 (against fp32)" bench/gpu/mlp_fp8.exp 5e-2 --against-uncompressed
else
  row path "FP8" skipped "CUDA only (K0203 on the CPU)"
fi
path "pipeline stage threads" experiments/mnist_mlp_pipeline.exp 1e-4 "${steps[@]}"
path "windowed attention, per-token loss" bench/gpu/windowed.exp 1e-4 "${steps[@]}"
path "DDP world size 1 (NCCL; Gloo on the CPU)" experiments/article_ddp_nccl.exp 1e-4 "${steps[@]}"

# `same_steps NAME EXP OTHER`: EXP and OTHER (the same experiment, one line changed) trained on
# the device; every step's loss must agree within 1e-4 relative (CUDA's attention backward may add
# in another order).
same_steps() {
  local name=$1 slug a b
  slug=$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '-')
  a="$OUT/runs/$slug-a" b="$OUT/runs/$slug-b"
  for pair in "$2:$a" "$3:$b"; do
    echo "\$ kiln run ${pair%%:*} --device $DEV --run-dir ${pair#*:}" >>"$LOG"
    if ! timeout 300 "$KILN" run "${pair%%:*}" --device "$DEV" --quiet --run-dir "${pair#*:}" "${steps[@]}" >>"$LOG" 2>&1; then
      row path "$name" FAILED "training on $DEV failed (see $LOG)"
      FAILED=1
      return
    fi
  done
  local verdict
  verdict=$("$PYTHON" - "$a/steps.jsonl" "$b/steps.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
worst = max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)), default=1.0)
print(("ok" if len(a) == len(b) and len(a) > 0 and worst <= 1e-4 else "FAILED") + f"\t{len(a)} steps, largest relative difference {worst:.2e}")
PY
)
  [ "${verdict%%$'\t'*}" = ok ] || FAILED=1
  row path "$name" "${verdict%%$'\t'*}" "${verdict#*$'\t'}"
}
# Activation checkpointing, against the same run keeping its activations.
sed 's/ recompute {/ {/' bench/gpu/recompute.exp >"$OUT/recompute-kept.exp"
same_steps "recompute (activation checkpointing)" bench/gpu/recompute.exp "$OUT/recompute-kept.exp"
# Fully sharded data parallel at world size 1, against the same run without a strategy.
grep -v '^  parallel ' bench/gpu/fsdp.exp >"$OUT/fsdp-none.exp"
same_steps "fsdp world size 1 (NCCL; Gloo on the CPU)" bench/gpu/fsdp.exp "$OUT/fsdp-none.exp"

# The c10d binding's own tests on CUDA: NCCL all-reduce of CUDA tensors, the Reducer.
if [ "$MODE" = gpu ] && [ -x target/release/c10d-tests ]; then
  if timeout 120 target/release/c10d-tests c10d --test-threads 1 >>"$LOG" 2>&1; then
    row path "c10d on CUDA (NCCL, Reducer)" ok "target/release/c10d-tests c10d"
  else
    row path "c10d on CUDA (NCCL, Reducer)" FAILED "see $LOG"
    FAILED=1
  fi
fi

# --- The table ---------------------------------------------------------------------------------
"$PYTHON" - "$ROWS" "$MODE" <<'PY'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
print(f"\nKiln gpu-check ({sys.argv[2]} mode)\n")
print(f"{'speed (steps/s)':<38} {'kiln':>9} {'eager':>9} {'compile':>9} {'kiln/eager':>10}")
for r in rows:
    if r[0] == "speed":
        print(f"{r[1]:<38} {r[2]:>9} {r[3]:>9} {r[4]:>9} {r[5]:>10}")
print()
for r in rows:
    if r[0] == "figure":
        print(f"{r[1]:<38} {r[2]}")
print(f"\n{'CUDA path':<42} {'result':<8} detail")
for r in rows:
    if r[0] == "path":
        print(f"{r[1]:<42} {r[2]:<8} {r[3]}")
PY
exit "$FAILED"
