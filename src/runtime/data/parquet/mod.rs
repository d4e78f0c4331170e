//! Parquet sources: the input columns and the target column of a Parquet file, or of a
//! directory of shards read in name order. Several input columns give a sample of one value
//! each; one list column (fixed-size, or a list whose rows all have one length, as token ids)
//! gives its values. Integer columns stay integers (class labels, token ids), any float column
//! makes the inputs floats; a missing (null) value is refused, naming its row.
//!
//! The footers say how many rows each shard holds, so each column's tensor is allocated once
//! and every shard decodes, on its own rayon thread, straight into its rows of it through the
//! `parquet` crate's column readers: each value is copied once out of its (decompressed) page.

mod values;

use std::fs::File;

use kiln::span::Span;
use parquet::file::reader::{FileReader, SerializedFileReader};
use rayon::prelude::*;
use tch::Tensor;

use super::error::{At, DataError};
use super::file::DataFile;
use super::{cut, invalid, Raw};
use values::{chunks, Chunks, Out, Stored, Width};

/// Values decoded per call of a column reader (a chunk that stays in the cache).
const CHUNK_VALUES: usize = 1 << 16;

/// A column of one shard.
struct Column {
    /// Its leaf in the Parquet schema.
    leaf: usize,
    stored: Stored,
    /// Values per row fixed by the schema: 1 for a value a row, `n` for a fixed-size list;
    /// `None` for a list whose rows' lengths only the data tells.
    fixed: Option<usize>,
}

/// A shard with its footer read.
struct Shard {
    file: DataFile,
    reader: SerializedFileReader<File>,
    rows: usize,
    /// The input columns, then the target column.
    columns: Vec<Column>,
}

/// Reads the `inputs` columns and the `target` column of a Parquet source (`kiln predict`'s
/// inputs have no target: zeros stand for it).
pub(super) fn read(
    file: &DataFile,
    inputs: &[String],
    target: Option<&str>,
    span: Span,
) -> Result<Raw, DataError> {
    let names: Vec<&str> = inputs.iter().map(String::as_str).chain(target).collect();
    let shards = file
        .parts(kiln::check::parquet_files, "`.parquet` files", span)?
        .into_iter()
        .map(|shard| open(shard, &names, span))
        .collect::<Result<Vec<Shard>, DataError>>()?;
    let rows: usize = shards.iter().map(|s| s.rows).sum();
    // Each column's values per row and tensor.
    let mut tensors = Vec::new();
    let mut per_row = Vec::new();
    for (c, name) in names.iter().enumerate() {
        let per = values_per_row(&shards, c, name, span)?;
        if c < inputs.len() && inputs.len() > 1 && per != 1 {
            return Err(column_error(
                file,
                name,
                "a list in each row, but several input columns must each hold one value per row (name a single list column instead)",
                span,
            ));
        }
        let scalar = if c < inputs.len() {
            inputs.len() > 1
        } else {
            per == 1
        };
        let shape: Vec<i64> = if scalar {
            vec![rows as i64]
        } else {
            vec![rows as i64, per as i64]
        };
        let width = shards
            .iter()
            .map(|s| s.columns[c].stored.width())
            .max()
            .unwrap_or(Width::Int);
        let t = Tensor::f_empty(&shape, (width.kind(), tch::Device::Cpu)).at(span)?;
        tensors.push((t, width));
        per_row.push(per);
    }
    {
        // Each shard's rows of each column, decoded side by side.
        // SAFETY: each tensor is new, contiguous, on the CPU and of its width's kind, and is
        // only reached through these views until they are dropped at the end of this block.
        let mut views: Vec<Out> = tensors
            .iter_mut()
            .map(|(t, width)| unsafe { Out::of(t, *width) })
            .collect();
        let jobs: Vec<(Shard, Vec<Out>)> = shards
            .into_iter()
            .map(|shard| {
                let outs = views
                    .iter_mut()
                    .zip(&per_row)
                    .map(|(view, per)| view.take(shard.rows * per))
                    .collect();
                (shard, outs)
            })
            .collect();
        let done: Vec<Result<(), DataError>> = jobs
            .into_par_iter()
            .map(|(shard, outs)| {
                for (c, (out, per)) in outs.into_iter().zip(&per_row).enumerate() {
                    decode(&shard, c, *per, out)
                        .map_err(|e| e.error(&shard.file, names[c], span))?;
                }
                Ok(())
            })
            .collect();
        done.into_iter().collect::<Result<(), DataError>>()?;
    }
    let mut tensors: Vec<Tensor> = tensors.into_iter().map(|(t, _)| t).collect();
    let targets = if target.is_some() {
        tensors.pop()
    } else {
        None
    };
    let inputs_t = if tensors.len() == 1 {
        tensors.remove(0)
    } else {
        // Several columns, one value each, side by side: int64 when every column holds
        // integers, else the widest float.
        let kind = tensors
            .iter()
            .map(Tensor::kind)
            .fold(tch::Kind::Int64, |k, c| match (k, c) {
                (tch::Kind::Double, _) | (_, tch::Kind::Double) => tch::Kind::Double,
                (tch::Kind::Float, _) | (_, tch::Kind::Float) => tch::Kind::Float,
                _ => tch::Kind::Int64,
            });
        let cols: Vec<Tensor> = tensors.into_iter().map(|c| c.to_kind(kind)).collect();
        Tensor::f_stack(&cols, 1).at(span)?
    };
    let shown = inputs
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
            "the column{} {shown} of {}",
            if inputs.len() == 1 { "" } else { "s" },
            file.name()
        ),
        target.map_or_else(String::new, |t| {
            format!("the column `{t}` of {}", file.name())
        }),
    ))
}

/// Opens a shard and reads its footer: its rows, and where and how it stores the `columns`.
fn open(file: DataFile, columns: &[&str], span: Span) -> Result<Shard, DataError> {
    let (f, _) = file.open(span)?;
    let reader = match SerializedFileReader::new(f) {
        Ok(r) => r,
        Err(e) => return Err(unreadable(&file, &e.to_string(), span)),
    };
    let meta = reader.metadata().file_metadata();
    let descr = meta.schema_descr();
    let schema = match parquet::arrow::parquet_to_arrow_schema(descr, meta.key_value_metadata()) {
        Ok(s) => s,
        Err(e) => return Err(unreadable(&file, &e.to_string(), span)),
    };
    let fields: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut found = Vec::new();
    for &name in columns {
        let Some(root) = fields.iter().position(|n| n == name) else {
            return Err(invalid(
                span,
                format!(
                    "{} has no column `{name}`; its columns: {}",
                    file.name(),
                    super::fmt_names(&fields)
                ),
                format!("no column `{name}`"),
                "name the columns with `inputs:` and `target:`",
            ));
        };
        let column = kiln::datafile::parquet::column(name, schema.field(root).data_type());
        let fixed = match column.list {
            None => Some(1),
            Some(Some(n)) => usize::try_from(n).ok(),
            Some(None) => None,
        };
        let leaves: Vec<usize> = (0..descr.num_columns())
            .filter(|&l| descr.get_column_root_idx(l) == root)
            .collect();
        let stored = match leaves[..] {
            [leaf] => Stored::of(&column.elem, descr.column(leaf).physical_type()),
            _ => None,
        };
        let Some(stored) = stored else {
            let why = format!(
                "{}: Kiln reads integers and 32- and 64-bit floats",
                column.describe()
            );
            return Err(column_error(&file, name, &why, span));
        };
        found.push(Column {
            leaf: leaves[0],
            stored,
            fixed,
        });
    }
    let rows = usize::try_from(meta.num_rows()).unwrap_or(0);
    Ok(Shard {
        file,
        reader,
        rows,
        columns: found,
    })
}

/// The values a row of the column `c` holds, one length in every shard: what the schemas fix,
/// or the length of the first row of a list.
fn values_per_row(shards: &[Shard], c: usize, name: &str, span: Span) -> Result<usize, DataError> {
    let mut per: Option<usize> = None;
    for shard in shards {
        let n = match shard.columns[c].fixed {
            Some(n) => n,
            None if shard.rows == 0 => continue,
            None => first_row_length(shard, c).map_err(|e| e.error(&shard.file, name, span))?,
        };
        match per {
            Some(p) if p != n => {
                let why = format!("rows of {p} and of {n} values");
                return Err(column_error(&shard.file, name, &why, span));
            }
            _ => per = Some(n),
        }
    }
    Ok(per.unwrap_or(1))
}

/// The length of the first row of the list column `c` of a shard with rows.
fn first_row_length(shard: &Shard, c: usize) -> Result<usize, Problem> {
    let groups = shard.reader.metadata().row_groups();
    let Some(group) = groups.iter().position(|g| g.num_rows() > 0) else {
        return Ok(1);
    };
    let mut reader = column_reader(shard, group, &shard.columns[c])?;
    let (mut def, mut rep) = (Vec::new(), Vec::new());
    let (_, levels, _) = reader
        .next(1, &mut def, &mut rep)
        .map_err(|e| Problem::Unreadable(e.to_string()))?;
    Ok(levels)
}

/// The reader of a column in row group `group` of a shard.
fn column_reader(shard: &Shard, group: usize, column: &Column) -> Result<Box<dyn Chunks>, Problem> {
    let reader = shard
        .reader
        .get_row_group(group)
        .and_then(|g| g.get_column_reader(column.leaf))
        .map_err(|e| Problem::Unreadable(e.to_string()))?;
    chunks(reader, column.stored).ok_or_else(|| {
        Problem::Unreadable("a column reader of another type than its schema's".into())
    })
}

/// Why a column of a shard could not be decoded.
enum Problem {
    /// The file is not Parquet as the `parquet` crate reads it.
    Unreadable(String),
    /// Its values cannot be samples.
    Column(String),
}

impl Problem {
    fn error(self, shard: &DataFile, column: &str, span: Span) -> DataError {
        match self {
            Problem::Unreadable(why) => unreadable(shard, &why, span),
            Problem::Column(why) => column_error(shard, column, &why, span),
        }
    }
}

/// Decodes the column `c` of every row group of a shard into `out`, its rows of the column's
/// tensor, `per` values a row; refuses missing values and rows of another length.
fn decode(shard: &Shard, c: usize, per: usize, mut out: Out) -> Result<(), Problem> {
    let column = &shard.columns[c];
    let descr = shard
        .reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .column(column.leaf);
    let (max_def, max_rep) = (descr.max_def_level(), descr.max_rep_level());
    let records = (CHUNK_VALUES / per.max(1)).max(1);
    let (mut def, mut rep) = (Vec::new(), Vec::new());
    let (mut at, mut row) = (0usize, 0usize);
    for group in 0..shard.reader.num_row_groups() {
        let mut reader = column_reader(shard, group, column)?;
        loop {
            def.clear();
            rep.clear();
            let (read, levels, values) = reader
                .next(records, &mut def, &mut rep)
                .map_err(|e| Problem::Unreadable(e.to_string()))?;
            if read == 0 && levels == 0 {
                break;
            }
            // A record starts at each repetition level 0; one value a level when none is missing.
            let row_of = |level: usize| {
                row + if max_rep > 0 {
                    rep[..=level].iter().filter(|&&r| r == 0).count() - 1
                } else {
                    level
                }
            };
            if max_def > 0 {
                if let Some(level) = def.iter().position(|&d| d < max_def) {
                    let what = if max_rep > 0 {
                        "an empty or missing (null) list, or a missing value in a list,"
                    } else {
                        "a missing (null) value"
                    };
                    return Err(Problem::Column(format!(
                        "{what} in row {}",
                        row_of(level) + 1
                    )));
                }
            }
            if max_rep > 0 && !rows_of(&rep, per) {
                let other = record_lengths(&rep).find(|&n| n != per).unwrap_or(0);
                return Err(Problem::Column(format!(
                    "rows of {per} and of {other} values"
                )));
            }
            if !out.put(at, values) {
                return Err(Problem::Column(format!(
                    "more values than the {} rows its footer states",
                    shard.rows
                )));
            }
            at += levels;
            row += read;
        }
    }
    if at != out.len() {
        return Err(Problem::Column(format!(
            "{row} rows where its footer states {}",
            shard.rows
        )));
    }
    Ok(())
}

/// Whether repetition levels `rep` (whole records) are records of `per` values each.
fn rows_of(rep: &[i16], per: usize) -> bool {
    per > 0
        && rep.len().is_multiple_of(per)
        && rep
            .chunks_exact(per)
            .all(|r| r[0] == 0 && r[1..].iter().fold(true, |all, &l| all & (l != 0)))
}

/// The lengths of the records whose repetition levels are `rep`.
fn record_lengths(rep: &[i16]) -> impl Iterator<Item = usize> + '_ {
    let starts: Vec<usize> = (0..rep.len()).filter(|&i| rep[i] == 0).collect();
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain([rep.len()]).collect();
    starts.into_iter().zip(ends).map(|(s, e)| e - s)
}

/// K0503 for a file that cannot be read as Parquet.
fn unreadable(shard: &DataFile, why: &str, span: Span) -> DataError {
    invalid(
        span,
        format!("{} cannot be read as Parquet: {}", shard.name(), cut(why, 200)),
        "unreadable Parquet",
        "write the file with pyarrow (`pyarrow.parquet.write_table`) or pandas (`DataFrame.to_parquet`); snappy, gzip or no compression",
    )
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
        // Unsigned and narrow integer columns, as pyarrow reads them.
        let d = data(
            source("groups.parquet", &["u32", "u8", "i16"], "label"),
            Targets::Classes(Some(3)),
            all,
        );
        let s = load(&d, &[3], DType::Float, &dir.0, 1).unwrap();
        let (u32s, u8s, i16s) = (f32s(&r["u32"]), f32s(&r["u8"]), f32s(&r["i16"]));
        assert!(
            u32s.iter().any(|&v| v > 2f32.powi(31)),
            "uint32 values above int32's"
        );
        let want: Vec<f32> = (0..50).flat_map(|i| [u32s[i], u8s[i], i16s[i]]).collect();
        assert_eq!(floats(&s.train.inputs), want);
        // A fixed-size list column, float values as targets; the same rows from two gzip shards
        // (and an empty one), and from row groups of 7 rows in version 2 pages.
        for path in ["table.parquet", "shards", "groups.parquet"] {
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
        for path in ["table.parquet", "groups.parquet"] {
            let mut d = data(
                source(path, &["tokens"], "label"),
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
                    .collect::<Vec<_>>(),
                "{path}"
            );
        }
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
        fails(
            "nulls.parquet",
            &["a"],
            &[1],
            "a missing (null) value in row 2",
        );
        for holed in ["holes.parquet", "empty.parquet"] {
            fails(
                holed,
                &["tokens"],
                &[2],
                "or a missing value in a list, in row 2",
            );
        }
        fails(
            "names.parquet",
            &["name"],
            &[1],
            "holds values of type `Utf8`: Kiln reads integers",
        );
        fails(
            "ragged.parquet",
            &["tokens"],
            &[2],
            "rows of 2 and of 1 values",
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
