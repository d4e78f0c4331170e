#!/usr/bin/env bash
# Quick start: installs whatever is missing (idempotent), builds Kiln, then checks, plans and
# trains the flagship experiment, the MNIST MLP on the real MNIST digits in data/mnist/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet
./target/release/kiln check experiments/mnist_mlp.exp
./target/release/kiln plan experiments/mnist_mlp.exp
./target/release/kiln run experiments/mnist_mlp.exp
