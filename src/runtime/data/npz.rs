//! `.npz` sources: a zip reader (stored and deflated members, zip64) and the `.npy` arrays inside;
//! a deflated member is inflated no further than it and the array's header declare.

use std::borrow::Cow;
use std::io::Read;

use kiln::span::Span;
use tch::Tensor;

use super::error::DataError;
use super::file::{missing_key, DataFile};
use super::npy::{npy_bytes, npy_header, npy_header_end};
use super::{invalid, quote, Raw};

/// One member of a zip archive, from its central directory.
#[derive(Debug)]
struct ZipEntry {
    name: String,
    flags: u16,
    method: u16,
    crc: u32,
    compressed: u64,
    size: u64,
    offset: u64,
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at.checked_add(2)?)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

/// `u64` to `usize`, as an offset into the archive.
fn offset(v: u64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// The members of a zip archive (zip64 included), from its central directory.
fn zip_entries(b: &[u8]) -> Result<Vec<ZipEntry>, String> {
    const EOCD: u32 = 0x0605_4b50;
    const EOCD64: u32 = 0x0606_4b50;
    const LOCATOR64: u32 = 0x0706_4b50;
    const CENTRAL: u32 = 0x0201_4b50;
    let corrupt = || "its zip directory is corrupt".to_string();
    let last = b.len().saturating_sub(22);
    let first = last.saturating_sub(0xFFFF);
    let eocd = (first..=last)
        .rev()
        .find(|&i| le32(b, i) == Some(EOCD))
        .ok_or("it has no zip directory (it is truncated, or not a zip archive)")?;
    let mut entries = u64::from(le16(b, eocd + 10).ok_or_else(corrupt)?);
    let mut cd_size = u64::from(le32(b, eocd + 12).ok_or_else(corrupt)?);
    let mut cd_offset = u64::from(le32(b, eocd + 16).ok_or_else(corrupt)?);
    if entries == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
        let locator = eocd.checked_sub(20).ok_or_else(corrupt)?;
        if le32(b, locator) != Some(LOCATOR64) {
            return Err(corrupt());
        }
        let at = le64(b, locator + 8).and_then(offset).ok_or_else(corrupt)?;
        if le32(b, at) != Some(EOCD64) {
            return Err(corrupt());
        }
        entries = le64(b, at + 32).ok_or_else(corrupt)?;
        cd_size = le64(b, at + 40).ok_or_else(corrupt)?;
        cd_offset = le64(b, at + 48).ok_or_else(corrupt)?;
    }
    let start = offset(cd_offset).ok_or_else(corrupt)?;
    let end = offset(cd_size)
        .and_then(|s| start.checked_add(s))
        .filter(|&e| e <= b.len())
        .ok_or_else(corrupt)?;
    let mut out = Vec::with_capacity(entries.min(1024) as usize);
    let mut p = start;
    for _ in 0..entries {
        if p >= end || le32(b, p) != Some(CENTRAL) {
            return Err(corrupt());
        }
        let field16 = |at: usize| le16(b, p + at).ok_or_else(corrupt);
        let field32 = |at: usize| le32(b, p + at).ok_or_else(corrupt);
        let (flags, method) = (field16(8)?, field16(10)?);
        let crc = field32(16)?;
        let mut compressed = u64::from(field32(20)?);
        let mut size = u64::from(field32(24)?);
        let name_len = usize::from(field16(28)?);
        let extra_len = usize::from(field16(30)?);
        let comment_len = usize::from(field16(32)?);
        let mut local = u64::from(field32(42)?);
        let name_at = p + 46;
        let name = b.get(name_at..name_at + name_len).ok_or_else(corrupt)?;
        let name = String::from_utf8_lossy(name).into_owned();
        let extra = b
            .get(name_at + name_len..name_at + name_len + extra_len)
            .ok_or_else(corrupt)?;
        // The zip64 extra field holds, in order, the sizes and offset that do not fit 32 bits.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = le16(extra, e).ok_or_else(corrupt)?;
            let len = usize::from(le16(extra, e + 2).ok_or_else(corrupt)?);
            if id == 0x0001 {
                let mut q = e + 4;
                let mut wide = |v: &mut u64, full: u64| -> Result<(), String> {
                    if *v == full {
                        *v = le64(extra, q).ok_or_else(corrupt)?;
                        q += 8;
                    }
                    Ok(())
                };
                wide(&mut size, 0xFFFF_FFFF)?;
                wide(&mut compressed, 0xFFFF_FFFF)?;
                wide(&mut local, 0xFFFF_FFFF)?;
            }
            e += 4 + len;
        }
        out.push(ZipEntry {
            name,
            flags,
            method,
            crc,
            compressed,
            size,
            offset: local,
        });
        p = name_at + name_len + extra_len + comment_len;
    }
    Ok(out)
}

/// Inflates a deflated member holding a `.npy` array: its header first, then no more than the
/// member declares and its header needs (one byte more is read, to refuse more data than
/// declared).
fn inflate(data: &[u8], entry: &ZipEntry, size: usize) -> Result<Vec<u8>, String> {
    let name = quote(&entry.name);
    let corrupt = || format!("its member `{name}` is corrupt or truncated");
    let mut decoder = flate2::read::DeflateDecoder::new(data);
    let mut out = Vec::new();
    let mut more = |out: &mut Vec<u8>, upto: usize| -> Result<(), String> {
        let want = upto.saturating_sub(out.len()) as u64;
        (&mut decoder)
            .take(want)
            .read_to_end(out)
            .map(drop)
            .map_err(|_| corrupt())
    };
    // The `.npy` preamble, then the header it announces.
    more(&mut out, 12.min(size))?;
    let end = npy_header_end(&out)
        .filter(|&end| end <= size)
        .unwrap_or(out.len());
    more(&mut out, end)?;
    let header = npy_header(&out)
        .map_err(|reason| format!("its member `{name}` is not a valid .npy array: {reason}"))?;
    if size > header.total() {
        return Err(format!(
            "its member `{name}` declares {size} bytes, but the array its header describes needs {}; it was decompressed no further",
            header.total()
        ));
    }
    // Deflate expands a byte to at most 1032.
    out.reserve(
        size.min(data.len().saturating_mul(1032))
            .saturating_sub(out.len()),
    );
    more(&mut out, size.saturating_add(1))?;
    if out.len() != size {
        return Err(if out.len() > size {
            format!("its member `{name}` holds more than the {size} bytes it declares; it was decompressed no further")
        } else {
            corrupt()
        });
    }
    Ok(out)
}

/// The uncompressed bytes of a member, checked against its CRC-32.
fn zip_extract<'a>(b: &'a [u8], entry: &ZipEntry) -> Result<Cow<'a, [u8]>, String> {
    const LOCAL: u32 = 0x0403_4b50;
    let name = quote(&entry.name);
    let corrupt = || format!("its member `{name}` is corrupt or truncated");
    if entry.flags & 1 != 0 {
        return Err(format!("its member `{name}` is encrypted"));
    }
    let at = offset(entry.offset).ok_or_else(corrupt)?;
    if le32(b, at) != Some(LOCAL) {
        return Err(corrupt());
    }
    let name_len = usize::from(le16(b, at + 26).ok_or_else(corrupt)?);
    let extra_len = usize::from(le16(b, at + 28).ok_or_else(corrupt)?);
    let start = at + 30 + name_len + extra_len;
    let data = offset(entry.compressed)
        .and_then(|len| b.get(start..start.checked_add(len)?))
        .ok_or_else(corrupt)?;
    let size = offset(entry.size).ok_or_else(corrupt)?;
    let out: Cow<'a, [u8]> = match entry.method {
        0 if data.len() == size => Cow::Borrowed(data),
        0 => return Err(corrupt()),
        8 => Cow::Owned(inflate(data, entry, size)?),
        m => {
            return Err(format!(
                "its member `{name}` uses zip compression method {m}; only stored and deflated members (as `np.savez` and `np.savez_compressed` write) are supported"
            ))
        }
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
    let entries = zip_entries(&bytes).map_err(|reason| {
        invalid(
            span,
            format!("{} is not a valid .npz archive: {reason}", file.name()),
            "malformed archive",
            "write the archive with numpy's `np.savez` or `np.savez_compressed`",
        )
    })?;
    let key_of = |e: &ZipEntry| e.name.strip_suffix(".npy").unwrap_or(&e.name).to_string();
    let keys: Vec<String> = entries.iter().map(key_of).collect();
    let array = |key: &str| -> Result<Tensor, DataError> {
        let entry = entries
            .iter()
            .find(|e| key_of(e) == key)
            .ok_or_else(|| missing_key(file, "array", key, &keys, span))?;
        let data = zip_extract(&bytes, entry).map_err(|reason| {
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
