//! The padding mask after an `embedding` with a `pad`: `[batch, sequence]`, true for tokens.
//! It follows the sequence through the layers that keep it as the second dimension, masks the
//! keys of every attention, and makes `mean(0)` average the tokens only. Also the attention
//! masks that combine it with `causal` and a local `window`.

use tch::{Device, Kind, TchError, Tensor};

use super::LayerRun;
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;

/// Whether `y` still has the sequence of `keep` as its second dimension (`[batch, S, ...]`).
pub(super) fn keeps_sequence(y: &Tensor, keep: &Tensor) -> bool {
    let (y, k) = (y.size(), keep.size());
    y.len() >= 3 && y[..2] == k[..]
}

/// `mean(0)` over the tokens that `keep` marks: `sum(x * keep) / sum(keep)` over the
/// sequence. A sequence of padding only has no mean (NaN, as `0 / 0`).
pub(super) fn mean(l: &LayerRun, x: &Tensor, keep: Option<Tensor>) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    let Some(keep) = keep else {
        return x
            .f_mean_dim(Some([1i64].as_slice()), false, None::<Kind>)
            .at(s);
    };
    let mut shape = keep.size();
    shape.resize(x.dim(), 1);
    let w = keep
        .f_to_kind(x.kind())
        .at(s)?
        .f_reshape(shape.as_slice())
        .at(s)?;
    let total = x
        .f_mul(&w)
        .at(s)?
        .f_sum_dim_intlist(Some([1i64].as_slice()), false, None::<Kind>)
        .at(s)?;
    let count = w
        .f_sum_dim_intlist(Some([1i64].as_slice()), false, None::<Kind>)
        .at(s)?;
    total.f_div(&count).at(s)
}

/// The boolean attention mask, true where query `i` may attend to key `j`, as the negation of
/// `nn.MultiheadAttention`'s boolean `attn_mask` combined with its `key_padding_mask`: the keys
/// that `keep` (`[batch, S]`) marks as tokens; under `causal` only `j <= i`; with a `window` of
/// `K` only `|i - j| < K`. It is `[batch, 1, 1, S]` (padding only), `[S, S]` (no padding) or
/// `[batch, 1, S, S]`.
pub(super) fn attention(
    keep: Option<&Tensor>,
    b: i64,
    n: i64,
    causal: bool,
    window: Option<i64>,
    device: Device,
) -> Result<Tensor, TchError> {
    let keys = keep.map(|k| k.f_view([b, 1, 1, n])).transpose()?;
    if let (Some(keys), false, None) = (&keys, causal, window) {
        return Ok(keys.shallow_clone());
    }
    // `tril(d)` keeps `j - i <= d` and `triu(d)` keeps `j - i >= d`.
    let ahead = if causal {
        0
    } else {
        window.map_or(n, |k| k - 1)
    };
    let behind = window.map_or(-n, |k| 1 - k);
    let local = Tensor::f_ones([n, n], (Kind::Bool, device))?
        .f_tril(ahead)?
        .f_triu(behind)?;
    match keys {
        Some(keys) => keys.f_logical_and(&local),
        None => Ok(local),
    }
}
