"""Writes the small data files the data-header goldens and tests/data_headers.rs read.

Run from this folder with any Python 3 (standard library only): `python3 make.py`.
Every source holds 4 samples of 3x3 values (9 per sample) with class labels below 3.
"""
import gzip
import json
import struct
import zipfile


def idx(dims, type_byte=0x08):
    head = bytes([0, 0, type_byte, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    n = 1
    for d in dims:
        n *= d
    return head + bytes(i % 3 for i in range(n))


def npy(descr, shape, body):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + body


def write(name, data):
    with open(name, "wb") as f:
        f.write(data)


write("images.idx", idx([4, 3, 3]))
write("images.idx.gz", gzip.compress(idx([4, 3, 3]), mtime=0))
write("labels.idx", idx([4]))
write("labels3.idx", idx([3]))
write("floats.idx", idx([4, 9], 0x0D)[:20])
x = npy("<f4", [4, 9], struct.pack("<36f", *range(36)))
y = npy("<i8", [4], struct.pack("<4q", 0, 1, 2, 0))
write("inputs.npy", x)
write("targets.npy", y)
write("ids.npy", npy("<i8", [4, 9], struct.pack("<36q", *(i % 5 for i in range(36)))))
with zipfile.ZipFile("arrays.npz", "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("inputs.npy", x)
    z.writestr("targets.npy", y)
header = json.dumps({
    "x": {"dtype": "F32", "shape": [4, 3, 3], "data_offsets": [0, 144]},
    "y": {"dtype": "I64", "shape": [4], "data_offsets": [144, 176]},
}).encode()
header += b" " * (-len(header) % 8)
write("tensors.safetensors", struct.pack("<Q", len(header)) + header
      + struct.pack("<36f", *range(36)) + struct.pack("<4q", 0, 1, 2, 0))
rows = ["a,b,c,d,e,f,g,h,i,label"] + [",".join(str(v) for v in range(9)) + ",%d" % (r % 3) for r in range(4)]
write("table.csv", ("\n".join(rows) + "\n").encode())
# Colour images of 2x2 pixels stored channels last, [4, 2, 2, 3], and one real value per sample.
write("images-hwc.npy", npy("<f4", [4, 2, 2, 3], struct.pack("<48f", *range(48))))
write("values.npy", npy("<f4", [4], struct.pack("<4f", 0.5, 1.5, -1.0, 2.0)))
