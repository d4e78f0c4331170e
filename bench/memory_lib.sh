# What bench/fsdp_memory.sh and bench/recompute_memory.sh share: the model they measure (an input
# linear, residual MLP blocks, a head; AdamW, 3 steps on synthetic data) and the profiled run.
# Sourced, with `bin` set to kiln-runtime.

# Writes FILE: experiment NAME with WIDTH inputs, BLOCKS blocks of WIDTH -> HIDDEN -> WIDTH (MARK
# after each block's name: "" or " recompute"), COUNT samples in batches of BATCH, and the
# strategy PARALLEL (none when empty).
blocks() {
  local file=$1 name=$2 width=$3 hidden=$4 blocks=$5 count=$6 batch=$7 mark=$8 parallel=$9
  {
    printf 'experiment "%s" {\n  seed 3\n  data {\n' "$name"
    printf '    source synthetic(inputs: normal([%s]), targets: randint(10), count: %s)\n' \
      "$width" "$count"
    printf '    batch %s\n  }\n  model {\n    input [%s]\n    embed: linear(%s)\n' \
      "$batch" "$width" "$width"
    for i in $(seq 0 $((blocks - 1))); do
      printf '    block b%s%s {\n      residual {\n        norm: layernorm\n' "$i" "$mark"
      printf '        up: linear(%s)\n        gelu\n        down: linear(%s)\n      }\n    }\n' \
        "$hidden" "$width"
    done
    printf '    head: linear(10)\n  }\n  device cpu\n'
    [ -z "$parallel" ] || printf '  parallel %s\n' "$parallel"
    printf '  optimizer adamw(lr: 1e-4)\n  train {\n    steps 3\n    loss cross_entropy\n  }\n}\n'
  } >"$file"
}

# Runs EXP into the run directory RUN with KILN_MEMORY_PROFILE, its output in LOG (shown, and
# the script stopped, when the run fails), and prints its ranks' profile lines after LABEL.
profiled() {
  local exp=$1 run=$2 log=$3 label=$4
  KILN_MEMORY_PROFILE=1 "$bin" run "$exp" --quiet --run-dir "$run" >"$log" 2>&1 \
    || { cat "$log"; exit 1; }
  grep -o 'memory profile: .*' "$log" | sed "s/^/$label /" | sort
}
