//! `.npy` arrays: the header read by [`kiln::datafile::npy`], then the values it declares checked
//! against the bytes that follow it before torch reads a byte, and converted to a kind torch has.

use std::borrow::Cow;

use kiln::datafile::npy::{self, Npy};
use kiln::datafile::Elem;
use kiln::span::Span;
use rayon::prelude::*;
use tch::{Kind, TchError, Tensor};

use super::error::{At, DataError};
use super::file::DataFile;
use super::{fmt_shape, invalid, quote};

/// Dimensions as torch writes them; one beyond `i64` (refused before a tensor is made) shows as
/// `i64::MAX`.
fn signed(shape: &[u64]) -> Vec<i64> {
    shape
        .iter()
        .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
        .collect()
}

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

/// The kind torch reads an array's values as, and how they become it.
fn npy_kind(header: &Npy) -> Result<(Kind, NpyConv), String> {
    let plain = |kind| Ok((kind, NpyConv::Plain));
    match &header.array.elem {
        Elem::Float { bits: 16 } => plain(Kind::Half),
        Elem::Float { bits: 32 } => plain(Kind::Float),
        Elem::Float { .. } => plain(Kind::Double),
        Elem::Int {
            signed: true,
            bits: 8,
        } => plain(Kind::Int8),
        Elem::Int {
            signed: true,
            bits: 16,
        } => plain(Kind::Int16),
        Elem::Int {
            signed: true,
            bits: 32,
        } => plain(Kind::Int),
        Elem::Int { signed: true, .. } => plain(Kind::Int64),
        Elem::Int {
            signed: false,
            bits: 8,
        } => plain(Kind::Uint8),
        Elem::Int {
            signed: false,
            bits: 16,
        } => Ok((Kind::Int, NpyConv::Unsigned)),
        Elem::Int { signed: false, .. } => Ok((Kind::Int64, NpyConv::Unsigned)),
        Elem::Bool => Ok((Kind::Bool, NpyConv::Bool)),
        Elem::Other(_) => {
            let Some(descr) = &header.descr else {
                return Err(
                    "it holds a structured array; only plain numeric arrays are supported".into(),
                );
            };
            let code = descr
                .trim_start_matches(['<', '>', '|', '='])
                .chars()
                .next();
            let what = match code {
                Some('c') => "complex numbers",
                Some('U' | 'S' | 'a') => "strings",
                Some('O') => "Python objects",
                Some('M' | 'm') => "dates or times",
                Some('V') => "raw records",
                _ => "values of an unknown type",
            };
            Err(format!(
                "it holds {what} (`{}`), but only real numbers are supported",
                quote(descr)
            ))
        }
    }
}

/// Parses `.npy` bytes (format versions 1 to 3): the header by the one `.npy` reader
/// ([`kiln::datafile::npy`]), then the values it declares.
fn parse_npy(bytes: &[u8]) -> Result<NpyArray<'_>, String> {
    let header = npy::header(&mut { bytes }, bytes.len() as u64)?;
    let (kind, conv) = npy_kind(&header)?;
    let too_large = || {
        format!(
            "its shape {} is too large",
            fmt_shape(&signed(&header.array.shape))
        )
    };
    let shape: Vec<i64> = header
        .array
        .shape
        .iter()
        .map(|&d| i64::try_from(d).map_err(|_| too_large()))
        .collect::<Result<_, _>>()?;
    let count = header
        .count()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(too_large)?;
    let need = header
        .body_len()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(too_large)?;
    let item = header.item as usize;
    let big = header.big_endian;
    // The header was read from these bytes: it ends within them.
    let body = &bytes[header.offset as usize..];
    if body.len() < need {
        return Err(format!(
            "it is truncated: its header describes {} values of `{}` ({need} bytes), but only {} bytes follow it",
            fmt_shape(&shape),
            quote(header.descr.as_deref().unwrap_or_default()),
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
        fortran: header.fortran,
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
