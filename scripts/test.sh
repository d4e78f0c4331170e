#!/usr/bin/env bash
# Runs every test: installs whatever is missing (idempotent), then formatting, lints and the
# whole test suite in release mode (the suite shares its build with `cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --check
cargo clippy --release --all-targets --quiet -- -D warnings
cargo test --release
