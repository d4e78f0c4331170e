//! Non-finite values: NaN and infinities in what a source holds, and values that overflow 32-bit
//! floats once converted, found with libtorch when the data is loaded. Every sample of a source is
//! scanned before the data is split, so neither a training nor a validation or test sample carries
//! one into a run; the message names the file, the sample (counted from 0 in the file) and the
//! feature.

use kiln::span::Span;
use tch::{Kind, TchError, Tensor};

use super::error::{At, DataError};
use super::{first_true, fmt_shape, fmt_value, invalid, is_float, Raw};

/// The first value of a tensor that is not finite: `(flat index, value)`. Integer tensors hold
/// none.
pub(super) fn first_non_finite(t: &Tensor) -> Result<Option<(i64, f64)>, TchError> {
    let kind = t.f_kind()?;
    if !is_float(kind) {
        return Ok(None);
    }
    // libtorch's `isfinite` covers the kinds arithmetic supports; the 8-bit floats are widened.
    let t = match kind {
        Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double => t.shallow_clone(),
        _ => t.f_to_kind(Kind::Float)?,
    };
    let finite = t.f_isfinite()?;
    if finite.f_all()?.f_int64_value(&[])? != 0 {
        return Ok(None);
    }
    match first_true(&finite.f_logical_not()?)? {
        Some(at) => Ok(Some((at, t.f_reshape([-1])?.f_double_value(&[at])?))),
        None => Ok(None),
    }
}

/// A non-finite value in words: `NaN`, `+Inf`, `-Inf`.
fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// Where flat index `at` of a tensor of samples of `shape` lies, in words: `sample 3 (counted
/// from 0 in the file), feature 17 (row 0, column 17)`. Samples of a single value (no dimension)
/// have no feature.
pub(super) fn place(raw: &Raw, at: i64, shape: &[i64]) -> String {
    let per: i64 = shape.iter().product::<i64>().max(1);
    let (sample, feature) = (at / per, at % per);
    let mut out = match raw
        .lines
        .as_ref()
        .and_then(|l| l.get(usize::try_from(sample).ok()?))
    {
        Some(line) => format!("sample {sample} (counted from 0; line {line} of the file)"),
        None => format!("sample {sample} (counted from 0 in the file)"),
    };
    if !shape.is_empty() {
        let mut index = vec![0; shape.len()];
        let mut rest = feature;
        for (d, size) in shape.iter().enumerate().rev() {
            let size = (*size).max(1);
            index[d] = rest % size;
            rest /= size;
        }
        out.push_str(&format!(", feature {feature}"));
        match index.as_slice() {
            [_] => {}
            [row, column] => out.push_str(&format!(" (row {row}, column {column})")),
            _ => out.push_str(&format!(" (at {})", fmt_shape(&index))),
        }
    }
    out
}

/// K0503 when the inputs or the targets of a source hold NaN or an infinity.
pub(super) fn check_source(raw: &Raw, span: Span) -> Result<(), DataError> {
    for (t, from, what) in [
        (&raw.inputs, &raw.inputs_from, "inputs"),
        (&raw.targets, &raw.targets_from, "targets"),
    ] {
        if let Some((at, v)) = first_non_finite(t).at(span)? {
            let shape = t.size();
            return Err(invalid(
                span,
                format!(
                    "{from} holds {} at {}",
                    non_finite(v),
                    place(raw, at, shape.get(1..).unwrap_or_default())
                ),
                format!("{} in the {what}", non_finite(v)),
                "replace or remove the samples holding NaN or infinite values; training on them makes the loss NaN",
            ));
        }
    }
    Ok(())
}

/// K0503 when converting `original` (the values of `from` as the source holds them, `[N, ..]`)
/// to 32-bit floats gave `converted` an infinity: a value beyond the range of 32-bit floats.
pub(super) fn check_overflow(
    raw: &Raw,
    original: &Tensor,
    converted: &Tensor,
    from: &str,
    span: Span,
) -> Result<(), DataError> {
    if original.f_kind().at(span)? != Kind::Double {
        return Ok(());
    }
    let Some((at, _)) = first_non_finite(converted).at(span)? else {
        return Ok(());
    };
    let value = original
        .f_reshape([-1])
        .and_then(|t| t.f_double_value(&[at]))
        .at(span)?;
    let shape = original.size();
    Err(invalid(
        span,
        format!(
            "{from} holds {} at {}, beyond the range of 32-bit floats (about ±3.4e38)",
            fmt_value(value),
            place(raw, at, shape.get(1..).unwrap_or_default())
        ),
        "value overflows 32-bit floats",
        "training uses 32-bit floats; rescale the data so that every value lies well within ±3.4e38",
    ))
}
