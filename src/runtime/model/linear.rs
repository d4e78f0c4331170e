//! `linear`, and the linear maps inside attention and transformer blocks.

use tch::Tensor;

use super::{Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;

/// `nn.Linear`'s parameters under `prefix` (`""` or `linear1.`): weight and bias both
/// `U(-1/sqrt(in), 1/sqrt(in))` (kaiming-uniform with `a = sqrt(5)`).
pub(super) fn init(
    i: &mut Init,
    prefix: &str,
    inputs: i64,
    outputs: i64,
    bias: bool,
) -> Result<(), Diagnostic> {
    let bound = 1.0 / (inputs as f64).sqrt();
    let weight = i.uniform(&[outputs, inputs], bound)?;
    i.param(&format!("{prefix}weight"), weight);
    if bias {
        let b = i.uniform(&[outputs], bound)?;
        i.param(&format!("{prefix}bias"), b);
    }
    Ok(())
}

/// `x W^T + b` with the weights under `prefix`; the bias is used when the layer has one.
pub(super) fn forward(
    net: &Net,
    l: &LayerRun,
    prefix: &str,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    affine(
        net,
        l,
        &format!("{prefix}weight"),
        &format!("{prefix}bias"),
        x,
    )
}

/// `x W^T + b` with the weight and bias of the given local names (the bias when present).
pub(super) fn affine(
    net: &Net,
    l: &LayerRun,
    weight: &str,
    bias: &str,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    let x = net.mm_input(l, x)?;
    let w = net.weight(l, weight)?;
    let b = if l.params.iter().any(|(n, _)| n == bias) {
        Some(net.weight(l, bias)?)
    } else {
        None
    };
    x.f_linear(&w, b.as_ref()).at(l.span)
}
