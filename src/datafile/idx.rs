//! IDX headers: the magic (`00 00 type ndims`) and the dimensions; a gzipped file (by its
//! `1f 8b` magic) is decompressed no further than the header. The one IDX header reader of Kiln:
//! the checker reads files with [`header`], the runtime reads the values after [`read`].

use std::io::{self, Cursor, Read};

use flate2::read::MultiGzDecoder;

use super::{read_up_to, Array, Elem};

/// What an IDX header declares.
#[derive(Clone, Debug, PartialEq)]
pub struct Idx {
    /// The element type and the dimensions, the sample count first.
    pub array: Array,
    /// The first four bytes as a number (`0x00000803`: unsigned bytes in 3 dimensions).
    pub magic: u32,
    /// Where the values start: the bytes of the header.
    pub offset: u64,
}

/// Why an IDX header cannot be read.
#[derive(Debug)]
pub enum Fault {
    /// The content cannot be read (a gzipped file that cannot be decompressed).
    Io(io::Error),
    /// The content ends inside the magic, after the bytes it holds.
    NoMagic(usize),
    /// The content does not start with two zero bytes: its first four as a number.
    NotIdx(u32),
    /// The content ends inside the dimensions that `magic` announces, after `held` bytes of them.
    Dims {
        /// The first four bytes as a number.
        magic: u32,
        /// The bytes of the dimensions it holds.
        held: usize,
    },
}

/// The element type an IDX type byte declares.
fn elem(byte: u8) -> Elem {
    match byte {
        0x08 => Elem::Int {
            signed: false,
            bits: 8,
        },
        0x09 => Elem::Int {
            signed: true,
            bits: 8,
        },
        0x0b => Elem::Int {
            signed: true,
            bits: 16,
        },
        0x0c => Elem::Int {
            signed: true,
            bits: 32,
        },
        0x0d => Elem::Float { bits: 32 },
        0x0e => Elem::Float { bits: 64 },
        other => Elem::Other(format!("0x{other:02x}")),
    }
}

/// Up to `n` bytes, fewer only at the end of the content.
fn take(r: &mut impl Read, n: u64) -> Result<Vec<u8>, Fault> {
    let mut out = Vec::new();
    r.take(n).read_to_end(&mut out).map_err(Fault::Io)?;
    Ok(out)
}

/// Reads the header of IDX content (decompressed already), no further than the header.
pub fn read(r: &mut impl Read) -> Result<Idx, Fault> {
    let bytes = take(r, 4)?;
    let Ok(first) = <[u8; 4]>::try_from(bytes.as_slice()) else {
        return Err(Fault::NoMagic(bytes.len()));
    };
    let magic = u32::from_be_bytes(first);
    if first[0] != 0 || first[1] != 0 {
        return Err(Fault::NotIdx(magic));
    }
    let ndims = u64::from(first[3]);
    let dims = take(r, 4 * ndims)?;
    if (dims.len() as u64) < 4 * ndims {
        return Err(Fault::Dims {
            magic,
            held: dims.len(),
        });
    }
    let shape = dims
        .chunks_exact(4)
        .map(|d| u64::from(u32::from_be_bytes([d[0], d[1], d[2], d[3]])))
        .collect();
    Ok(Idx {
        array: Array {
            elem: elem(first[2]),
            shape,
        },
        magic,
        offset: 4 + 4 * ndims,
    })
}

/// The header of an IDX file, plain or gzipped; the error is why it is malformed.
pub(super) fn header(file: &mut impl Read) -> Result<Array, String> {
    let start = read_up_to(file, 2)?;
    let gzipped = start == [0x1f, 0x8b];
    let mut chained = Cursor::new(start).chain(file);
    let (result, held, failed) = if gzipped {
        (
            self::read(&mut MultiGzDecoder::new(chained)),
            " (decompressed)",
            "it cannot be decompressed",
        )
    } else {
        (self::read(&mut chained), "", "it cannot be read")
    };
    let truncated = |what: String, n: usize| {
        format!("it is truncated: its header needs {what}, but it holds{held} {n}")
    };
    let not_idx = |found: u32| {
        format!(
            "it is not an IDX file: it starts with 0x{found:08x}, not `00 00 <type> <dimensions>`"
        )
    };
    match result {
        Ok(idx) if idx.array.shape.is_empty() => Err(not_idx(idx.magic)),
        Ok(idx) => Ok(idx.array),
        Err(Fault::Io(e)) => Err(format!("{failed}: {e}")),
        Err(Fault::NoMagic(n)) => Err(truncated("4 bytes".into(), n)),
        Err(Fault::NotIdx(found)) => Err(not_idx(found)),
        Err(Fault::Dims { magic, held: n }) => {
            let ndims = magic & 0xff;
            Err(truncated(
                format!("{} bytes for {ndims} dimensions", 4 * ndims),
                n,
            ))
        }
    }
}
