//! Zip archives (`.npz`): the central directory (zip64 included), and where each member's bytes
//! lie (its local header); for each member the checker asks for, the first bytes of its data,
//! inflated no further than the `.npy` header. The one zip reader of Kiln: the runtime extracts
//! the members it locates.

use std::io::{Read, Seek, SeekFrom};

use flate2::read::DeflateDecoder;

use super::npy::{self, Npy};
use super::{quote, read_exact, Member, MAX_HEADER_BYTES};

const EOCD: u32 = 0x0605_4b50;
const EOCD64: u32 = 0x0606_4b50;
const LOCATOR64: u32 = 0x0706_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

fn le16(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at.checked_add(2)?)
        .map(|s| u64::from(u16::from_le_bytes([s[0], s[1]])))
}

fn le32(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at.checked_add(4)?)
        .map(|s| u64::from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])))
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

/// One member of a zip archive, from its central directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Its name in the archive (`inputs.npy`).
    pub name: String,
    /// Its general-purpose flags (bit 0: encrypted).
    flags: u64,
    /// Its compression method (0 stored, 8 deflated).
    method: u64,
    /// The CRC-32 of its uncompressed bytes.
    pub crc: u32,
    /// Its bytes in the archive.
    pub compressed: u64,
    /// Its bytes uncompressed.
    pub size: u64,
    /// Where its local header starts.
    offset: u64,
}

/// Where a member's bytes lie in the archive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Body {
    /// The offset of its first byte.
    pub start: u64,
    /// Its bytes in the archive ([`Entry::compressed`]).
    pub len: u64,
    /// Whether they are deflated (else stored).
    pub deflated: bool,
}

impl Entry {
    /// Its name without the `.npy` suffix: the key an `.npz` archive names the array by.
    pub fn key(&self) -> &str {
        self.name.strip_suffix(".npy").unwrap_or(&self.name)
    }

    /// Where its bytes lie, from its local header, in an archive of `size` bytes: refused when
    /// it is encrypted, compressed by a method other than stored or deflated, or cut short.
    pub fn locate<R: Read + Seek>(&self, r: &mut R, size: u64) -> Result<Body, String> {
        let name = quote(&self.name);
        let truncated = || format!("its member `{name}` is corrupt or truncated");
        if self.flags & 1 != 0 {
            return Err(format!("its member `{name}` is encrypted"));
        }
        let deflated = match self.method {
            0 => false,
            8 => true,
            m => return Err(format!(
                "its member `{name}` uses zip compression method {m}; only stored and deflated members (as `np.savez` and `np.savez_compressed` write) are supported"
            )),
        };
        let local = read_at(r, self.offset, 30).map_err(|_| truncated())?;
        if le32(&local, 0) != Some(u64::from(LOCAL)) {
            return Err(truncated());
        }
        let skip = le16(&local, 26).unwrap_or(0) + le16(&local, 28).unwrap_or(0);
        let start = self.offset + 30 + skip;
        if start.saturating_add(self.compressed) > size
            || (!deflated && self.compressed != self.size)
        {
            return Err(truncated());
        }
        Ok(Body {
            start,
            len: self.compressed,
            deflated,
        })
    }
}

fn corrupt() -> String {
    "its zip directory is corrupt".into()
}

/// `n` bytes at `at`.
fn read_at<R: Read + Seek>(r: &mut R, at: u64, n: u64) -> Result<Vec<u8>, String> {
    r.seek(SeekFrom::Start(at))
        .map_err(|e| format!("it cannot be read: {e}"))?;
    read_exact(r, n, |_| corrupt())
}

/// The members of the archive; the `.npy` headers of those named in `wanted` are read.
pub(super) fn members<R: Read + Seek>(
    r: &mut R,
    size: u64,
    wanted: &[String],
) -> Result<Vec<Member>, String> {
    let entries = directory(r, size)?;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let name = e.key().to_string();
        let array = wanted
            .contains(&name)
            .then(|| member_header(r, size, &e).map(|npy| npy.array));
        out.push(Member { name, array });
    }
    Ok(out)
}

/// The members of a zip archive of `size` bytes (zip64 included), from its central directory.
pub fn directory<R: Read + Seek>(r: &mut R, size: u64) -> Result<Vec<Entry>, String> {
    let missing = || "it has no zip directory (it is truncated, or not a zip archive)".to_string();
    if size < 22 {
        return Err(missing());
    }
    let tail_len = size.min(22 + 0xFFFF);
    let tail = read_at(r, size - tail_len, tail_len)?;
    let at = (0..=tail.len() - 22)
        .rev()
        .find(|&i| le32(&tail, i) == Some(u64::from(EOCD)))
        .ok_or_else(missing)?;
    let mut count = le16(&tail, at + 10).ok_or_else(corrupt)?;
    let mut cd_size = le32(&tail, at + 12).ok_or_else(corrupt)?;
    let mut cd_offset = le32(&tail, at + 16).ok_or_else(corrupt)?;
    if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
        // Zip64: the locator just before the end record points at the zip64 end record.
        let locator = at
            .checked_sub(20)
            .filter(|&l| le32(&tail, l) == Some(u64::from(LOCATOR64)))
            .ok_or_else(corrupt)?;
        let record_at = le64(&tail, locator + 8).ok_or_else(corrupt)?;
        let record = read_at(r, record_at, 56)?;
        if le32(&record, 0) != Some(u64::from(EOCD64)) {
            return Err(corrupt());
        }
        count = le64(&record, 32).ok_or_else(corrupt)?;
        cd_size = le64(&record, 40).ok_or_else(corrupt)?;
        cd_offset = le64(&record, 48).ok_or_else(corrupt)?;
    }
    if cd_size > MAX_HEADER_BYTES || cd_offset.saturating_add(cd_size) > size {
        return Err(corrupt());
    }
    let cd = read_at(r, cd_offset, cd_size)?;
    let mut entries = Vec::new();
    let mut p = 0usize;
    for _ in 0..count {
        if le32(&cd, p) != Some(u64::from(CENTRAL)) {
            return Err(corrupt());
        }
        let field =
            |at: usize, f: fn(&[u8], usize) -> Option<u64>| f(&cd, p + at).ok_or_else(corrupt);
        let flags = field(8, le16)?;
        let method = field(10, le16)?;
        let crc = field(16, le32)? as u32;
        let mut compressed = field(20, le32)?;
        let mut uncompressed = field(24, le32)?;
        let name_len = field(28, le16)? as usize;
        let extra_len = field(30, le16)? as usize;
        let comment_len = field(32, le16)? as usize;
        let mut offset = field(42, le32)?;
        let name_at = p + 46;
        let name = cd.get(name_at..name_at + name_len).ok_or_else(corrupt)?;
        let extra = cd
            .get(name_at + name_len..name_at + name_len + extra_len)
            .ok_or_else(corrupt)?;
        // The zip64 extra field holds, in order, the sizes and offset that do not fit 32 bits.
        let mut x = 0;
        while x + 4 <= extra.len() {
            let (id, len) = (
                le16(extra, x).unwrap_or(0),
                le16(extra, x + 2).unwrap_or(0) as usize,
            );
            if id == 1 {
                let mut q = x + 4;
                let mut next = || {
                    let v = le64(extra, q);
                    q += 8;
                    v
                };
                if uncompressed == 0xFFFF_FFFF {
                    uncompressed = next().ok_or_else(corrupt)?;
                }
                if compressed == 0xFFFF_FFFF {
                    compressed = next().ok_or_else(corrupt)?;
                }
                if offset == 0xFFFF_FFFF {
                    offset = next().ok_or_else(corrupt)?;
                }
            }
            x += 4 + len;
        }
        entries.push(Entry {
            name: String::from_utf8_lossy(name).into_owned(),
            flags,
            method,
            crc,
            compressed,
            size: uncompressed,
            offset,
        });
        p = name_at + name_len + extra_len + comment_len;
    }
    Ok(entries)
}

/// The `.npy` header of one member: as much of its data as the header takes, inflated when the
/// member is deflated.
pub fn member_header<R: Read + Seek>(r: &mut R, size: u64, e: &Entry) -> Result<Npy, String> {
    let body = e.locate(r, size)?;
    r.seek(SeekFrom::Start(body.start))
        .map_err(|err| format!("it cannot be read: {err}"))?;
    let data = r.take(body.len);
    let within = |reason: String| {
        format!(
            "its member `{}` is not a valid .npy array: {reason}",
            quote(&e.name)
        )
    };
    if body.deflated {
        npy::header(&mut DeflateDecoder::new(data), e.size).map_err(within)
    } else {
        npy::header(&mut { data }, body.len).map_err(within)
    }
}
