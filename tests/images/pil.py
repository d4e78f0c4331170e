"""Writes image folders and what PIL (and torch) read from them, for the image source's tests.

usage: pil.py DIR

DIR/same/   ImageFolder of 12x10 images: PNG in modes 1, L, LA, P, P with transparency, RGB,
            RGBA, and a 16-bit RGB PNG; JPEG 4:2:0, 4:4:4, greyscale and progressive; a nested folder, an
            upper-case extension, and files ImageFolder-style loaders skip (a text file, a
            hidden image).
DIR/sizes/  ImageFolder of RGB PNGs of other sizes, for `resize: true`.
DIR/large/  ImageFolder of 80x96 JPEGs (4:2:0 at quality 75, 4:2:2, 4:4:4, progressive,
            greyscale, restart markers), for the decoder difference on images of some size.

Prints JSON: for each folder, the images in ImageFolder's order (sorted classes, then
sorted(os.walk(...)) and sorted names) with their class index, whether they are JPEG, and
their pixels as PIL reads them, [C, H, W] for `convert("L")` and `convert("RGB")`; for `sizes`,
the RGB pixels resized to 12x10 as `F.interpolate(..., mode="bilinear", antialias=True)`,
rounded.
"""

import json
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

H, W = 12, 10
rng = np.random.default_rng(7)


def smooth(h, w, bands):
    """A picture with edges and gradients (JPEG on pure noise is not a fair test)."""
    y, x = np.mgrid[0:h, 0:w]
    planes = []
    for b in range(bands):
        base = 128 + 90 * np.sin(x / (1.5 + b) + y / 3.0 + b)
        base[(x + 2 * y + b) % 7 == 0] = 250 - 40 * b
        planes.append(base + rng.normal(0, 6, (h, w)))
    a = np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8)
    return a[..., 0] if bands == 1 else a


def write_png16(path, rgb):
    """A 16-bit RGB PNG, written by hand (PIL writes RGB with 8 bits)."""
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    h, w, _ = rgb.shape
    rows = b"".join(b"\0" + rgb[y].astype(">u2").tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(rows)))
        f.write(chunk(b"IEND", b""))


def write_same(root):
    os.makedirs(f"{root}/cat/indoor", exist_ok=True)
    os.makedirs(f"{root}/dog", exist_ok=True)
    os.makedirs(f"{root}/zebra", exist_ok=True)
    Image.fromarray(smooth(H, W, 1) > 128).save(f"{root}/cat/bits.png")
    Image.fromarray(smooth(H, W, 1)).save(f"{root}/cat/grey.png")
    la = np.dstack([smooth(H, W, 1), smooth(H, W, 1)])
    Image.fromarray(la).save(f"{root}/cat/indoor/grey_alpha.png")
    Image.fromarray(smooth(H, W, 3)).save(f"{root}/cat/indoor/rgb.PNG")
    Image.fromarray(smooth(H, W, 4)).save(f"{root}/dog/rgba.png")
    p = Image.fromarray(smooth(H, W, 3)).quantize(colors=16)
    p.save(f"{root}/dog/palette.png")
    p.save(f"{root}/dog/palette_transparent.png", transparency=3)
    rgb16 = smooth(H, W, 3).astype(np.uint16) * 257 + rng.integers(0, 200, (H, W, 3)).astype(np.uint16)
    write_png16(f"{root}/dog/rgb16.png", rgb16)
    rgb = Image.fromarray(smooth(H, W, 3))
    rgb.save(f"{root}/zebra/a420.jpg", quality=90)
    rgb.save(f"{root}/zebra/b444.jpeg", quality=95, subsampling=0)
    rgb.save(f"{root}/zebra/c_progressive.jpg", quality=85, progressive=True)
    Image.fromarray(smooth(H, W, 1)).save(f"{root}/zebra/d_grey.jpg", quality=90)
    Image.fromarray(smooth(H, W, 1)).save(f"{root}/zebra/.hidden.png")
    with open(f"{root}/zebra/notes.txt", "w") as f:
        f.write("not an image\n")


def write_sizes(root):
    os.makedirs(f"{root}/a", exist_ok=True)
    os.makedirs(f"{root}/b", exist_ok=True)
    for name, (h, w) in {"a/big": (37, 29), "a/wide": (12, 31), "b/small": (5, 4), "b/same": (H, W)}.items():
        Image.fromarray(smooth(h, w, 3)).save(f"{root}/{name}.png")


def write_large(root):
    os.makedirs(f"{root}/a", exist_ok=True)
    os.makedirs(f"{root}/b", exist_ok=True)
    h, w = 80, 96
    rgb = Image.fromarray(smooth(h, w, 3))
    rgb.save(f"{root}/a/q75_420.jpg", quality=75)
    rgb.save(f"{root}/a/q90_422.jpg", quality=90, subsampling=1)
    rgb.save(f"{root}/a/q95_444.jpg", quality=95, subsampling=0)
    Image.fromarray(smooth(h, w, 3)).save(f"{root}/b/progressive.jpg", quality=85, progressive=True)
    Image.fromarray(smooth(h, w, 1)).save(f"{root}/b/grey.jpg", quality=80)
    Image.fromarray(smooth(h, w, 3)).save(f"{root}/b/restarts.jpg", quality=80, restart_marker_blocks=4)


def listing(root):
    """ImageFolder's samples, leaving out names starting with a dot."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    out = []
    for k, c in enumerate(classes):
        for r, _, names in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            for n in sorted(names):
                if n.startswith(".") or not n.lower().endswith((".png", ".jpg", ".jpeg")):
                    continue
                out.append((os.path.join(r, n), k))
    return out


def chw(img, mode):
    a = np.asarray(img.convert(mode))
    return (a[None] if a.ndim == 2 else a.transpose(2, 0, 1)).astype(int).tolist()


def main():
    root = sys.argv[1]
    write_same(f"{root}/same")
    write_sizes(f"{root}/sizes")
    write_large(f"{root}/large")
    same = []
    for path, k in listing(f"{root}/same"):
        img = Image.open(path)
        same.append({
            "path": os.path.relpath(path, f"{root}/same"),
            "class": k,
            "jpeg": img.format == "JPEG",
            "L": chw(img, "L"),
            "RGB": chw(img, "RGB"),
        })
    sizes = []
    for path, k in listing(f"{root}/sizes"):
        x = torch.from_numpy(np.asarray(Image.open(path).convert("RGB")).copy())
        x = x.permute(2, 0, 1)[None].float()
        y = F.interpolate(x, (H, W), mode="bilinear", antialias=True, align_corners=False)
        sizes.append({
            "path": os.path.relpath(path, f"{root}/sizes"),
            "class": k,
            "RGB": y.round().clamp(0, 255)[0].int().tolist(),
        })
    large = []
    for path, k in listing(f"{root}/large"):
        img = Image.open(path)
        large.append({"path": os.path.relpath(path, f"{root}/large"), "class": k,
                      "L": chw(img, "L"), "RGB": chw(img, "RGB")})
    json.dump({"same": same, "sizes": sizes, "large": large}, sys.stdout)


main()
