//! Tensor parallel in the lowered model: the layers `kiln::ir::tensor` splits keep this rank's
//! piece of each parameter they cut ([`Cut`]) and run on their share of the work, between the two
//! collectives of the tensor group ([`Collective`]): `enter` before a layer split by its outputs,
//! `leave` (the sum) after one split by its inputs, before its bias.

use std::sync::Arc;

use tch::{TchError, Tensor};

use super::{dropout, LayerRun, Lowered, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::tensor::{Cut, Split};

/// The tensor group's collectives, as autograd functions.
pub trait Collective: Send + Sync {
    /// This rank's index in the group.
    fn rank(&self) -> usize;
    /// The group's size, the tensor degree.
    fn degree(&self) -> usize;
    /// `x` as it is; in backward, its gradient summed over the group.
    fn enter(&self, x: &Tensor) -> Result<Tensor, TchError>;
    /// `x` summed over the group; in backward, the gradient as it is.
    fn leave(&self, x: &Tensor) -> Result<Tensor, TchError>;
    /// Every rank's `x` side by side along the last dimension; in backward, this rank's part.
    fn gather(&self, x: &Tensor) -> Result<Tensor, TchError>;
}

/// A split layer's share: how it is split, and the group it shares the work with.
#[derive(Clone)]
pub(super) struct Share {
    pub split: Split,
    pub group: Arc<dyn Collective>,
}

impl Share {
    /// `n` (heads, widths) over the ranks.
    pub fn part(&self, n: i64) -> i64 {
        n / self.group.degree() as i64
    }
}

/// This rank's piece of `whole` under `cut` (a contiguous copy; `whole` itself when not cut).
pub fn piece(whole: &Tensor, cut: Cut, rank: usize, degree: usize) -> Result<Tensor, TchError> {
    let Cut::Along { dim, chunks } = cut else {
        return Ok(whole.shallow_clone());
    };
    let block = whole.size()[dim] / chunks;
    let part = block / degree as i64;
    let pieces = (0..chunks)
        .map(|c| whole.f_narrow(dim as i64, c * block + rank as i64 * part, part))
        .collect::<Result<Vec<_>, _>>()?;
    Tensor::f_cat(&pieces, dim as i64)?.f_contiguous()
}

/// The whole tensor from every rank's piece under `cut`, in rank order.
pub fn whole(pieces: &[Tensor], cut: Cut) -> Result<Tensor, TchError> {
    let Cut::Along { dim, chunks } = cut else {
        return Ok(pieces[0].shallow_clone());
    };
    let part = pieces[0].size()[dim] / chunks;
    let mut parts = Vec::new();
    for c in 0..chunks {
        for p in pieces {
            parts.push(p.f_narrow(dim as i64, c * part, part)?);
        }
    }
    Tensor::f_cat(&parts, dim as i64)
}

impl Net {
    /// Splits the layers `splits` names over `group`: each keeps this rank's piece of every
    /// parameter it cuts (set in place, so that every shallow clone of the model's tensors holds
    /// the piece) and runs on its share.
    pub fn split_tensors(
        &mut self,
        splits: &[(String, Split)],
        group: Arc<dyn Collective>,
    ) -> Result<(), Diagnostic> {
        let (rank, degree) = (group.rank(), group.degree());
        let by_name: std::collections::HashMap<&str, Split> =
            splits.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        let mut nodes = std::mem::take(&mut self.nodes);
        let mut result = Ok(());
        visit(&mut nodes, &mut |l: &mut LayerRun| {
            let Some(split) = by_name.get(l.name.as_str()) else {
                return;
            };
            if matches!(split, Split::Replicated(_)) {
                return;
            }
            for (local, i) in &l.params {
                let cut = Cut::of(*split, local);
                let t = &mut self.params[*i].tensor;
                let cutting =
                    tch::no_grad(|| piece(t, cut, rank, degree)).and_then(|p| t.f_set_data(&p));
                if let (Err(e), Ok(())) = (cutting.at(l.span), &result) {
                    result = Err(e);
                }
            }
            l.share = Some(Share {
                split: *split,
                group: group.clone(),
            });
        });
        self.nodes = nodes;
        result
    }

    /// The cut of each parameter over the tensor ranks, in the model's order (all whole unless
    /// [`Net::split_tensors`] split the model).
    pub fn cuts(&self) -> Vec<Cut> {
        fn walk(nodes: &[Lowered], cuts: &mut [Cut]) {
            for n in nodes {
                match n {
                    Lowered::Layer(l) => {
                        if let Some(share) = &l.share {
                            for (local, i) in &l.params {
                                cuts[*i] = Cut::of(share.split, local);
                            }
                        }
                    }
                    Lowered::Residual(inner, _) | Lowered::Recompute(inner, _) => walk(inner, cuts),
                }
            }
        }
        let mut cuts = vec![Cut::Whole; self.params.len()];
        walk(&self.nodes, &mut cuts);
        cuts
    }
}

/// Calls `f` on every layer of `nodes`, in order.
fn visit(nodes: &mut [Lowered], f: &mut dyn FnMut(&mut LayerRun)) {
    for n in nodes {
        match n {
            Lowered::Layer(l) => f(l),
            Lowered::Residual(inner, _) | Lowered::Recompute(inner, _) => visit(inner, f),
        }
    }
}

/// The input of a layer split by its outputs: the identity, whose backward sums the gradient
/// over the tensor ranks; `x` itself for a layer that is not split.
pub(super) fn enter(l: &LayerRun, x: &Tensor) -> Result<Tensor, Diagnostic> {
    match &l.share {
        Some(s) => s.group.enter(x).at(l.span),
        None => Ok(x.shallow_clone()),
    }
}

/// The output of a layer split by its inputs: the ranks' partial products summed; `y` itself
/// for a layer that is not split.
pub(super) fn leave(l: &LayerRun, y: &Tensor) -> Result<Tensor, Diagnostic> {
    match &l.share {
        Some(s) => s.group.leave(y).at(l.span),
        None => Ok(y.shallow_clone()),
    }
}

/// The outputs of a layer split by its outputs, gathered whole from the tensor ranks.
pub(super) fn gather(l: &LayerRun, y: &Tensor) -> Result<Tensor, Diagnostic> {
    match &l.share {
        Some(s) => s.group.gather(y).at(l.span),
        None => Ok(y.shallow_clone()),
    }
}

/// Dropout on `x`, this rank's part along `dim` of what one process computes: where Kiln draws
/// the mask (fp32 on the CPU) the whole mask is drawn, from the same key as that process, and
/// this rank's part kept, so the ranks drop what it drops.
pub(super) fn dropout(
    l: &LayerRun,
    x: &Tensor,
    p: f64,
    train: bool,
    dim: i64,
) -> Result<Tensor, TchError> {
    match &l.share {
        Some(s) if train && p > 0.0 && dropout::drawn_here(x) => {
            let (rank, degree) = (s.group.rank() as i64, s.group.degree() as i64);
            let mut shape = x.size();
            let d = if dim < 0 {
                shape.len() as i64 + dim
            } else {
                dim
            } as usize;
            let part = shape[d];
            shape[d] = part * degree;
            let mask = dropout::mask(&shape, p)?.f_narrow(d as i64, rank * part, part)?;
            x.f_mul(&mask)
        }
        Some(_) | None => dropout::dropout(x, p, train),
    }
}
