//! What the data files' headers declare against the model: each sample against the model's
//! input (the one rule of [`sample_fit`], after the source's `shape` and `layout`), token ids
//! stored as integers, and the targets against what the experiment makes of them.

use super::super::cx::Cx;
use super::{dims, Declared};
use crate::datafile::Elem;
use crate::diagnostic::problem::DataFit;
use crate::diagnostic::Problem;
use crate::ir::{sample_fit, DType, Layout, Loss, SampleFit, Shape, Targets};

/// What the model needs of the data, for [`fit`].
pub(in crate::check) struct Wants<'a> {
    /// The model's input shape.
    pub input: &'a Shape,
    /// The element type the model takes.
    pub dtype: DType,
    /// What a target is.
    pub targets: &'a Targets,
    /// The loss, when it checked.
    pub loss: Option<&'a Loss>,
}

/// Whether the training files fit the model: their samples the input, their targets what the
/// experiment makes of them.
pub(in crate::check) struct Fit {
    /// The samples fit the model's input (or were not read).
    pub inputs: bool,
    /// The targets fit (or were not read).
    pub targets: bool,
}

/// Checks what the headers declare against the model: each sample against the model's input
/// (the one rule of [`sample_fit`], after the source's `shape` and `layout`), token ids stored as
/// integers, and the targets against what the experiment makes of them.
pub(in crate::check) fn fit(cx: &mut Cx, declared: &[Declared], wants: &Wants) -> Fit {
    let mut fit = Fit {
        inputs: true,
        targets: true,
    };
    for d in declared {
        let inputs = fit_inputs(cx, d, wants);
        let targets = inputs && fit_targets(cx, d, wants);
        if d.trains() {
            fit = Fit { inputs, targets };
        }
    }
    fit
}

/// A file's samples against the declared `shape` and the model's input.
fn fit_inputs(cx: &mut Cx, d: &Declared, wants: &Wants) -> bool {
    let x = &d.inputs;
    let stored = &x.shape[1..];
    let mismatch = |cx: &mut Cx, situation: DataFit| {
        cx.report(Problem::DataMismatch {
            span: x.span,
            file: x.name.clone(),
            situation,
        });
        false
    };
    if let (DType::Int, Some(elem @ Elem::Float { .. })) = (wants.dtype, &x.elem) {
        return mismatch(
            cx,
            DataFit::TokenFloats {
                found: elem.to_string(),
            },
        );
    }
    let signed = dims(stored);
    // A declared shape is a reading of what the file stores; the model checker compares it
    // (arranged by the layout) with the input.
    if let Some(declared) = &d.spans.shape {
        return declared_fits(cx, d, &signed, declared);
    }
    if matches!(d.layout, Layout::ChannelsLast(_)) && signed.len() < 2 {
        let span = d.spans.args.get("layout").copied().unwrap_or(x.span);
        cx.report(Problem::DataMismatch {
            span,
            file: x.name.clone(),
            situation: DataFit::FlatLayout {
                found: stored.to_vec(),
            },
        });
        return false;
    }
    let seen = d.layout.arranged(&signed);
    let input_span = d.spans.input;
    match sample_fit(&seen, wants.input) {
        SampleFit::Fits => true,
        SampleFit::Size => mismatch(
            cx,
            DataFit::SampleSize {
                found: stored.to_vec(),
                input: wants.input.clone(),
                input_span,
            },
        ),
        fit => {
            let arranged = matches!(d.layout, Layout::ChannelsLast(_));
            let found = if arranged {
                seen.iter().map(|d| *d as u64).collect()
            } else {
                stored.to_vec()
            };
            mismatch(
                cx,
                DataFit::Layout {
                    found,
                    want: wants.input.clone(),
                    want_span: input_span,
                    declared: false,
                    channels_last: fit == SampleFit::ChannelsLast && !arranged,
                    arranged,
                },
            )
        }
    }
}

/// The samples as stored against a declared `shape`: the same values, reshaped only as
/// [`sample_fit`] allows.
fn declared_fits(cx: &mut Cx, d: &Declared, stored: &Shape, declared: &Shape) -> bool {
    let x = &d.inputs;
    let at = d.spans.args.get("shape").copied();
    let situation = match sample_fit(stored, declared) {
        SampleFit::Fits => return true,
        SampleFit::Size => DataFit::DeclaredSize {
            found: x.shape[1..].to_vec(),
            declared: declared.clone(),
            declared_span: at,
        },
        fit => DataFit::Layout {
            found: x.shape[1..].to_vec(),
            want: declared.clone(),
            want_span: at,
            declared: true,
            channels_last: fit == SampleFit::ChannelsLast,
            arranged: false,
        },
    };
    cx.report(Problem::DataMismatch {
        span: x.span,
        file: x.name.clone(),
        situation,
    });
    false
}

/// A file's targets against what the experiment makes of them; false after reporting that they
/// do not fit.
fn fit_targets(cx: &mut Cx, d: &Declared, wants: &Wants) -> bool {
    let y = &d.targets;
    let found = y.shape[1..].to_vec();
    let per_target: u64 = found.iter().fold(1, |a, d| a.saturating_mul(*d));
    // Targets shaped as integer inputs look like a class per token.
    let tokens_like = wants.dtype == DType::Int && dims(&found) == *wants.input;
    let class_loss = matches!(
        wants.loss,
        Some(Loss::CrossEntropy { .. } | Loss::Nll { .. })
    );
    let situation = match wants.targets {
        Targets::Classes(_) if per_target != 1 => DataFit::NotClassLabels {
            found,
            classes: d.spans.args.get("classes").copied(),
            per_token: tokens_like,
        },
        Targets::Unknown if class_loss && per_target != 1 => DataFit::NotClassLabels {
            found,
            classes: None,
            per_token: tokens_like,
        },
        Targets::Tokens { .. } if i64::try_from(per_target).ok() != Some(wants.input.numel()) => {
            DataFit::NotTokenClasses {
                found,
                tokens: wants.input.clone(),
            }
        }
        Targets::Values(shape) if i64::try_from(per_target).ok() != Some(shape.numel()) => {
            DataFit::TargetSize {
                found,
                declared: shape.clone(),
            }
        }
        _ => return true,
    };
    cx.report(Problem::DataMismatch {
        span: y.span,
        file: y.name.clone(),
        situation,
    });
    false
}
