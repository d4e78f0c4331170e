#!/usr/bin/env bash
# Quick start: installs whatever is missing (idempotent), builds Kiln, and checks and plans the
# flagship experiment, the MNIST MLP.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet
./target/release/kiln check experiments/mnist_mlp.exp
./target/release/kiln plan experiments/mnist_mlp.exp
