//! Image folders (`images("dir", size: [C, H, W])`): the layout of torchvision's `ImageFolder`
//! (listed by `kiln::check::image_folder`, the checker's listing), each PNG or JPEG decoded on
//! the rayon threads into its own slice of one uint8 buffer `[N, C, H, W]`, so the source then
//! goes the way of IDX bytes (scaled by 255, normalised, split).
//!
//! Pixels are PIL's: an image is read as its file's content says (not its extension), PNG
//! palettes and low bit depths expanded, 16-bit samples by their high byte; one channel is
//! PIL's `convert("L")` (`(19595 R + 38470 G + 7471 B + 32768) >> 16`), three are
//! `convert("RGB")` (grey replicated), alpha dropped. JPEG is decoded by `jpeg-decoder`,
//! whose inverse DCT and chroma upsampling differ from libjpeg-turbo's (PIL's) by a few
//! levels on some pixels (measured in the tests). An image of another height and width is
//! refused, or with `resize: true` resized as `F.interpolate(x.float(), (H, W),
//! mode="bilinear", antialias=True)` (torchvision's `Resize` of a tensor), rounded back to bytes.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tch::Tensor;

use kiln::span::Span;

use super::error::{At, DataError};
use super::file::DataFile;
use super::{invalid, Raw};

/// Reads the image folder `file` at `size` (`[C, H, W]`, C 1 or 3).
pub(super) fn read(
    file: &DataFile,
    size: &[i64],
    resize: bool,
    span: Span,
) -> Result<Raw, DataError> {
    if !file.path.exists() {
        return Err(file.missing("it does not exist", span));
    }
    let folder = kiln::check::image_folder(&file.path).map_err(|why| {
        invalid(
            span,
            format!("{} is not an image folder: {why}", file.name()),
            "not an image folder",
            "lay it out as torchvision's `ImageFolder`: one folder per class, named by it, holding that class's PNG or JPEG images",
        )
    })?;
    let paths: Vec<PathBuf> = folder.images.iter().map(|(p, _)| p.clone()).collect();
    let inputs = decode_all(&paths, &file.path, size, resize, file, span)?;
    let labels: Vec<i64> = folder.images.iter().map(|(_, k)| *k as i64).collect();
    let targets = Tensor::f_from_slice(&labels).at(span)?;
    let mut raw = Raw::new(
        inputs,
        targets,
        file.name(),
        format!("{}'s class folders", file.name()),
    );
    raw.finite = true;
    raw.keep_bytes = true;
    Ok(raw)
}

/// Reads the images `kiln predict` is given: one PNG or JPEG file, or every image of a folder
/// (flat, or of class folders, the classes ignored) in `sorted(os.walk(...))` order, at the
/// run's `size`. Returns the samples and each one's path (relative to the folder).
pub(super) fn read_unlabelled(
    file: &DataFile,
    size: &[i64],
    resize: bool,
    span: Span,
) -> Result<(Tensor, Vec<String>), DataError> {
    if !file.path.exists() {
        return Err(file.missing("it does not exist", span));
    }
    let paths: Vec<PathBuf> = file
        .parts(kiln::check::image_files, "PNG or JPEG images", span)?
        .into_iter()
        .map(|f| f.path)
        .collect();
    let root = if file.path.is_dir() {
        file.path.clone()
    } else {
        file.path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    let x = decode_all(&paths, &root, size, resize, file, span)?;
    let names = paths
        .iter()
        .map(|p| shown(p, &root).display().to_string())
        .collect();
    Ok((x, names))
}

/// `path` relative to `root`, as messages and predictions name it.
fn shown(path: &Path, root: &Path) -> PathBuf {
    path.strip_prefix(root)
        .map_or_else(|_| path.to_path_buf(), Path::to_path_buf)
}

/// Decodes `paths` on the rayon threads into one uint8 tensor `[N, C, H, W]`; the first image
/// (in order) that cannot be read, decoded or sized is K0503, named relative to `root` within
/// `file`.
fn decode_all(
    paths: &[PathBuf],
    root: &Path,
    size: &[i64],
    resize: bool,
    file: &DataFile,
    span: Span,
) -> Result<Tensor, DataError> {
    let [c, h, w] = [size[0], size[1], size[2]].map(|d| usize::try_from(d).unwrap_or(0));
    let per = c * h * w;
    let mut pixels = vec![0u8; paths.len() * per];
    let failures: Vec<Option<(usize, String)>> = pixels
        .par_chunks_mut(per.max(1))
        .zip(paths.par_iter())
        .enumerate()
        .map(|(i, (out, path))| {
            let failed = |why: String| Some((i, why));
            let bytes = match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => return failed(format!("it cannot be read: {e}")),
            };
            let image = match decode(&bytes) {
                Ok(image) => image,
                Err(why) => return failed(why),
            };
            let image = image.channels(c);
            if (image.height, image.width) == (h, w) {
                image.planar(out);
            } else if resize {
                image.planar_resized(h, w, out);
            } else {
                return failed(format!(
                    "it is {} × {} pixels (height × width), not {h} × {w}",
                    image.height, image.width
                ));
            }
            None
        })
        .collect();
    if let Some((i, why)) = failures.into_iter().flatten().next() {
        let sized = why.contains("pixels (height × width)");
        return Err(invalid(
            span,
            format!(
                "the image `{}` in {}: {why}",
                shown(&paths[i], root).display(),
                file.name()
            ),
            if sized {
                "another size"
            } else {
                "unreadable image"
            },
            if sized {
                "add `resize: true` to resize every image to `size` (bilinear, antialiased), or give `size` the images' own height and width"
            } else {
                "store images as PNG or baseline/progressive JPEG (RGB or greyscale), or remove the file from the folder"
            },
        ));
    }
    Tensor::f_from_slice(&pixels)
        .and_then(|t| t.f_reshape([paths.len() as i64, size[0], size[1], size[2]]))
        .at(span)
}

/// A decoded image: `height × width` pixels of `bands` interleaved bytes (1 grey, 2 grey and
/// alpha, 3 RGB, 4 RGBA).
struct Image {
    width: usize,
    height: usize,
    bands: usize,
    bytes: Vec<u8>,
}

/// Decodes a PNG or JPEG file by its signature.
fn decode(bytes: &[u8]) -> Result<Image, String> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        png(bytes)
    } else if bytes.starts_with(&[0xff, 0xd8]) {
        jpeg(bytes)
    } else {
        Err("it is neither PNG nor JPEG (by its first bytes)".into())
    }
}

fn png(bytes: &[u8]) -> Result<Image, String> {
    let bad = |e: png::DecodingError| format!("it is not a readable PNG: {e}");
    let mut decoder = png::Decoder::new(bytes);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(bad)?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).map_err(bad)?;
    buf.truncate(info.buffer_size());
    let bands = match info.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err("its palette could not be expanded".into()),
    };
    let (width, height) = (info.width as usize, info.height as usize);
    // Rows are packed: 8-bit samples after the transformations.
    if buf.len() != width * height * bands {
        return Err("its decoded rows are not 8-bit pixels".into());
    }
    Ok(Image {
        width,
        height,
        bands,
        bytes: buf,
    })
}

fn jpeg(bytes: &[u8]) -> Result<Image, String> {
    let mut decoder = jpeg_decoder::Decoder::new(bytes);
    let pixels = decoder
        .decode()
        .map_err(|e| format!("it is not a readable JPEG: {e}"))?;
    let info = decoder
        .info()
        .ok_or("it is not a readable JPEG: no frame header")?;
    let bands = match info.pixel_format {
        jpeg_decoder::PixelFormat::L8 => 1,
        jpeg_decoder::PixelFormat::RGB24 => 3,
        jpeg_decoder::PixelFormat::L16 => {
            return Err("it holds 16-bit samples (a lossless JPEG)".into())
        }
        jpeg_decoder::PixelFormat::CMYK32 => {
            return Err("it is a CMYK JPEG (convert it to RGB)".into())
        }
    };
    Ok(Image {
        width: usize::from(info.width),
        height: usize::from(info.height),
        bands,
        bytes: pixels,
    })
}

impl Image {
    /// The image as `channels` bands: PIL's `convert("L")` for 1, `convert("RGB")` for 3.
    fn channels(self, channels: usize) -> Image {
        let colour = self.bands >= 3;
        let bytes: Vec<u8> = match (channels, colour) {
            (1, false) => self.bytes.chunks_exact(self.bands).map(|p| p[0]).collect(),
            (1, true) => self
                .bytes
                .chunks_exact(self.bands)
                .map(|p| {
                    let l = 19595 * u32::from(p[0])
                        + 38470 * u32::from(p[1])
                        + 7471 * u32::from(p[2])
                        + 0x8000;
                    (l >> 16) as u8
                })
                .collect(),
            (_, false) => self
                .bytes
                .chunks_exact(self.bands)
                .flat_map(|p| [p[0]; 3])
                .collect(),
            (_, true) => self
                .bytes
                .chunks_exact(self.bands)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
        };
        Image {
            bands: channels,
            bytes,
            ..self
        }
    }

    /// Writes the image channel by channel (`[C, H, W]`) into `out`.
    fn planar(&self, out: &mut [u8]) {
        let plane = self.width * self.height;
        for (i, p) in self.bytes.chunks_exact(self.bands).enumerate() {
            for (c, &v) in p.iter().enumerate() {
                out[c * plane + i] = v;
            }
        }
    }

    /// Writes the image resized to `height × width` channel by channel into `out`: separable
    /// antialiased bilinear interpolation (the width first, then the height, as libtorch's
    /// `_upsample_bilinear2d_aa`), rounded half to even and clamped to bytes.
    fn planar_resized(&self, height: usize, width: usize, out: &mut [u8]) {
        let across = taps(self.width, width);
        let down = taps(self.height, height);
        let mut rows = vec![0f32; self.height * width];
        for c in 0..self.bands {
            for y in 0..self.height {
                let line = &self.bytes[y * self.width * self.bands..][..self.width * self.bands];
                for (x, (start, weights)) in across.iter().enumerate() {
                    let mut sum = 0f32;
                    for (k, w) in weights.iter().enumerate() {
                        sum += w * f32::from(line[(start + k) * self.bands + c]);
                    }
                    rows[y * width + x] = sum;
                }
            }
            let plane = &mut out[c * height * width..][..height * width];
            for (y, (start, weights)) in down.iter().enumerate() {
                for x in 0..width {
                    let mut sum = 0f32;
                    for (k, w) in weights.iter().enumerate() {
                        sum += w * rows[(start + k) * width + x];
                    }
                    plane[y * width + x] = sum.round_ties_even().clamp(0.0, 255.0) as u8;
                }
            }
        }
    }
}

/// For each of `output` positions resampled from `input`: the first input position it reads
/// and the normalised weights of those it reads from there (a triangle filter widened by the
/// scale when shrinking, as PIL's and libtorch's antialiased bilinear filter).
fn taps(input: usize, output: usize) -> Vec<(usize, Vec<f32>)> {
    let scale = input as f32 / output as f32;
    let (support, invscale) = if scale >= 1.0 {
        (scale, 1.0 / scale)
    } else {
        (1.0, 1.0)
    };
    (0..output)
        .map(|i| {
            let center = scale * (i as f32 + 0.5);
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64).min(input as i64) as usize;
            let mut weights: Vec<f32> = (lo..hi)
                .map(|j| {
                    let x = ((j as f32 - center + 0.5) * invscale).abs();
                    if x < 1.0 {
                        1.0 - x
                    } else {
                        0.0
                    }
                })
                .collect();
            let total: f32 = weights.iter().sum();
            if total != 0.0 {
                weights.iter_mut().for_each(|w| *w /= total);
            }
            (lo, weights)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{data, expect_failure, floats, ints, source_span, Scratch};
    use super::*;
    use kiln::diagnostic::Code;
    use kiln::ir::{Augment, Shape, Source, Targets};
    use tch::Kind;

    /// The folders `tests/images/pil.py` writes into `dir`, and what PIL reads from them.
    fn reference(dir: &std::path::Path) -> serde_json::Value {
        let dir = dir.to_str().expect("utf-8 path");
        crate::toolkit::python_json("image folders", "tests/images/pil.py", &[dir])
    }

    fn pixels(v: &serde_json::Value) -> Vec<i64> {
        fn flat(v: &serde_json::Value, out: &mut Vec<i64>) {
            match v {
                serde_json::Value::Array(items) => items.iter().for_each(|i| flat(i, out)),
                x => out.push(x.as_i64().expect("int")),
            }
        }
        let mut out = Vec::new();
        flat(v, &mut out);
        out
    }

    fn read_folder(dir: &std::path::Path, name: &str, size: [i64; 3], resize: bool) -> Raw {
        let file = DataFile::new(dir, name);
        match read(&file, &size, resize, source_span()) {
            Ok(raw) => raw,
            Err(e) => panic!("{}", kiln::diagnostic::Diagnostic::from(e).message),
        }
    }

    #[test]
    fn png_pixels_are_pils_and_jpeg_within_its_decoder_difference() {
        let dir = Scratch::new();
        let r = reference(&dir.0);
        let same = r["same"].as_array().expect("list");
        for (c, mode) in [(1, "L"), (3, "RGB")] {
            let raw = read_folder(&dir.0, "same", [c, 12, 10], false);
            assert_eq!(raw.inputs.size(), [same.len() as i64, c, 12, 10]);
            let classes: Vec<i64> = same.iter().map(|s| s["class"].as_i64().unwrap()).collect();
            assert_eq!(
                ints(&raw.targets),
                classes,
                "ImageFolder's order and classes"
            );
            let mut jpeg_worst = 0;
            for (i, s) in same.iter().enumerate() {
                let got = ints(&raw.inputs.get(i as i64));
                let want = pixels(&s[mode]);
                let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).max();
                if s["jpeg"].as_bool().unwrap() {
                    jpeg_worst = jpeg_worst.max(worst.unwrap());
                } else {
                    assert_eq!(got, want, "{} as {mode}", s["path"]);
                }
            }
            // jpeg-decoder's integer IDCT and upsampling against libjpeg-turbo's (PIL's): the
            // bound docs/language.md states.
            assert!(
                jpeg_worst <= JPEG_LEVELS,
                "{mode}: JPEG off by {jpeg_worst}"
            );
            assert!(jpeg_worst > 0 || mode == "L", "the JPEGs were compared");
            // Larger JPEGs of several encodings, pixel by pixel: within the bound, and a fraction
            // of a level on average.
            let raw = read_folder(&dir.0, "large", [c, 80, 96], false);
            for (i, s) in r["large"].as_array().expect("list").iter().enumerate() {
                let got = ints(&raw.inputs.get(i as i64));
                let want = pixels(&s[mode]);
                let off: Vec<i64> = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).collect();
                let worst = off.iter().copied().max().unwrap_or(0);
                assert!(
                    worst <= JPEG_LEVELS,
                    "{} as {mode}: off by {worst}",
                    s["path"]
                );
                let mean = off.iter().sum::<i64>() as f64 / off.len() as f64;
                // Measured: greyscale within 1 level, RGB within 3, on average 0.03-0.25.
                assert!(
                    mean <= 0.5,
                    "{} as {mode}: off by {mean} on average",
                    s["path"]
                );
            }
        }
    }

    /// The most a JPEG pixel differs from PIL's, in levels of 255 (docs/language.md).
    const JPEG_LEVELS: i64 = 3;

    #[test]
    fn other_sizes_are_resized_as_torchs_antialiased_bilinear_or_refused() {
        let dir = Scratch::new();
        let r = reference(&dir.0);
        let raw = read_folder(&dir.0, "sizes", [3, 12, 10], true);
        for (i, s) in r["sizes"].as_array().unwrap().iter().enumerate() {
            let got = ints(&raw.inputs.get(i as i64));
            let want = pixels(&s["RGB"]);
            let off: Vec<i64> = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).collect();
            // float32 sums in another order: a value near .5 may round the other way.
            assert!(off.iter().all(|&d| d <= 1), "{}: {off:?}", s["path"]);
            let ones = off.iter().filter(|&&d| d == 1).count();
            assert!(
                ones * 100 <= off.len(),
                "{}: {ones} pixels off by one",
                s["path"]
            );
        }
        let file = DataFile::new(&dir.0, "sizes");
        let refused = read(&file, &[3, 12, 10], false, source_span()).map(|_| ());
        let e = kiln::diagnostic::Diagnostic::from(refused.unwrap_err());
        assert!(
            e.message.contains("a/big.png") && e.message.contains("37 × 29"),
            "{}",
            e.message
        );
        assert!(e.help.unwrap().contains("resize: true"));
    }

    fn images(path: &str, augment: Augment) -> kiln::ir::Data {
        let source = Source::Images {
            path: path.into(),
            size: Shape(vec![3, 12, 10]),
            resize: true,
            augment,
        };
        let mut d = data(source, Targets::Classes(Some(2)), (1.0, 0.0, 0.0));
        d.scale = Some(255.0);
        d
    }

    #[test]
    fn a_folder_loads_scaled_and_bad_images_are_named() {
        let dir = Scratch::new();
        reference(&dir.0);
        let d = images("sizes", Augment::default());
        let splits =
            super::super::load(&d, &[3, 12, 10], kiln::ir::DType::Float, &dir.0, 0).unwrap();
        // Held as bytes, a quarter of floats' memory; scaled as they are gathered.
        let train = &splits.train;
        assert_eq!(train.inputs.kind(), Kind::Uint8);
        let all = Tensor::arange(train.len(), (Kind::Int64, tch::Device::Cpu));
        let (x, _) = train.gather(&all).unwrap();
        assert_eq!(x.kind(), Kind::Float);
        let want = floats(&train.inputs.to_kind(Kind::Float).divide_scalar(255.0));
        assert_eq!(floats(&x), want);
        assert!(want.iter().all(|v| (0.0..=1.0).contains(v)) && want.iter().any(|&v| v > 0.5));
        assert!(splits.train.augment.is_none());
        dir.write("sizes/b/broken.png", b"\x89PNG\r\n\x1a\nnot really");
        let e = expect_failure(
            super::super::load(&d, &[3, 12, 10], kiln::ir::DType::Float, &dir.0, 0),
            Code::DataInvalid,
            "b/broken.png",
        );
        assert!(e.message.contains("not a readable PNG"), "{}", e.message);
        std::fs::remove_file(dir.path("sizes/b/broken.png")).unwrap();
        dir.write("sizes/b/text.jpg", b"hello");
        expect_failure(
            super::super::load(&d, &[3, 12, 10], kiln::ir::DType::Float, &dir.0, 0),
            Code::DataInvalid,
            "neither PNG nor JPEG",
        );
        expect_failure(
            super::super::load(
                &images("nowhere", Augment::default()),
                &[3, 12, 10],
                kiln::ir::DType::Float,
                &dir.0,
                0,
            ),
            Code::DataMissing,
            "nowhere",
        );
    }
}
