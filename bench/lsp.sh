#!/usr/bin/env bash
# Benchmarks `kiln lsp` (release build) on a generated 2,000-line document, as an editor drives
# it over stdio: the time from didChange to publishDiagnostics, and hover and completion round
# trips; medians over RUNS runs.
# Needs bash, python3 and cargo. Usage: bash bench/lsp.sh   (RUNS=20 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-20}
KILN=${CARGO_TARGET_DIR:-target}/release/kiln

echo "== building: cargo build --release --bin kiln" >&2
cargo build --release --bin kiln >&2
python3 bench/lsp.py "$KILN" "$RUNS"
