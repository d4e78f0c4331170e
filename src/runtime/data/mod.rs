//! Data: loading sources into memory, splitting, and batches prepared ahead of the device.
//!
//! [`load`] reads the source of a checked experiment into CPU tensors, checks them against the
//! model (sample size, element type, class labels), normalises the inputs and splits the samples
//! with a seeded permutation. A [`Loader`] walks one epoch of a [`Dataset`] in batches that a
//! background thread gathers and moves to the device ahead of the training loop.
//!
//! Every problem with the data is a [`DataError`] at the experiment's `source` statement: K0502 when
//! a file cannot be read, K0503 when what it holds is wrong (its conversion into a `Diagnostic` is
//! the one place it becomes a diagnostic). The headers of the file formats (IDX, `.npy`, the
//! zip archive of an `.npz`) and CSV's rows and cells are read by `kiln::datafile`, the checker's
//! reader; the readers here turn the bytes it locates into tensors, with every length checked
//! before a byte is copied: libtorch's own `.npy` reader trusts the header's shape and reads past
//! the end of a truncated file, so a damaged file must be caught before it gets there.
//!
//! Shuffling and splitting use a small Rust PRNG (SplitMix64 with Fisher-Yates), never torch's
//! generator, so that the order of the data does not disturb the random numbers of the model.
//!
//! This file holds the interface ([`load`]; [`Dataset`] and [`Splits`] live in `dataset`), the
//! checking and shaping of a source's inputs against the model, and the helpers the readers
//! share; `targets` shapes the targets. Each source has its own file: `file` (opening, reading
//! and gunzipping a named file, bounded), `synthetic`, `idx`, `npy`, `npz`, `csv`,
//! `safetensors`, `parquet`, `images` for image folders (with `augment`, the training split's
//! crops and flips), and `stream` for token streams; `inputs` reads `kiln predict`'s samples; `split` holds the splits and the PRNG, `loader` the [`Loader`].

mod augment;
mod csv;
mod dataset;
mod error;
mod file;
mod finite;
mod idx;
mod images;
mod inputs;
mod layout;
mod loader;
mod npy;
mod npz;
#[cfg(test)]
mod options_tests;
mod parquet;
mod safetensors;
mod split;
mod stream;
mod synthetic;
mod targets;
#[cfg(test)]
mod tests;
mod tokens;

use std::fmt::Write as _;
use std::path::Path;

use kiln::datafile::{cut, quote};
use kiln::ir::{count_fit, CountMisfit, DType, Data, Layout, Normalize, Source};
// The readers' tests name targets from here, beside `Source`.
#[cfg(test)]
use kiln::ir::Targets;
use kiln::span::Span;
use tch::{Kind, TchError, Tensor};

use error::At;
use file::DataFile;

pub use dataset::{Dataset, Splits};
pub use error::{DataError, DataKind};
pub use inputs::read_inputs;
pub use loader::Loader;
pub(crate) use stream::encode;

/// Loads and splits the data of a checked experiment.
///
/// `base` is the directory of the `.exp` file that declares the source (relative paths resolve
/// against it); `input` and `input_dtype` are the model's (`kiln::ir::Model::input` and
/// `input_dtype`). Synthetic data is drawn from torch's generator after
/// `tch::manual_seed(seed)`; the split is a permutation seeded with `seed`. Each split keeps its
/// samples in file order. Failures are reported at `data.source_span`.
pub fn load(
    data: &Data,
    input: &[i64],
    input_dtype: DType,
    base: &Path,
    seed: u64,
) -> Result<Splits, DataError> {
    let span = data.source_span;
    if data.source.block().is_some() {
        return stream::load(data, base);
    }
    let raw = read_source(&data.source, data.scale, input_dtype, base, seed, span)?;
    let dataset = prepare(
        raw,
        data,
        data.scale,
        &data.layout,
        input,
        input_dtype,
        span,
    )?;
    let mut splits = split::split(&dataset, &data.split, seed, span)?;
    if let Source::Images { size, augment, .. } = &data.source {
        if augment.any() {
            splits.train.augment = Some(augment::Augmentation {
                crop: augment.crop as i64,
                flip: augment.flip,
                fill: augment::zero_pixel(size[0] as usize, data.normalize.as_ref()),
            });
        }
    }
    // A split's own source: all its samples, in file order; synthetic ones from their own seed.
    for (own, slot, stream) in [
        (&data.val, &mut splits.val, VAL_STREAM),
        (&data.test, &mut splits.test, TEST_STREAM),
    ] {
        if let Some(own) = own {
            let raw = read_source(
                &own.source,
                own.scale,
                input_dtype,
                base,
                seed ^ stream,
                own.span,
            )?;
            *slot = Some(prepare(
                raw,
                data,
                own.scale,
                &own.layout,
                input,
                input_dtype,
                own.span,
            )?);
        }
    }
    if !data.trains_on(splits.train.len() as u64) {
        return Err(invalid(
            data.batch_span,
            format!(
                "batch {} is larger than the {} training samples, and `drop_last` leaves out every partial batch",
                data.batch,
                splits.train.len()
            ),
            "no full batch",
            "use a smaller batch, more samples, or `drop_last false`",
        ));
    }
    Ok(splits)
}

/// Mixed into the seed of a validation split's own synthetic source, so that its samples differ
/// from the training source's.
const VAL_STREAM: u64 = 0x5EED_0000_0000_0001;
/// Mixed into the seed of a test split's own synthetic source.
const TEST_STREAM: u64 = 0x5EED_0000_0000_0002;

// ---------------------------------------------------------------------------------------------
// Failures

/// A K0503 problem: the data is there but wrong.
fn invalid(
    span: Span,
    message: impl Into<String>,
    label: impl Into<String>,
    help: impl Into<String>,
) -> DataError {
    DataError::new(DataKind::Invalid, span, message)
        .label(label)
        .help(help)
}

/// `[1, 28, 28]`.
fn fmt_shape(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// `` `a`, `b` `` (at most 12 names, each cut to 40 characters, then a count).
fn fmt_names(names: &[String]) -> String {
    if names.is_empty() {
        return "nothing".to_string();
    }
    let mut out = String::new();
    for (i, name) in names.iter().take(12).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "`{}`", quote(name));
    }
    if names.len() > 12 {
        let _ = write!(out, " and {} more", names.len() - 12);
    }
    out
}

/// A value as a person writes it: `3`, not `3.0`; `1e30`, not thirty-one digits.
fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.is_finite() && v != 0.0 && (v.abs() >= 1e15 || v.abs() < 1e-4) {
        format!("{v:e}")
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
    /// Whether every value is known to be finite by the way the source was read (bytes scaled to
    /// [0, 1], CSV cells checked as they are parsed), so the scan for NaN and infinities is
    /// skipped.
    finite: bool,
    /// Whether the inputs are images kept as bytes, made floats batch by batch
    /// ([`Dataset::pixels`]) instead of once here.
    keep_bytes: bool,
}

impl Raw {
    fn new(inputs: Tensor, targets: Tensor, inputs_from: String, targets_from: String) -> Raw {
        Raw {
            inputs,
            targets,
            inputs_from,
            targets_from,
            lines: None,
            finite: false,
            keep_bytes: false,
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

/// Reads the tensors of a source; file paths resolve against `base`.
fn read_source(
    source: &Source,
    scale: Option<f64>,
    dtype: DType,
    base: &Path,
    seed: u64,
    span: Span,
) -> Result<Raw, DataError> {
    let raw = match source {
        Source::Synthetic {
            inputs,
            targets,
            count,
        } => synthetic::read(inputs, targets, *count, seed, span),
        Source::Idx { images, labels } => {
            return idx::read(
                &DataFile::new(base, images),
                &DataFile::new(base, labels),
                dtype,
                scale,
                span,
            )
        }
        Source::Npy { inputs, targets } => {
            let (fi, ft) = (DataFile::new(base, inputs), DataFile::new(base, targets));
            let x = npy::read(&fi, span)?;
            let y = npy::read(&ft, span)?;
            Ok(Raw::new(x, y, fi.name(), ft.name()))
        }
        Source::Npz {
            path,
            inputs,
            targets,
        } => npz::read(&DataFile::new(base, path), inputs, targets, span),
        Source::Csv {
            path,
            target,
            header,
        } => csv::read(&DataFile::new(base, path), target, *header, span),
        Source::Safetensors {
            path,
            inputs,
            targets,
        } => safetensors::read(&DataFile::new(base, path), inputs, targets, span),
        Source::Parquet {
            path,
            inputs,
            target,
        } => parquet::read(&DataFile::new(base, path), inputs, Some(target), span),
        // Kept as bytes: scaled and normalised batch by batch.
        Source::Images {
            path, size, resize, ..
        } => return images::read(&DataFile::new(base, path), size, *resize, span),
        Source::Tokens { .. } | Source::Text { .. } => Err(stream::mixed(span)),
    }?;
    scale_bytes(raw, scale, dtype, span)
}

/// Divides uint8 inputs by `scale` (for a model taking floats); a scale given for inputs of
/// another element type is refused.
fn scale_bytes(raw: Raw, scale: Option<f64>, dtype: DType, span: Span) -> Result<Raw, DataError> {
    let Some(divisor) = scale else {
        return Ok(raw);
    };
    let kind = raw.inputs.f_kind().at(span)?;
    if kind != Kind::Uint8 {
        return Err(invalid(
            span,
            format!(
                "`scale: {}` divides uint8 inputs, but {} holds {} values",
                fmt_value(divisor),
                raw.inputs_from,
                kind_name(kind)
            ),
            "not bytes",
            "remove `scale` (or write `scale: none`): values of other types are read as they are",
        ));
    }
    divide_bytes(raw, divisor, dtype, span)
}

/// uint8 inputs as floats divided by `divisor`, for a model taking floats (token ids are kept).
fn divide_bytes(mut raw: Raw, divisor: f64, dtype: DType, span: Span) -> Result<Raw, DataError> {
    if dtype == DType::Float {
        raw.inputs = raw
            .inputs
            .f_to_kind(Kind::Float)
            .and_then(|x| x.f_div_scalar(divisor))
            .at(span)?;
    }
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
#[allow(clippy::too_many_arguments)]
fn prepare(
    raw: Raw,
    data: &Data,
    scale: Option<f64>,
    layout: &Layout,
    input: &[i64],
    dtype: DType,
    span: Span,
) -> Result<Dataset, DataError> {
    let dims = |t: &Tensor| -> Vec<u64> { t.size().iter().map(|&d| d.max(0) as u64).collect() };
    let n = match count_fit(&dims(&raw.inputs), &dims(&raw.targets)) {
        Ok(n) => n as i64,
        Err(CountMisfit::NotPerSample { inputs: true }) => {
            return Err(invalid(
                span,
                format!(
                    "{} holds a single value, not one row per sample",
                    raw.inputs_from
                ),
                "no samples",
                "the inputs' first dimension counts the samples",
            ))
        }
        Err(CountMisfit::NotPerSample { inputs: false }) => {
            return Err(invalid(
                span,
                format!(
                    "{} holds a single value, not one per sample",
                    raw.targets_from
                ),
                "no samples",
                "the targets' first dimension counts the samples",
            ))
        }
        Err(CountMisfit::Differ { inputs, targets }) => {
            return Err(invalid(
                span,
                format!(
                    "{} holds {inputs} samples but {} holds {targets} targets",
                    raw.inputs_from, raw.targets_from
                ),
                "counts differ",
                "the inputs and the targets need one row per sample each",
            ))
        }
        Err(CountMisfit::NoSamples) => {
            return Err(invalid(
                span,
                format!("{} holds no samples", raw.inputs_from),
                "no samples",
                "the data needs at least one sample",
            ))
        }
    };
    // NaN and infinities, in every sample, before the split.
    finite::check_source(&raw, span)?;
    let raw = layout::arrange(raw, layout, input, span)?;
    let inputs = model_inputs(&raw, n, data, input, dtype, span)?;
    let targets = targets::shape(&raw, n, &data.targets, data.ignore_label, span)?;
    let pixels = if raw.keep_bytes {
        let normalize = normalization(data.normalize.as_ref(), input, span)?;
        Some(augment::Pixels { scale, normalize })
    } else {
        None
    };
    Ok(Dataset {
        pixels,
        ..Dataset::rows(inputs, targets)
    })
}

/// The model's inputs from arranged samples: shaped, token ids checked against the vocabulary,
/// normalised.
fn model_inputs(
    raw: &Raw,
    n: i64,
    data: &Data,
    input: &[i64],
    dtype: DType,
    span: Span,
) -> Result<Tensor, DataError> {
    let inputs = shape_inputs(raw, n, input, dtype, span)?;
    if let (DType::Int, Some(vocab)) = (dtype, data.token_vocab) {
        tokens::check_range(raw, &inputs, vocab, span)?;
    }
    normalize(inputs, data.normalize.as_ref(), input, span)
}

/// `[N, ..input]`, Float or Int64 by the model's input type (the samples fit the input: see
/// `layout::arrange`).
fn shape_inputs(
    raw: &Raw,
    n: i64,
    input: &[i64],
    dtype: DType,
    span: Span,
) -> Result<Tensor, DataError> {
    let from = &raw.inputs_from;
    let x = &raw.inputs;
    let want: i64 = input.iter().product();
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
        DType::Float if raw.keep_bytes && kind == Kind::Uint8 => Ok(x),
        DType::Float if is_float(kind) || is_integer(kind) => {
            let converted = x.f_to_kind(Kind::Float).at(span)?;
            finite::check_overflow(raw, &raw.inputs, &converted, from, span)?;
            Ok(converted)
        }
        DType::Int if is_integer(kind) => x.f_to_kind(Kind::Int64).at(span),
        DType::Int if is_float(kind) => {
            tokens::refuse_floats(raw, kind, span)?;
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
/// (token ids, and images kept as bytes, normalised batch by batch) are left alone.
fn normalize(
    x: Tensor,
    norm: Option<&Normalize>,
    input: &[i64],
    span: Span,
) -> Result<Tensor, DataError> {
    let Some((mean, std)) = normalization(norm, input, span)? else {
        return Ok(x);
    };
    if x.f_kind().at(span)? != Kind::Float {
        return Ok(x);
    }
    x.f_sub(&mean).and_then(|t| t.f_div(&std)).at(span)
}

/// `normalize`'s means and standard deviations as CPU tensors that broadcast over a batch of
/// samples `input` (`[1, C, 1, ...]` per channel, else scalars), or why they do not fit them.
fn normalization(
    norm: Option<&Normalize>,
    input: &[i64],
    span: Span,
) -> Result<Option<(Tensor, Tensor)>, DataError> {
    let Some(norm) = norm else {
        return Ok(None);
    };
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
    Ok(Some((
        to_tensor(&mean).at(span)?,
        to_tensor(&std).at(span)?,
    )))
}
