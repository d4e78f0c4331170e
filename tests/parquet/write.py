"""The reference of the Parquet source's tests: writes Parquet files with pyarrow and prints, as
JSON, what pyarrow reads back from them (`to_pylist`), for Kiln's reader to match.

    python tests/parquet/write.py DIR

`table.parquet` (snappy): float32 `a`, float64 `b`, int32 `c`, a fixed-size list of 6 float32
`pixels`, a list of 4 int64 `tokens` per row, int64 `label`, float64 `value`, uint32 `u32`, uint8 `u8`, int16 `i16`;
`groups.parquet` the same in row groups of 7 rows, version 2 data pages, no dictionary and no
compression; `shards/` the same rows in two files (`part-0.parquet`, `part-1.parquet`, gzip)
and an empty one (`part-2.parquet`); `nulls.parquet` with a missing value; `ragged.parquet` with
lists of two lengths; `holes.parquet` and `empty.parquet` with a missing value in a list and an
empty list; `names.parquet` with a string column; `broken.parquet`, truncated; `pixels.npy`, the
`pixels` column as an array.
"""

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
rng = np.random.default_rng(3)
n = 50
table = pa.table(
    {
        "a": pa.array(rng.normal(size=n).astype(np.float32)),
        "b": pa.array(rng.normal(size=n)),
        "c": pa.array(rng.integers(-5, 5, size=n).astype(np.int32)),
        "pixels": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 6).astype(np.float32)), 6),
        "tokens": pa.array([list(map(int, rng.integers(0, 20, size=4))) for _ in range(n)], type=pa.list_(pa.int64())),
        "label": pa.array(rng.integers(0, 3, size=n)),
        "value": pa.array(rng.normal(size=n)),
        "u32": pa.array(rng.integers(0, 2**32, size=n).astype(np.uint32)),
        "u8": pa.array(rng.integers(0, 256, size=n).astype(np.uint8)),
        "i16": pa.array(rng.integers(-(2**15), 2**15, size=n).astype(np.int16)),
    }
)
pq.write_table(table, os.path.join(out, "table.parquet"))
os.makedirs(os.path.join(out, "shards"))
pq.write_table(table.slice(0, 20), os.path.join(out, "shards", "part-0.parquet"), compression="gzip")
pq.write_table(table.slice(20), os.path.join(out, "shards", "part-1.parquet"), compression="gzip")
pq.write_table(
    table,
    os.path.join(out, "groups.parquet"),
    row_group_size=7,
    data_page_version="2.0",
    use_dictionary=False,
    compression="none",
)
pq.write_table(table.slice(0, 0), os.path.join(out, "shards", "part-2.parquet"))
pq.write_table(pa.table({"a": pa.array([1.0, None, 3.0]), "label": pa.array([0, 1, 2])}), os.path.join(out, "nulls.parquet"))
pq.write_table(
    pa.table({"tokens": pa.array([[1, 2], [3], [4, 5, 6]], type=pa.list_(pa.int64())), "label": pa.array([0, 1, 2])}),
    os.path.join(out, "ragged.parquet"),
)
for name, tokens in (("holes", [[1, 2], [3, None]]), ("empty", [[1, 2], []])):
    pq.write_table(
        pa.table({"tokens": pa.array(tokens, type=pa.list_(pa.int64())), "label": pa.array([0, 1])}),
        os.path.join(out, f"{name}.parquet"),
    )
pq.write_table(pa.table({"name": pa.array(["x", "y"]), "label": pa.array([0, 1])}), os.path.join(out, "names.parquet"))
with open(os.path.join(out, "table.parquet"), "rb") as f:
    whole = f.read()
with open(os.path.join(out, "broken.parquet"), "wb") as f:
    f.write(whole[: len(whole) // 2] + whole[-8:])
np.save(os.path.join(out, "pixels.npy"), np.array(table.column("pixels").to_pylist(), dtype=np.float32))
read = pq.read_table(os.path.join(out, "table.parquet"))
json.dump({c: read.column(c).to_pylist() for c in read.column_names}, sys.stdout)
