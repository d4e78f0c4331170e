//! `.npy` arrays: the magic, the version, the dictionary of `descr`, `fortran_order` and
//! `shape`, and where the values lie. The one `.npy` header reader of Kiln: the checker reads
//! files and `.npz` members with it, the runtime reads what follows the header.

use std::io::Read;

use super::{read_exact, read_up_to, Array, Elem, MAX_HEADER_BYTES};

/// What a `.npy` header declares, and where the values lie.
#[derive(Clone, Debug, PartialEq)]
pub struct Npy {
    /// The element type and the shape.
    pub array: Array,
    /// The dtype as the header writes it (`<f4`); `None` for a structured dtype.
    pub descr: Option<String>,
    /// The bytes of one value in the file (0 when the type is not a number).
    pub item: u64,
    /// Whether the values are big-endian.
    pub big_endian: bool,
    /// Whether the values are stored column-major (Fortran order): the shape is unchanged,
    /// only where the values lie.
    pub fortran: bool,
    /// Where the values start: the bytes of the preamble and the header.
    pub offset: u64,
}

impl Npy {
    /// The number of values, when it fits 64 bits.
    pub fn count(&self) -> Option<u64> {
        self.array
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// The bytes of the values, when they fit 64 bits.
    pub fn body_len(&self) -> Option<u64> {
        self.count()?.checked_mul(self.item)
    }

    /// The bytes of the whole array, header included, when they fit 64 bits.
    pub fn total(&self) -> Option<u64> {
        self.body_len()?.checked_add(self.offset)
    }
}

/// The header of a `.npy` array; `size` bounds what a header may declare.
pub fn header(r: &mut impl Read, size: u64) -> Result<Npy, String> {
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
    let (len, preamble) = match start[6] {
        1 => (u64::from(u16::from_le_bytes([start[8], start[9]])), 10),
        2 | 3 => {
            let more = read_exact(r, 2, truncated)?;
            let len = u32::from_le_bytes([start[8], start[9], more[0], more[1]]);
            (u64::from(len), 12)
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
    parse(&text, preamble + len)
}

/// Parses the header dictionary of an array whose values start at `offset`.
fn parse(text: &str, offset: u64) -> Result<Npy, String> {
    let descr = field(text, "descr")?;
    let descr = match descr.chars().next() {
        Some(q @ ('\'' | '"')) => {
            let body = &descr[1..];
            let end = body.find(q).ok_or("its header's `descr` is malformed")?;
            Some(body[..end].to_string())
        }
        _ => None,
    };
    let (elem, item, big_endian) = match &descr {
        Some(d) => dtype(d),
        None => (Elem::Other("a structured dtype".into()), 0, false),
    };
    let fortran = field(text, "fortran_order")?;
    let fortran = if fortran.starts_with("True") {
        true
    } else if fortran.starts_with("False") {
        false
    } else {
        return Err("its header's `fortran_order` is malformed".into());
    };
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
    Ok(Npy {
        array: Array { elem, shape },
        descr,
        item,
        big_endian,
        fortran,
        offset,
    })
}

/// The text after `'key':` in a `.npy` header dictionary.
fn field<'h>(header: &'h str, key: &str) -> Result<&'h str, String> {
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

/// The element type of a numpy dtype string (`<f4`, `|u1`), the bytes of one value (0 when it
/// is not a number) and whether they are big-endian (`>`; `=` and no mark are this machine's
/// order).
fn dtype(descr: &str) -> (Elem, u64, bool) {
    let (big, rest) = match descr.chars().next() {
        Some('<' | '|') => (false, &descr[1..]),
        Some('>') => (true, &descr[1..]),
        Some('=') => (cfg!(target_endian = "big"), &descr[1..]),
        _ => (cfg!(target_endian = "big"), descr),
    };
    let mut chars = rest.chars();
    let code = chars.next().unwrap_or(' ');
    let bytes: u8 = chars.as_str().parse().unwrap_or(0);
    let elem = match (code, bytes) {
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
        _ => return (Elem::Other(descr.to_string()), 0, big),
    };
    (elem, u64::from(bytes), big)
}
