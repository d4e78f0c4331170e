//! Parquet sources: the input columns and the target column of a Parquet file, or of a
//! directory of shards read in name order, through the `parquet` crate's Arrow reader. Several
//! input columns give a sample of one value each; one list column (fixed-size, or a list whose
//! rows all have one length, as token ids) gives its values. Integer columns stay integers
//! (class labels, token ids), any float column makes the inputs floats; a missing (null) value
//! is refused, naming its row.

use std::fs::File;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait};
use arrow_schema::DataType;
use kiln::span::Span;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use rayon::prelude::*;
use tch::Tensor;

use super::error::{At, DataError};
use super::file::DataFile;
use super::{cut, invalid, Raw};

/// One column's values, row after row, in the narrowest of its types that holds them all.
enum Buffer {
    /// Integers, while every value read was one.
    Ints(Vec<i64>),
    /// float32 values (and integers read before them, converted).
    F32(Vec<f32>),
    /// float64 values (and anything read before them, converted).
    F64(Vec<f64>),
}

/// One column's values with the values per row.
struct Values {
    buffer: Buffer,
    /// Values per row; `None` until the first row.
    per_row: Option<usize>,
}

impl Values {
    fn new() -> Values {
        Values {
            buffer: Buffer::Ints(Vec::new()),
            per_row: None,
        }
    }

    fn push_ints(&mut self, v: &[impl Copy + Into<i128>]) {
        match &mut self.buffer {
            Buffer::Ints(b) => b.extend(v.iter().map(|&x| x.into() as i64)),
            Buffer::F32(b) => b.extend(v.iter().map(|&x| x.into() as f32)),
            Buffer::F64(b) => b.extend(v.iter().map(|&x| x.into() as f64)),
        }
    }

    fn push_f32(&mut self, v: &[f32]) {
        match &mut self.buffer {
            Buffer::F32(b) => b.extend_from_slice(v),
            Buffer::F64(b) => b.extend(v.iter().map(|&x| f64::from(x))),
            Buffer::Ints(b) => {
                let mut f: Vec<f32> = b.iter().map(|&x| x as f32).collect();
                f.extend_from_slice(v);
                self.buffer = Buffer::F32(f);
            }
        }
    }

    fn push_f64(&mut self, v: &[f64]) {
        let mut f = match std::mem::replace(&mut self.buffer, Buffer::Ints(Vec::new())) {
            Buffer::F64(b) => b,
            Buffer::F32(b) => b.into_iter().map(f64::from).collect(),
            Buffer::Ints(b) => b.into_iter().map(|x| x as f64).collect(),
        };
        f.extend_from_slice(v);
        self.buffer = Buffer::F64(f);
    }

    /// Room for `total` values in all.
    fn reserve(&mut self, total: usize) {
        match &mut self.buffer {
            Buffer::Ints(b) => b.reserve(total.saturating_sub(b.len())),
            Buffer::F32(b) => b.reserve(total.saturating_sub(b.len())),
            Buffer::F64(b) => b.reserve(total.saturating_sub(b.len())),
        }
    }

    /// Values held.
    fn len(&self) -> usize {
        match &self.buffer {
            Buffer::Ints(b) => b.len(),
            Buffer::F32(b) => b.len(),
            Buffer::F64(b) => b.len(),
        }
    }
}

/// One column's values over the shards, in order, as one tensor `[rows, per_row]` (`[rows]`
/// when `scalar`): int64 when every shard holds integers, else the widest float. Each value is
/// copied once, into the tensor.
fn joined(parts: Vec<Values>, scalar: bool) -> Result<Tensor, tch::TchError> {
    let per = parts.iter().find_map(|v| v.per_row).unwrap_or(1).max(1);
    let total: usize = parts.iter().map(Values::len).sum();
    let rows = (total / per) as i64;
    let shape: Vec<i64> = if scalar {
        vec![rows]
    } else {
        vec![rows, per as i64]
    };
    let rank = |b: &Buffer| match b {
        Buffer::Ints(_) => 0,
        Buffer::F32(_) => 1,
        Buffer::F64(_) => 2,
    };
    let widest = parts.iter().map(|v| rank(&v.buffer)).max().unwrap_or(0);
    let buffers = parts.into_iter().map(|v| v.buffer);
    match widest {
        0 => fill(
            buffers.map(|b| match b {
                Buffer::Ints(v) => v,
                _ => Vec::new(),
            }),
            &shape,
            tch::Kind::Int64,
        ),
        1 => fill(
            buffers.map(|b| match b {
                Buffer::F32(v) => v,
                Buffer::Ints(v) => v.into_iter().map(|x| x as f32).collect(),
                Buffer::F64(_) => Vec::new(),
            }),
            &shape,
            tch::Kind::Float,
        ),
        _ => fill(
            buffers.map(|b| match b {
                Buffer::F64(v) => v,
                Buffer::F32(v) => v.into_iter().map(f64::from).collect(),
                Buffer::Ints(v) => v.into_iter().map(|x| x as f64).collect(),
            }),
            &shape,
            tch::Kind::Double,
        ),
    }
}

/// A new CPU tensor of `shape` and `kind` (whose elements are `T`) holding `parts` one after
/// another.
fn fill<T: Copy>(
    parts: impl Iterator<Item = Vec<T>>,
    shape: &[i64],
    kind: tch::Kind,
) -> Result<Tensor, tch::TchError> {
    let t = Tensor::f_empty(shape, (kind, tch::Device::Cpu))?;
    let room = t.numel();
    let base = t.data_ptr() as *mut T;
    let mut at = 0usize;
    for part in parts {
        if at + part.len() > room {
            return Err(tch::TchError::Shape(format!(
                "{} values for a tensor of {room}",
                at + part.len()
            )));
        }
        // SAFETY: `t` is a new contiguous CPU tensor of `room` elements of `kind`, whose
        // element type is `T` (the caller pairs them); `at + part.len() <= room` was checked,
        // and `part` is a separate allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), base.add(at), part.len()) };
        at += part.len();
    }
    if at != room {
        return Err(tch::TchError::Shape(format!(
            "{at} values for a tensor of {room}"
        )));
    }
    Ok(t)
}

/// Appends a primitive array's values; refuses nulls and types that are not numbers.
fn primitive(a: &dyn Array, out: &mut Values) -> Result<(), String> {
    if a.null_count() > 0 {
        let row = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
        return Err(format!(
            "a missing (null) value, the {}th of its rows' values",
            row + 1
        ));
    }
    macro_rules! ints {
        ($t:ty) => {
            out.push_ints(a.as_primitive::<$t>().values())
        };
    }
    match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => ints!(UInt64Type),
        DataType::Float32 => out.push_f32(a.as_primitive::<Float32Type>().values()),
        DataType::Float64 => out.push_f64(a.as_primitive::<Float64Type>().values()),
        other => return Err(format!("values of type {other}, not numbers")),
    }
    Ok(())
}

/// Appends a column's rows: one value each, or a list each (all of one length).
fn column(a: &ArrayRef, out: &mut Values) -> Result<(), String> {
    let check = |out: &mut Values, n: usize| -> Result<(), String> {
        match out.per_row {
            Some(p) if p != n => Err(format!("rows of {p} and of {n} values")),
            _ => {
                out.per_row = Some(n);
                Ok(())
            }
        }
    };
    match a.data_type() {
        DataType::FixedSizeList(_, n) => {
            let list = a.as_fixed_size_list();
            if list.null_count() > 0 {
                return Err("a missing (null) list".into());
            }
            check(out, *n as usize)?;
            primitive(
                list.values()
                    .slice(list.offset() * *n as usize, list.len() * *n as usize)
                    .as_ref(),
                out,
            )
        }
        DataType::List(_) => list(a.as_list::<i32>(), out, check),
        DataType::LargeList(_) => list(a.as_list::<i64>(), out, check),
        _ => {
            check(out, 1)?;
            primitive(a.as_ref(), out)
        }
    }
}

/// Appends a list column's values, refusing null lists and (through `check`) rows of another
/// length than the others.
fn list<O: OffsetSizeTrait>(
    list: &GenericListArray<O>,
    out: &mut Values,
    check: impl Fn(&mut Values, usize) -> Result<(), String>,
) -> Result<(), String> {
    if list.null_count() > 0 {
        return Err("a missing (null) list".into());
    }
    for i in 0..list.len() {
        check(out, list.value_length(i).as_usize())?;
    }
    let offsets = list.value_offsets();
    let (lo, hi) = (offsets[0].as_usize(), offsets[list.len()].as_usize());
    primitive(list.values().slice(lo, hi - lo).as_ref(), out)
}

/// Reads the `inputs` columns and the `target` column of a Parquet source (`kiln predict`'s
/// inputs have no target: zeros stand for it).
pub(super) fn read(
    file: &DataFile,
    inputs: &[String],
    target: Option<&str>,
    span: Span,
) -> Result<Raw, DataError> {
    // The shards are decoded side by side (Rust alone, no libtorch), then joined in order.
    let shards = file.parts(kiln::check::parquet_files, "`.parquet` files", span)?;
    let decoded: Vec<Result<Shard, DataError>> = shards
        .into_par_iter()
        .map(|shard| {
            let (f, _) = shard.open(span)?;
            let bad = |why: String| {
                invalid(
                    span,
                    format!("{} cannot be read as Parquet: {}", shard.name(), cut(&why, 200)),
                    "unreadable Parquet",
                    "write the file with pyarrow (`pyarrow.parquet.write_table`) or pandas (`DataFrame.to_parquet`); snappy, gzip or no compression",
                )
            };
            read_shard(f, inputs, target, &shard, span).map_err(bad)?
        })
        .collect();
    let mut xs: Vec<Vec<Values>> = inputs.iter().map(|_| Vec::new()).collect();
    let mut ys = Vec::new();
    for shard in decoded {
        let shard = shard?;
        for (column, (v, out)) in inputs.iter().zip(shard.x.into_iter().zip(xs.iter_mut())) {
            if inputs.len() > 1 && v.per_row.is_some_and(|n| n != 1) {
                return Err(column_error(
                    file,
                    column,
                    "a list in each row, but several input columns must each hold one value per row (name a single list column instead)",
                    span,
                ));
            }
            out.push(v);
        }
        ys.push(shard.y);
    }
    // Lists of one length in every shard.
    for (column, parts) in inputs
        .iter()
        .map(String::as_str)
        .zip(&xs)
        .chain(target.map(|t| (t, &ys)))
    {
        let mut lengths = parts.iter().filter_map(|v| v.per_row);
        if let Some(first) = lengths.next() {
            if let Some(other) = lengths.find(|&n| n != first) {
                let why = format!("rows of {first} and of {other} values");
                return Err(column_error(file, column, &why, span));
            }
        }
    }
    let y_scalar = ys.iter().find_map(|v| v.per_row) == Some(1);
    let targets = if target.is_some() {
        Some(joined(ys, y_scalar).at(span)?)
    } else {
        None
    };
    let many = inputs.len() > 1;
    let mut cols = xs
        .into_iter()
        .map(|parts| joined(parts, many))
        .collect::<Result<Vec<Tensor>, _>>()
        .at(span)?;
    let inputs_t = if cols.len() == 1 {
        cols.remove(0)
    } else {
        // Several columns, one value each, side by side: int64 when every column holds
        // integers, else the widest float.
        let kind = cols
            .iter()
            .map(Tensor::kind)
            .fold(tch::Kind::Int64, |k, c| match (k, c) {
                (tch::Kind::Double, _) | (_, tch::Kind::Double) => tch::Kind::Double,
                (tch::Kind::Float, _) | (_, tch::Kind::Float) => tch::Kind::Float,
                _ => tch::Kind::Int64,
            });
        let cols: Vec<Tensor> = cols.into_iter().map(|c| c.to_kind(kind)).collect();
        Tensor::f_stack(&cols, 1).at(span)?
    };
    let names = inputs
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let targets = match targets {
        Some(t) => t,
        None => {
            Tensor::f_zeros([inputs_t.size()[0]], (tch::Kind::Float, tch::Device::Cpu)).at(span)?
        }
    };
    Ok(Raw::new(
        inputs_t,
        targets,
        format!(
            "the column{} {names} of {}",
            if inputs.len() == 1 { "" } else { "s" },
            file.name()
        ),
        target.map_or_else(String::new, |t| {
            format!("the column `{t}` of {}", file.name())
        }),
    ))
}

/// Reads one shard's columns. The outer error is the
/// `parquet` crate's (unreadable Parquet), the inner one Kiln's about the columns.
fn read_shard(
    f: File,
    inputs: &[String],
    target: Option<&str>,
    shard: &DataFile,
    span: Span,
) -> Result<Result<Shard, DataError>, String> {
    let mut x: Vec<Values> = inputs.iter().map(|_| Values::new()).collect();
    let mut y = Values::new();
    let builder = ParquetRecordBatchReaderBuilder::try_new(f).map_err(|e| e.to_string())?;
    let shard_rows = usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let schema = builder.schema().clone();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut wanted: Vec<usize> = Vec::new();
    for c in inputs.iter().map(String::as_str).chain(target) {
        let Some(i) = names.iter().position(|n| n == c) else {
            return Ok(Err(invalid(
                span,
                format!(
                    "{} has no column `{c}`; its columns: {}",
                    shard.name(),
                    super::fmt_names(&names)
                ),
                format!("no column `{c}`"),
                "name the columns with `inputs:` and `target:`",
            )));
        };
        wanted.push(i);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), wanted.iter().copied());
    let reader = builder
        .with_projection(mask)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| e.to_string())?;
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        let bschema = batch.schema();
        let get = |name: &str| -> &ArrayRef {
            let i = bschema
                .fields()
                .iter()
                .position(|f| f.name() == name)
                .unwrap_or(0);
            batch.column(i)
        };
        for (c, out) in inputs
            .iter()
            .map(String::as_str)
            .zip(x.iter_mut())
            .chain(target.map(|t| (t, &mut y)))
        {
            let first = out.per_row.is_none();
            if let Err(why) = column(get(c), out) {
                return Ok(Err(column_error(shard, c, &why, span)));
            }
            // The whole shard's values, once its first batch tells how many a row holds.
            if first {
                out.reserve(shard_rows.saturating_mul(out.per_row.unwrap_or(1)));
            }
        }
    }
    Ok(Ok(Shard { x, y }))
}

/// One shard's columns.
struct Shard {
    x: Vec<Values>,
    y: Values,
}

/// K0503 for a column that cannot be read as samples.
fn column_error(shard: &DataFile, column: &str, why: &str, span: Span) -> DataError {
    invalid(
        span,
        format!("the column `{column}` of {} holds {why}", shard.name()),
        "unusable column",
        "inputs and targets are numbers, one per row or a list of one length per row, none missing",
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::{data, expect_failure, floats, ints, Scratch};
    use super::super::{load, Source, Targets};
    use kiln::diagnostic::Code;
    use kiln::ir::DType;

    /// What pyarrow reads from the files `tests/parquet/write.py` writes into `dir`.
    fn reference(dir: &std::path::Path) -> serde_json::Value {
        let dir = dir.to_str().expect("utf-8 path");
        crate::toolkit::python_json("parquet", "tests/parquet/write.py", &[dir])
    }

    fn source(path: &str, inputs: &[&str], target: &str) -> Source {
        Source::Parquet {
            path: path.into(),
            inputs: inputs.iter().map(|c| c.to_string()).collect(),
            target: target.into(),
        }
    }

    fn f32s(v: &serde_json::Value) -> Vec<f32> {
        let mut out = Vec::new();
        for x in v.as_array().expect("list") {
            match x.as_array() {
                Some(row) => out.extend(row.iter().map(|y| y.as_f64().expect("number") as f32)),
                None => out.push(x.as_f64().expect("number") as f32),
            }
        }
        out
    }

    #[test]
    fn columns_read_as_pyarrow_reads_them() {
        let dir = Scratch::new();
        let r = reference(&dir.0);
        let all = (1.0, 0.0, 0.0);
        // Three scalar columns side by side, float32, float64 and int32, as float32 inputs.
        let d = data(
            source("table.parquet", &["a", "b", "c"], "label"),
            Targets::Classes(Some(3)),
            all,
        );
        let s = load(&d, &[3], DType::Float, &dir.0, 1).unwrap();
        let (a, b, c) = (f32s(&r["a"]), f32s(&r["b"]), f32s(&r["c"]));
        let want: Vec<f32> = (0..50).flat_map(|i| [a[i], b[i], c[i]]).collect();
        assert_eq!(floats(&s.train.inputs), want);
        assert_eq!(
            ints(&s.train.targets),
            f32s(&r["label"])
                .iter()
                .map(|&v| v as i64)
                .collect::<Vec<_>>()
        );
        // A fixed-size list column, float values as targets; the same rows from two gzip shards.
        for path in ["table.parquet", "shards"] {
            let d = data(
                source(path, &["pixels"], "value"),
                Targets::Values(kiln::ir::Shape(vec![])),
                all,
            );
            let s = load(&d, &[6], DType::Float, &dir.0, 1).unwrap();
            assert_eq!(floats(&s.train.inputs), f32s(&r["pixels"]), "{path}");
            assert_eq!(floats(&s.train.targets), f32s(&r["value"]), "{path}");
        }
        // A list column of token ids, all rows of one length, read as int64 ids.
        let mut d = data(
            source("table.parquet", &["tokens"], "label"),
            Targets::Classes(Some(3)),
            all,
        );
        d.token_vocab = Some(20);
        let s = load(&d, &[4], DType::Int, &dir.0, 1).unwrap();
        assert_eq!(
            ints(&s.train.inputs),
            f32s(&r["tokens"])
                .iter()
                .map(|&v| v as i64)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn unusable_parquet_is_a_data_diagnostic() {
        let dir = Scratch::new();
        reference(&dir.0);
        let all = (1.0, 0.0, 0.0);
        let fails = |path: &str, inputs: &[&str], input: &[i64], needle: &str| {
            let d = data(
                source(path, inputs, "label"),
                Targets::Classes(Some(3)),
                all,
            );
            expect_failure(
                load(&d, input, DType::Float, &dir.0, 1),
                Code::DataInvalid,
                needle,
            );
        };
        fails("nulls.parquet", &["a"], &[1], "a missing (null) value");
        fails(
            "ragged.parquet",
            &["tokens"],
            &[2],
            "rows of 2 and of 3 values",
        );
        fails("broken.parquet", &["a"], &[1], "cannot be read as Parquet");
        fails(
            "table.parquet",
            &["pixel"],
            &[6],
            "has no column `pixel`; its columns: `a`, `b`",
        );
    }
}
