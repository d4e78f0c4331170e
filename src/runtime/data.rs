//! Data: loading sources into memory, splitting, and batches prepared ahead of the device.
//!
//! [`load`] reads the source of a checked experiment into CPU tensors, checks them against the
//! model (sample size, element type, class labels), normalises the inputs and splits the samples
//! with a seeded permutation. A [`Loader`] walks one epoch of a [`Dataset`] in batches that a
//! background thread gathers and moves to the device ahead of the training loop.
//!
//! Every problem with the data is a [`Failure`] at the experiment's `source` statement: K0502 when
//! a file cannot be read, K0503 when what it holds is wrong. The file formats (IDX, `.npy`, the
//! zip archive of an `.npz`, CSV) are parsed here with every length checked before a byte is
//! copied: libtorch's own `.npy` reader trusts the header's shape and reads past the end of a
//! truncated file, so a damaged file must be caught before it gets there.
//!
//! Shuffling and splitting use a small Rust PRNG (SplitMix64 with Fisher-Yates), never torch's
//! generator, so that the order of the data does not disturb the random numbers of the model.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kiln::diagnostic::Code;
use kiln::plan::{DType, Data, Generator, Normalize, Source, Split, Targets};
use kiln::span::Span;
use rayon::prelude::*;
use tch::{Device, Kind, TchError, Tensor};

use super::failure::{torch_failure, At, Failure};

/// Batches the background thread prepares ahead of the consumer.
const AHEAD: usize = 2;

/// Rows of a CSV file parsed by one rayon task.
const CSV_ROWS_PER_TASK: usize = 2048;

/// Bytes decoded by one rayon task.
const BYTES_PER_TASK: usize = 1 << 16;

/// Mixed into the seed of the split permutation, so that it differs from the epoch orders
/// derived from the same seed.
const SPLIT_STREAM: u64 = 0x5EED_5B11_7000_0001;

// ---------------------------------------------------------------------------------------------
// Datasets

/// Samples in memory on the CPU.
///
/// `inputs` is `[N, ..model input shape]` (`Kind::Float`, or `Kind::Int64` for token ids);
/// `targets` is `[N]` `Int64` class indices or `[N, ..shape]` `Float` values.
#[derive(Debug)]
pub struct Dataset {
    /// The model's inputs, one row per sample.
    pub inputs: Tensor,
    /// The targets, one row per sample.
    pub targets: Tensor,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> i64 {
        self.inputs.size().first().copied().unwrap_or(0)
    }

    /// The samples at `indices`, copied.
    fn select(&self, indices: &[i64]) -> Result<Dataset, TchError> {
        let index = Tensor::f_from_slice(indices)?;
        Ok(Dataset {
            inputs: self.inputs.f_index_select(0, &index)?,
            targets: self.targets.f_index_select(0, &index)?,
        })
    }
}

/// The splits of the data: training always, validation and test when their fraction gives at
/// least one sample.
#[derive(Debug)]
pub struct Splits {
    /// The training samples.
    pub train: Dataset,
    /// The validation samples.
    pub val: Option<Dataset>,
    /// The test samples.
    pub test: Option<Dataset>,
}

/// Loads and splits the data of a checked experiment.
///
/// `base` is the directory of the `.exp` file that declares the source (relative paths resolve
/// against it); `input` and `input_dtype` are the model's (`kiln::plan::Model::input` and
/// `input_dtype`). Synthetic data is drawn from torch's generator after
/// `tch::manual_seed(seed)`; the split is a permutation seeded with `seed`. Each split keeps its
/// samples in file order. Failures are reported at `data.source_span`.
pub fn load(
    data: &Data,
    input: &[i64],
    input_dtype: DType,
    base: &Path,
    seed: u64,
) -> Result<Splits, Failure> {
    let span = data.source_span;
    let raw = read_source(&data.source, input_dtype, base, seed, span)?;
    let dataset = prepare(raw, data, input, input_dtype)?;
    split(&dataset, &data.split, seed, span)
}

// ---------------------------------------------------------------------------------------------
// Failures

/// A K0503 failure: the data is there but wrong.
fn invalid(
    span: Span,
    message: impl Into<String>,
    label: impl Into<String>,
    help: impl Into<String>,
) -> Failure {
    Failure::new(Code::DataInvalid, span, message)
        .label(label)
        .help(help)
}

/// `[1, 28, 28]`.
fn fmt_shape(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// `` `a`, `b` `` (at most 12 names, then a count).
fn fmt_names(names: &[String]) -> String {
    if names.is_empty() {
        return "nothing".to_string();
    }
    let mut out = String::new();
    for (i, name) in names.iter().take(12).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "`{name}`");
    }
    if names.len() > 12 {
        let _ = write!(out, " and {} more", names.len() - 12);
    }
    out
}

/// A value as a person writes it: `3`, not `3.0`.
fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// numpy's name of a kind, for messages.
fn kind_name(kind: Kind) -> String {
    match kind {
        Kind::Uint8 => "uint8".into(),
        Kind::Int8 => "int8".into(),
        Kind::Int16 => "int16".into(),
        Kind::Int => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Half => "float16".into(),
        Kind::Float => "float32".into(),
        Kind::Double => "float64".into(),
        Kind::BFloat16 => "bfloat16".into(),
        Kind::Bool => "bool".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Kinds whose values are whole numbers.
fn is_integer(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Uint8 | Kind::Int8 | Kind::Int16 | Kind::Int | Kind::Int64 | Kind::Bool
    )
}

/// Kinds of real floating-point values.
fn is_float(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Half
            | Kind::Float
            | Kind::Double
            | Kind::BFloat16
            | Kind::Float8e5m2
            | Kind::Float8e4m3fn
            | Kind::Float8e5m2fnuz
            | Kind::Float8e4m3fnuz
    )
}

// ---------------------------------------------------------------------------------------------
// Files

/// A data file named by the source: as written, and resolved against the `.exp` file's folder.
struct DataFile {
    /// The path as the experiment writes it.
    shown: String,
    /// The path to open.
    path: PathBuf,
    /// The directory relative paths resolve against.
    base: PathBuf,
}

impl DataFile {
    fn new(base: &Path, shown: &str) -> DataFile {
        DataFile {
            shown: shown.to_string(),
            path: base.join(shown),
            base: base.to_path_buf(),
        }
    }

    /// The name in messages: `` `mnist/train.idx` ``.
    fn name(&self) -> String {
        format!("`{}`", self.shown)
    }

    /// K0502 for this file.
    fn missing(&self, why: &str, span: Span) -> Failure {
        let resolved = std::path::absolute(&self.path).unwrap_or_else(|_| self.path.clone());
        let label = if why == "it does not exist" {
            "file not found"
        } else {
            "file cannot be read"
        };
        let base = std::path::absolute(&self.base).unwrap_or_else(|_| self.base.clone());
        Failure::new(
            Code::DataMissing,
            span,
            format!(
                "cannot read the data file {}: {why} (looked for {})",
                self.name(),
                resolved.display()
            ),
        )
        .label(label)
        .help(format!(
            "paths are relative to the directory of the .exp file that declares the source ({})",
            base.display()
        ))
    }

    /// Why the file cannot be read, from an IO error.
    fn reason(error: &std::io::Error) -> String {
        match error.kind() {
            std::io::ErrorKind::NotFound => "it does not exist".into(),
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            _ => error.to_string(),
        }
    }

    /// The whole file.
    fn read(&self, span: Span) -> Result<Vec<u8>, Failure> {
        if self.path.is_dir() {
            return Err(self.missing("it is a directory", span));
        }
        std::fs::read(&self.path).map_err(|e| self.missing(&Self::reason(&e), span))
    }

    /// Checks that the file can be opened, for readers that open it themselves.
    fn check_readable(&self, span: Span) -> Result<(), Failure> {
        if self.path.is_dir() {
            return Err(self.missing("it is a directory", span));
        }
        std::fs::File::open(&self.path)
            .map(drop)
            .map_err(|e| self.missing(&Self::reason(&e), span))
    }
}

/// Decompresses `bytes` when they start with the gzip magic (whatever the file's extension).
fn gunzip(bytes: Vec<u8>, file: &DataFile, span: Span) -> Result<Vec<u8>, Failure> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    // The trailer holds the size modulo 2^32: a hint, capped by deflate's best ratio.
    let hint = match bytes.len().checked_sub(4).and_then(|at| bytes.get(at..)) {
        Some(t) => u32::from_le_bytes([t[0], t[1], t[2], t[3]]) as usize,
        None => 0,
    };
    let mut out = Vec::with_capacity(hint.min(bytes.len().saturating_mul(1032)));
    flate2::read::MultiGzDecoder::new(bytes.as_slice())
        .read_to_end(&mut out)
        .map_err(|e| {
            invalid(
                span,
                format!("{} is gzipped but cannot be decompressed: {e}", file.name()),
                "corrupt gzip data",
                "the file is probably truncated or damaged; download or copy it again",
            )
        })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Sources

/// Tensors read from a source, before they are checked against the model.
struct Raw {
    inputs: Tensor,
    targets: Tensor,
    /// Where the inputs come from, for messages.
    inputs_from: String,
    /// Where the targets come from, for messages.
    targets_from: String,
    /// The file line of each sample (CSV), for messages.
    lines: Option<Vec<usize>>,
}

impl Raw {
    fn new(inputs: Tensor, targets: Tensor, inputs_from: String, targets_from: String) -> Raw {
        Raw {
            inputs,
            targets,
            inputs_from,
            targets_from,
            lines: None,
        }
    }

    /// How messages name sample `i`.
    fn sample(&self, i: i64) -> String {
        match self
            .lines
            .as_ref()
            .and_then(|l| l.get(usize::try_from(i).ok()?))
        {
            Some(line) => format!("line {line}"),
            None => format!("sample {i}"),
        }
    }
}

fn read_source(
    source: &Source,
    dtype: DType,
    base: &Path,
    seed: u64,
    span: Span,
) -> Result<Raw, Failure> {
    match source {
        Source::Synthetic {
            inputs,
            targets,
            count,
        } => synthetic(inputs, targets, *count, seed, span),
        Source::Idx { images, labels } => idx(
            &DataFile::new(base, images),
            &DataFile::new(base, labels),
            dtype,
            span,
        ),
        Source::Npy { inputs, targets } => {
            let (fi, ft) = (DataFile::new(base, inputs), DataFile::new(base, targets));
            let x = npy_file(&fi, span)?;
            let y = npy_file(&ft, span)?;
            Ok(Raw::new(x, y, fi.name(), ft.name()))
        }
        Source::Npz {
            path,
            inputs,
            targets,
        } => npz(&DataFile::new(base, path), inputs, targets, span),
        Source::Csv {
            path,
            target,
            header,
        } => csv(&DataFile::new(base, path), target, *header, span),
        Source::Safetensors {
            path,
            inputs,
            targets,
        } => safetensors(&DataFile::new(base, path), inputs, targets, span),
    }
}

// Synthetic ------------------------------------------------------------------------------------

fn synthetic(
    inputs: &Generator,
    targets: &Generator,
    count: u64,
    seed: u64,
    span: Span,
) -> Result<Raw, Failure> {
    tch::manual_seed(seed as i64);
    let x = generate(inputs, count, span)?;
    let y = generate(targets, count, span)?;
    Ok(Raw::new(
        x,
        y,
        "the synthetic inputs".into(),
        "the synthetic targets".into(),
    ))
}

/// `count` samples, as `torch.randn(count, *shape)` and friends.
fn generate(g: &Generator, count: u64, span: Span) -> Result<Tensor, Failure> {
    let too_many = || {
        invalid(
            span,
            format!(
                "{count} synthetic samples of {} are too many values",
                fmt_shape(g.shape())
            ),
            "too many values",
            "use fewer samples",
        )
    };
    let n = i64::try_from(count).map_err(|_| too_many())?;
    let mut size = vec![n];
    size.extend_from_slice(g.shape());
    size.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(too_many)?;
    let options = (Kind::Float, Device::Cpu);
    let t = match *g {
        Generator::Normal { mean, std, .. } => {
            let t = Tensor::f_randn(size.as_slice(), options).at(span)?;
            if std == 1.0 && mean == 0.0 {
                t
            } else {
                t.f_mul_scalar(std).at(span)?.f_add_scalar(mean).at(span)?
            }
        }
        Generator::Uniform { low, high, .. } => {
            let t = Tensor::f_rand(size.as_slice(), options).at(span)?;
            if low == 0.0 && high == 1.0 {
                t
            } else {
                t.f_mul_scalar(high - low)
                    .at(span)?
                    .f_add_scalar(low)
                    .at(span)?
            }
        }
        Generator::Randint { high, .. } => {
            let high = i64::try_from(high).map_err(|_| {
                invalid(
                    span,
                    format!("`randint({high})` is beyond 64-bit integers"),
                    "bound too large",
                    "use a smaller bound",
                )
            })?;
            Tensor::f_randint(high, size.as_slice(), (Kind::Int64, Device::Cpu)).at(span)?
        }
    };
    Ok(t)
}

// IDX ------------------------------------------------------------------------------------------

/// A parsed IDX file of unsigned bytes.
struct Idx<'a> {
    /// The dimensions, the sample count first.
    dims: Vec<usize>,
    /// The values.
    body: &'a [u8],
}

/// What an IDX file is expected to hold.
#[derive(Clone, Copy, PartialEq)]
enum IdxRole {
    Images,
    Labels,
}

/// Parses an IDX file of unsigned bytes (magic `00 00 08 ndims`), checking its length.
fn parse_idx<'a>(
    bytes: &'a [u8],
    role: IdxRole,
    file: &DataFile,
    gzipped: bool,
    span: Span,
) -> Result<Idx<'a>, Failure> {
    let name = file.name();
    let held = if gzipped {
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
    if bytes.len() < 4 {
        return Err(truncated("at least a 4-byte header".into(), bytes.len()));
    }
    let found = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(wrong(format!(
            "{name} is not an IDX file: it starts with 0x{found:08x}, but IDX {what} start with {magic}"
        )));
    }
    if bytes[2] != 0x08 {
        let kind = match bytes[2] {
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
    let ndims = usize::from(bytes[3]);
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
    let Some(raw_dims) = bytes.get(4..header) else {
        return Err(truncated(
            format!("{ndims} dimensions ({header} header bytes)"),
            bytes.len(),
        ));
    };
    let dims: Vec<usize> = raw_dims
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let described = dims
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" x ");
    let total = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .and_then(|n| n.checked_add(header))
        .ok_or_else(|| {
            invalid(
                span,
                format!("{name} describes {described} values, more than memory can address"),
                "malformed header",
                "the header is damaged; download or copy the file again",
            )
        })?;
    if bytes.len() < total {
        return Err(truncated(
            format!("{described} values ({total} bytes with the header)"),
            bytes.len(),
        ));
    }
    if bytes.len() > total {
        return Err(invalid(
            span,
            format!(
                "{name} holds {} bytes after the {described} values ({total} bytes with the header) it describes",
                bytes.len() - total
            ),
            "malformed file",
            "the header does not match the data; download or copy the file again",
        ));
    }
    Ok(Idx {
        dims,
        body: &bytes[header..],
    })
}

fn idx(images: &DataFile, labels: &DataFile, dtype: DType, span: Span) -> Result<Raw, Failure> {
    let image_bytes = images.read(span)?;
    let image_gz = image_bytes.starts_with(&[0x1f, 0x8b]);
    let image_bytes = gunzip(image_bytes, images, span)?;
    let label_bytes = labels.read(span)?;
    let label_gz = label_bytes.starts_with(&[0x1f, 0x8b]);
    let label_bytes = gunzip(label_bytes, labels, span)?;
    let img = parse_idx(&image_bytes, IdxRole::Images, images, image_gz, span)?;
    let lab = parse_idx(&label_bytes, IdxRole::Labels, labels, label_gz, span)?;
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
    let shape: Vec<i64> = img.dims.iter().map(|&d| d as i64).collect();
    let x = match dtype {
        // Grey levels in [0, 1], as torchvision's `ToTensor`.
        DType::Float => {
            let mut pixels = vec![0f32; img.body.len()];
            pixels
                .par_chunks_mut(BYTES_PER_TASK)
                .zip(img.body.par_chunks(BYTES_PER_TASK))
                .for_each(|(out, bytes)| {
                    for (o, &b) in out.iter_mut().zip(bytes) {
                        *o = f32::from(b) / 255.0;
                    }
                });
            Tensor::f_from_slice(&pixels)
                .and_then(|t| t.f_reshape(shape.as_slice()))
                .at(span)?
        }
        // Token ids: the bytes themselves.
        DType::Int => Tensor::f_from_data_size(img.body, &shape, Kind::Uint8).at(span)?,
    };
    let y = Tensor::f_from_data_size(lab.body, &[shape[0]], Kind::Uint8).at(span)?;
    Ok(Raw::new(x, y, images.name(), labels.name()))
}

// NPY ------------------------------------------------------------------------------------------

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
                "it holds {what} (`{descr}`), but only real numbers are supported"
            ))
        }
    }
}

/// The text after `'key':` in a numpy header dictionary.
fn npy_field<'h>(header: &'h str, key: &str) -> Result<&'h str, String> {
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

/// Parses `.npy` bytes (format versions 1 to 3).
fn parse_npy(bytes: &[u8]) -> Result<NpyArray<'_>, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if !bytes.starts_with(MAGIC) {
        return Err(if MAGIC.starts_with(bytes) {
            "it is truncated inside its magic string".into()
        } else {
            "it does not start with the .npy magic string".into()
        });
    }
    let (header_len, start): (usize, usize) = match bytes.get(6) {
        Some(1) => match bytes.get(8..10) {
            Some(b) => (usize::from(u16::from_le_bytes([b[0], b[1]])), 10),
            None => return Err("it is truncated inside its header".into()),
        },
        Some(2 | 3) => match bytes.get(8..12) {
            Some(b) => (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12),
            None => return Err("it is truncated inside its header".into()),
        },
        Some(v) => return Err(format!("its format version {v} is not supported")),
        None => return Err("it is truncated inside its header".into()),
    };
    let end = start.saturating_add(header_len);
    let header = bytes
        .get(start..end)
        .ok_or("it is truncated inside its header")?;
    let header = std::str::from_utf8(header).map_err(|_| "its header is not text")?;

    let descr_text = npy_field(header, "descr")?;
    if descr_text.starts_with('[') {
        return Err("it holds a structured array; only plain numeric arrays are supported".into());
    }
    let quote = descr_text
        .chars()
        .next()
        .filter(|&c| c == '\'' || c == '"')
        .ok_or("its header's `descr` is not a string")?;
    let descr = descr_text[1..]
        .split(quote)
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
        .map_err(|_| format!("its header's shape ({inner}) is not a tuple of sizes"))?;
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("its header's shape ({inner}) has a negative size"));
    }
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or_else(|| format!("its shape ({inner}) is too large"))?;
    let need = count
        .checked_mul(item)
        .ok_or_else(|| format!("its shape ({inner}) is too large"))?;
    let body = &bytes[end..];
    if body.len() < need {
        return Err(format!(
            "it is truncated: its header describes {} values of `{descr}` ({need} bytes), but only {} bytes follow it",
            fmt_shape(&shape),
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
fn npy_bytes(bytes: &[u8], what: &str, span: Span) -> Result<Tensor, Failure> {
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

fn npy_file(file: &DataFile, span: Span) -> Result<Tensor, Failure> {
    let bytes = file.read(span)?;
    npy_bytes(&bytes, &file.name(), span)
}

// NPZ (zip) ------------------------------------------------------------------------------------

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

/// The uncompressed bytes of a member, checked against its CRC-32.
fn zip_extract<'a>(b: &'a [u8], entry: &ZipEntry) -> Result<Cow<'a, [u8]>, String> {
    const LOCAL: u32 = 0x0403_4b50;
    let corrupt = || format!("its member `{}` is corrupt or truncated", entry.name);
    if entry.flags & 1 != 0 {
        return Err(format!("its member `{}` is encrypted", entry.name));
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
        8 => {
            let mut out = Vec::with_capacity(size.min(data.len().saturating_mul(1032)));
            flate2::read::DeflateDecoder::new(data)
                .take(entry.size.saturating_add(1))
                .read_to_end(&mut out)
                .map_err(|_| corrupt())?;
            if out.len() != size {
                return Err(corrupt());
            }
            Cow::Owned(out)
        }
        m => {
            return Err(format!(
                "its member `{}` uses zip compression method {m}; only stored and deflated members (as `np.savez` and `np.savez_compressed` write) are supported",
                entry.name
            ))
        }
    };
    let mut crc = flate2::Crc::new();
    crc.update(&out);
    if crc.sum() != entry.crc {
        return Err(format!(
            "its member `{}` fails its checksum (the archive is damaged)",
            entry.name
        ));
    }
    Ok(out)
}

/// A missing array or tensor: K0503 naming the key and the keys present.
fn missing_key(file: &DataFile, what: &str, key: &str, present: &[String], span: Span) -> Failure {
    let mut present = present.to_vec();
    present.sort();
    let plural = if present.len() == 1 { "" } else { "s" };
    invalid(
        span,
        format!(
            "{} has no {what} `{key}`; its {what}{plural}: {}",
            file.name(),
            fmt_names(&present)
        ),
        format!("no {what} `{key}`"),
        format!("name the {what}s with `inputs:` and `targets:`"),
    )
}

fn npz(file: &DataFile, inputs: &str, targets: &str, span: Span) -> Result<Raw, Failure> {
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
    let array = |key: &str| -> Result<Tensor, Failure> {
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

// Safetensors ----------------------------------------------------------------------------------

fn safetensors(file: &DataFile, inputs: &str, targets: &str, span: Span) -> Result<Raw, Failure> {
    file.check_readable(span)?;
    let mut tensors = Tensor::read_safetensors(&file.path).map_err(|e| match e {
        TchError::Torch(message) => torch_failure(&message, span),
        other => invalid(
            span,
            format!("{} is not a valid safetensors file: {other}", file.name()),
            "malformed file",
            "write the file with `safetensors.torch.save_file` or `safetensors.numpy.save_file`",
        ),
    })?;
    let names: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    let mut take = |key: &str| -> Result<Tensor, Failure> {
        let at = tensors
            .iter()
            .position(|(n, _)| n == key)
            .ok_or_else(|| missing_key(file, "tensor", key, &names, span))?;
        Ok(tensors.swap_remove(at).1)
    };
    let x = take(inputs)?;
    let y = take(targets)?;
    Ok(Raw::new(
        x,
        y,
        format!("the tensor `{inputs}` in {}", file.name()),
        format!("the tensor `{targets}` in {}", file.name()),
    ))
}

// CSV ------------------------------------------------------------------------------------------

/// The numbers of a CSV file.
#[derive(Debug)]
struct CsvData {
    /// Row-major input features, `rows x (columns - 1)`.
    features: Vec<f32>,
    /// The target of each row.
    targets: Vec<f64>,
    /// Input features per row.
    width: usize,
    /// The 1-based file line of each row.
    lines: Vec<usize>,
}

/// The features and targets of consecutive CSV rows.
type CsvChunk = (Vec<f32>, Vec<f64>);

/// Splits a CSV line at commas outside double quotes.
fn split_cells<'l>(line: &'l str, cells: &mut Vec<&'l str>) {
    cells.clear();
    let mut start = 0;
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                cells.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cells.push(&line[start..]);
}

/// A cell without surrounding blanks and quotes.
fn unquote(cell: &str) -> Cow<'_, str> {
    let t = cell.trim();
    match t.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) if inner.contains("\"\"") => Cow::Owned(inner.replace("\"\"", "\"")),
        Some(inner) => Cow::Borrowed(inner.trim()),
        None => Cow::Borrowed(t),
    }
}

/// Parses CSV text: every column but the target is an input feature.
fn parse_csv(
    text: &str,
    target: &str,
    header: bool,
    file: &DataFile,
    span: Span,
) -> Result<CsvData, Failure> {
    let name = file.name();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rows: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    let Some(&(_, first)) = rows.first() else {
        return Err(invalid(
            span,
            format!("{name} is empty"),
            "no rows",
            "a CSV source needs one row per sample",
        ));
    };
    let mut cells = Vec::new();
    split_cells(first, &mut cells);
    let columns = cells.len();
    let names: Vec<String> = if header {
        cells.iter().map(|c| unquote(c).into_owned()).collect()
    } else {
        (0..columns).map(|c| c.to_string()).collect()
    };
    let column = if header {
        names.iter().position(|n| n == target).ok_or_else(|| {
            invalid(
                span,
                format!(
                    "{name} has no column `{target}`; its columns: {}",
                    fmt_names(&names)
                ),
                format!("no column `{target}`"),
                "name the target column with `target:`, or write `header: false` for a file without a header row",
            )
        })?
    } else {
        let index = target.trim().parse::<usize>().map_err(|_| {
            invalid(
                span,
                format!(
                    "without a header row, `target` must be a column index counted from 0, not `{target}`"
                ),
                "no header to find the column in",
                "write `target: \"0\"` for the first column, or `header: true` if the first row names the columns",
            )
        })?;
        if index >= columns {
            return Err(invalid(
                span,
                format!(
                    "{name} has {columns} column{}, so it has no column {index} (counted from 0)",
                    if columns == 1 { "" } else { "s" }
                ),
                "target column out of range",
                format!("give `target` a column index below {columns}"),
            ));
        }
        index
    };
    if columns < 2 {
        let separator = [';', '\t', '|']
            .into_iter()
            .find(|&s| first.contains(s))
            .map(|s| {
                format!(
                    "; the file seems to separate cells with {s:?}, but only commas are supported"
                )
            })
            .unwrap_or_default();
        return Err(invalid(
            span,
            format!("{name} has a single column, the target, so the samples have no inputs"),
            "no input columns",
            format!(
                "a CSV source needs the target column and at least one input column{separator}"
            ),
        ));
    }
    let body = if header { &rows[1..] } else { &rows[..] };
    if body.is_empty() {
        return Err(invalid(
            span,
            format!("{name} has a header but no rows"),
            "no samples",
            "a CSV source needs one row per sample after the header",
        ));
    }
    let width = columns - 1;
    let counted = if header {
        "the header has"
    } else {
        "the first row has"
    };
    let parsed: Vec<Result<CsvChunk, Failure>> = body
        .par_chunks(CSV_ROWS_PER_TASK)
        .map(|chunk| {
            let mut features = Vec::with_capacity(chunk.len() * width);
            let mut targets = Vec::with_capacity(chunk.len());
            let mut cells = Vec::with_capacity(columns);
            for &(line, text) in chunk {
                split_cells(text, &mut cells);
                if cells.len() != columns {
                    return Err(invalid(
                        span,
                        format!(
                            "line {line} of {name} has {} cells, but {counted} {columns}",
                            cells.len()
                        ),
                        format!("ragged row on line {line}"),
                        "every row needs one cell per column",
                    ));
                }
                for (c, cell) in cells.iter().enumerate() {
                    let value = unquote(cell);
                    let place = if header {
                        format!("column `{}`", names[c])
                    } else {
                        format!("column {c}")
                    };
                    let number = if value.is_empty() {
                        Err(format!("line {line} of {name} has an empty cell in {place}"))
                    } else {
                        match value.parse::<f64>() {
                            Ok(v) if v.is_finite() => Ok(v),
                            Ok(_) => Err(format!(
                                "line {line} of {name} has `{value}` in {place}, which is not a finite number"
                            )),
                            Err(_) => Err(format!(
                                "line {line} of {name} has `{value}` in {place}, which is not a number"
                            )),
                        }
                    };
                    let v = number.map_err(|message| {
                        invalid(
                            span,
                            message,
                            format!("bad cell on line {line}"),
                            "every cell must be a number; fill in or remove missing values",
                        )
                    })?;
                    if c == column {
                        targets.push(v);
                    } else {
                        features.push(v as f32);
                    }
                }
            }
            Ok((features, targets))
        })
        .collect();
    let mut features = Vec::with_capacity(body.len() * width);
    let mut targets = Vec::with_capacity(body.len());
    for part in parsed {
        let (f, t) = part?;
        features.extend_from_slice(&f);
        targets.extend_from_slice(&t);
    }
    Ok(CsvData {
        features,
        targets,
        width,
        lines: body.iter().map(|&(line, _)| line).collect(),
    })
}

fn csv(file: &DataFile, target: &str, header: bool, span: Span) -> Result<Raw, Failure> {
    let bytes = file.read(span)?;
    let text = String::from_utf8_lossy(&bytes);
    let data = parse_csv(&text, target, header, file, span)?;
    let n = data.targets.len() as i64;
    let x = Tensor::f_from_slice(&data.features)
        .and_then(|t| t.f_reshape([n, data.width as i64]))
        .at(span)?;
    // Whole numbers are integer targets (class labels); any fraction makes them real values.
    let whole = data
        .targets
        .iter()
        .all(|v| v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0);
    let y = if whole {
        let ints: Vec<i64> = data.targets.iter().map(|&v| v as i64).collect();
        Tensor::f_from_slice(&ints)
    } else {
        Tensor::f_from_slice(&data.targets)
    }
    .at(span)?;
    let target_name = if header {
        format!("the column `{target}` of {}", file.name())
    } else {
        format!("column {} of {}", target.trim(), file.name())
    };
    let mut raw = Raw::new(x, y, file.name(), target_name);
    raw.lines = Some(data.lines);
    Ok(raw)
}

// ---------------------------------------------------------------------------------------------
// Checking against the model

/// The flat index of the first `true` of a boolean tensor, if any.
fn first_true(mask: &Tensor) -> Result<Option<i64>, TchError> {
    let flat = mask.f_reshape([-1])?;
    if flat.f_any()?.f_int64_value(&[])? == 0 {
        return Ok(None);
    }
    // `argmax` returns the first of equal maxima.
    let at = flat
        .f_to_kind(Kind::Uint8)?
        .f_argmax(0, false)?
        .f_int64_value(&[])?;
    Ok(Some(at))
}

/// The first value of a float tensor that is not a whole number: `(flat index, value)`.
fn first_fraction(t: &Tensor) -> Result<Option<(i64, f64)>, TchError> {
    let mask = t.f_frac()?.f_ne(0.0)?;
    match first_true(&mask)? {
        Some(i) => Ok(Some((i, t.f_reshape([-1])?.f_double_value(&[i])?))),
        None => Ok(None),
    }
}

/// Checks the raw tensors against the model and the targets, and shapes them.
fn prepare(raw: Raw, data: &Data, input: &[i64], dtype: DType) -> Result<Dataset, Failure> {
    let span = data.source_span;
    let xs = raw.inputs.size();
    let ys = raw.targets.size();
    let Some(&n) = xs.first() else {
        return Err(invalid(
            span,
            format!(
                "{} holds a single value, not one row per sample",
                raw.inputs_from
            ),
            "no samples",
            "the inputs' first dimension counts the samples",
        ));
    };
    let Some(&m) = ys.first() else {
        return Err(invalid(
            span,
            format!(
                "{} holds a single value, not one per sample",
                raw.targets_from
            ),
            "no samples",
            "the targets' first dimension counts the samples",
        ));
    };
    if n != m {
        return Err(invalid(
            span,
            format!(
                "{} holds {n} samples but {} holds {m} targets",
                raw.inputs_from, raw.targets_from
            ),
            "counts differ",
            "the inputs and the targets need one row per sample each",
        ));
    }
    if n == 0 {
        return Err(invalid(
            span,
            format!("{} holds no samples", raw.inputs_from),
            "no samples",
            "the data needs at least one sample",
        ));
    }
    let inputs = shape_inputs(&raw, n, input, dtype, span)?;
    let inputs = normalize(inputs, data.normalize.as_ref(), input, span)?;
    let targets = shape_targets(&raw, n, &data.targets, span)?;
    Ok(Dataset { inputs, targets })
}

/// `[N, ..input]`, Float or Int64 by the model's input type.
fn shape_inputs(
    raw: &Raw,
    n: i64,
    input: &[i64],
    dtype: DType,
    span: Span,
) -> Result<Tensor, Failure> {
    let from = &raw.inputs_from;
    let x = &raw.inputs;
    let xs = x.size();
    let per: i64 = xs[1..].iter().product();
    let want: i64 = input.iter().product();
    if per != want {
        return Err(invalid(
            span,
            format!(
                "{from} holds samples of {per} values {}, but the model's input {} holds {want}",
                fmt_shape(&xs[1..]),
                fmt_shape(input)
            ),
            "wrong sample size",
            format!(
                "make the model's input hold {per} values, for example `input {}`",
                fmt_shape(&xs[1..])
            ),
        ));
    }
    let kind = x.f_kind().at(span)?;
    let unsupported = || {
        invalid(
            span,
            format!(
                "{from} holds {} values, but only real numbers are supported",
                kind_name(kind)
            ),
            "unsupported element type",
            "store the inputs as floats or integers",
        )
    };
    let mut shape = vec![n];
    shape.extend_from_slice(input);
    let x = x.f_reshape(shape.as_slice()).at(span)?;
    match dtype {
        DType::Float if is_float(kind) || is_integer(kind) => x.f_to_kind(Kind::Float).at(span),
        DType::Int if is_integer(kind) => x.f_to_kind(Kind::Int64).at(span),
        DType::Int if is_float(kind) => {
            if let Some((i, v)) = first_fraction(&x).at(span)? {
                let sample = raw.sample(i / want.max(1));
                return Err(invalid(
                    span,
                    format!(
                        "{from} holds {} for {sample}, but the model takes integer token ids",
                        fmt_value(v)
                    ),
                    "not a token id",
                    "store token ids as integers",
                ));
            }
            x.f_to_kind(Kind::Int64).at(span)
        }
        _ => Err(unsupported()),
    }
}

/// `(x - mean) / std`, per channel (dimension 1) when several values are given. Integer inputs
/// (token ids) are left alone.
fn normalize(
    x: Tensor,
    norm: Option<&Normalize>,
    input: &[i64],
    span: Span,
) -> Result<Tensor, Failure> {
    let Some(norm) = norm else {
        return Ok(x);
    };
    if x.f_kind().at(span)? != Kind::Float {
        return Ok(x);
    }
    let channels = norm.mean.len().max(norm.std.len());
    let expand = |v: &[f64]| -> Vec<f32> {
        if v.len() == 1 {
            vec![v[0] as f32; channels]
        } else {
            v.iter().map(|&x| x as f32).collect()
        }
    };
    let (mean, std) = (expand(&norm.mean), expand(&norm.std));
    if mean.len() != channels || std.len() != channels || std.contains(&0.0) {
        return Err(invalid(
            span,
            "`normalize` needs as many means as standard deviations, none of them zero",
            "invalid normalisation",
            "give one mean and one non-zero std, or one of each per channel",
        ));
    }
    let shape: Vec<i64> = if channels == 1 {
        vec![]
    } else {
        if input.first() != Some(&(channels as i64)) {
            let have = match input.first() {
                Some(c) => format!("{c} channels"),
                None => "no channel dimension".to_string(),
            };
            return Err(invalid(
                span,
                format!(
                    "`normalize` gives {channels} values, one per channel, but the samples {} have {have}",
                    fmt_shape(input)
                ),
                "channel count differs",
                "give one mean and std per channel (the first dimension of the model's input), or a single value for all",
            ));
        }
        let mut s = vec![1i64; input.len() + 1];
        s[1] = channels as i64;
        s
    };
    let to_tensor = |v: &[f32]| Tensor::f_from_slice(v).and_then(|t| t.f_reshape(shape.as_slice()));
    let mean = to_tensor(&mean).at(span)?;
    let std = to_tensor(&std).at(span)?;
    x.f_sub(&mean).and_then(|t| t.f_div(&std)).at(span)
}

/// `[N]` Int64 class indices (checked against the class count) or `[N, ..shape]` Float values.
fn shape_targets(raw: &Raw, n: i64, targets: &Targets, span: Span) -> Result<Tensor, Failure> {
    let from = &raw.targets_from;
    let y = &raw.targets;
    let ys = y.size();
    let per: i64 = ys[1..].iter().product();
    let kind = y.f_kind().at(span)?;
    if !is_integer(kind) && !is_float(kind) {
        return Err(invalid(
            span,
            format!(
                "{from} holds {} values, but only real numbers are supported",
                kind_name(kind)
            ),
            "unsupported element type",
            "store the targets as integers (class labels) or floats (values)",
        ));
    }
    match targets {
        Targets::Classes(classes) => {
            if per != 1 {
                return Err(invalid(
                    span,
                    format!(
                        "{from} holds {per} values per sample {}, but class labels are one per sample",
                        fmt_shape(&ys[1..])
                    ),
                    "not class labels",
                    "give one class index per sample",
                ));
            }
            let y = y.f_reshape([n]).at(span)?;
            if is_float(kind) {
                if let Some((i, v)) = first_fraction(&y).at(span)? {
                    return Err(invalid(
                        span,
                        format!(
                            "{from} holds {} for {}, which is not a class index",
                            fmt_value(v),
                            raw.sample(i)
                        ),
                        "not a class label",
                        "class labels are whole numbers from 0",
                    ));
                }
            }
            let y = y.f_to_kind(Kind::Int64).at(span)?;
            if let Some(k) = classes {
                let k = i64::try_from(*k).unwrap_or(i64::MAX);
                let outside = y
                    .f_lt(0)
                    .and_then(|low| low.f_logical_or(&y.f_ge(k)?))
                    .at(span)?;
                if let Some(i) = first_true(&outside).at(span)? {
                    let label = y.f_int64_value(&[i]).at(span)?;
                    return Err(invalid(
                        span,
                        format!(
                            "{from} holds the label {label} for {}, outside the {k} classes [0, {k})",
                            raw.sample(i)
                        ),
                        "label out of range",
                        format!("labels must lie in [0, {k}); check `classes:` and the file"),
                    ));
                }
            }
            Ok(y)
        }
        Targets::Values(shape) => {
            let want: i64 = shape.iter().product();
            if per != want {
                return Err(invalid(
                    span,
                    format!(
                        "{from} holds {per} values per sample {}, but the targets are declared as {} ({want} values)",
                        fmt_shape(&ys[1..]),
                        fmt_shape(shape)
                    ),
                    "wrong target size",
                    "make the targets' shape match the data",
                ));
            }
            let mut s = vec![n];
            s.extend_from_slice(shape);
            y.f_reshape(s.as_slice())
                .and_then(|t| t.f_to_kind(Kind::Float))
                .at(span)
        }
        Targets::Unknown if is_integer(kind) => {
            let y = if per == 1 {
                y.f_reshape([n]).at(span)?
            } else {
                y.shallow_clone()
            };
            y.f_to_kind(Kind::Int64).at(span)
        }
        Targets::Unknown => y.f_to_kind(Kind::Float).at(span),
    }
}

// ---------------------------------------------------------------------------------------------
// Splitting

/// Samples in each split: `floor(fraction x n)` each, in order train, val, test.
///
/// A relative tolerance of 1e-12 keeps `0.29 x 100` at 29 despite its rounding in binary.
fn split_counts(n: usize, split: &Split) -> (usize, usize, usize) {
    let count = |f: f64, left: usize| -> usize {
        let c = (f.max(0.0) * n as f64 * (1.0 + 1e-12)).floor();
        (c as usize).min(left)
    };
    let train = count(split.train, n);
    let val = count(split.val, n - train);
    let test = count(split.test, n - train - val);
    (train, val, test)
}

fn split(data: &Dataset, split: &Split, seed: u64, span: Span) -> Result<Splits, Failure> {
    let n = usize::try_from(data.len()).unwrap_or(0);
    let (train, val, test) = split_counts(n, split);
    if train == 0 {
        return Err(invalid(
            span,
            format!(
                "the training split is empty: {} of {n} sample{} is less than one",
                split.train,
                if n == 1 { "" } else { "s" }
            ),
            "no training samples",
            "use more samples or a larger `train` fraction",
        ));
    }
    let order = permutation(n, seed ^ SPLIT_STREAM);
    let part = |from: usize, len: usize| -> Result<Option<Dataset>, Failure> {
        if len == 0 {
            return Ok(None);
        }
        let mut indices = order[from..from + len].to_vec();
        indices.sort_unstable();
        data.select(&indices).map(Some).at(span)
    };
    let train_set = part(0, train)?.ok_or_else(|| {
        invalid(
            span,
            "the training split is empty",
            "no training samples",
            "use more samples",
        )
    })?;
    Ok(Splits {
        train: train_set,
        val: part(train, val)?,
        test: part(train + val, test)?,
    })
}

/// SplitMix64 (Steele, Lea and Flood, 2014): small, fast, and good enough to shuffle.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on `[0, bound)` without bias (Lemire, 2019). `bound` must be positive.
    fn below(&mut self, bound: u64) -> u64 {
        let mut m = u128::from(self.next()) * u128::from(bound);
        if (m as u64) < bound {
            let threshold = bound.wrapping_neg() % bound;
            while (m as u64) < threshold {
                m = u128::from(self.next()) * u128::from(bound);
            }
        }
        (m >> 64) as u64
    }
}

/// A uniformly random permutation of `0..n` (Fisher-Yates).
fn permutation(n: usize, seed: u64) -> Vec<i64> {
    let mut order: Vec<i64> = (0..n as i64).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// The seed of one epoch's order.
fn epoch_seed(order_seed: u64, epoch: u64) -> u64 {
    let a = SplitMix64(order_seed).next();
    SplitMix64(a ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03)).next()
}

// ---------------------------------------------------------------------------------------------
// Batches

/// Builds the batches of one epoch.
struct Producer {
    inputs: Tensor,
    targets: Tensor,
    order: Arc<[i64]>,
    batch: usize,
    device: Device,
}

impl Producer {
    /// A producer sharing this one's tensors.
    fn share(&self) -> Producer {
        Producer {
            inputs: self.inputs.shallow_clone(),
            targets: self.targets.shallow_clone(),
            order: Arc::clone(&self.order),
            batch: self.batch,
            device: self.device,
        }
    }

    /// Batch `b` of the epoch, on the device.
    fn make(&self, b: usize) -> Result<(Tensor, Tensor), TchError> {
        let start = b * self.batch;
        let end = (start + self.batch).min(self.order.len());
        let index =
            Tensor::f_from_slice(&self.order[start..end])?.f_to_device(self.inputs.device())?;
        let x = self.inputs.f_index_select(0, &index)?;
        let y = self.targets.f_index_select(0, &index)?;
        Ok((to_device(x, self.device)?, to_device(y, self.device)?))
    }
}

/// Moves a batch to the device; the copy to a CUDA device does not wait for the device.
fn to_device(t: Tensor, device: Device) -> Result<Tensor, TchError> {
    if t.device() == device {
        return Ok(t);
    }
    match device {
        Device::Cuda(_) => {
            let kind = t.f_kind()?;
            t.f_to_device_(device, kind, true, false)
        }
        _ => t.f_to_device(device),
    }
}

/// One epoch of batches of a dataset, prepared ahead in a background thread.
///
/// The thread gathers each batch with `index_select` and moves it to the device, keeping at most
/// two batches ahead of the consumer. Dropping the loader mid-epoch stops the thread and waits
/// for it (at most the batch it is building). Failures of libtorch (a device out of memory) are
/// reported at the span given by [`Loader::at`], which should be the experiment's `batch`
/// statement; after one the iterator ends.
pub struct Loader {
    /// Batches from the thread; `None` when it could not be started or once dropped.
    batches: Option<Receiver<Result<(Tensor, Tensor), String>>>,
    /// Tells the thread to stop.
    stop: Arc<AtomicBool>,
    /// The thread.
    worker: Option<JoinHandle<()>>,
    /// Builds batches in `next` when no thread could be started.
    inline: Option<Producer>,
    /// The next batch index when building inline.
    next_batch: usize,
    /// Batches still to yield.
    remaining: usize,
    /// Time spent blocked waiting for the thread.
    waited: Duration,
    /// Where failures are reported.
    span: Span,
}

impl Loader {
    /// Starts an epoch of `batch`-sized batches of `dataset` (the last one may be smaller, as in
    /// PyTorch's `DataLoader`).
    ///
    /// With `shuffle`, the order is a permutation computed with a small Rust PRNG (SplitMix64,
    /// Fisher-Yates) seeded from `(order_seed, epoch)`, never torch's generator; without, the
    /// dataset's order. The first `skip` batches are skipped (resuming mid-epoch). Batches arrive
    /// on `device`. Fails only when `batch` is below 1 (at [`Span::default`]; the checker rules
    /// that out).
    pub fn new(
        dataset: &Dataset,
        batch: i64,
        shuffle: bool,
        order_seed: u64,
        epoch: u64,
        skip: usize,
        device: Device,
    ) -> Result<Loader, Failure> {
        if batch < 1 {
            return Err(Failure::new(
                Code::DataInvalid,
                Span::default(),
                format!("the batch size must be at least 1, not {batch}"),
            )
            .label("invalid batch size")
            .help("give `batch` a positive number of samples"));
        }
        let len = usize::try_from(dataset.len()).unwrap_or(0);
        let total = Self::batches_per_epoch(dataset.len(), batch);
        let order: Arc<[i64]> = if shuffle {
            permutation(len, epoch_seed(order_seed, epoch)).into()
        } else {
            (0..len as i64).collect::<Vec<_>>().into()
        };
        let producer = Producer {
            inputs: dataset.inputs.shallow_clone(),
            targets: dataset.targets.shallow_clone(),
            order,
            batch: usize::try_from(batch).unwrap_or(usize::MAX),
            device,
        };
        let mut loader = Loader {
            batches: None,
            stop: Arc::new(AtomicBool::new(false)),
            worker: None,
            inline: None,
            next_batch: skip,
            remaining: total.saturating_sub(skip),
            waited: Duration::ZERO,
            span: Span::default(),
        };
        if loader.remaining == 0 {
            return Ok(loader);
        }
        let (tx, rx) = sync_channel(AHEAD);
        let stop = Arc::clone(&loader.stop);
        let work = producer.share();
        let spawned = std::thread::Builder::new()
            .name("kiln-data".into())
            .spawn(move || {
                for b in skip..total {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let item = work.make(b).map_err(|e| e.to_string());
                    let failed = item.is_err();
                    if tx.send(item).is_err() || failed {
                        return;
                    }
                }
            });
        match spawned {
            Ok(handle) => {
                loader.batches = Some(rx);
                loader.worker = Some(handle);
            }
            // No thread to be had: build the batches in `next` instead.
            Err(_) => loader.inline = Some(producer),
        }
        Ok(loader)
    }

    /// Reports failures at `span` (the experiment's `batch` statement).
    pub fn at(mut self, span: Span) -> Loader {
        self.span = span;
        self
    }

    /// Number of batches in the epoch (`ceil(len / batch)`), before skipping.
    pub fn batches_per_epoch(len: i64, batch: i64) -> usize {
        if len <= 0 || batch <= 0 {
            return 0;
        }
        usize::try_from((len + batch - 1) / batch).unwrap_or(usize::MAX)
    }

    /// Total seconds the consumer has spent blocked waiting for a batch.
    pub fn wait_seconds(&self) -> f64 {
        self.waited.as_secs_f64()
    }

    /// Stops the thread and waits for it.
    fn shut_down(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver wakes a thread blocked on a full channel.
        self.batches = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl Iterator for Loader {
    type Item = Result<(Tensor, Tensor), Failure>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let got = if let Some(producer) = &self.inline {
            let started = Instant::now();
            let item = producer.make(self.next_batch).map_err(|e| e.to_string());
            self.waited += started.elapsed();
            self.next_batch += 1;
            Some(item)
        } else {
            let batches = self.batches.as_ref()?;
            let started = Instant::now();
            let got = batches.recv().ok();
            self.waited += started.elapsed();
            got
        };
        match got {
            Some(Ok(batch)) => {
                self.remaining -= 1;
                Some(Ok(batch))
            }
            Some(Err(message)) => {
                self.remaining = 0;
                self.shut_down();
                Some(Err(torch_failure(&message, self.span)))
            }
            None => {
                self.remaining = 0;
                self.shut_down();
                Some(Err(Failure::new(
                    Code::TorchError,
                    self.span,
                    "the thread preparing batches stopped before the end of the epoch",
                )
                .label("while loading this batch")
                .help(
                    "this is a bug in Kiln; please report it with the experiment file",
                )))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

impl std::iter::FusedIterator for Loader {}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shut_down();
    }
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::span::FileId;
    use std::collections::HashSet;
    use std::io::Write;
    use std::sync::atomic::AtomicUsize;

    /// A scratch directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Scratch {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "kiln-data-test-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }

        fn write(&self, name: &str, bytes: &[u8]) {
            std::fs::write(self.path(name), bytes).unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn source_span() -> Span {
        Span::new(FileId(0), 10, 20)
    }

    fn data(source: Source, targets: Targets, split: (f64, f64, f64)) -> Data {
        Data {
            source,
            source_span: source_span(),
            split: Split {
                train: split.0,
                val: split.1,
                test: split.2,
            },
            batch: 4,
            batch_span: Span::new(FileId(0), 30, 40),
            shuffle: true,
            normalize: None,
            targets,
        }
    }

    fn all_train() -> (f64, f64, f64) {
        (1.0, 0.0, 0.0)
    }

    fn floats(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(&t.f_reshape([-1]).unwrap().f_to_kind(Kind::Float).unwrap()).unwrap()
    }

    fn ints(t: &Tensor) -> Vec<i64> {
        Vec::<i64>::try_from(&t.f_reshape([-1]).unwrap().f_to_kind(Kind::Int64).unwrap()).unwrap()
    }

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

    fn idx_source(images: &str, labels: &str) -> Source {
        Source::Idx {
            images: images.into(),
            labels: labels.into(),
        }
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

    fn expect_failure(result: Result<Splits, Failure>, code: Code, needle: &str) -> Failure {
        match result {
            Ok(_) => panic!("expected {code:?} containing {needle:?}, got data"),
            Err(f) => {
                assert_eq!(f.code, code, "{}", f.message);
                assert!(
                    f.message.contains(needle),
                    "message {:?} lacks {needle:?}",
                    f.message
                );
                assert!(!f.label.is_empty() && !f.help.is_empty());
                f
            }
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
    fn real_mnist_loads_and_splits() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR"));
        let d = data(
            idx_source("data/mnist/images.idx.gz", "data/mnist/labels.idx.gz"),
            Targets::Classes(Some(10)),
            (0.8, 0.2, 0.0),
        );
        let s = load(&d, &[784], DType::Float, base, 42).unwrap();
        let val = s.val.as_ref().unwrap();
        assert!(s.test.is_none());
        assert_eq!(s.train.inputs.size(), vec![8000, 784]);
        assert_eq!(val.inputs.size(), vec![2000, 784]);
        assert_eq!(s.train.targets.size(), vec![8000]);
        let all = Tensor::cat(&[&s.train.inputs, &val.inputs], 0);
        let lo = all.min().double_value(&[]);
        let hi = all.max().double_value(&[]);
        assert!(lo == 0.0 && hi == 1.0, "pixels in [{lo}, {hi}]");
        // The digits of README.md, whatever the split.
        let labels = Tensor::cat(&[&s.train.targets, &val.targets], 0);
        let counts = ints(&labels.bincount::<Tensor>(None, 10));
        assert_eq!(
            counts,
            vec![1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]
        );
        // The same seed gives the same split, another seed another.
        let again = load(&d, &[784], DType::Float, base, 42).unwrap();
        assert_eq!(ints(&again.train.targets), ints(&s.train.targets));
        let other = load(&d, &[784], DType::Float, base, 43).unwrap();
        assert_ne!(ints(&other.train.targets), ints(&s.train.targets));
        // A model input of the wrong size is named with both sizes.
        let f = expect_failure(
            load(&d, &[1, 28, 29], DType::Float, base, 1),
            Code::DataInvalid,
            "samples of 784 values [28, 28], but the model's input [1, 28, 29] holds 812",
        );
        assert_eq!(f.span, source_span());
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
        assert_eq!(f.label, "label out of range");
    }

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
            run("x.npy", "y.npy", Targets::Values(vec![2]), &[4]),
            Code::DataInvalid,
            "declared as [2]",
        );
        // Token ids must be whole numbers.
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
            "holds 1.5 for sample 1, but the model takes integer token ids",
        );
    }

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
        assert_eq!(f.label, "no array `x`");
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

    #[test]
    fn safetensors_round_trips_and_fails() {
        let dir = Scratch::new();
        let x = Tensor::arange(12, (Kind::Float, Device::Cpu)).reshape([3, 2, 2]);
        let y = Tensor::from_slice(&[0.5f32, 1.5, 2.5]);
        Tensor::write_safetensors(
            &[("inputs", &x), ("targets", &y)],
            dir.path("d.safetensors"),
        )
        .unwrap();
        let run = |file: &str, targets: &str, t: Targets| {
            let source = Source::Safetensors {
                path: file.into(),
                inputs: "inputs".into(),
                targets: targets.into(),
            };
            load(&data(source, t, all_train()), &[4], DType::Float, &dir.0, 1)
        };
        let s = run("d.safetensors", "targets", Targets::Values(vec![])).unwrap();
        assert_eq!(s.train.inputs.size(), vec![3, 4]);
        assert_eq!(s.train.targets.kind(), Kind::Float);
        assert_eq!(floats(&s.train.targets), vec![0.5, 1.5, 2.5]);
        expect_failure(
            run("d.safetensors", "labels", Targets::Unknown),
            Code::DataInvalid,
            "has no tensor `labels`; its tensors: `inputs`, `targets`",
        );
        let bytes = std::fs::read(dir.path("d.safetensors")).unwrap();
        dir.write("cut.safetensors", &bytes[..bytes.len() - 8]);
        expect_failure(
            run("cut.safetensors", "targets", Targets::Unknown),
            Code::DataInvalid,
            "not a valid safetensors file",
        );
        expect_failure(
            run("gone.safetensors", "targets", Targets::Unknown),
            Code::DataMissing,
            "`gone.safetensors`",
        );
    }

    #[test]
    fn csv_with_and_without_header() {
        let dir = Scratch::new();
        dir.write(
            "h.csv",
            "\u{feff}a,\"b\",label\r\n1,2,0\r\n\r\n3.5, 4 ,1\r\n\"5\",6e0,2\r\n".as_bytes(),
        );
        let source = Source::Csv {
            path: "h.csv".into(),
            target: "label".into(),
            header: true,
        };
        let s = load(
            &data(source, Targets::Classes(Some(3)), all_train()),
            &[2],
            DType::Float,
            &dir.0,
            1,
        )
        .unwrap();
        assert_eq!(floats(&s.train.inputs), vec![1., 2., 3.5, 4., 5., 6.]);
        assert_eq!(ints(&s.train.targets), vec![0, 1, 2]);

        dir.write("n.csv", b"0.5,1,2\n1.5,3,4\n");
        let source = Source::Csv {
            path: "n.csv".into(),
            target: "0".into(),
            header: false,
        };
        let s = load(
            &data(source, Targets::Unknown, all_train()),
            &[2],
            DType::Float,
            &dir.0,
            1,
        )
        .unwrap();
        assert_eq!(s.train.targets.kind(), Kind::Float);
        assert_eq!(floats(&s.train.targets), vec![0.5, 1.5]);
        assert_eq!(floats(&s.train.inputs), vec![1., 2., 3., 4.]);
    }

    #[test]
    fn csv_failures() {
        let dir = Scratch::new();
        let run = |text: &str, target: &str, header: bool, t: Targets| {
            dir.write("f.csv", text.as_bytes());
            let source = Source::Csv {
                path: "f.csv".into(),
                target: target.into(),
                header,
            };
            load(&data(source, t, all_train()), &[2], DType::Float, &dir.0, 1)
        };
        let f = expect_failure(
            run(
                "x,y,label\n1,2,0\n3,oops,1\n",
                "label",
                true,
                Targets::Unknown,
            ),
            Code::DataInvalid,
            "line 3 of `f.csv` has `oops` in column `y`, which is not a number",
        );
        assert_eq!(f.label, "bad cell on line 3");
        expect_failure(
            run("1,2,0\n\n3,,1\n", "2", false, Targets::Unknown),
            Code::DataInvalid,
            "line 3 of `f.csv` has an empty cell in column 1",
        );
        expect_failure(
            run(
                "x,y,label\n1,2,0\n3,nan,1\n",
                "label",
                true,
                Targets::Unknown,
            ),
            Code::DataInvalid,
            "not a finite number",
        );
        expect_failure(
            run("x,y,label\n1,2,0\n3,1\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "line 3 of `f.csv` has 2 cells, but the header has 3",
        );
        expect_failure(
            run("x,y,z\n1,2,0\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "has no column `label`; its columns: `x`, `y`, `z`",
        );
        expect_failure(
            run("1,2,0\n", "label", false, Targets::Unknown),
            Code::DataInvalid,
            "column index counted from 0, not `label`",
        );
        expect_failure(
            run("1,2,0\n", "3", false, Targets::Unknown),
            Code::DataInvalid,
            "has 3 columns, so it has no column 3",
        );
        expect_failure(
            run(
                "x,y,label\n1,2,0\n3,4,7\n",
                "label",
                true,
                Targets::Classes(Some(3)),
            ),
            Code::DataInvalid,
            "the label 7 for line 3, outside the 3 classes",
        );
        expect_failure(
            run("x;y;label\n1;2;0\n", "x;y;label", true, Targets::Unknown),
            Code::DataInvalid,
            "single column",
        );
        expect_failure(
            run("\n\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "is empty",
        );
        expect_failure(
            run("x,y,label\n", "label", true, Targets::Unknown),
            Code::DataInvalid,
            "a header but no rows",
        );
    }

    #[test]
    fn csv_reports_the_first_bad_line_of_many() {
        let mut text = String::from("a,b,label\n");
        for i in 0..10_000 {
            let bad = i == 6000 || i == 9000;
            text.push_str(&format!(
                "{},{},{}\n",
                i,
                if bad { "x" } else { "1" },
                i % 2
            ));
        }
        let dir = Scratch::new();
        dir.write("big.csv", text.as_bytes());
        let source = Source::Csv {
            path: "big.csv".into(),
            target: "label".into(),
            header: true,
        };
        expect_failure(
            load(
                &data(source, Targets::Unknown, all_train()),
                &[2],
                DType::Float,
                &dir.0,
                1,
            ),
            Code::DataInvalid,
            "line 6002 of",
        );
    }

    #[test]
    fn synthetic_follows_torch_and_the_seed() {
        // The only test that draws from torch's global generator.
        let source = Source::Synthetic {
            inputs: Generator::Normal {
                shape: vec![3, 4],
                mean: 2.0,
                std: 0.5,
            },
            targets: Generator::Randint {
                shape: vec![],
                high: 5,
            },
            count: 50,
        };
        let d = data(source, Targets::Classes(Some(5)), (0.6, 0.2, 0.2));
        let s = load(&d, &[12], DType::Float, Path::new("."), 9).unwrap();
        assert_eq!(s.train.inputs.size(), vec![30, 12]);
        assert_eq!(s.val.as_ref().unwrap().len(), 10);
        assert_eq!(s.test.as_ref().unwrap().len(), 10);
        let t = &s.train.targets;
        assert_eq!(t.kind(), Kind::Int64);
        assert!(ints(t).iter().all(|&v| (0..5).contains(&v)));
        // As torch.randn(50, 3, 4) * 0.5 + 2 then torch.randint(5, (50,)) after manual_seed(9).
        tch::manual_seed(9);
        let x = Tensor::randn([50, 3, 4], (Kind::Float, Device::Cpu)) * 0.5 + 2.0;
        let y = Tensor::randint(5, [50], (Kind::Int64, Device::Cpu));
        let all = load(
            &data(d.source.clone(), Targets::Classes(Some(5)), all_train()),
            &[12],
            DType::Float,
            Path::new("."),
            9,
        )
        .unwrap();
        assert_eq!(floats(&all.train.inputs), floats(&x));
        assert_eq!(ints(&all.train.targets), ints(&y));
        let again = load(&d, &[12], DType::Float, Path::new("."), 9).unwrap();
        assert_eq!(floats(&again.train.inputs), floats(&s.train.inputs));

        // Uniform values in [low, high), randint token ids.
        let source = Source::Synthetic {
            inputs: Generator::Randint {
                shape: vec![8],
                high: 100,
            },
            targets: Generator::Uniform {
                shape: vec![2],
                low: -1.0,
                high: 3.0,
            },
            count: 20,
        };
        let d = data(source, Targets::Values(vec![2]), all_train());
        let s = load(&d, &[8], DType::Int, Path::new("."), 1).unwrap();
        assert_eq!(s.train.inputs.kind(), Kind::Int64);
        assert!(ints(&s.train.inputs).iter().all(|&v| (0..100).contains(&v)));
        assert_eq!(s.train.targets.size(), vec![20, 2]);
        assert!(floats(&s.train.targets)
            .iter()
            .all(|&v| (-1.0..3.0).contains(&v)));
    }

    #[test]
    fn normalize_per_channel_and_scalar() {
        let dir = Scratch::new();
        // Two samples of two channels of two values.
        Tensor::from_slice(&[1f32, 3., 10., 30., 5., 7., 50., 70.])
            .reshape([2, 2, 2])
            .write_npy(dir.path("x.npy"))
            .unwrap();
        Tensor::from_slice(&[0i64, 1])
            .write_npy(dir.path("y.npy"))
            .unwrap();
        let source = Source::Npy {
            inputs: "x.npy".into(),
            targets: "y.npy".into(),
        };
        let mut d = data(source, Targets::Classes(Some(2)), all_train());
        d.normalize = Some(Normalize {
            mean: vec![1.0, 10.0],
            std: vec![2.0, 20.0],
        });
        let s = load(&d, &[2, 2], DType::Float, &dir.0, 1).unwrap();
        assert_eq!(
            floats(&s.train.inputs),
            vec![0., 1., 0., 1., 2., 3., 2., 3.]
        );
        d.normalize = Some(Normalize {
            mean: vec![1.0],
            std: vec![2.0],
        });
        let s = load(&d, &[2, 2], DType::Float, &dir.0, 1).unwrap();
        assert_eq!(floats(&s.train.inputs)[..2], [0., 1.]);
        d.normalize = Some(Normalize {
            mean: vec![0.0, 0.0, 0.0],
            std: vec![1.0, 1.0, 1.0],
        });
        expect_failure(
            load(&d, &[2, 2], DType::Float, &dir.0, 1),
            Code::DataInvalid,
            "gives 3 values, one per channel, but the samples [2, 2] have 2 channels",
        );
    }

    #[test]
    fn split_sizes_and_membership() {
        let frac = |train, val, test| Split { train, val, test };
        assert_eq!(split_counts(10_000, &frac(0.8, 0.2, 0.0)), (8000, 2000, 0));
        assert_eq!(split_counts(100, &frac(0.29, 0.71, 0.0)), (29, 71, 0));
        assert_eq!(split_counts(10, &frac(0.7, 0.15, 0.15)), (7, 1, 1));
        assert_eq!(split_counts(3, &frac(0.5, 0.5, 0.0)), (1, 1, 0));

        let n = 103;
        let d = Dataset {
            inputs: Tensor::arange(n, (Kind::Float, Device::Cpu)).reshape([n, 1]),
            targets: Tensor::arange(n, (Kind::Int64, Device::Cpu)),
        };
        let s = split(&d, &frac(0.5, 0.3, 0.2), 5, source_span()).unwrap();
        let (val, test) = (s.val.unwrap(), s.test.unwrap());
        assert_eq!((s.train.len(), val.len(), test.len()), (51, 30, 20));
        let mut seen = HashSet::new();
        for part in [&s.train, &val, &test] {
            let ids = ints(&part.targets);
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "file order within a split"
            );
            assert_eq!(
                floats(&part.inputs),
                ids.iter().map(|&v| v as f32).collect::<Vec<_>>()
            );
            for id in ids {
                assert!(seen.insert(id));
            }
        }
        assert_eq!(seen.len(), 101);
        // The training split is not simply the first samples.
        assert_ne!(ints(&s.train.targets), (0..51).collect::<Vec<i64>>());

        let f = split(&d, &frac(0.001, 0.0, 0.0), 5, source_span()).unwrap_err();
        assert_eq!(f.code, Code::DataInvalid);
        assert!(
            f.message.contains("training split is empty"),
            "{}",
            f.message
        );
    }

    #[test]
    fn permutations_are_uniform_enough() {
        for n in [0usize, 1, 2, 17, 1000] {
            let mut p = permutation(n, 3);
            p.sort_unstable();
            assert_eq!(p, (0..n as i64).collect::<Vec<_>>());
        }
        // Each of 4 items lands in each of 4 places about equally often.
        let mut counts = [[0u32; 4]; 4];
        for seed in 0..4000 {
            for (place, &item) in permutation(4, seed).iter().enumerate() {
                counts[item as usize][place] += 1;
            }
        }
        for row in counts {
            for c in row {
                assert!((850..1150).contains(&c), "{counts:?}");
            }
        }
    }

    fn dataset(n: i64) -> Dataset {
        Dataset {
            inputs: Tensor::arange(n, (Kind::Float, Device::Cpu)).reshape([n, 1]),
            targets: Tensor::arange(n, (Kind::Int64, Device::Cpu)),
        }
    }

    /// The sample ids of each batch.
    fn epoch(
        d: &Dataset,
        batch: i64,
        shuffle: bool,
        seed: u64,
        e: u64,
        skip: usize,
    ) -> Vec<Vec<i64>> {
        Loader::new(d, batch, shuffle, seed, e, skip, Device::Cpu)
            .unwrap()
            .map(|b| {
                let (x, y) = b.unwrap();
                let ids = ints(&y);
                assert_eq!(
                    floats(&x),
                    ids.iter().map(|&v| v as f32).collect::<Vec<_>>()
                );
                assert_eq!(x.size(), vec![ids.len() as i64, 1]);
                ids
            })
            .collect()
    }

    #[test]
    fn loader_covers_the_epoch() {
        let d = dataset(103);
        assert_eq!(Loader::batches_per_epoch(103, 10), 11);
        assert_eq!(Loader::batches_per_epoch(100, 10), 10);
        assert_eq!(Loader::batches_per_epoch(0, 10), 0);
        assert_eq!(Loader::batches_per_epoch(5, 10), 1);

        let batches = epoch(&d, 10, true, 7, 0, 0);
        assert_eq!(batches.len(), 11);
        assert!(batches[..10].iter().all(|b| b.len() == 10));
        assert_eq!(batches[10].len(), 3);
        let mut all: Vec<i64> = batches.concat();
        assert_ne!(all, (0..103).collect::<Vec<_>>(), "shuffled");
        all.sort_unstable();
        assert_eq!(all, (0..103).collect::<Vec<_>>());

        // Same (seed, epoch), same order; another epoch or seed, another.
        assert_eq!(epoch(&d, 10, true, 7, 0, 0), batches);
        assert_ne!(epoch(&d, 10, true, 7, 1, 0), batches);
        assert_ne!(epoch(&d, 10, true, 8, 0, 0), batches);

        // Without shuffling, file order.
        assert_eq!(
            epoch(&d, 10, false, 7, 3, 0).concat(),
            (0..103).collect::<Vec<_>>()
        );

        // Skipping resumes mid-epoch in the same order.
        assert_eq!(epoch(&d, 10, true, 7, 0, 4), batches[4..].to_vec());
        assert!(epoch(&d, 10, true, 7, 0, 11).is_empty());
        assert!(epoch(&d, 10, true, 7, 0, 50).is_empty());

        // A batch larger than the data is one batch; an empty dataset none.
        assert_eq!(epoch(&d, 1000, false, 0, 0, 0).len(), 1);
        assert!(epoch(&dataset(0), 4, true, 0, 0, 0).is_empty());
        assert!(Loader::new(&d, 0, true, 0, 0, 0, Device::Cpu).is_err());
    }

    #[test]
    fn loader_stops_when_dropped() {
        let n = 200_000;
        let d = Dataset {
            inputs: Tensor::zeros([n, 64], (Kind::Float, Device::Cpu)),
            targets: Tensor::zeros([n], (Kind::Int64, Device::Cpu)),
        };
        let mut loader = Loader::new(&d, 16, true, 1, 0, 0, Device::Cpu)
            .unwrap()
            .at(Span::new(FileId(0), 30, 40));
        let (x, _) = loader.next().unwrap().unwrap();
        assert_eq!(x.size(), vec![16, 64]);
        // Let the thread fill the channel and block on it.
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        drop(loader);
        assert!(started.elapsed() < Duration::from_secs(2));
        // Dropped before its first batch, too.
        let loader = Loader::new(&d, 16, true, 1, 0, 0, Device::Cpu).unwrap();
        drop(loader);
        assert!(started.elapsed() < Duration::from_secs(2));
        // The wait is measured.
        let mut loader = Loader::new(&d, 16, false, 1, 0, 0, Device::Cpu).unwrap();
        for _ in 0..10 {
            let _ = loader.next().unwrap().unwrap();
        }
        assert!(loader.wait_seconds() >= 0.0);
    }

    #[test]
    fn loader_builds_inline_without_a_thread() {
        // The fallback path, exercised directly.
        let d = dataset(10);
        let producer = Producer {
            inputs: d.inputs.shallow_clone(),
            targets: d.targets.shallow_clone(),
            order: (0..10).collect::<Vec<i64>>().into(),
            batch: 4,
            device: Device::Cpu,
        };
        let mut loader = Loader {
            batches: None,
            stop: Arc::new(AtomicBool::new(false)),
            worker: None,
            inline: Some(producer),
            next_batch: 1,
            remaining: 2,
            waited: Duration::ZERO,
            span: Span::default(),
        };
        let ids: Vec<Vec<i64>> = loader.by_ref().map(|b| ints(&b.unwrap().1)).collect();
        assert_eq!(ids, vec![vec![4, 5, 6, 7], vec![8, 9]]);
        assert!(loader.next().is_none());
    }

    #[test]
    fn loader_reports_a_failed_batch_at_its_span() {
        // Targets shorter than the inputs: the second batch's gather fails in libtorch.
        let d = Dataset {
            inputs: Tensor::zeros([10, 1], (Kind::Float, Device::Cpu)),
            targets: Tensor::zeros([5], (Kind::Int64, Device::Cpu)),
        };
        let at = Span::new(FileId(0), 30, 40);
        let mut loader = Loader::new(&d, 4, false, 0, 0, 0, Device::Cpu)
            .unwrap()
            .at(at);
        assert_eq!(loader.size_hint(), (0, Some(3)));
        assert!(loader.next().unwrap().is_ok());
        let f = loader.next().unwrap().unwrap_err();
        assert_eq!(f.code, Code::TorchError);
        assert_eq!(f.span, at);
        assert!(loader.next().is_none());
    }
}
