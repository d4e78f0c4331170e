//! The headers of data files, read without reading the data: IDX dimensions and type (gzipped
//! files decompressed no further than the header), `.npy` headers, an `.npz` archive's directory
//! and its members' `.npy` headers, a safetensors header, a CSV file's first rows and its row
//! count. Every reader is bounded in bytes: a header larger than [`MAX_HEADER_BYTES`] is refused
//! and a CSV file's rows are counted only within its first [`CSV_COUNT_BYTES`].
//!
//! It is the one reader of these formats: besides the checker's headers, it gives the runtime
//! where each format's values lie (`npy::Npy::offset`, `zip::Entry::locate`, `idx::read`, the
//! CSV `rows`), so that the runtime only decodes the bytes it locates and the two never parse a
//! header twice.
//!
//! The module imports nothing from the rest of the crate and does no IO of its own beyond the
//! reader it is given; the checker's `FsLoader` opens the files (regular files only) and lists a
//! directory of text files or Parquet shards, or an image folder's classes (`images`).

mod csv;
pub mod idx;
pub mod images;
pub mod npy;
pub mod parquet;
mod safetensors;
pub mod text;
pub mod zip;

use std::borrow::Cow;
use std::fmt;
use std::io::{Read, Seek};

pub use csv::{rows, split_cells, unquote, Csv, Rows};

/// The largest header Kiln reads: 16 MiB (a safetensors header, an `.npz` directory).
pub const MAX_HEADER_BYTES: u64 = 16 * 1024 * 1024;

/// How much of a CSV file is read to count its rows: 8 MiB. A larger file's row count is a
/// lower bound.
pub const CSV_COUNT_BYTES: u64 = 8 * 1024 * 1024;

/// What a file is read as, with the member names an archive is asked for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// An IDX file, plain or gzipped.
    Idx,
    /// A `.npy` array.
    Npy,
    /// An `.npz` archive; the headers of the named members are read.
    Npz(Vec<String>),
    /// A safetensors file.
    Safetensors,
    /// A CSV file.
    Csv,
    /// A flat stream of unsigned token ids of this many bits.
    Tokens(u8),
    /// UTF-8 text (a file, or a directory's files), read whole to find its vocabulary.
    Text,
    /// A Parquet file (or a directory of shards): its footer.
    Parquet,
    /// An image folder: its classes and images, listed (no image is decoded).
    Images,
}

/// The type of an array's elements.
#[derive(Clone, Debug, PartialEq)]
pub enum Elem {
    /// Booleans.
    Bool,
    /// Integers.
    Int {
        /// Whether negative values exist.
        signed: bool,
        /// The width in bits.
        bits: u8,
    },
    /// Floating-point numbers.
    Float {
        /// The width in bits.
        bits: u8,
    },
    /// Anything else (strings, complex numbers, objects), as the file names it.
    Other(String),
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Bool => write!(f, "booleans"),
            Elem::Int {
                signed: false,
                bits,
            } => write!(f, "unsigned {bits}-bit integers"),
            Elem::Int { bits, .. } => write!(f, "{bits}-bit integers"),
            Elem::Float { bits } => write!(f, "{bits}-bit floats"),
            Elem::Other(name) => write!(f, "values of type `{name}`"),
        }
    }
}

/// An array's element type and shape, as its header declares them.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// The element type.
    pub elem: Elem,
    /// The dimensions, the sample count first.
    pub shape: Vec<u64>,
}

/// A member of an archive (`.npz`) or a tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// Its name (an `.npz` member without its `.npy` suffix).
    pub name: String,
    /// Its header, when it was asked for: an `.npz` member's header is read only when named.
    pub array: Option<Result<Array, String>>,
}

/// What a file's header says.
#[derive(Clone, Debug, PartialEq)]
pub enum Header {
    /// One array (IDX, `.npy`).
    Array(Array),
    /// Named arrays (`.npz`, safetensors).
    Members(Vec<Member>),
    /// A CSV file's first rows and row count.
    Csv(Csv),
    /// A text's characters and vocabulary.
    Text(text::Text),
    /// A Parquet table's rows and columns.
    Table(parquet::Table),
    /// An image folder's classes.
    Folder(images::Classes),
}

/// What reading a data file's header found.
#[derive(Clone, Debug, PartialEq)]
pub enum Probe {
    /// The file was not read (a loader that reads no data files, as an editor's).
    Unknown,
    /// The file cannot be opened: the reason (`it does not exist`).
    Missing(String),
    /// The file is there but its header is malformed or unsupported: the reason, a clause
    /// (`it is not an IDX file: ...`).
    Malformed(String),
    /// The header.
    Read(Header),
}

/// Reads the header of a file of `size` bytes, as `format`; the error is why it is malformed.
pub fn read_header<R: Read + Seek>(
    file: &mut R,
    size: u64,
    format: &Format,
) -> Result<Header, String> {
    match format {
        Format::Idx => idx::header(file).map(Header::Array),
        Format::Npy => npy::header(file, size).map(|npy| Header::Array(npy.array)),
        Format::Npz(wanted) => zip::members(file, size, wanted).map(Header::Members),
        Format::Safetensors => safetensors::header(file, size).map(Header::Members),
        Format::Csv => csv::header(file, size).map(Header::Csv),
        Format::Tokens(bits) => text::tokens(size, *bits).map(Header::Array),
        Format::Parquet => parquet::header(file, size).map(Header::Table),
        // Folders are listed by the checker, not read.
        Format::Images => Err("it is not a folder of class folders".into()),
        Format::Text => {
            let bytes = if size <= text::TEXT_CHECK_BYTES {
                Some(read_up_to(file, size)?)
            } else {
                None
            };
            text::header(bytes.as_deref(), size).map(Header::Text)
        }
    }
}

/// `text`, or its first `keep` characters, `…` and its length when it is longer: file content
/// quoted in a message is never echoed whole.
pub fn cut(text: &str, keep: usize) -> Cow<'_, str> {
    match text.char_indices().nth(keep) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!(
            "{}… ({} characters)",
            &text[..end],
            text.chars().count()
        )),
    }
}

/// Cell-sized file content in a message: at most 40 characters, then `…` and the length.
pub fn quote(text: &str) -> Cow<'_, str> {
    cut(text, 40)
}

/// Up to `n` bytes from `r`: fewer only at the end of the stream.
fn read_up_to(r: &mut impl Read, n: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(usize::try_from(n.min(1 << 16)).unwrap_or(0));
    r.take(n)
        .read_to_end(&mut out)
        .map_err(|e| format!("it cannot be read: {e}"))?;
    Ok(out)
}

/// Exactly `n` bytes from `r`, or the error `truncated` names.
fn read_exact(
    r: &mut impl Read,
    n: u64,
    truncated: impl Fn(usize) -> String,
) -> Result<Vec<u8>, String> {
    let bytes = read_up_to(r, n)?;
    if (bytes.len() as u64) < n {
        return Err(truncated(bytes.len()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
