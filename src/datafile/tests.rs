//! The header readers on files written here, and on the repository's MNIST files.

use std::io::{Cursor, Write};

use flate2::write::{DeflateEncoder, GzEncoder};
use flate2::Compression;

use super::*;

fn read(bytes: &[u8], format: &Format) -> Result<Header, String> {
    read_header(&mut Cursor::new(bytes), bytes.len() as u64, format)
}

fn array(bytes: &[u8], format: &Format) -> Array {
    match read(bytes, format) {
        Ok(Header::Array(a)) => a,
        other => panic!("not an array: {other:?}"),
    }
}

fn u8s(shape: &[u64]) -> Array {
    Array {
        elem: Elem::Int {
            signed: false,
            bits: 8,
        },
        shape: shape.to_vec(),
    }
}

fn idx(dims: &[u32], type_byte: u8) -> Vec<u8> {
    let mut out = vec![0, 0, type_byte, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    let n: u32 = dims.iter().product();
    out.extend(std::iter::repeat_n(7u8, n as usize));
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(bytes).expect("gzip");
    gz.finish().expect("gzip")
}

#[test]
fn idx_headers_plain_and_gzipped() {
    let plain = idx(&[3, 2, 2], 0x08);
    assert_eq!(array(&plain, &Format::Idx), u8s(&[3, 2, 2]));
    assert_eq!(array(&gzip(&plain), &Format::Idx), u8s(&[3, 2, 2]));
    assert_eq!(
        array(&idx(&[4], 0x0d), &Format::Idx).elem,
        Elem::Float { bits: 32 }
    );
    let err = read(b"PK\x03\x04", &Format::Idx).expect_err("not idx");
    assert!(err.contains("not an IDX file"), "{err}");
    let err = read(&plain[..9], &Format::Idx).expect_err("truncated");
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn the_repositorys_mnist_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mnist");
    let images = std::fs::read(dir.join("images.idx.gz")).expect("MNIST images");
    let labels = std::fs::read(dir.join("labels.idx.gz")).expect("MNIST labels");
    let x = array(&images, &Format::Idx);
    let y = array(&labels, &Format::Idx);
    assert_eq!(x.shape[1..], [28, 28]);
    assert_eq!(y.shape, [x.shape[0]]);
}

fn npy(descr: &str, shape: &str, version: u8) -> Vec<u8> {
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n");
    let mut out = b"\x93NUMPY".to_vec();
    out.push(version);
    out.push(0);
    if version == 1 {
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(&[0; 64]);
    out
}

#[test]
fn npy_headers() {
    let a = array(&npy("<f4", "(5, 3)", 1), &Format::Npy);
    assert_eq!((a.elem, a.shape), (Elem::Float { bits: 32 }, vec![5, 3]));
    assert_eq!(array(&npy("|u1", "(7,)", 2), &Format::Npy), u8s(&[7]));
    assert_eq!(
        array(&npy("<i8", "()", 1), &Format::Npy).shape,
        Vec::<u64>::new()
    );
    assert_eq!(
        array(&npy("<U3", "(2,)", 1), &Format::Npy).elem,
        Elem::Other("<U3".into())
    );
    let err = read(b"\x93NUMPY\x01\x00\xff\xff{", &Format::Npy).expect_err("too long");
    assert!(err.contains("more than the file holds"), "{err}");
}

/// A zip archive of `members` (name, content, deflated), as `np.savez` writes one.
fn zip(members: &[(&str, Vec<u8>, bool)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, content, deflate) in members {
        let data = if *deflate {
            let mut d = DeflateEncoder::new(Vec::new(), Compression::default());
            d.write_all(content).expect("deflate");
            d.finish().expect("deflate")
        } else {
            content.clone()
        };
        let method: u16 = if *deflate { 8 } else { 0 };
        let offset = out.len() as u32;
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&[20, 0, 0, 0]);
        out.extend_from_slice(&method.to_le_bytes());
        out.extend_from_slice(&[0; 8]); // time, date, crc
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&(content.len() as u32).to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&[20, 0, 20, 0, 0, 0]);
        central.extend_from_slice(&method.to_le_bytes());
        central.extend_from_slice(&[0; 8]);
        central.extend_from_slice(&(data.len() as u32).to_le_bytes());
        central.extend_from_slice(&(content.len() as u32).to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let at = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let n = members.len() as u16;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&at.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

#[test]
fn npz_directories_and_member_headers() {
    let archive = zip(&[
        ("inputs.npy", npy("<f8", "(4, 2, 3)", 1), true),
        ("targets.npy", npy("<i8", "(4,)", 1), false),
        ("other.npy", npy("<f4", "(1,)", 1), false),
    ]);
    let format = Format::Npz(vec!["inputs".into(), "targets".into()]);
    let Ok(Header::Members(m)) = read(&archive, &format) else {
        panic!("not an archive");
    };
    let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["inputs", "targets", "other"]);
    assert_eq!(
        m[0].array,
        Some(Ok(Array {
            elem: Elem::Float { bits: 64 },
            shape: vec![4, 2, 3]
        }))
    );
    assert_eq!(
        m[1].array.clone().map(|a| a.map(|a| a.shape)),
        Some(Ok(vec![4]))
    );
    assert_eq!(m[2].array, None, "a member not asked for is not read");
    let err = read(&archive[..archive.len() - 30], &format).expect_err("cut");
    assert!(err.contains("zip"), "{err}");
}

#[test]
fn safetensors_headers() {
    let json = r#"{"x":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},"y":{"dtype":"I64","shape":[3],"data_offsets":[24,48]},"__metadata__":{"a":"b"}}"#;
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    file.extend_from_slice(&[0; 48]);
    let Ok(Header::Members(m)) = read(&file, &Format::Safetensors) else {
        panic!("not a safetensors file");
    };
    assert_eq!(m.len(), 2);
    assert_eq!(
        m[0].array.clone().map(|a| a.map(|a| a.shape)),
        Some(Ok(vec![3, 2]))
    );
    let Ok(Header::Members(m)) = read(&file[..file.len() - 1], &Format::Safetensors) else {
        panic!("a truncated tensor leaves the header readable");
    };
    assert!(
        matches!(&m[1].array, Some(Err(e)) if e.contains("truncated")),
        "{m:?}"
    );
    let err = read(&[0xff; 16], &Format::Safetensors).expect_err("not one");
    assert!(err.contains("more than the file holds"), "{err}");
}

#[test]
fn csv_rows_and_cells() {
    let text = b"\xef\xbb\xbfa,\"b,c\",label\r\n1,2,3\n\n4,5,6\n";
    let Ok(Header::Csv(csv)) = read(text, &Format::Csv) else {
        panic!("not csv");
    };
    assert_eq!(csv.first, ["a", "b,c", "label"]);
    assert_eq!(csv.second, Some(vec!["1".into(), "2".into(), "3".into()]));
    assert_eq!(csv.rows, Rows::Exact(3));
    let big: Vec<u8> = b"1,2\n".repeat(CSV_COUNT_BYTES as usize / 4 + 10);
    let Ok(Header::Csv(csv)) = read(&big, &Format::Csv) else {
        panic!("not csv");
    };
    assert_eq!(csv.rows, Rows::AtLeast(CSV_COUNT_BYTES / 4));
    assert!(read(b"\n \n", &Format::Csv).is_err());
}

#[test]
fn npy_headers_locate_their_values() {
    let bytes = npy(">i2", "(3, 2)", 1);
    let h = npy::header(&mut &bytes[..], bytes.len() as u64).expect("a header");
    let dict = bytes.len() as u64 - 64 - 10;
    assert_eq!(h.offset, 10 + dict);
    assert_eq!((h.item, h.big_endian, h.fortran), (2, true, false));
    assert_eq!((h.count(), h.body_len()), (Some(6), Some(12)));
    assert_eq!(h.descr.as_deref(), Some(">i2"));
    let v3 = npy("<f8", "(1,)", 3);
    let h = npy::header(&mut &v3[..], v3.len() as u64).expect("a header");
    assert_eq!(h.offset, v3.len() as u64 - 64);
}

#[test]
fn zip_members_are_located() {
    let archive = zip(&[
        ("inputs.npy", npy("<f8", "(4, 2, 3)", 1), true),
        ("targets.npy", npy("<i8", "(4,)", 1), false),
    ]);
    let size = archive.len() as u64;
    let entries = zip::directory(&mut Cursor::new(&archive), size).expect("a directory");
    assert_eq!(entries[0].key(), "inputs");
    let stored = entries[1]
        .locate(&mut Cursor::new(&archive), size)
        .expect("stored");
    assert!(!stored.deflated);
    let start = stored.start as usize;
    assert_eq!(&archive[start..start + 6], b"\x93NUMPY");
    assert_eq!(stored.len, entries[1].size);
    assert!(
        entries[0]
            .locate(&mut Cursor::new(&archive), size)
            .expect("deflated")
            .deflated
    );
    let err = zip::directory(&mut Cursor::new(b"not a zip archive at all"), 24).expect_err("text");
    assert!(err.contains("no zip directory"), "{err}");
}

#[test]
fn idx_faults_are_facts() {
    let ok = idx(&[2, 3], 0x08);
    let h = idx::read(&mut &ok[..]).expect("a header");
    assert_eq!((h.magic, h.offset, h.array.shape), (0x0802, 12, vec![2, 3]));
    assert!(matches!(
        idx::read(&mut &[0u8, 0][..]),
        Err(idx::Fault::NoMagic(2))
    ));
    assert!(matches!(
        idx::read(&mut &b"hello"[..]),
        Err(idx::Fault::NotIdx(0x6865_6c6c))
    ));
    assert!(matches!(
        idx::read(&mut &ok[..9]),
        Err(idx::Fault::Dims {
            magic: 0x0802,
            held: 5
        })
    ));
}

#[test]
fn csv_rows_skip_blank_lines_and_count_from_one() {
    let rows: Vec<(usize, &str)> = rows("\u{feff}a,b\r\n\n \t\n1,2\n").collect();
    assert_eq!(rows, [(1, "a,b"), (4, "1,2")]);
}

#[test]
fn cut_keeps_short_text_and_cuts_long_text() {
    assert_eq!(cut("short", 40), "short");
    assert_eq!(cut(&"é".repeat(40), 40), "é".repeat(40));
    assert_eq!(
        cut(&"é".repeat(41), 40),
        format!("{}… (41 characters)", "é".repeat(40))
    );
}
