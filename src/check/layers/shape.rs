//! Layers that reshape or reduce: `flatten`, `reshape`, `mean`, and the softmaxes, which take a
//! dimension like `mean` does.

use super::{Check, Checked, Flow, LayerCheck};
use crate::diagnostic::problem::{Expected, Names, NoOp, OutOfRange, Shapes, Warnings};
use crate::diagnostic::Problem;
use crate::ir::numel;
use crate::ir::Kind;
use crate::ir::LayerKind;
use crate::span::Span;
use crate::syntax::ast::ValueKind;

/// What a layer that takes a dimension does along it.
pub(super) enum DimOp {
    Softmax,
    LogSoftmax,
    Mean,
}

/// The check of `kind` when it is a shape operation.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Softmax => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_dim(lc, flow, DimOp::Softmax))
        }
        Kind::LogSoftmax => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check_dim(lc, flow, DimOp::LogSoftmax))
        }
        Kind::Mean => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_dim(lc, flow, DimOp::Mean)),
        Kind::Flatten => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_flatten(lc, flow)),
        Kind::Reshape => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_reshape(lc, flow)),
        _ => return None,
    })
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
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: at,
            situation: OutOfRange::DimOutside {
                dim: d,
                producer: super::producer(flow, &shape),
            },
        }));
        return None;
    }
    let (kind, output) = match op {
        DimOp::Softmax => (LayerKind::Softmax { dim: resolved }, shape.clone()),
        DimOp::LogSoftmax => (LayerKind::LogSoftmax { dim: resolved }, shape.clone()),
        DimOp::Mean => {
            let mut output = shape.clone();
            output.remove(resolved as usize);
            (LayerKind::Mean { dim: resolved }, output)
        }
    };
    Some(Checked::new(kind, &shape, output))
}

pub(super) fn check_flatten(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let shape = lc.input(flow)?;
    Some(Checked::new(
        LayerKind::Flatten,
        &shape,
        vec![numel(&shape)],
    ))
}

pub(super) fn check_reshape(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let v = lc.required("shape")?;
    let ValueKind::List(items) = &v.kind else {
        lc.cx.wrong_type(v, Expected::ReshapeShape);
        return None;
    };
    let mut dims = Vec::new();
    for item in items {
        let d = lc.cx.int(item)?;
        if d == 0 || d < -1 {
            lc.cx.report(Problem::Names(Names::OutOfRange {
                span: item.span,
                situation: OutOfRange::ReshapeDim { dim: d },
            }));
            return None;
        }
        dims.push(d);
    }
    if dims.iter().filter(|d| **d == -1).count() > 1 {
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: v.span,
            situation: OutOfRange::ReshapeInferred,
        }));
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
        lc.cx.report(Problem::Warnings(Warnings::NoOpLayer {
            span: lc.span,
            situation: NoOp::Reshape {
                shape: output.as_slice().into(),
            },
        }));
    }
    let kind = LayerKind::Reshape {
        shape: output.clone(),
    };
    Some(Checked::new(kind, &shape, output))
}

fn reshape_error(lc: &mut LayerCheck, at: Span, shape: &[i64], dims: &[i64], flow: &Flow) {
    lc.cx.report(Problem::Shapes(Shapes::ReshapeSize {
        span: at,
        target: dims.into(),
        producer: super::producer(flow, shape),
    }));
}
