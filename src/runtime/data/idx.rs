//! IDX sources (MNIST-style images and labels of unsigned bytes, plain or gzipped); a gzipped
//! file is decompressed no further than its header declares.

use kiln::datafile::idx::{self, Fault};
use kiln::ir::DType;
use kiln::span::Span;
use rayon::prelude::*;
use tch::{Kind, Tensor};

use super::error::{At, DataError};
use super::file::DataFile;
use super::{invalid, Raw};

/// Bytes decoded by one rayon task.
const BYTES_PER_TASK: usize = 1 << 16;

/// A parsed IDX file of unsigned bytes.
struct Idx {
    /// The dimensions, the sample count first.
    dims: Vec<usize>,
    /// The values.
    body: Vec<u8>,
}

/// What an IDX file is expected to hold.
#[derive(Clone, Copy, PartialEq)]
enum IdxRole {
    Images,
    Labels,
}

/// Reads an IDX file of unsigned bytes (magic `00 00 08 ndims`), plain or gzipped: the header
/// first, then the values it declares and one byte more, so that a file holding more than its
/// header declares is refused without being read (or decompressed) any further.
fn read_idx(file: &DataFile, role: IdxRole, span: Span) -> Result<Idx, DataError> {
    let name = file.name();
    let mut stream = file.stream(span)?;
    let held = if stream.gzipped {
        "it holds, decompressed,"
    } else {
        "it holds"
    };
    let (what, magic) = match role {
        IdxRole::Images => ("images", "0x00000803"),
        IdxRole::Labels => ("labels", "0x00000801"),
    };
    let wrong = |message: String| {
        invalid(
            span,
            message,
            "not an IDX file of this kind",
            format!(
                "MNIST-style {what} are IDX files of unsigned bytes starting with {magic}; check that `images` and `labels` name the right files"
            ),
        )
    };
    let truncated = |expected: String, found: usize| {
        invalid(
            span,
            format!(
                "{name} is truncated: its header describes {expected}, but {held} {found} bytes"
            ),
            "truncated file",
            "the file is incomplete; download or copy it again",
        )
    };
    let not_idx = |found: u32| {
        wrong(format!(
            "{name} is not an IDX file: it starts with 0x{found:08x}, but IDX {what} start with {magic}"
        ))
    };
    // The header by the one IDX reader; its type and dimensions are checked before a truncated
    // list of dimensions is.
    let (found, parsed) = match idx::read(&mut stream.reader) {
        Ok(header) => (header.magic, Ok(header)),
        Err(Fault::Io(e)) => return Err(stream.fault(&e, file, span)),
        Err(Fault::NoMagic(held)) => {
            return Err(truncated("at least a 4-byte header".into(), held))
        }
        Err(Fault::NotIdx(found)) => return Err(not_idx(found)),
        Err(Fault::Dims { magic, held }) => (magic, Err(held)),
    };
    let [_, _, type_byte, ndims] = found.to_be_bytes();
    if type_byte != 0x08 {
        let kind = match type_byte {
            0x09 => "signed bytes",
            0x0b => "16-bit integers",
            0x0c => "32-bit integers",
            0x0d => "32-bit floats",
            0x0e => "64-bit floats",
            _ => "an unknown type",
        };
        return Err(wrong(format!(
            "{name} holds {kind} (magic 0x{found:08x}), but only IDX files of unsigned bytes are supported"
        )));
    }
    let ndims = usize::from(ndims);
    let fits = match role {
        IdxRole::Images => ndims >= 2,
        IdxRole::Labels => ndims == 1,
    };
    if !fits {
        let want = match role {
            IdxRole::Images => "at least 2 (the count and the sample's dimensions)",
            IdxRole::Labels => "1",
        };
        return Err(wrong(format!(
            "{name} has {ndims} dimension{} (magic 0x{found:08x}), but IDX {what} have {want}",
            if ndims == 1 { "" } else { "s" }
        )));
    }
    let header = 4 + 4 * ndims;
    let dims: Vec<usize> = parsed
        .map_err(|held| {
            truncated(
                format!("{ndims} dimensions ({header} header bytes)"),
                4 + held,
            )
        })?
        .array
        .shape
        .iter()
        .map(|&d| d as usize)
        .collect();
    let described = dims
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" x ");
    let values = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n.checked_add(header).is_some())
        .ok_or_else(|| {
            invalid(
                span,
                format!("{name} describes {described} values, more than memory can address"),
                "malformed header",
                "the header is damaged; download or copy the file again",
            )
        })?;
    let total = values + header;
    // The values and one byte more: a file holding more than it declares is read no further.
    let body = stream.read_up_to(values as u64 + 1, file, span)?;
    if body.len() < values {
        return Err(truncated(
            format!("{described} values ({total} bytes with the header)"),
            header + body.len(),
        ));
    }
    if body.len() > values {
        return Err(if stream.gzipped {
            invalid(
                span,
                format!(
                    "{name} declares {described} values ({total} bytes with the header), but decompressed it holds more; it was decompressed no further"
                ),
                "more data than its header declares",
                "the header does not match the data; download or copy the file again",
            )
        } else {
            invalid(
                span,
                format!(
                    "{name} holds {} bytes after the {described} values ({total} bytes with the header) it describes",
                    stream.size.saturating_sub(total as u64)
                ),
                "malformed file",
                "the header does not match the data; download or copy the file again",
            )
        }
        .path(&file.path));
    }
    Ok(Idx { dims, body })
}

/// Reads MNIST-style images and labels: inputs as bytes divided by `scale` (grey levels in
/// [0, 1] with 255, as torchvision's `ToTensor`; the bytes themselves with `None`), or the bytes
/// as token ids.
pub(super) fn read(
    images: &DataFile,
    labels: &DataFile,
    dtype: DType,
    scale: Option<f64>,
    span: Span,
) -> Result<Raw, DataError> {
    let divisor = scale.unwrap_or(1.0) as f32;
    let img = read_idx(images, IdxRole::Images, span)?;
    let lab = read_idx(labels, IdxRole::Labels, span)?;
    if img.dims[0] != lab.dims[0] {
        return Err(invalid(
            span,
            format!(
                "{} holds {} images but {} holds {} labels",
                images.name(),
                img.dims[0],
                labels.name(),
                lab.dims[0]
            ),
            "counts differ",
            "the two files must describe the same samples (both training or both test files)",
        ));
    }
    let x = pixels(&img, dtype, divisor, span)?;
    let y = Tensor::f_from_data_size(&lab.body, &[img.dims[0] as i64], Kind::Uint8).at(span)?;
    let mut raw = Raw::new(x, y, images.name(), labels.name());
    // Bytes, divided by a positive number or kept: never NaN or infinite.
    raw.finite = true;
    Ok(raw)
}

/// Reads MNIST-style images without labels (`kiln predict`'s inputs), as [`read`] reads them.
pub(super) fn read_images(
    images: &DataFile,
    dtype: DType,
    scale: Option<f64>,
    span: Span,
) -> Result<Tensor, DataError> {
    let img = read_idx(images, IdxRole::Images, span)?;
    pixels(&img, dtype, scale.unwrap_or(1.0) as f32, span)
}

/// The images as floats divided by `divisor`, or their bytes as token ids.
fn pixels(img: &Idx, dtype: DType, divisor: f32, span: Span) -> Result<Tensor, DataError> {
    let shape: Vec<i64> = img.dims.iter().map(|&d| d as i64).collect();
    Ok(match dtype {
        DType::Float => {
            let mut pixels = vec![0f32; img.body.len()];
            pixels
                .par_chunks_mut(BYTES_PER_TASK)
                .zip(img.body.par_chunks(BYTES_PER_TASK))
                .for_each(|(out, bytes)| {
                    for (o, &b) in out.iter_mut().zip(bytes) {
                        *o = f32::from(b) / divisor;
                    }
                });
            Tensor::f_from_slice(&pixels)
                .and_then(|t| t.f_reshape(shape.as_slice()))
                .at(span)?
        }
        // Token ids: the bytes themselves.
        DType::Int => Tensor::f_from_data_size(&img.body, &shape, Kind::Uint8).at(span)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_train, data, expect_failure, floats, idx_source, ints, Scratch};
    use super::super::{load, Targets};
    use super::*;
    use kiln::diagnostic::Code;
    use std::io::Write;

    fn idx_bytes(kind: u8, dims: &[u32], body: &[u8]) -> Vec<u8> {
        let mut b = vec![0, 0, kind, dims.len() as u8];
        for d in dims {
            b.extend_from_slice(&d.to_be_bytes());
        }
        b.extend_from_slice(body);
        b
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    /// Five 2x3 images with pixel `i * 6 + j` and labels `i % 3`.
    fn small_idx(dir: &Scratch, gz: bool) {
        let pixels: Vec<u8> = (0..30).collect();
        let images = idx_bytes(0x08, &[5, 2, 3], &pixels);
        let labels = idx_bytes(0x08, &[5], &[0, 1, 2, 0, 1]);
        if gz {
            // An extension that says nothing: the magic decides.
            dir.write("images.idx", &gzip(&images));
            dir.write("labels.bin", &gzip(&labels));
        } else {
            dir.write("images.idx", &images);
            dir.write("labels.bin", &labels);
        }
    }

    #[test]
    fn idx_round_trips_plain_and_gzipped() {
        for gz in [false, true] {
            let dir = Scratch::new();
            small_idx(&dir, gz);
            let d = data(
                idx_source("images.idx", "labels.bin"),
                Targets::Classes(Some(3)),
                all_train(),
            );
            let s = load(&d, &[1, 2, 3], DType::Float, &dir.0, 1).unwrap();
            assert_eq!(s.train.inputs.size(), vec![5, 1, 2, 3]);
            assert_eq!(s.train.inputs.kind(), Kind::Float);
            assert_eq!(s.train.targets.size(), vec![5]);
            assert_eq!(s.train.targets.kind(), Kind::Int64);
            assert!(s.val.is_none() && s.test.is_none());
            // Splits keep file order, so row i is image i.
            let x = floats(&s.train.inputs);
            for (i, v) in x.iter().enumerate() {
                assert_eq!(*v, i as f32 / 255.0);
            }
            assert_eq!(ints(&s.train.targets), vec![0, 1, 2, 0, 1]);
        }
    }

    #[test]
    fn idx_as_token_ids_keeps_the_bytes() {
        let dir = Scratch::new();
        small_idx(&dir, false);
        let d = data(
            idx_source("images.idx", "labels.bin"),
            Targets::Unknown,
            all_train(),
        );
        let s = load(&d, &[6], DType::Int, &dir.0, 1).unwrap();
        assert_eq!(s.train.inputs.kind(), Kind::Int64);
        assert_eq!(ints(&s.train.inputs), (0..30).collect::<Vec<i64>>());
        assert_eq!(s.train.targets.kind(), Kind::Int64);
    }

    #[test]
    fn idx_failures() {
        let dir = Scratch::new();
        let labels = idx_bytes(0x08, &[5], &[0, 1, 2, 0, 1]);
        dir.write("labels.idx", &labels);
        let d = |images: &str| {
            data(
                idx_source(images, "labels.idx"),
                Targets::Classes(Some(3)),
                all_train(),
            )
        };
        let load_it = |images: &str| load(&d(images), &[6], DType::Float, &dir.0, 1);

        // Missing: K0502 naming the resolved path.
        let f = expect_failure(load_it("nope.idx"), Code::DataMissing, "`nope.idx`");
        assert!(f
            .message
            .contains(&dir.path("nope.idx").display().to_string()));
        assert!(f
            .help
            .as_deref()
            .unwrap_or_default()
            .contains("relative to the directory of the .exp file"));
        // A directory is not a file.
        std::fs::create_dir_all(dir.path("folder")).unwrap();
        expect_failure(load_it("folder"), Code::DataMissing, "is a directory");

        // Truncated, plain and gzipped: the bytes expected and found.
        let full = idx_bytes(0x08, &[5, 2, 3], &(0..30).collect::<Vec<u8>>());
        dir.write("short.idx", &full[..30]);
        expect_failure(
            load_it("short.idx"),
            Code::DataInvalid,
            "truncated: its header describes 5 x 2 x 3 values (46 bytes with the header), but it holds 30 bytes",
        );
        dir.write("short.gz", &gzip(&full[..30]));
        expect_failure(load_it("short.gz"), Code::DataInvalid, "decompressed");
        let zipped = gzip(&full);
        dir.write("cut.gz", &zipped[..zipped.len() - 10]);
        expect_failure(
            load_it("cut.gz"),
            Code::DataInvalid,
            "cannot be decompressed",
        );
        dir.write("tiny.idx", &[0, 0]);
        expect_failure(load_it("tiny.idx"), Code::DataInvalid, "truncated");
        dir.write("long.idx", &[full.as_slice(), &[0, 0]].concat());
        expect_failure(load_it("long.idx"), Code::DataInvalid, "2 bytes after");

        // More data than the header declares, gzipped: refused after one byte more.
        dir.write("more.gz", &gzip(&[full.as_slice(), &[0; 5000]].concat()));
        expect_failure(
            load_it("more.gz"),
            Code::DataInvalid,
            "`more.gz` declares 5 x 2 x 3 values (46 bytes with the header), but decompressed it holds more; it was decompressed no further",
        );

        // Wrong magic: not IDX, labels given as images, another type.
        dir.write("text.idx", b"hello world");
        expect_failure(load_it("text.idx"), Code::DataInvalid, "0x68656c6c");
        expect_failure(load_it("labels.idx"), Code::DataInvalid, "has 1 dimension");
        dir.write("floats.idx", &idx_bytes(0x0d, &[5, 2, 3], &[0; 120]));
        expect_failure(load_it("floats.idx"), Code::DataInvalid, "32-bit floats");

        // Counts differ.
        dir.write("four.idx", &idx_bytes(0x08, &[4, 2, 3], &[0; 24]));
        expect_failure(
            load_it("four.idx"),
            Code::DataInvalid,
            "holds 4 images but `labels.idx` holds 5 labels",
        );

        // Labels outside the classes.
        dir.write("images.idx", &full);
        let f = expect_failure(
            load(
                &data(
                    idx_source("images.idx", "labels.idx"),
                    Targets::Classes(Some(2)),
                    all_train(),
                ),
                &[6],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataInvalid,
            "the label 2 for sample 2, outside the 2 classes [0, 2)",
        );
        assert_eq!(f.primary.text, "label out of range");
    }
}
