#!/usr/bin/env bash
# Runs every test: installs whatever is missing (idempotent), then formatting, lints and the
# whole test suite in release mode (the suite shares its build with `cargo build --release`),
# then the GPU check's CPU mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --check
cargo clippy --release --all-targets --quiet -- -D warnings
cargo test --release
# The GPU check's CPU mode: every check of scripts/gpu-check.sh, small, on the CPU.
bash scripts/gpu-check.sh --cpu
