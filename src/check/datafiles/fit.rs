//! What the data files' headers declare against the model, by the rules the runtime applies to
//! the loaded arrays: each sample against the model's input ([`input_fit`], after the source's
//! `shape` and `layout`), token ids stored as integers, and the targets against what the
//! experiment makes of them ([`target_fit`]).

use super::super::cx::Cx;
use super::{dims, Declared};
use crate::datafile::Elem;
use crate::diagnostic::problem::{DataFit, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{
    input_fit, target_fit, DType, InputMisfit, Layout, Loss, Shape, TargetMisfit, Targets,
};
use crate::span::Span;

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
/// (the one rule of [`input_fit`], after the source's `shape` and `layout`), token ids stored as
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

/// A file's samples against the declared `shape` and the model's input, by the one rule of
/// [`input_fit`].
fn fit_inputs(cx: &mut Cx, d: &Declared, wants: &Wants) -> bool {
    let x = &d.inputs;
    let stored = &x.shape[1..];
    let mismatch = |cx: &mut Cx, span: Span, situation: DataFit| {
        cx.report(Problem::Strategies(Strategies::DataMismatch {
            span,
            file: x.name.clone(),
            situation,
        }));
        false
    };
    if let (DType::Int, Some(elem @ Elem::Float { .. })) = (wants.dtype, &x.elem) {
        let found = elem.to_string();
        return mismatch(cx, x.span, DataFit::TokenFloats { found });
    }
    let signed = dims(stored);
    let declared = d.spans.shape.as_ref();
    let at = d.spans.args.get("shape").copied();
    let input_span = d.spans.input;
    let arranged = matches!(d.layout, Layout::ChannelsLast(_));
    let situation = match input_fit(&signed, declared.map(|s| &s[..]), &d.layout, wants.input) {
        Ok(()) => return true,
        Err(InputMisfit::DeclaredSize) => DataFit::DeclaredSize {
            found: stored.to_vec(),
            declared: declared.cloned().unwrap_or_default(),
            declared_span: at,
        },
        Err(InputMisfit::DeclaredOrder { channels_last }) => DataFit::Layout {
            found: stored.to_vec(),
            want: declared.cloned().unwrap_or_default(),
            want_span: at,
            declared: true,
            channels_last,
            arranged: false,
        },
        // A declared shape is a reading of what the file stores; the model checker compares it
        // (arranged by the layout) with the input.
        Err(_) if declared.is_some() => return true,
        Err(InputMisfit::FlatLayout) => {
            let span = d.spans.args.get("layout").copied().unwrap_or(x.span);
            let found = stored.to_vec();
            return mismatch(cx, span, DataFit::FlatLayout { found });
        }
        Err(InputMisfit::Size) => DataFit::SampleSize {
            found: stored.to_vec(),
            input: wants.input.clone(),
            input_span,
        },
        Err(InputMisfit::Order { channels_last }) => DataFit::Layout {
            found: if arranged {
                d.layout
                    .arranged(&signed)
                    .iter()
                    .map(|d| *d as u64)
                    .collect()
            } else {
                stored.to_vec()
            },
            want: wants.input.clone(),
            want_span: input_span,
            declared: false,
            channels_last: channels_last && !arranged,
            arranged,
        },
    };
    mismatch(cx, x.span, situation)
}

/// A file's targets against what the experiment makes of them, by the one rule of
/// [`target_fit`]; false after reporting that they do not fit.
fn fit_targets(cx: &mut Cx, d: &Declared, wants: &Wants) -> bool {
    let y = &d.targets;
    let found = y.shape[1..].to_vec();
    // Targets shaped as integer inputs look like a class per token.
    let tokens_like = wants.dtype == DType::Int && dims(&found) == *wants.input;
    let class_loss = matches!(
        wants.loss,
        Some(Loss::CrossEntropy { .. } | Loss::Nll { .. })
    );
    let situation = match target_fit(&dims(&found), wants.targets, wants.input, class_loss) {
        Ok(()) => return true,
        Err(TargetMisfit::NotClassLabels) => DataFit::NotClassLabels {
            found,
            classes: match wants.targets {
                Targets::Classes(_) => d.spans.args.get("classes").copied(),
                _ => None,
            },
            per_token: tokens_like,
        },
        Err(TargetMisfit::NotTokenClasses) => DataFit::NotTokenClasses {
            found,
            tokens: wants.input.clone(),
        },
        Err(TargetMisfit::Size) => DataFit::TargetSize {
            found,
            declared: match wants.targets {
                Targets::Values(shape) => shape.clone(),
                _ => Shape::default(),
            },
        },
    };
    cx.report(Problem::Strategies(Strategies::DataMismatch {
        span: y.span,
        file: y.name.clone(),
        situation,
    }));
    false
}
