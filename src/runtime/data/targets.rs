//! The targets of a source shaped as the experiment makes them: class indices (checked against
//! the class count, the loss's `ignore_index` aside), a class per token, or values.

use kiln::ir::{target_fit, Targets};
use kiln::span::Span;
use tch::{Kind, Tensor};

use super::error::{At, DataError};
use super::{
    finite, first_fraction, first_true, fmt_shape, fmt_value, invalid, is_float, is_integer,
    kind_name, Raw,
};

/// Refuses a class label of `y` (`[N]`, or `[N, ..]` per token) outside `[0, classes)` that is
/// not the loss's `ignore_index`, a label the data may hold besides the classes.
fn in_classes(
    raw: &Raw,
    y: &Tensor,
    classes: Option<u64>,
    ignore: Option<i64>,
    span: Span,
) -> Result<(), DataError> {
    let Some(k) = classes else {
        return Ok(());
    };
    let k = i64::try_from(k).unwrap_or(i64::MAX);
    let outside = y
        .f_lt(0)
        .and_then(|low| low.f_logical_or(&y.f_ge(k)?))
        .and_then(|out| match ignore {
            Some(i) => out.f_logical_and(&y.f_ne(i)?),
            None => Ok(out),
        })
        .at(span)?;
    let Some(i) = first_true(&outside).at(span)? else {
        return Ok(());
    };
    let flat = y.f_reshape([-1]).at(span)?;
    let label = flat.f_int64_value(&[i]).at(span)?;
    let per = (flat.numel() / y.size().first().copied().unwrap_or(1).max(1) as usize).max(1) as i64;
    let at = if per == 1 {
        raw.sample(i)
    } else {
        format!("{}, token {}", raw.sample(i / per), i % per)
    };
    Err(invalid(
        span,
        format!(
            "{} holds the label {label} for {at}, outside the {k} classes [0, {k})",
            raw.targets_from
        ),
        "label out of range",
        format!("labels must lie in [0, {k}); check `classes:` and the file"),
    ))
}

/// `[N]` Int64 class indices (checked against the class count), `[N, ..shape]` Int64 class
/// indices per token, or `[N, ..shape]` Float values.
pub(super) fn shape(
    raw: &Raw,
    n: i64,
    targets: &Targets,
    ignore: Option<i64>,
    span: Span,
) -> Result<Tensor, DataError> {
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
    let tokens = match targets {
        Targets::Tokens { shape, .. } => &shape[..],
        _ => &[],
    };
    // The rule `kiln check` applies to the files' headers; a class loss over undeclared targets
    // is the checker's to refuse.
    let misfit = target_fit(&ys[1..], targets, tokens, false).is_err();
    match targets {
        Targets::Classes(classes) => {
            if misfit {
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
                float_labels(raw, &y, *classes, ignore, span)?;
            }
            let y = y.f_to_kind(Kind::Int64).at(span)?;
            in_classes(raw, &y, *classes, ignore, span)?;
            Ok(y)
        }
        Targets::Tokens { shape, classes } => {
            if misfit || !is_integer(kind) {
                return Err(invalid(
                    span,
                    format!(
                        "{from} holds {} per sample {}, but the targets are a class per token of {}",
                        kind_name(kind),
                        fmt_shape(&ys[1..]),
                        fmt_shape(shape)
                    ),
                    "not a class per token",
                    "give every split the same per-token targets",
                ));
            }
            let mut s = vec![n];
            s.extend_from_slice(shape);
            let y = y
                .f_reshape(s.as_slice())
                .and_then(|y| y.f_to_kind(Kind::Int64))
                .at(span)?;
            in_classes(raw, &y, *classes, ignore, span)?;
            Ok(y)
        }
        Targets::Values(shape) => {
            let want: i64 = shape.iter().product();
            if misfit {
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
            let converted = y.f_to_kind(Kind::Float).at(span)?;
            finite::check_overflow(raw, y, &converted, from, span)?;
            converted.f_reshape(s.as_slice()).at(span)
        }
        Targets::Unknown if is_integer(kind) => {
            let y = if per == 1 {
                y.f_reshape([n]).at(span)?
            } else {
                y.shallow_clone()
            };
            y.f_to_kind(Kind::Int64).at(span)
        }
        Targets::Unknown => {
            let converted = y.f_to_kind(Kind::Float).at(span)?;
            finite::check_overflow(raw, y, &converted, from, span)?;
            Ok(converted)
        }
    }
}

/// Checks class labels stored as floats (`[N]`) before they become integers: each a whole
/// number, inside `[0, classes)` when the class count is known, and small enough to be an index
/// otherwise. A label is named by its real value (`1e30`, `-3.5`).
fn float_labels(
    raw: &Raw,
    y: &Tensor,
    classes: Option<u64>,
    ignore: Option<i64>,
    span: Span,
) -> Result<(), DataError> {
    let from = &raw.targets_from;
    if let Some((i, v)) = first_fraction(y).at(span)? {
        return Err(invalid(
            span,
            format!(
                "{from} holds {} for {}, which is not a class index (not a whole number)",
                fmt_value(v),
                raw.sample(i)
            ),
            "not a class label",
            "class labels are whole numbers from 0",
        ));
    }
    // Beyond 2^53, floats skip whole numbers; no class count comes near.
    let (low, high, within) = match classes {
        Some(k) => (0.0, k as f64, format!("outside the {k} classes [0, {k})")),
        None => (
            -9_007_199_254_740_992.0,
            9_007_199_254_740_992.0,
            "too large to be a class index".to_string(),
        ),
    };
    let outside = y
        .f_lt(low)
        .and_then(|below| below.f_logical_or(&y.f_ge(high)?))
        .and_then(|out| match ignore {
            Some(i) => out.f_logical_and(&y.f_ne(i as f64)?),
            None => Ok(out),
        })
        .at(span)?;
    if let Some(i) = first_true(&outside).at(span)? {
        let label = y.f_double_value(&[i]).at(span)?;
        let help = match classes {
            Some(k) => format!("labels must lie in [0, {k}); check `classes:` and the file"),
            None => "class labels are whole numbers from 0".to_string(),
        };
        return Err(invalid(
            span,
            format!(
                "{from} holds the label {} for {}, {within}",
                fmt_value(label),
                raw.sample(i)
            ),
            "label out of range",
            help,
        ));
    }
    Ok(())
}
