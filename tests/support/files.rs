//! Data files written byte for byte as numpy, `safetensors` and the MNIST tools write them: the
//! one set of writers the tests share.

use std::io::Write;

/// One array: its element type (numpy's `descr` such as `<f4`), its shape and its bytes.
pub struct Array {
    /// numpy's type string: `<f4`, `<f8`, `<i8`, `|u1`...
    pub descr: &'static str,
    /// The dimensions, the sample count first.
    pub shape: Vec<usize>,
    /// The values, little-endian.
    pub bytes: Vec<u8>,
}

impl Array {
    /// float32 values of `shape`.
    pub fn f32(shape: &[usize], values: &[f32]) -> Array {
        assert_eq!(
            shape.iter().product::<usize>(),
            values.len(),
            "values of the shape"
        );
        Array {
            descr: "<f4",
            shape: shape.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// int64 values of `shape`.
    pub fn i64(shape: &[usize], values: &[i64]) -> Array {
        assert_eq!(
            shape.iter().product::<usize>(),
            values.len(),
            "values of the shape"
        );
        Array {
            descr: "<i8",
            shape: shape.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// uint8 values of `shape`.
    pub fn u8(shape: &[usize], values: &[u8]) -> Array {
        assert_eq!(
            shape.iter().product::<usize>(),
            values.len(),
            "values of the shape"
        );
        Array {
            descr: "|u1",
            shape: shape.to_vec(),
            bytes: values.to_vec(),
        }
    }

    /// The safetensors name of the element type.
    fn dtype(&self) -> &'static str {
        match self.descr {
            "<f4" => "F32",
            "<f8" => "F64",
            "<i8" => "I64",
            "<i4" => "I32",
            "|u1" => "U8",
            other => panic!("no safetensors dtype for {other}"),
        }
    }
}

/// A `.npy` file (format 1.0) of `descr` values of `shape`.
pub fn npy_bytes(descr: &str, shape: &[usize], body: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
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

/// `a` as a `.npy` file.
pub fn npy(a: &Array) -> Vec<u8> {
    npy_bytes(a.descr, &a.shape, &a.bytes)
}

/// A zip archive of stored members, as `np.savez` writes it.
pub fn zip(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let offset = out.len() as u32;
        let fields = |b: &mut Vec<u8>| {
            b.extend_from_slice(&20u16.to_le_bytes());
            b.extend_from_slice(&[0; 2]); // flags
            b.extend_from_slice(&[0; 2]); // stored
            b.extend_from_slice(&[0; 4]); // time and date
            b.extend_from_slice(&crc.sum().to_le_bytes());
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(&[0; 2]); // extra
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        fields(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes());
        fields(&mut central);
        central.extend_from_slice(&[0; 10]); // comment, disk, attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let at = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let count = (members.len() as u16).to_le_bytes();
    out.extend_from_slice(&count);
    out.extend_from_slice(&count);
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&at.to_le_bytes());
    out.extend_from_slice(&[0; 2]);
    out
}

/// An `.npz` archive of named arrays, as `np.savez(path, name=array, ...)` writes it.
pub fn npz(arrays: &[(&str, &Array)]) -> Vec<u8> {
    let members: Vec<(String, Vec<u8>)> = arrays
        .iter()
        .map(|(name, a)| (format!("{name}.npy"), npy(a)))
        .collect();
    let named: Vec<(&str, Vec<u8>)> = members
        .iter()
        .map(|(n, b)| (n.as_str(), b.clone()))
        .collect();
    zip(&named)
}

/// A safetensors file of named arrays, as `safetensors.torch.save_file` writes it.
pub fn safetensors(arrays: &[(&str, &Array)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, a) in arrays {
        header.insert(
            (*name).into(),
            serde_json::json!({
                "dtype": a.dtype(),
                "shape": a.shape,
                "data_offsets": [offset, offset + a.bytes.len()],
            }),
        );
        offset += a.bytes.len();
    }
    let mut head = serde_json::to_vec(&header).expect("header");
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend(head);
    for (_, a) in arrays {
        out.extend_from_slice(&a.bytes);
    }
    out
}

/// An IDX file of unsigned bytes (MNIST's format), gzipped when `gzip`.
pub fn idx(shape: &[usize], values: &[u8], gzip: bool) -> Vec<u8> {
    assert_eq!(
        shape.iter().product::<usize>(),
        values.len(),
        "values of the shape"
    );
    let mut b = vec![0, 0, 0x08, shape.len() as u8];
    for d in shape {
        b.extend_from_slice(&(*d as u32).to_be_bytes());
    }
    b.extend_from_slice(values);
    if !gzip {
        return b;
    }
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&b).expect("gzip");
    z.finish().expect("gzip")
}

/// A CSV file with a header row: `columns` names, then one row per sample.
pub fn csv(columns: &[&str], rows: &[Vec<f64>]) -> String {
    let mut text = columns.join(",");
    text.push('\n');
    for row in rows {
        let cells: Vec<String> = row.iter().map(f64::to_string).collect();
        text.push_str(&cells.join(","));
        text.push('\n');
    }
    text
}
