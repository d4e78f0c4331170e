//! `.npy` arrays: the header parsed and the data checked against it before torch reads a byte.

use std::borrow::Cow;

use kiln::datafile::npy_field;
use kiln::span::Span;
use rayon::prelude::*;
use tch::{Kind, TchError, Tensor};

use super::error::{At, DataError};
use super::file::DataFile;
use super::{fmt_shape, invalid, quote};

/// An array parsed from `.npy` bytes, its data checked and converted to a kind torch reads in
/// native byte order.
#[derive(Debug)]
struct NpyArray<'a> {
    kind: Kind,
    shape: Vec<i64>,
    fortran: bool,
    data: Cow<'a, [u8]>,
}

/// How the values of a numpy dtype become torch's.
#[derive(Clone, Copy, Debug, PartialEq)]
enum NpyConv {
    /// Byte for byte (after fixing the byte order).
    Plain,
    /// Booleans, normalised to 0 and 1.
    Bool,
    /// Unsigned integers widened to a signed kind torch has.
    Unsigned,
}

/// The kind torch reads a numpy dtype as: `(kind, item size in the file, big-endian, conversion)`.
fn npy_dtype(descr: &str) -> Result<(Kind, usize, bool, NpyConv), String> {
    let mut chars = descr.chars();
    let order = chars.next().unwrap_or(' ');
    let (big, rest) = match order {
        '<' | '|' => (false, chars.as_str()),
        '>' => (true, chars.as_str()),
        '=' => (cfg!(target_endian = "big"), chars.as_str()),
        _ => (cfg!(target_endian = "big"), descr),
    };
    let mut rest_chars = rest.chars();
    let code = rest_chars.next().unwrap_or(' ');
    let size: usize = rest_chars.as_str().parse().unwrap_or(0);
    let plain = |kind| Ok((kind, size, big, NpyConv::Plain));
    match (code, size) {
        ('f', 2) => plain(Kind::Half),
        ('f', 4) => plain(Kind::Float),
        ('f', 8) => plain(Kind::Double),
        ('i', 1) => plain(Kind::Int8),
        ('i', 2) => plain(Kind::Int16),
        ('i', 4) => plain(Kind::Int),
        ('i', 8) => plain(Kind::Int64),
        ('u', 1) => plain(Kind::Uint8),
        ('u', 2) => Ok((Kind::Int, 2, big, NpyConv::Unsigned)),
        ('u', 4) | ('u', 8) => Ok((Kind::Int64, size, big, NpyConv::Unsigned)),
        ('b', 1) => Ok((Kind::Bool, 1, big, NpyConv::Bool)),
        _ => {
            let what = match code {
                'c' => "complex numbers",
                'U' | 'S' | 'a' => "strings",
                'O' => "Python objects",
                'M' | 'm' => "dates or times",
                'V' => "raw records",
                _ => "values of an unknown type",
            };
            Err(format!(
                "it holds {what} (`{}`), but only real numbers are supported",
                quote(descr)
            ))
        }
    }
}

/// What the header of a `.npy` array declares.
#[derive(Debug)]
pub(super) struct NpyHeader {
    kind: Kind,
    /// The item size in the file.
    item: usize,
    big: bool,
    conv: NpyConv,
    fortran: bool,
    shape: Vec<i64>,
    /// The number of values.
    count: usize,
    /// The bytes of the values.
    need: usize,
    /// Where the values start (the length of the preamble and the header).
    pub(super) end: usize,
    /// The dtype as the header writes it.
    descr: String,
}

impl NpyHeader {
    /// The bytes of the whole array, header included.
    pub(super) fn total(&self) -> usize {
        self.end.saturating_add(self.need)
    }
}

/// Where the header of a `.npy` array ends, from its first 12 bytes (or fewer, when the file is
/// that short).
pub(super) fn npy_header_end(bytes: &[u8]) -> Option<usize> {
    match bytes.get(6)? {
        1 => bytes
            .get(8..10)
            .map(|b| 10 + usize::from(u16::from_le_bytes([b[0], b[1]]))),
        2 | 3 => bytes
            .get(8..12)
            .map(|b| 12usize.saturating_add(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)),
        _ => None,
    }
}

/// Parses the preamble and header of `.npy` bytes (format versions 1 to 3); `bytes` need hold
/// no more than the header.
pub(super) fn npy_header(bytes: &[u8]) -> Result<NpyHeader, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if !bytes.starts_with(MAGIC) {
        return Err(if MAGIC.starts_with(bytes) {
            "it is truncated inside its magic string".into()
        } else {
            "it does not start with the .npy magic string".into()
        });
    }
    let start = match bytes.get(6) {
        Some(1) => 10,
        Some(2 | 3) => 12,
        Some(v) => return Err(format!("its format version {v} is not supported")),
        None => return Err("it is truncated inside its header".into()),
    };
    let end = npy_header_end(bytes).ok_or("it is truncated inside its header")?;
    let header = bytes
        .get(start..end)
        .ok_or("it is truncated inside its header")?;
    let header = std::str::from_utf8(header).map_err(|_| "its header is not text")?;

    let descr_text = npy_field(header, "descr")?;
    if descr_text.starts_with('[') {
        return Err("it holds a structured array; only plain numeric arrays are supported".into());
    }
    let mark = descr_text
        .chars()
        .next()
        .filter(|&c| c == '\'' || c == '"')
        .ok_or("its header's `descr` is not a string")?;
    let descr = descr_text[1..]
        .split(mark)
        .next()
        .ok_or("its header's `descr` is not a string")?;
    let (kind, item, big, conv) = npy_dtype(descr)?;

    let fortran_text = npy_field(header, "fortran_order")?;
    let fortran = if fortran_text.starts_with("True") {
        true
    } else if fortran_text.starts_with("False") {
        false
    } else {
        return Err("its header's `fortran_order` is not True or False".into());
    };

    let shape_text = npy_field(header, "shape")?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("its header's `shape` is not a tuple")?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_end_matches('L').parse::<i64>())
        .collect::<Result<Vec<i64>, _>>()
        .map_err(|_| {
            format!(
                "its header's shape ({}) is not a tuple of sizes",
                quote(inner)
            )
        })?;
    if shape.iter().any(|&d| d < 0) {
        return Err(format!(
            "its header's shape ({}) has a negative size",
            quote(inner)
        ));
    }
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or_else(|| format!("its shape ({}) is too large", quote(inner)))?;
    let need = count
        .checked_mul(item)
        .ok_or_else(|| format!("its shape ({}) is too large", quote(inner)))?;
    Ok(NpyHeader {
        kind,
        item,
        big,
        conv,
        fortran,
        shape,
        count,
        need,
        end,
        descr: descr.to_string(),
    })
}

/// Parses `.npy` bytes (format versions 1 to 3).
fn parse_npy(bytes: &[u8]) -> Result<NpyArray<'_>, String> {
    let NpyHeader {
        kind,
        item,
        big,
        conv,
        fortran,
        shape,
        count,
        need,
        end,
        descr,
    } = npy_header(bytes)?;
    let body = &bytes[end..];
    if body.len() < need {
        return Err(format!(
            "it is truncated: its header describes {} values of `{}` ({need} bytes), but only {} bytes follow it",
            fmt_shape(&shape),
            quote(&descr),
            body.len()
        ));
    }
    let body = &body[..need];
    let swap = item > 1 && big != cfg!(target_endian = "big");
    let data: Cow<'_, [u8]> = match conv {
        NpyConv::Plain if swap => {
            let mut owned = body.to_vec();
            owned
                .par_chunks_mut(item * 4096)
                .for_each(|c| c.chunks_exact_mut(item).for_each(<[u8]>::reverse));
            Cow::Owned(owned)
        }
        NpyConv::Plain => Cow::Borrowed(body),
        NpyConv::Bool => Cow::Owned(body.iter().map(|&b| u8::from(b != 0)).collect()),
        NpyConv::Unsigned => {
            let value = |c: &[u8]| -> u64 {
                let mut v = 0u64;
                let mut push = |b: &u8| v = (v << 8) | u64::from(*b);
                if big {
                    c.iter().for_each(&mut push);
                } else {
                    c.iter().rev().for_each(&mut push);
                }
                v
            };
            let mut owned = Vec::with_capacity(count * kind.elt_size_in_bytes());
            for c in body.chunks_exact(item) {
                let v = value(c);
                if kind == Kind::Int {
                    owned.extend_from_slice(&(v as i32).to_ne_bytes());
                } else {
                    let v = i64::try_from(v).map_err(|_| {
                        format!("it holds the unsigned value {v}, beyond 64-bit signed integers")
                    })?;
                    owned.extend_from_slice(&v.to_ne_bytes());
                }
            }
            Cow::Owned(owned)
        }
    };
    Ok(NpyArray {
        kind,
        shape,
        fortran,
        data,
    })
}

/// The tensor of a parsed array (C order).
fn npy_tensor(array: &NpyArray<'_>) -> Result<Tensor, TchError> {
    if !array.fortran || array.shape.len() < 2 {
        return Tensor::f_from_data_size(&array.data, &array.shape, array.kind);
    }
    // Fortran order is C order of the reversed shape, transposed.
    let reversed: Vec<i64> = array.shape.iter().rev().copied().collect();
    let axes: Vec<i64> = (0..reversed.len() as i64).rev().collect();
    Tensor::f_from_data_size(&array.data, &reversed, array.kind)?
        .f_permute(axes.as_slice())?
        .f_contiguous()
}

/// Parses `.npy` bytes into a tensor; `what` names the array in messages.
pub(super) fn npy_bytes(bytes: &[u8], what: &str, span: Span) -> Result<Tensor, DataError> {
    let array = parse_npy(bytes).map_err(|reason| {
        invalid(
            span,
            format!("{what} is not a valid .npy array: {reason}"),
            "malformed array",
            "write the array with numpy's `np.save` (or `np.savez` for archives)",
        )
    })?;
    npy_tensor(&array).at(span)
}

/// Reads a `.npy` file into a tensor.
pub(super) fn read(file: &DataFile, span: Span) -> Result<Tensor, DataError> {
    let bytes = file.read(span)?;
    npy_bytes(&bytes, &file.name(), span)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, floats, ints, Scratch};
    use super::super::{load, DType, Source, Targets};
    use super::*;
    use kiln::diagnostic::Code;
    use tch::Device;

    #[test]
    fn npy_round_trips() {
        let dir = Scratch::new();
        let x = Tensor::arange(24, (Kind::Double, Device::Cpu)).reshape([6, 4]);
        let y = Tensor::from_slice(&[0i32, 1, 2, 0, 1, 2]);
        x.write_npy(dir.path("x.npy")).unwrap();
        y.write_npy(dir.path("y.npy")).unwrap();
        let source = Source::Npy {
            inputs: "x.npy".into(),
            targets: "y.npy".into(),
        };
        let s = load(
            &data(source.clone(), Targets::Classes(Some(3)), all_train()),
            &[2, 2],
            DType::Float,
            &dir.0,
            7,
        )
        .unwrap();
        assert_eq!(s.train.inputs.size(), vec![6, 2, 2]);
        assert_eq!(s.train.inputs.kind(), Kind::Float);
        assert_eq!(
            floats(&s.train.inputs),
            (0..24).map(|v| v as f32).collect::<Vec<_>>()
        );
        assert_eq!(ints(&s.train.targets), vec![0, 1, 2, 0, 1, 2]);

        // Unknown integer targets become Int64 [N]; float ones stay values.
        let s = load(
            &data(source, Targets::Unknown, all_train()),
            &[4],
            DType::Float,
            &dir.0,
            7,
        )
        .unwrap();
        assert_eq!(s.train.targets.kind(), Kind::Int64);
        assert_eq!(s.train.targets.size(), vec![6]);
        let v = Tensor::arange(6, (Kind::Float, Device::Cpu)).reshape([6, 1]) / 2.0;
        v.write_npy(dir.path("v.npy")).unwrap();
        let s = load(
            &data(
                Source::Npy {
                    inputs: "x.npy".into(),
                    targets: "v.npy".into(),
                },
                Targets::Unknown,
                all_train(),
            ),
            &[4],
            DType::Float,
            &dir.0,
            7,
        )
        .unwrap();
        assert_eq!(s.train.targets.kind(), Kind::Float);
        assert_eq!(s.train.targets.size(), vec![6, 1]);
    }

    /// `.npy` bytes with a hand-written header.
    fn npy_raw(descr: &str, fortran: bool, shape: &str, body: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn npy_parser_handles_orders_and_types() {
        // Fortran order: [[0, 1, 2], [3, 4, 5]] stored by columns.
        let body: Vec<u8> = [0f32, 3., 1., 4., 2., 5.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let bytes = npy_raw("<f4", true, "(2, 3)", &body);
        let a = parse_npy(&bytes).unwrap();
        let t = npy_tensor(&a).unwrap();
        assert_eq!(t.size(), vec![2, 3]);
        assert_eq!(floats(&t), vec![0., 1., 2., 3., 4., 5.]);

        // Big-endian 64-bit integers.
        let body: Vec<u8> = [1i64, -2, 300]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let t = npy_tensor(&parse_npy(&npy_raw(">i8", false, "(3,)", &body)).unwrap()).unwrap();
        assert_eq!(t.kind(), Kind::Int64);
        assert_eq!(ints(&t), vec![1, -2, 300]);

        // Unsigned 16-bit integers widen; booleans become 0 and 1.
        let body: Vec<u8> = [65535u16, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = npy_tensor(&parse_npy(&npy_raw("<u2", false, "(2,)", &body)).unwrap()).unwrap();
        assert_eq!(ints(&t), vec![65535, 7]);
        let t =
            npy_tensor(&parse_npy(&npy_raw("|b1", false, "(3,)", &[0, 1, 9])).unwrap()).unwrap();
        assert_eq!(ints(&t), vec![0, 1, 1]);

        // Truncated data is refused before any copy.
        let e = parse_npy(&npy_raw("<f8", false, "(1000, 784)", &[0; 100])).unwrap_err();
        assert!(e.contains("6272000 bytes"), "{e}");
        assert!(e.contains("only 100 bytes"), "{e}");
        // Other damage.
        assert!(parse_npy(b"\x93NUM").unwrap_err().contains("magic"));
        assert!(parse_npy(b"PK\x03\x04....").unwrap_err().contains("magic"));
        let full = npy_raw("<f4", false, "(2,)", &[0; 8]);
        assert!(parse_npy(&full[..20]).unwrap_err().contains("header"));
        assert!(parse_npy(&npy_raw("<U5", false, "(2,)", &[0; 40]))
            .unwrap_err()
            .contains("strings"));
        assert!(parse_npy(&npy_raw("|O", false, "(2,)", &[0; 16]))
            .unwrap_err()
            .contains("Python objects"));
    }

    #[test]
    fn npy_failures() {
        let dir = Scratch::new();
        Tensor::arange(12, (Kind::Float, Device::Cpu))
            .reshape([3, 4])
            .write_npy(dir.path("x.npy"))
            .unwrap();
        Tensor::from_slice(&[0i64, 1, 5])
            .write_npy(dir.path("y.npy"))
            .unwrap();
        Tensor::from_slice(&[0i64, 1])
            .write_npy(dir.path("two.npy"))
            .unwrap();
        Tensor::from_slice(&[0.0f32, 1.5, 1.0])
            .write_npy(dir.path("half.npy"))
            .unwrap();
        let bytes = std::fs::read(dir.path("x.npy")).unwrap();
        dir.write("cut.npy", &bytes[..bytes.len() - 5]);
        let run = |x: &str, y: &str, targets: Targets, input: &[i64]| {
            let source = Source::Npy {
                inputs: x.into(),
                targets: y.into(),
            };
            load(
                &data(source, targets, all_train()),
                input,
                DType::Float,
                &dir.0,
                1,
            )
        };
        expect_failure(
            run("cut.npy", "y.npy", Targets::Unknown, &[4]),
            Code::DataInvalid,
            "`cut.npy` is not a valid .npy array: it is truncated",
        );
        expect_failure(
            run("x.npy", "missing.npy", Targets::Unknown, &[4]),
            Code::DataMissing,
            "`missing.npy`",
        );
        expect_failure(
            run("x.npy", "two.npy", Targets::Unknown, &[4]),
            Code::DataInvalid,
            "holds 3 samples but `two.npy` holds 2 targets",
        );
        expect_failure(
            run("x.npy", "y.npy", Targets::Classes(Some(5)), &[4]),
            Code::DataInvalid,
            "the label 5 for sample 2",
        );
        expect_failure(
            run("x.npy", "half.npy", Targets::Classes(Some(3)), &[4]),
            Code::DataInvalid,
            "holds 1.5 for sample 1, which is not a class index",
        );
        expect_failure(
            run("x.npy", "y.npy", Targets::Unknown, &[5]),
            Code::DataInvalid,
            "holds samples of 4 values [4], but the model's input [5] holds 5",
        );
        expect_failure(
            run("x.npy", "y.npy", Targets::Values(vec![2].into()), &[4]),
            Code::DataInvalid,
            "declared as [2]",
        );
        // Token ids are stored as integers.
        let source = Source::Npy {
            inputs: "half.npy".into(),
            targets: "y.npy".into(),
        };
        expect_failure(
            load(
                &data(source, Targets::Unknown, all_train()),
                &[],
                DType::Int,
                &dir.0,
                1,
            ),
            Code::DataInvalid,
            "`half.npy` holds float32 values, but the model's first layer, an `embedding`, takes integer token ids",
        );
    }
}
