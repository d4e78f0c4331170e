//! `positional` (a learned table, as GPT-2's `wpe`) and `sinusoidal` (Vaswani et al.'s fixed
//! encoding), added to `[batch, sequence, width]`.

use tch::{Kind, Tensor};

use super::{embedding, Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;

/// The learned table `weight` of `[max_len, width]`, `N(0, 1)` as `nn.Embedding`'s; the
/// sinusoidal encoding has no tensors (it is computed, as a non-persistent buffer would be).
pub(super) fn init(
    i: &mut Init,
    max_len: i64,
    width: i64,
    learned: bool,
) -> Result<(), Diagnostic> {
    if learned {
        embedding::init(i, max_len, width, None)?;
    }
    Ok(())
}

/// `x + P[:S]`, with `P` the learned table or the sinusoids.
pub(super) fn forward(
    net: &Net,
    l: &LayerRun,
    x: &Tensor,
    learned: bool,
) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    let (len, width) = match x.size().as_slice() {
        [_, len, width] => (*len, *width),
        _ => (0, 0),
    };
    let p = if learned {
        net.param(l, "weight")?.f_narrow(0, 0, len).at(s)?
    } else {
        sinusoids(len, width, x.device()).at(s)?
    };
    net.fp32_input(l, x)?.f_add(&p).at(s)
}

/// `PE[pos, 2i] = sin(pos / 10000^(2i/E))`, `PE[pos, 2i+1] = cos(pos / 10000^(2i/E))`, as the
/// PyTorch tutorial's `PositionalEncoding` computes it (`div_term = exp(2i * -ln(10000) / E)`).
fn sinusoids(len: i64, width: i64, device: tch::Device) -> Result<Tensor, tch::TchError> {
    let options = (Kind::Float, device);
    let position = Tensor::f_arange(len, options)?.f_unsqueeze(1)?;
    let div = Tensor::f_arange_start_step(0, width, 2, options)?
        .f_mul_scalar(-(10000f64.ln()) / width as f64)?
        .f_exp()?;
    let angle = position.f_mul(&div)?;
    Tensor::f_stack(&[angle.f_sin()?, angle.f_cos()?], -1)?.f_reshape([len, width])
}
