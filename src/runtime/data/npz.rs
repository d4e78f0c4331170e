//! `.npz` sources: the archive's directory and where each member lies, read by the one zip
//! reader ([`kiln::datafile::zip`]); the members extracted here (stored, or deflated and inflated
//! no further than they and the array's header declare) and checked against their CRC-32.

use std::borrow::Cow;
use std::io::{Cursor, Read};

use kiln::datafile::npy;
use kiln::datafile::zip::{self, Entry};
use kiln::span::Span;
use tch::Tensor;

use super::error::DataError;
use super::file::{missing_key, DataFile};
use super::npy::npy_bytes;
use super::{invalid, quote, Raw};

/// A reader that keeps the bytes read through it.
struct Kept<R> {
    inner: R,
    bytes: Vec<u8>,
}

impl<R: Read> Read for Kept<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// Inflates a deflated member holding a `.npy` array: its header first, then no more than the
/// member declares and its header needs (one byte more is read, to refuse more data than
/// declared).
fn inflate(data: &[u8], entry: &Entry, size: usize) -> Result<Vec<u8>, String> {
    let name = quote(&entry.name);
    let corrupt = || format!("its member `{name}` is corrupt or truncated");
    // The `.npy` preamble and the header it announces, inflated no further than declared.
    let mut kept = Kept {
        inner: flate2::read::DeflateDecoder::new(data),
        bytes: Vec::new(),
    };
    let header = npy::header(&mut (&mut kept).take(size as u64), size as u64)
        .map_err(|reason| format!("its member `{name}` is not a valid .npy array: {reason}"))?;
    let Kept {
        inner: mut decoder,
        bytes: mut out,
    } = kept;
    let total = header.total().unwrap_or(u64::MAX);
    if size as u64 > total {
        return Err(format!(
            "its member `{name}` declares {size} bytes, but the array its header describes needs {total}; it was decompressed no further"
        ));
    }
    // Deflate expands a byte to at most 1032.
    out.reserve(
        size.min(data.len().saturating_mul(1032))
            .saturating_sub(out.len()),
    );
    let want = size.saturating_add(1).saturating_sub(out.len()) as u64;
    (&mut decoder)
        .take(want)
        .read_to_end(&mut out)
        .map_err(|_| corrupt())?;
    if out.len() != size {
        return Err(if out.len() > size {
            format!("its member `{name}` holds more than the {size} bytes it declares; it was decompressed no further")
        } else {
            corrupt()
        });
    }
    Ok(out)
}

/// The uncompressed bytes of a member, located by the zip reader and checked against its CRC-32.
fn extract<'a>(b: &'a [u8], entry: &Entry) -> Result<Cow<'a, [u8]>, String> {
    let name = quote(&entry.name);
    let corrupt = || format!("its member `{name}` is corrupt or truncated");
    let body = entry.locate(&mut Cursor::new(b), b.len() as u64)?;
    // `locate` keeps the member within the archive.
    let data = usize::try_from(body.start)
        .ok()
        .zip(usize::try_from(body.len).ok())
        .and_then(|(start, len)| b.get(start..start.checked_add(len)?))
        .ok_or_else(corrupt)?;
    let out: Cow<'a, [u8]> = if body.deflated {
        let size = usize::try_from(entry.size).map_err(|_| corrupt())?;
        Cow::Owned(inflate(data, entry, size)?)
    } else {
        Cow::Borrowed(data)
    };
    let mut crc = flate2::Crc::new();
    crc.update(&out);
    if crc.sum() != entry.crc {
        return Err(format!(
            "its member `{name}` fails its checksum (the archive is damaged)"
        ));
    }
    Ok(out)
}

/// Reads the arrays `inputs` and `targets` of an `.npz` archive.
pub(super) fn read(
    file: &DataFile,
    inputs: &str,
    targets: &str,
    span: Span,
) -> Result<Raw, DataError> {
    let bytes = file.read(span)?;
    let entries =
        zip::directory(&mut Cursor::new(&bytes[..]), bytes.len() as u64).map_err(|reason| {
            invalid(
                span,
                format!("{} is not a valid .npz archive: {reason}", file.name()),
                "malformed archive",
                "write the archive with numpy's `np.savez` or `np.savez_compressed`",
            )
        })?;
    let keys: Vec<String> = entries.iter().map(|e| e.key().to_string()).collect();
    let array = |key: &str| -> Result<Tensor, DataError> {
        let entry = entries
            .iter()
            .find(|e| e.key() == key)
            .ok_or_else(|| missing_key(file, "array", key, &keys, span))?;
        let data = extract(&bytes, entry).map_err(|reason| {
            invalid(
                span,
                format!("{} is not a valid .npz archive: {reason}", file.name()),
                "malformed archive",
                "the file is probably truncated or damaged; write or copy it again",
            )
        })?;
        npy_bytes(
            &data,
            &format!("the array `{key}` in {}", file.name()),
            span,
        )
    };
    let x = array(inputs)?;
    let y = array(targets)?;
    Ok(Raw::new(
        x,
        y,
        format!("the array `{inputs}` in {}", file.name()),
        format!("the array `{targets}` in {}", file.name()),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, floats, ints, Scratch};
    use super::super::{load, DType, Source, Targets};
    use super::*;
    use kiln::diagnostic::Code;
    use tch::{Device, Kind};

    /// `np.savez_compressed(f, inputs=np.arange(12, dtype=np.float32).reshape(3, 4),
    /// targets=np.array([2, 0, 1]))`, written by numpy 2.4 (deflated, zip64 local headers).
    const NUMPY_NPZ: &str = "504b03042d0000000800000021002d6f2226ffffffffffffffff0a001400696e707574732e6e707901001000b00000000000000066000000000000009bec17ea1b10c9c850c650ad9e925a9c5ca46ea5a06e9366a2aea3a09e965f54529498179f5f94920a12774bcc294e058a17672416a402f91ac63a0a269a3a0ab50a64032e063068b007120e4004c40d40bc00880f00f1032066706460100062052036700400504b03042d0000000800000021008a1ace13ffffffffffffffff0b001400746172676574732e6e70790100100098000000000000004a000000000000009bec17ea1b10c9c850c650ad9e925a9c5ca46ea5a06e9369a1aea3a09e965f54529498179f5f94920a12774bcc294e058a17672416a402f91ac63a9a3a0ab50a14002e260654c008a501504b01022d032d0000000800000021002d6f222666000000b00000000a0000000000000000000000800100000000696e707574732e6e7079504b01022d032d0000000800000021008a1ace134a000000980000000b00000000000000000000008001a2000000746172676574732e6e7079504b0506000000000200020071000000290100000000";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn npz_round_trips() {
        let dir = Scratch::new();
        // Written by tch (stored members).
        let x = Tensor::arange(20, (Kind::Float, Device::Cpu)).reshape([5, 4]);
        let y = Tensor::from_slice(&[1i64, 0, 1, 1, 0]);
        Tensor::write_npz(&[("features", &x), ("labels", &y)], dir.path("d.npz")).unwrap();
        let source = Source::Npz {
            path: "d.npz".into(),
            inputs: "features".into(),
            targets: "labels".into(),
        };
        let s = load(
            &data(source, Targets::Classes(Some(2)), all_train()),
            &[4],
            DType::Float,
            &dir.0,
            3,
        )
        .unwrap();
        assert_eq!(floats(&s.train.inputs), floats(&x));
        assert_eq!(ints(&s.train.targets), vec![1, 0, 1, 1, 0]);

        // Written by numpy (deflated, zip64 extras).
        dir.write("np.npz", &unhex(NUMPY_NPZ));
        let source = Source::Npz {
            path: "np.npz".into(),
            inputs: "inputs".into(),
            targets: "targets".into(),
        };
        let s = load(
            &data(source, Targets::Classes(Some(3)), all_train()),
            &[2, 2],
            DType::Float,
            &dir.0,
            3,
        )
        .unwrap();
        assert_eq!(s.train.inputs.size(), vec![3, 2, 2]);
        assert_eq!(
            floats(&s.train.inputs),
            (0..12).map(|v| v as f32).collect::<Vec<_>>()
        );
        assert_eq!(ints(&s.train.targets), vec![2, 0, 1]);
    }

    /// A zip archive of one deflated member `name` holding `content`, declaring `declared` bytes
    /// uncompressed.
    fn zip_one(name: &str, content: &[u8], declared: u32) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(content).unwrap();
        let packed = e.finish().unwrap();
        let mut crc = flate2::Crc::new();
        crc.update(content);
        let fields = |out: &mut Vec<u8>| {
            out.extend_from_slice(&20u16.to_le_bytes()); // version needed
            out.extend_from_slice(&0u16.to_le_bytes()); // flags
            out.extend_from_slice(&8u16.to_le_bytes()); // deflated
            out.extend_from_slice(&[0; 4]); // time and date
            out.extend_from_slice(&crc.sum().to_le_bytes());
            out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
            out.extend_from_slice(&declared.to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes()); // extra
        };
        let mut b = 0x0403_4b50u32.to_le_bytes().to_vec();
        fields(&mut b);
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&packed);
        let central = b.len();
        b.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        b.extend_from_slice(&20u16.to_le_bytes()); // version made by
        fields(&mut b);
        b.extend_from_slice(&[0; 6]); // comment, disk, internal attributes
        b.extend_from_slice(&[0; 4]); // external attributes
        b.extend_from_slice(&0u32.to_le_bytes()); // local header offset
        b.extend_from_slice(name.as_bytes());
        let size = b.len() - central;
        b.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&(size as u32).to_le_bytes());
        b.extend_from_slice(&(central as u32).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b
    }

    #[test]
    fn npz_members_are_inflated_no_further_than_declared() {
        let dir = Scratch::new();
        Tensor::arange(12, (Kind::Float, Device::Cpu))
            .reshape([3, 4])
            .write_npy(dir.path("x.npy"))
            .unwrap();
        let array = std::fs::read(dir.path("x.npy")).unwrap();
        let run = |name: &str| {
            let source = Source::Npz {
                path: name.into(),
                inputs: "inputs".into(),
                targets: "inputs".into(),
            };
            load(
                &data(source, Targets::Unknown, all_train()),
                &[4],
                DType::Float,
                &dir.0,
                1,
            )
        };
        // The archive writer is right: an honest member loads.
        let n = array.len() as u32;
        dir.write("ok.npz", &zip_one("inputs.npy", &array, n));
        assert_eq!(run("ok.npz").unwrap().train.inputs.size(), vec![3, 4]);
        // A member declaring far more than its array needs is not inflated.
        let padded = [array.as_slice(), &vec![0; 1 << 20]].concat();
        dir.write(
            "big.npz",
            &zip_one("inputs.npy", &padded, padded.len() as u32),
        );
        expect_failure(
            run("big.npz"),
            Code::DataInvalid,
            &format!(
                "its member `inputs.npy` declares {} bytes, but the array its header describes needs {n}; it was decompressed no further",
                padded.len()
            ),
        );
        // A member holding more than it declares stops one byte beyond.
        dir.write("more.npz", &zip_one("inputs.npy", &padded, n));
        expect_failure(
            run("more.npz"),
            Code::DataInvalid,
            &format!("holds more than the {n} bytes it declares"),
        );
    }

    #[test]
    fn npz_failures() {
        let dir = Scratch::new();
        let run = |file: &str, inputs: &str| {
            let source = Source::Npz {
                path: file.into(),
                inputs: inputs.into(),
                targets: "targets".into(),
            };
            load(
                &data(source, Targets::Unknown, all_train()),
                &[4],
                DType::Float,
                &dir.0,
                1,
            )
        };
        let npz = unhex(NUMPY_NPZ);
        dir.write("np.npz", &npz);
        let f = expect_failure(
            run("np.npz", "x"),
            Code::DataInvalid,
            "`np.npz` has no array `x`; its arrays: `inputs`, `targets`",
        );
        assert_eq!(f.primary.text, "no array `x`");
        dir.write("cut.npz", &npz[..npz.len() - 30]);
        expect_failure(
            run("cut.npz", "inputs"),
            Code::DataInvalid,
            "no zip directory",
        );
        // A flipped byte in the compressed data.
        let mut bad = npz.clone();
        bad[80] ^= 0x55;
        dir.write("bad.npz", &bad);
        expect_failure(run("bad.npz", "inputs"), Code::DataInvalid, "`inputs.npy`");
        dir.write(
            "text.npz",
            b"not a zip at all, just some text that is long enough",
        );
        expect_failure(
            run("text.npz", "inputs"),
            Code::DataInvalid,
            "not a valid .npz",
        );
        expect_failure(
            run("none.npz", "inputs"),
            Code::DataMissing,
            "does not exist",
        );
    }
}
