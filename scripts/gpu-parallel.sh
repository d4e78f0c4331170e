#!/usr/bin/env bash
# The parallel strategies on a CUDA machine (issue 9's GPU checks): DDP over NCCL at world size 1
# against no strategy, data parallel with two replicas on cuda:0 against one, model parallel over
# cuda:0 and the CPU, and the source article's scenarios. Figures go to BENCHMARKS.md.
#
# Built here (`cargo build --release`), run there from the repository root with
# target/release/kiln and target/release/kiln-runtime carried over, like scripts/gpu-check.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
TORCH_LIB=$("$PY" -c 'import torch,os;print(os.path.dirname(torch.__file__))')/lib
export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
RUNS=${RUNS:-/tmp/kiln-gpu-parallel}
KILN=${KILN:-target/release/kiln}
mkdir -p "$RUNS"
say() { printf '\n== %s\n$ %s\n' "$1" "$2"; }

# Runs an experiment and prints the figures of its report: steps, samples/s, losses, accuracy.
run() {
  local exp=$1; shift
  say "$exp $*" "kiln run $exp $* --quiet --runs-dir $RUNS"
  /usr/bin/time -f "wall %e s" timeout 60 "$KILN" run "$exp" "$@" --quiet --runs-dir "$RUNS"
  local status=$?
  local report
  report="$(ls -td "$RUNS"/*/*/ | head -1)report.yaml"
  if [ "$status" = 0 ] && [ -f "$report" ]; then
    "$PY" - "$report" <<'PYEOF'
import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))
o = r.get("outcome", r)
val = o.get("val") or {}
acc = val.get("accuracy")
print(f"steps {o['steps']}  samples/s {o['samples_per_s']:.0f}  train loss {o['train_loss']:.6f}"
      + (f"  val accuracy {100 * acc:.2f}%" if acc is not None else ""))
PYEOF
  else
    echo "exit status $status"
  fi
}

# SKIP_DATA=1 leaves out the data-parallel runs (a build without them).
run bench/gpu/linear.exp
run bench/gpu/ddp_nccl.exp
run bench/gpu/model_parallel.exp
run experiments/mnist_mlp_pipeline.exp --device cuda:0
run experiments/article_ddp_nccl.exp
if [ -z "${SKIP_DATA:-}" ]; then
  run bench/gpu/cnn.exp
  run bench/gpu/data_parallel.exp
  run experiments/article_data_parallel.exp --device cuda:0
fi
