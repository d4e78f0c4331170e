//! The inputs of `kiln predict`: samples without targets, from a file of a format a source
//! reads (chosen by its name), prepared as the run prepared its training inputs: uint8 values
//! divided by the training source's `scale`, its `layout`, the data's `normalize`, token ids
//! checked against the vocabulary.

use std::path::Path;

use kiln::ir::{DType, Data, Layout, Source};
use kiln::span::Span;
use tch::{Kind, Tensor};

use super::error::{At, DataError};
use super::file::DataFile;
use super::{
    csv, divide_bytes, finite, idx, images, invalid, layout, model_inputs, npy, npz, parquet,
    safetensors, Raw,
};

/// The member of an `.npz` archive, or the tensor of a safetensors file, that holds the inputs.
const INPUTS: &str = "inputs";

/// Reads the samples of `path` (`.npy`, `.npz` with an `inputs` array, `.safetensors` with an
/// `inputs` tensor, `.csv` of features, IDX images, gzipped or not, or for a run that read
/// Parquet a Parquet file or directory with its input columns, for a run that read an image
/// folder a PNG or JPEG file or a folder of them) as the model's inputs `[N, ..input]`, with
/// each sample's image file when they are images. Failures are reported at `span`.
pub fn read_inputs(
    data: &Data,
    input: &[i64],
    dtype: DType,
    path: &Path,
    span: Span,
) -> Result<(Tensor, Option<Vec<String>>), DataError> {
    let shown = path.to_string_lossy();
    let file = DataFile::new(Path::new(""), &shown);
    let name = shown.to_lowercase();
    let image = kiln::datafile::images::is_image(path);
    let mut names = None;
    let raw = if let (Source::Images { size, resize, .. }, true) =
        (&data.source, image || file.path.is_dir())
    {
        let (x, files) = images::read_unlabelled(&file, size, *resize, span)?;
        names = Some(files);
        let n = x.size().first().copied().unwrap_or(0);
        let none = Tensor::f_zeros([n], (Kind::Float, tch::Device::Cpu)).at(span)?;
        let mut raw = Raw::new(x, none, file.name(), String::new());
        raw.finite = true;
        raw
    } else if image {
        return Err(invalid(
            span,
            format!(
                "{} is an image, but the run did not read images, so their size is not known",
                file.name()
            ),
            "an image for a run without images",
            "give the samples in the format the run read",
        ));
    } else if name.ends_with(".npy") {
        let x = npy::read(&file, span)?;
        let n = x.size().first().copied().unwrap_or(0);
        let none = Tensor::f_zeros([n], (Kind::Float, tch::Device::Cpu)).at(span)?;
        Raw::new(x, none, file.name(), String::new())
    } else if name.ends_with(".npz") {
        npz::read(&file, INPUTS, INPUTS, span)?
    } else if name.ends_with(".safetensors") {
        safetensors::read(&file, INPUTS, INPUTS, span)?
    } else if name.ends_with(".parquet") || file.path.is_dir() {
        // The columns the run read its inputs from.
        let Source::Parquet { inputs, .. } = &data.source else {
            return Err(invalid(
                span,
                format!(
                    "{} is Parquet, but the run did not read Parquet, so its input columns are not known",
                    file.name()
                ),
                "Parquet without columns",
                "give the samples as `.npy` (or the format the run read)",
            ));
        };
        parquet::read(&file, inputs, None, span)?
    } else if name.ends_with(".csv") {
        csv::read_features(&file, span)?
    } else if name.ends_with(".gz") || name.contains("idx") || name.contains("ubyte") {
        // Bytes divided by the training source's scale as they are read (kept as token ids).
        let x = idx::read_images(&file, dtype, data.scale, span)?;
        let n = x.size().first().copied().unwrap_or(0);
        let none = Tensor::f_zeros([n], (Kind::Float, tch::Device::Cpu)).at(span)?;
        let mut raw = Raw::new(x, none, file.name(), String::new());
        raw.finite = true;
        raw
    } else {
        return Err(invalid(
            span,
            format!("{} is not a file `kiln predict` reads", file.name()),
            "unknown input format",
            "give inputs as `.npy`, `.npz` (array `inputs`), `.safetensors` (tensor `inputs`), `.csv` (one row of features per sample), IDX images (`.idx`, `-ubyte`, `.gz`), for a run that read Parquet, Parquet with its input columns, or for a run that read an image folder, PNG and JPEG images",
        ));
    };
    let raw = scale(raw, data.scale, dtype, span)?;
    let n = raw.inputs.size().first().copied().unwrap_or(0);
    finite::check_source(&raw, span)?;
    let layout: &Layout = &data.layout;
    let raw = layout::arrange(raw, layout, input, span)?;
    Ok((model_inputs(&raw, n, data, input, dtype, span)?, names))
}

/// Divides bytes by the training source's `scale` (an IDX source's 255 by default), as the run
/// did; inputs of another type are taken as they are.
fn scale(raw: Raw, scale: Option<f64>, dtype: DType, span: Span) -> Result<Raw, DataError> {
    match scale {
        Some(divisor) if raw.inputs.f_kind().at(span)? == Kind::Uint8 => {
            divide_bytes(raw, divisor, dtype, span)
        }
        _ => Ok(raw),
    }
}
