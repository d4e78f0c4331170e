//! The padding mask after an `embedding` with a `pad`: `[batch, sequence]`, true for tokens.
//! It follows the sequence through the layers that keep it as the second dimension, masks the
//! keys of every attention, and makes `mean(0)` average the tokens only.

use tch::{Kind, Tensor};

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
