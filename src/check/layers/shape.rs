//! Layers that reshape or reduce: `flatten`, `reshape`, `mean`, and the softmaxes, which take a
//! dimension like `mean` does.

use super::{fmt_shape, given, numel, required, Checked, Flow, LayerCheck, Spec};
use crate::diagnostic::{Code, Diagnostic};
use crate::ir::LayerKind;
use crate::span::Span;
use crate::syntax::ast::ValueKind;

/// `flatten`.
pub static FLATTEN: Spec = Spec {
    params: &[],
    note: None,
    shapes: "`[...]` -> `[product]`",
};

/// `reshape(shape)`.
pub static RESHAPE: Spec = Spec {
    params: &[required("shape")],
    note: None,
    shapes: "same number of values; one `-1` allowed",
};

/// `mean(dim)`.
pub static MEAN: Spec = Spec {
    params: &[required("dim")],
    note: None,
    shapes: "removes `dim`",
};

/// `softmax(dim)` and `log_softmax(dim)`.
pub static SOFTMAX: Spec = Spec {
    params: &[given("dim", "-1")],
    note: None,
    shapes: "unchanged",
};

/// What a layer that takes a dimension does along it.
pub(super) enum DimOp {
    Softmax,
    LogSoftmax,
    Mean,
}

pub(super) fn check_dim(lc: &mut LayerCheck, flow: &Flow, op: DimOp) -> Option<Checked> {
    let dim = match lc.bound.get("dim") {
        Some(v) => Some((lc.cx.int(v)?, v.span)),
        None if matches!(op, DimOp::Mean) => {
            lc.cx.missing(lc.kind.name(), "dim", lc.bound.span);
            return None;
        }
        None => None,
    };
    let shape = lc.input(flow)?;
    let rank = shape.len() as i64;
    let (d, at) = dim.unwrap_or((-1, lc.span));
    let resolved = if d < 0 { d + rank } else { d };
    if resolved < 0 || resolved >= rank {
        lc.cx.push(
            Diagnostic::new(
                Code::OutOfRange,
                at,
                format!(
                    "dimension {d} is outside a {rank}-D sample {}",
                    fmt_shape(&shape)
                ),
            )
            .label(format!("valid: {} to {}", -rank, rank - 1))
            .with(
                flow.producer.0,
                format!("{} produces {}", flow.producer.1, fmt_shape(&shape)),
            )
            .help("dimensions count per sample, from 0, without the batch"),
        );
        return None;
    }
    let n = numel(&shape).max(0) as u64;
    Some(match op {
        DimOp::Softmax => Checked::new(LayerKind::Softmax { dim: resolved }, shape, 0, n),
        DimOp::LogSoftmax => Checked::new(LayerKind::LogSoftmax { dim: resolved }, shape, 0, n),
        DimOp::Mean => {
            let mut output = shape;
            output.remove(resolved as usize);
            Checked::new(LayerKind::Mean { dim: resolved }, output, 0, n)
        }
    })
}

pub(super) fn check_flatten(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let shape = lc.input(flow)?;
    Some(Checked::new(LayerKind::Flatten, vec![numel(&shape)], 0, 0))
}

pub(super) fn check_reshape(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let v = lc.required("shape")?;
    let ValueKind::List(items) = &v.kind else {
        lc.cx.push(
            Diagnostic::new(
                Code::WrongType,
                v.span,
                format!("expected a shape, found {}", v.type_name()),
            )
            .label("expected a shape such as `[1, 28, 28]`")
            .help("write the per-sample shape; one dimension may be -1"),
        );
        return None;
    };
    let mut dims = Vec::new();
    for item in items {
        let d = lc.cx.int(item)?;
        if d == 0 || d < -1 {
            lc.cx.push(
                Diagnostic::new(
                    Code::OutOfRange,
                    item.span,
                    format!("dimension {d} is not allowed"),
                )
                .label("must be positive, or -1 once")
                .help("dimensions are positive; -1 stands for what is left"),
            );
            return None;
        }
        dims.push(d);
    }
    if dims.iter().filter(|d| **d == -1).count() > 1 {
        lc.cx.push(
            Diagnostic::new(Code::OutOfRange, v.span, "more than one -1 in a reshape")
                .label("only one dimension can be inferred")
                .help("write every dimension but one"),
        );
        return None;
    }
    let at = v.span;
    let shape = lc.input(flow)?;
    let known: i64 = dims.iter().filter(|d| **d != -1).product();
    let total = numel(&shape);
    let output: Vec<i64> = if dims.contains(&-1) {
        if known == 0 || total % known != 0 {
            reshape_error(lc, at, &shape, &dims, flow);
            return None;
        }
        dims.iter()
            .map(|d| if *d == -1 { total / known } else { *d })
            .collect()
    } else {
        if known != total {
            reshape_error(lc, at, &shape, &dims, flow);
            return None;
        }
        dims.clone()
    };
    if output == shape {
        lc.cx.push(
            Diagnostic::new(
                Code::NoOpLayer,
                lc.span,
                format!("reshape to {} keeps the shape", fmt_shape(&output)),
            )
            .label("has no effect")
            .help("remove the layer"),
        );
    }
    Some(Checked::new(
        LayerKind::Reshape {
            shape: output.clone(),
        },
        output,
        0,
        0,
    ))
}

fn reshape_error(lc: &mut LayerCheck, at: Span, shape: &[i64], dims: &[i64], flow: &Flow) {
    lc.cx.push(
        Diagnostic::new(
            Code::ReshapeSize,
            at,
            format!(
                "cannot reshape {} ({} values) to {}",
                fmt_shape(shape),
                numel(shape),
                fmt_shape(dims)
            ),
        )
        .label(format!("{} values do not fit", numel(shape)))
        .with(
            flow.producer.0,
            format!("{} produces {}", flow.producer.1, fmt_shape(shape)),
        )
        .help("the new shape must hold the same number of values"),
    );
}
