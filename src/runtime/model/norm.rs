//! Normalisation: batch, layer, RMS and group norms. They run in fp32, as under autocast, but
//! for the RMS norm, which autocast leaves in its input's type (it computes in fp32 inside).

use tch::Tensor;

use super::{Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::problem::Strategies;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{BatchNorm, LayerNorm};

/// An affine `weight` (ones) and `bias` (zeros) of `shape`, under `prefix`.
pub(super) fn init_affine(i: &mut Init, prefix: &str, shape: &[i64]) -> Result<(), Diagnostic> {
    init_scale(i, prefix, shape, true)
}

/// A `weight` (ones) of `shape` under `prefix`, and a `bias` (zeros) when `bias`.
pub(super) fn init_scale(
    i: &mut Init,
    prefix: &str,
    shape: &[i64],
    bias: bool,
) -> Result<(), Diagnostic> {
    let weight = i.filled(shape, 1.0)?;
    i.param(&format!("{prefix}weight"), weight);
    if bias {
        let b = i.filled(shape, 0.0)?;
        i.param(&format!("{prefix}bias"), b);
    }
    Ok(())
}

/// `nn.BatchNorm*d`'s parameters (when `affine`) and running statistics (when tracked).
pub(super) fn init_batch(i: &mut Init, norm: &BatchNorm) -> Result<(), Diagnostic> {
    let features = norm.features;
    if norm.affine {
        init_affine(i, "", &[features])?;
    }
    if norm.track_running_stats {
        let mean = i.filled(&[features], 0.0)?;
        i.buffer("running_mean", mean);
        let var = i.filled(&[features], 1.0)?;
        i.buffer("running_var", var);
    }
    Ok(())
}

/// `nn.LayerNorm`'s `weight` (ones) and `bias` (zeros); `nn.RMSNorm`'s `weight` alone.
pub(super) fn init_layer(i: &mut Init, norm: &LayerNorm) -> Result<(), Diagnostic> {
    init_scale(i, "", &norm.shape, !norm.rms)
}

/// A `layernorm` or `rmsnorm` layer.
pub(super) fn layer_norm(
    net: &Net,
    l: &LayerRun,
    norm: &LayerNorm,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    if !norm.rms {
        return layer(net, l, "", &norm.shape, norm.eps, x);
    }
    x.f_rms_norm(&norm.shape, Some(net.param(l, "weight")?), norm.eps)
        .at(l.span)
}

/// The layer's parameter of local name `name`, when it has one (a layer norm's bias).
fn optional<'n>(net: &'n Net, l: &LayerRun, name: &str) -> Result<Option<&'n Tensor>, Diagnostic> {
    if l.params.iter().any(|(n, _)| n == name) {
        net.param(l, name).map(Some)
    } else {
        Ok(None)
    }
}

/// Batch normalisation: batch statistics (updating the running ones) when training, and also
/// in evaluation when the layer keeps no running statistics (as PyTorch).
pub(super) fn batch(
    net: &Net,
    l: &LayerRun,
    norm: &BatchNorm,
    x: &Tensor,
    train: bool,
) -> Result<Tensor, Diagnostic> {
    let x = net.fp32_input(l, x)?;
    let batch_stats = train || !norm.track_running_stats;
    let size = x.size();
    let per_channel = size.iter().skip(2).product::<i64>() * size.first().copied().unwrap_or(0);
    if batch_stats && per_channel == 1 {
        // PyTorch refuses this pass; libtorch would return zeros and a NaN running variance.
        return Err(Problem::Strategies(Strategies::BatchNormOneValue {
            span: l.span,
            layer: l.name.clone(),
            cause: None,
            evaluation: !train,
        })
        .diagnostic());
    }
    let (weight, bias) = if norm.affine {
        (Some(net.param(l, "weight")?), Some(net.param(l, "bias")?))
    } else {
        (None, None)
    };
    let (mean, var) = if norm.track_running_stats {
        (
            Some(net.buffer(l, "running_mean")?),
            Some(net.buffer(l, "running_var")?),
        )
    } else {
        (None, None)
    };
    x.f_batch_norm(
        weight,
        bias,
        mean,
        var,
        batch_stats,
        norm.momentum,
        norm.eps,
        true,
    )
    .at(l.span)
}

/// Layer normalisation over the trailing `shape`, with the affine weights under `prefix` (the
/// bias when the layer has one).
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
        optional(net, l, &format!("{prefix}bias"))?,
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
