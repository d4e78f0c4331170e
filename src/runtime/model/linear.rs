//! `linear`, and the linear maps inside attention and transformer blocks.

use tch::{Kind, Tensor};

use super::{split, Init, LayerRun, LinearSwap, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::tensor::Split;

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

/// A `linear` layer: compression's swap when it has one, `x W^T + b` otherwise.
pub(super) fn layer(
    net: &Net,
    l: &LayerRun,
    x: &Tensor,
    train: bool,
) -> Result<Tensor, Diagnostic> {
    match net.swaps.iter().find(|(n, _)| *n == l.name) {
        Some((_, swap)) => swapped(net, l, swap.as_ref(), x, train),
        None => match l.share.as_ref().map(|s| s.split) {
            Some(Split::Columns) => forward(net, l, "", &split::enter(l, x)?),
            Some(Split::Rows) => rows(net, l, "", x),
            Some(Split::Gathered) => split::gather(l, &forward(net, l, "", &split::enter(l, x)?)?),
            _ => forward(net, l, "", x),
        },
    }
}

/// A layer split by its inputs (tensor parallel's rows): this rank's partial product `x W_r^T`,
/// summed over the tensor ranks, then the bias (whole on every rank).
pub(super) fn rows(
    net: &Net,
    l: &LayerRun,
    prefix: &str,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    let partial = affine(net, l, &format!("{prefix}weight"), "", x)?;
    let y = split::leave(l, &partial)?;
    let bias = format!("{prefix}bias");
    if !l.params.iter().any(|(n, _)| *n == bias) {
        return Ok(y);
    }
    y.f_add(&net.weight(l, &bias)?).at(l.span)
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

/// The layer through compression's swap: the input flattened to `[M, K]` in fp32, the output
/// given back its leading dimensions.
fn swapped(
    net: &Net,
    l: &LayerRun,
    swap: &dyn LinearSwap,
    x: &Tensor,
    train: bool,
) -> Result<Tensor, Diagnostic> {
    let w = net.param(l, "weight")?;
    let b = if l.params.iter().any(|(n, _)| n == "bias") {
        Some(net.param(l, "bias")?)
    } else {
        None
    };
    let mut dims = x.size();
    let k = dims.pop().unwrap_or(1);
    let flat = x.f_reshape([-1, k]).at(l.span)?;
    let flat = if flat.kind() == Kind::Float {
        flat
    } else {
        flat.f_to_kind(Kind::Float).at(l.span)?
    };
    let y = swap.forward(&flat, w, b, train).at(l.span)?;
    dims.push(y.size().last().copied().unwrap_or(0));
    y.f_reshape(dims).at(l.span)
}
