//! Parquet files: the footer (its schema and row count) read without the data. The file ends
//! with `[metadata][u32 length][PAR1]`; the metadata, decoded by the `parquet` crate, gives the
//! row count and the schema, converted to Arrow's as the runtime reads the columns (pyarrow
//! stores the Arrow schema in the metadata, so fixed-size lists come back as such).

use std::io::{Read, Seek, SeekFrom};

use arrow_schema::DataType;

use super::{read_exact, Elem, MAX_HEADER_BYTES};

/// A table's row count and columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Rows, over every shard.
    pub rows: u64,
    /// The top-level columns, in order.
    pub columns: Vec<Column>,
}

/// A top-level column.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// The type of its values (a list's items).
    pub elem: Elem,
    /// `None` for one value per row; `Some(Some(n))` for a fixed-size list of `n` values;
    /// `Some(None)` for a list whose length may vary from row to row.
    pub list: Option<Option<u64>>,
}

impl Column {
    /// The column's type in words: `float32`, `a list of 8 int64`.
    pub fn describe(&self) -> String {
        match self.list {
            None => self.elem.to_string(),
            Some(Some(n)) => format!("lists of {n} {}", self.elem),
            Some(None) => format!("lists of {}", self.elem),
        }
    }
}

/// The element type of an Arrow type that holds numbers.
fn elem(t: &DataType) -> Elem {
    match t {
        DataType::Boolean => Elem::Bool,
        DataType::Int8 => Elem::Int {
            signed: true,
            bits: 8,
        },
        DataType::Int16 => Elem::Int {
            signed: true,
            bits: 16,
        },
        DataType::Int32 => Elem::Int {
            signed: true,
            bits: 32,
        },
        DataType::Int64 => Elem::Int {
            signed: true,
            bits: 64,
        },
        DataType::UInt8 => Elem::Int {
            signed: false,
            bits: 8,
        },
        DataType::UInt16 => Elem::Int {
            signed: false,
            bits: 16,
        },
        DataType::UInt32 => Elem::Int {
            signed: false,
            bits: 32,
        },
        DataType::UInt64 => Elem::Int {
            signed: false,
            bits: 64,
        },
        DataType::Float16 => Elem::Float { bits: 16 },
        DataType::Float32 => Elem::Float { bits: 32 },
        DataType::Float64 => Elem::Float { bits: 64 },
        other => Elem::Other(other.to_string()),
    }
}

/// A column of Arrow type `t`.
pub fn column(name: &str, t: &DataType) -> Column {
    let (elem, list) = match t {
        DataType::FixedSizeList(item, n) => (elem(item.data_type()), Some(Some(*n as u64))),
        DataType::List(item) | DataType::LargeList(item) => (elem(item.data_type()), Some(None)),
        other => (elem(other), None),
    };
    Column {
        name: name.to_string(),
        elem,
        list,
    }
}

/// The footer of a Parquet file of `size` bytes.
pub fn header<R: Read + Seek>(file: &mut R, size: u64) -> Result<Table, String> {
    let not = |why: &str| format!("it is not a Parquet file: {why}");
    if size < 12 {
        return Err(not(&format!("it holds {size} bytes")));
    }
    file.seek(SeekFrom::Start(size - 8))
        .map_err(|e| format!("it cannot be read: {e}"))?;
    let tail = read_exact(file, 8, |_| not("it ends early"))?;
    if &tail[4..] != b"PAR1" {
        return Err(not("it does not end with `PAR1`"));
    }
    let length = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if length > MAX_HEADER_BYTES || length + 12 > size {
        return Err(not(&format!("its footer claims {length} bytes")));
    }
    file.seek(SeekFrom::Start(size - 8 - length))
        .map_err(|e| format!("it cannot be read: {e}"))?;
    let bytes = read_exact(file, length, |_| not("its footer ends early"))?;
    let meta = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&bytes)
        .map_err(|e| format!("its footer cannot be decoded: {e}"))?;
    let fm = meta.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(fm.schema_descr(), fm.key_value_metadata())
            .map_err(|e| format!("its schema cannot be read: {e}"))?;
    Ok(Table {
        rows: u64::try_from(fm.num_rows()).unwrap_or(0),
        columns: schema
            .fields()
            .iter()
            .map(|f| column(f.name(), f.data_type()))
            .collect(),
    })
}
