//! `.npy` headers: the magic, the version, and the dictionary of `descr`, `fortran_order` and
//! `shape`.

use std::io::Read;

use super::{read_exact, read_up_to, Array, Elem, MAX_HEADER_BYTES};

/// The header of a `.npy` array; `size` bounds what a header may declare.
pub(super) fn header(r: &mut impl Read, size: u64) -> Result<Array, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    let start = read_up_to(r, 10)?;
    if !start.starts_with(MAGIC) {
        return Err(if MAGIC.starts_with(&start) {
            "it is truncated inside its magic string".into()
        } else {
            "it does not start with the .npy magic string".into()
        });
    }
    let truncated = |n: usize| format!("it is truncated inside its header ({n} bytes)");
    if start.len() < 10 {
        return Err(truncated(start.len()));
    }
    let len = match start[6] {
        1 => u64::from(u16::from_le_bytes([start[8], start[9]])),
        2 | 3 => {
            let more = read_exact(r, 2, truncated)?;
            u64::from(u32::from_le_bytes([start[8], start[9], more[0], more[1]]))
        }
        v => return Err(format!("it has .npy format version {v}, not 1, 2 or 3")),
    };
    if len > MAX_HEADER_BYTES.min(size) {
        return Err(format!(
            "its header declares {len} bytes, more than the file holds or Kiln reads"
        ));
    }
    let text = read_exact(r, len, truncated)?;
    let text = String::from_utf8_lossy(&text);
    parse(&text)
}

/// Parses the header dictionary.
pub(super) fn parse(text: &str) -> Result<Array, String> {
    let descr = field(text, "descr")?;
    let elem = match descr.chars().next() {
        Some(q @ ('\'' | '"')) => {
            let body = &descr[1..];
            let end = body.find(q).ok_or("its header's `descr` is malformed")?;
            dtype(&body[..end])
        }
        _ => Elem::Other("a structured dtype".into()),
    };
    // Fortran order changes where values lie, not the shape: the runtime reads both.
    let fortran = field(text, "fortran_order")?;
    if !fortran.starts_with("True") && !fortran.starts_with("False") {
        return Err("its header's `fortran_order` is malformed".into());
    }
    let shape = field(text, "shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("its header's `shape` is malformed")?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_end_matches('L').parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| "its header's `shape` is malformed".to_string())?;
    Ok(Array { elem, shape })
}

/// The text after `'key':` in a `.npy` header dictionary (the runtime's reader uses it too).
pub fn field<'h>(header: &'h str, key: &str) -> Result<&'h str, String> {
    let at = [format!("'{key}'"), format!("\"{key}\"")]
        .iter()
        .find_map(|k| header.find(k.as_str()).map(|i| i + k.len()))
        .ok_or_else(|| format!("its header has no `{key}`"))?;
    header[at..]
        .trim_start()
        .strip_prefix(':')
        .map(str::trim_start)
        .ok_or_else(|| format!("its header's `{key}` is malformed"))
}

/// The element type of a numpy dtype string (`<f4`, `|u1`).
fn dtype(descr: &str) -> Elem {
    let rest = descr.trim_start_matches(['<', '>', '|', '=']);
    let mut chars = rest.chars();
    let code = chars.next().unwrap_or(' ');
    let bytes: u8 = chars.as_str().parse().unwrap_or(0);
    match (code, bytes) {
        ('f', 2 | 4 | 8) => Elem::Float { bits: bytes * 8 },
        ('i', 1 | 2 | 4 | 8) => Elem::Int {
            signed: true,
            bits: bytes * 8,
        },
        ('u', 1 | 2 | 4 | 8) => Elem::Int {
            signed: false,
            bits: bytes * 8,
        },
        ('b', 1) => Elem::Bool,
        _ => Elem::Other(descr.to_string()),
    }
}
