//! `embedding`.

use tch::{Kind, Tensor};

use super::{split, Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;

/// `nn.Embedding`'s table: `N(0, 1)`, with the `pad` row zeroed as `padding_idx` does.
pub(super) fn init(i: &mut Init, vocab: i64, dim: i64, pad: Option<i64>) -> Result<(), Diagnostic> {
    let (device, span) = (i.run.device, i.run.span);
    let mut t = Tensor::f_empty([vocab, dim], (Kind::Float, device)).at(span)?;
    t.f_normal_(0.0, 1.0).done_at(span)?;
    if let Some(p) = pad {
        t.f_get(p).at(span)?.f_fill_(0.0).done_at(span)?;
    }
    i.param("weight", t);
    Ok(())
}

/// Looks up each token id's row; the `pad` row gets no gradient (`padding_idx`). With a `pad`,
/// `keep` becomes which positions hold other ids (`[batch, sequence]`, true for tokens), the
/// mask that attention and the mean over the sequence apply downstream.
pub(super) fn forward(
    net: &Net,
    l: &LayerRun,
    x: &Tensor,
    pad: Option<i64>,
    keep: &mut Option<Tensor>,
) -> Result<Tensor, Diagnostic> {
    if let Some(p) = pad {
        *keep = Some(x.f_ne(p).at(l.span)?);
    }
    let table = net.param(l, "weight")?;
    let Some(share) = &l.share else {
        return Tensor::f_embedding(table, x, pad.unwrap_or(-1), false, false).at(l.span);
    };
    // Split by vocabulary: this rank's rows are ids `[start, start + rows)`; it looks those up
    // (the others as its first row, zeroed) and the ranks' lookups are summed.
    let rows = table.size()[0];
    let start = share.group.rank() as i64 * rows;
    let s = l.span;
    let local = x.f_sub_scalar(start).at(s)?;
    let mine = local
        .f_ge(0)
        .at(s)?
        .f_logical_and(&local.f_lt(rows).at(s)?)
        .at(s)?;
    let ids = local.f_clamp(0, rows - 1).at(s)?;
    let pad = pad.map(|p| p - start).filter(|p| (0..rows).contains(p));
    let found = Tensor::f_embedding(table, &ids, pad.unwrap_or(-1), false, false)
        .at(s)?
        .f_mul(&mine.f_unsqueeze(-1).at(s)?.f_to_kind(table.kind()).at(s)?)
        .at(s)?;
    split::leave(l, &found)
}
