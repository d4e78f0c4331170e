//! Normalisation: batch, layer and group norms. They run in fp32, as under autocast.

use tch::Tensor;

use super::{Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::BatchNorm;

/// An affine `weight` (ones) and `bias` (zeros) of `shape`, under `prefix`.
pub(super) fn init_affine(i: &mut Init, prefix: &str, shape: &[i64]) -> Result<(), Diagnostic> {
    let weight = i.filled(shape, 1.0)?;
    i.param(&format!("{prefix}weight"), weight);
    let bias = i.filled(shape, 0.0)?;
    i.param(&format!("{prefix}bias"), bias);
    Ok(())
}

/// `nn.BatchNorm*d`'s parameters and running statistics.
pub(super) fn init_batch(i: &mut Init, features: i64) -> Result<(), Diagnostic> {
    init_affine(i, "", &[features])?;
    let mean = i.filled(&[features], 0.0)?;
    i.buffer("running_mean", mean);
    let var = i.filled(&[features], 1.0)?;
    i.buffer("running_var", var);
    Ok(())
}

/// Batch normalisation: batch statistics (updating the running ones) when training.
pub(super) fn batch(
    net: &Net,
    l: &LayerRun,
    norm: &BatchNorm,
    x: &Tensor,
    train: bool,
) -> Result<Tensor, Diagnostic> {
    let x = net.fp32_input(l, x)?;
    x.f_batch_norm(
        Some(net.param(l, "weight")?),
        Some(net.param(l, "bias")?),
        Some(net.buffer(l, "running_mean")?),
        Some(net.buffer(l, "running_var")?),
        train,
        norm.momentum,
        norm.eps,
        true,
    )
    .at(l.span)
}

/// Layer normalisation over the trailing `shape`, with the affine weights under `prefix`.
pub(super) fn layer(
    net: &Net,
    l: &LayerRun,
    prefix: &str,
    shape: &[i64],
    eps: f64,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    let x = net.fp32_input(l, x)?;
    x.f_layer_norm(
        shape,
        Some(net.param(l, &format!("{prefix}weight"))?),
        Some(net.param(l, &format!("{prefix}bias"))?),
        eps,
        true,
    )
    .at(l.span)
}

/// Group normalisation.
pub(super) fn group(
    net: &Net,
    l: &LayerRun,
    groups: i64,
    eps: f64,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    let x = net.fp32_input(l, x)?;
    x.f_group_norm(
        groups,
        Some(net.param(l, "weight")?),
        Some(net.param(l, "bias")?),
        eps,
        true,
    )
    .at(l.span)
}
