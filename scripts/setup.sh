#!/usr/bin/env bash
# Installs everything Kiln needs to build and test, idempotently:
# a project-local virtualenv with the pinned PyTorch wheel (which carries libtorch),
# the `.libtorch` link that `.cargo/config.toml` points torch-sys at, and the Rust toolchain check.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.11.0
VENV=.venv

log() { printf '[setup] %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
  log "cargo is missing: install the Rust toolchain (https://rustup.rs) and run this again"
  exit 1
fi

if command -v rustup >/dev/null 2>&1; then
  for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
      log "adding rust component $component"
      rustup component add "$component"
    fi
  done
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtualenv $VENV"
  python3 -m venv "$VENV"
fi

if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  log "installing torch==$TORCH_VERSION into $VENV (about 4.6 GB, once)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION" numpy
fi

torch_dir=$("$VENV/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
if [ "$(readlink .libtorch 2>/dev/null || true)" != "$torch_dir" ]; then
  ln -sfn "$torch_dir" .libtorch
  log "linked .libtorch -> $torch_dir"
fi
