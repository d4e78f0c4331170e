//! IDX headers: the magic (`00 00 type ndims`) and the dimensions; a gzipped file (by its
//! `1f 8b` magic) is decompressed no further than the header.

use std::io::{Cursor, Read};

use flate2::read::MultiGzDecoder;

use super::{read_exact, read_up_to, Array, Elem};

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

/// The header of an IDX file, plain or gzipped.
pub(super) fn header(file: &mut impl Read) -> Result<Array, String> {
    let start = read_up_to(file, 2)?;
    let gzipped = start == [0x1f, 0x8b];
    let mut chained = Cursor::new(start).chain(file);
    if gzipped {
        parse(&mut MultiGzDecoder::new(chained), " (decompressed)")
    } else {
        parse(&mut chained, "")
    }
}

fn parse(r: &mut impl Read, held: &str) -> Result<Array, String> {
    let truncated = |what: String| {
        move |n: usize| format!("it is truncated: its header needs {what}, but it holds{held} {n}")
    };
    let magic = read_exact(r, 4, truncated("4 bytes".into()))
        .map_err(|e| e.replace("it cannot be read", "it cannot be decompressed"))?;
    let found = u32::from_be_bytes([magic[0], magic[1], magic[2], magic[3]]);
    if magic[0] != 0 || magic[1] != 0 || magic[3] == 0 {
        return Err(format!(
            "it is not an IDX file: it starts with 0x{found:08x}, not `00 00 <type> <dimensions>`"
        ));
    }
    let ndims = u64::from(magic[3]);
    let dims = read_exact(
        r,
        4 * ndims,
        truncated(format!("{} bytes for {ndims} dimensions", 4 * ndims)),
    )?;
    let shape = dims
        .chunks_exact(4)
        .map(|d| u64::from(u32::from_be_bytes([d[0], d[1], d[2], d[3]])))
        .collect();
    Ok(Array {
        elem: elem(magic[2]),
        shape,
    })
}
