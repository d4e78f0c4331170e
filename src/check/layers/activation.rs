//! Element-wise layers: `dropout` and the activations.

use super::{Check, Checked, Flow, LayerCheck};
use crate::check::cx::Range;
use crate::diagnostic::problem::{Declared, NoOp, Warnings};
use crate::diagnostic::Problem;
use crate::ir::LayerKind;
use crate::ir::{Elementwise, Kind};

/// The output of an element-wise layer: the input's shape.
fn elementwise(kind: LayerKind, shape: Vec<i64>) -> Checked {
    Checked::new(kind, &shape, shape.clone())
}

/// The check of `kind` when it is element-wise.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Dropout => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_dropout(lc, flow)),
        Kind::Elementwise(e) => {
            Box::new(move |lc: &mut LayerCheck, flow: &Flow| check_plain(lc, flow, e))
        }
        Kind::LeakyRelu => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_leaky_relu(lc, flow)),
        Kind::Elu => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_elu(lc, flow)),
        Kind::Prelu => Box::new(|lc: &mut LayerCheck, flow: &Flow| check_prelu(lc, flow)),
        _ => return None,
    })
}

pub(super) fn check_dropout(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let p = lc.num_or("p", 0.5, Range::UnitOpen)?;
    if p == 0.0 {
        lc.cx.report(Problem::Warnings(Warnings::NoOpLayer {
            span: lc.span,
            situation: NoOp::Dropout,
        }));
    }
    let shape = lc.input(flow)?;
    Some(elementwise(LayerKind::Dropout { p }, shape))
}

/// Checks an activation without parameters.
fn check_plain(lc: &mut LayerCheck, flow: &Flow, e: Elementwise) -> Option<Checked> {
    let shape = lc.input(flow)?;
    Some(elementwise(LayerKind::Elementwise(e), shape))
}

pub(super) fn check_leaky_relu(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let negative_slope = lc.num_or("negative_slope", 0.01, Range::Any)?;
    let shape = lc.input(flow)?;
    Some(elementwise(LayerKind::LeakyRelu { negative_slope }, shape))
}

pub(super) fn check_elu(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let alpha = lc.num_or("alpha", 1.0, Range::Any)?;
    let shape = lc.input(flow)?;
    Some(elementwise(LayerKind::Elu { alpha }, shape))
}

pub(super) fn check_prelu(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let parameters = lc.opt_uint("num_parameters", 1)?.unwrap_or(1);
    let init = lc.num_or("init", 0.25, Range::Any)?;
    let shape = lc.input(flow)?;
    if parameters != 1 && shape.first() != Some(&parameters) {
        let at = lc.at("num_parameters");
        let declared = Declared::Slopes {
            declared: parameters,
        };
        lc.mismatch(at, flow, &shape, declared);
        return None;
    }
    let kind = LayerKind::Prelu { parameters, init };
    Some(elementwise(kind, shape))
}
