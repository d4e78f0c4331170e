//! Activations: those without parameters, one libtorch call each, and `leaky_relu`, `elu` and
//! `prelu`.

use tch::{TchError, Tensor};

use super::{Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Elementwise;

/// An activation without parameters, as `torch.nn.functional` computes it (GELU exact).
pub(super) fn elementwise(e: Elementwise, x: &Tensor) -> Result<Tensor, TchError> {
    match e {
        Elementwise::Relu => x.f_relu(),
        Elementwise::Gelu => x.f_gelu("none"),
        Elementwise::Silu => x.f_silu(),
        Elementwise::Tanh => x.f_tanh(),
        Elementwise::Sigmoid => x.f_sigmoid(),
    }
}

/// `x` where `x > 0`, else `negative_slope * x`; the gradient at 0 is the slope, as in
/// PyTorch's `leaky_relu`.
pub(super) fn leaky_relu(
    l: &LayerRun,
    negative_slope: f64,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    let positive = x.f_gt(0.0).at(s)?;
    let scaled = x.f_mul_scalar(negative_slope).at(s)?;
    x.f_where_self(&positive, &scaled).at(s)
}

/// `x` where `x > 0`, else `alpha * (exp(x) - 1)`. The exponential sees `min(x, 0)`, so a
/// large positive input cannot overflow it and poison the gradient of the branch not taken.
pub(super) fn elu(l: &LayerRun, alpha: f64, x: &Tensor) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    let positive = x.f_gt(0.0).at(s)?;
    let negative = x
        .f_clamp_max(0.0)
        .at(s)?
        .f_expm1()
        .at(s)?
        .f_mul_scalar(alpha)
        .at(s)?;
    x.f_where_self(&positive, &negative).at(s)
}

/// `nn.PReLU`'s slopes: `parameters` values of `init`.
pub(super) fn init_prelu(i: &mut Init, parameters: i64, init: f64) -> Result<(), Diagnostic> {
    let weight = i.filled(&[parameters], init)?;
    i.param("weight", weight);
    Ok(())
}

/// A leaky ReLU with the learned slopes, one for all values or one per channel (dimension 1
/// of the batch). Under bf16/fp16 it runs in the lower precision, as autocast runs `prelu`.
pub(super) fn prelu(net: &Net, l: &LayerRun, x: &Tensor) -> Result<Tensor, Diagnostic> {
    let x = net.mm_input(l, x)?;
    let weight = net.weight(l, "weight")?;
    x.f_prelu(&weight).at(l.span)
}
