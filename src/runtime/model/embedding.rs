//! `embedding`.

use tch::{Kind, Tensor};

use super::{Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;

/// `nn.Embedding`'s table: `N(0, 1)`.
pub(super) fn init(i: &mut Init, vocab: i64, dim: i64) -> Result<(), Diagnostic> {
    let (device, span) = (i.run.device, i.run.span);
    let mut t = Tensor::f_empty([vocab, dim], (Kind::Float, device)).at(span)?;
    t.f_normal_(0.0, 1.0).done_at(span)?;
    i.param("weight", t);
    Ok(())
}

/// Looks up each token id's row.
pub(super) fn forward(net: &Net, l: &LayerRun, x: &Tensor) -> Result<Tensor, Diagnostic> {
    Tensor::f_embedding(net.param(l, "weight")?, x, -1, false, false).at(l.span)
}
