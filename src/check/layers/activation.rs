//! Element-wise layers: `dropout` and the activations.

use super::{given, numel, Checked, Flow, LayerCheck, Spec};
use crate::check::cx::Range;
use crate::diagnostic::problem::{Declared, NoOp};
use crate::diagnostic::Problem;
use crate::ir::LayerKind;

/// `dropout(p)`.
pub static DROPOUT: Spec = Spec {
    params: &[given("p", "0.5, in [0, 1)")],
    note: None,
    shapes: "unchanged",
};

/// `relu`, `gelu`, `silu`, `tanh`, `sigmoid`.
pub static PLAIN: Spec = Spec {
    params: &[],
    note: None,
    shapes: "unchanged",
};

/// `leaky_relu(negative_slope)`.
pub static LEAKY_RELU: Spec = Spec {
    params: &[given("negative_slope", "0.01")],
    note: None,
    shapes: "unchanged; `x` above 0, `negative_slope * x` below",
};

/// `elu(alpha)`.
pub static ELU: Spec = Spec {
    params: &[given("alpha", "1.0")],
    note: None,
    shapes: "unchanged; `x` above 0, `alpha * (exp(x) - 1)` below",
};

/// `prelu(num_parameters, init)`.
pub static PRELU: Spec = Spec {
    params: &[given("num_parameters", "1"), given("init", "0.25")],
    note: None,
    shapes: "unchanged; a leaky ReLU with learned slopes: one, or one per channel (`num_parameters` = `C` of `[C, ...]`)",
};

/// The output of an element-wise layer: the input's shape, one FLOP per value.
fn elementwise(kind: LayerKind, shape: Vec<i64>, params: u64) -> Checked {
    let n = numel(&shape).max(0) as u64;
    Checked::new(kind, shape, params, n)
}

pub(super) fn check_dropout(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let p = lc.num_or("p", 0.5, Range::UnitOpen)?;
    if p == 0.0 {
        lc.cx.report(Problem::NoOpLayer {
            span: lc.span,
            situation: NoOp::Dropout,
        });
    }
    let shape = lc.input(flow)?;
    Some(elementwise(LayerKind::Dropout { p }, shape, 0))
}

/// Checks an activation without parameters, which computes `kind`.
pub(super) fn check_plain(lc: &mut LayerCheck, flow: &Flow, kind: LayerKind) -> Option<Checked> {
    let shape = lc.input(flow)?;
    Some(elementwise(kind, shape, 0))
}

pub(super) fn check_leaky_relu(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let negative_slope = lc.num_or("negative_slope", 0.01, Range::Any)?;
    let shape = lc.input(flow)?;
    Some(elementwise(
        LayerKind::LeakyRelu { negative_slope },
        shape,
        0,
    ))
}

pub(super) fn check_elu(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let alpha = lc.num_or("alpha", 1.0, Range::Any)?;
    let shape = lc.input(flow)?;
    Some(elementwise(LayerKind::Elu { alpha }, shape, 0))
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
    Some(elementwise(kind, shape, parameters as u64))
}
