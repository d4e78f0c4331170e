//! Pruning masks, as `torch.nn.utils.prune` computes them.
//!
//! A mask is an fp32 tensor of its weight's shape and device: 1.0 keeps an entry, 0.0 prunes it.
//! Every function takes the current mask (all ones before the first pruning) and returns the new
//! one, following `PruningContainer._combine_masks` for repeated pruning:
//! - the candidates are the still-unpruned entries (mask == 1) or, when structured, the slices
//!   whose mask is not all zero, and the amount is relative to them (0.5 then 0.5 of 100 weights
//!   prunes 75);
//! - a fraction becomes a count with Python's `round` (half to even), a count is absolute;
//! - scores come from the masked weight (PyTorch scores `module.weight`, which is the masked
//!   tensor once pruned), so passing the original or the masked weight gives the same mask;
//! - ties are broken by the same ATen `topk` on the same values in the same order (`|w|` in
//!   row-major order, `torch.norm` over the other dimensions, `rand_like` for random), which is
//!   not stable: equal values do not go first-come first-pruned.

use tch::{Kind, TchError, Tensor};

type Result<T> = std::result::Result<T, TchError>;

/// How much to prune.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// A fraction in [0, 1] of the candidates, rounded half to even (Python's `round`).
    Fraction(f64),
    /// An absolute number of candidates, at most their number.
    Count(i64),
}

/// The number of candidates pruned out of `n`: `round(amount * n)` half to even for a fraction,
/// the count itself for a count.
pub fn count(amount: Amount, n: i64) -> i64 {
    match amount {
        Amount::Fraction(f) => (f * n as f64).round_ties_even() as i64,
        Amount::Count(c) => c,
    }
}

/// The count, after PyTorch's checks: a fraction in [0, 1], a count in [0, n].
fn checked_count(amount: Amount, n: i64) -> Result<i64> {
    let valid = match amount {
        Amount::Fraction(f) => (0.0..=1.0).contains(&f),
        Amount::Count(c) => (0..=n).contains(&c),
    };
    if valid {
        Ok(count(amount, n))
    } else {
        Err(TchError::Convert(format!(
            "cannot prune {amount:?} of {n} candidates: a fraction must be in [0, 1] and a \
             count in [0, {n}]"
        )))
    }
}

/// Fails unless `mask` has `w`'s shape.
fn same_shape(w: &Tensor, mask: &Tensor) -> Result<()> {
    if w.size() == mask.size() {
        Ok(())
    } else {
        Err(TchError::Shape(format!(
            "a pruning mask of shape {:?} for a weight of shape {:?}",
            mask.size(),
            w.size()
        )))
    }
}

/// The flat positions where `selected` (a bool tensor) is true, in row-major order.
fn positions(selected: &Tensor) -> Result<Tensor> {
    selected.f_reshape([-1])?.f_nonzero()?.f_squeeze_dim(1)
}

/// Unstructured pruning: the candidates are the entries whose mask is 1; `pick` receives their
/// weights (row-major, 1-D) and the number to prune, and returns the indices (into the
/// candidates) of the entries to prune.
fn unstructured(
    w: &Tensor,
    mask: &Tensor,
    amount: Amount,
    pick: impl FnOnce(&Tensor, i64) -> Result<Tensor>,
) -> Result<Tensor> {
    same_shape(w, mask)?;
    let base = mask.f_to_kind(Kind::Float)?;
    let selected = base.f_eq(1.0)?;
    let candidates = w.detach().f_masked_select(&selected)?;
    let k = checked_count(amount, candidates.numel() as i64)?;
    if k == 0 {
        return base.f_detach_copy()?.f_contiguous();
    }
    let pruned = positions(&selected)?.f_index_select(0, &pick(&candidates, k)?)?;
    base.f_reshape([-1])?
        .f_index_fill(0, &pruned, 0.0)?
        .f_reshape(w.size())
}

/// Prunes the candidates with the smallest absolute values (`prune.l1_unstructured`).
pub fn l1_unstructured(w: &Tensor, mask: &Tensor, amount: Amount) -> Result<Tensor> {
    unstructured(w, mask, amount, |candidates, k| {
        Ok(candidates.f_abs()?.f_topk(k, 0, false, true)?.1)
    })
}

/// Prunes uniformly random candidates (`prune.random_unstructured`): one `rand_like` draw per
/// candidate from the global generator, pruning the `k` largest draws. Nothing is drawn when
/// nothing is pruned.
pub fn random_unstructured(w: &Tensor, mask: &Tensor, amount: Amount) -> Result<Tensor> {
    unstructured(w, mask, amount, |candidates, k| {
        Ok(candidates.f_rand_like()?.f_topk(k, 0, true, true)?.1)
    })
}

/// Prunes the whole slices along `dim` with the smallest Ln norm (`prune.ln_structured`). The
/// weight needs at least two dimensions; the candidates are the slices whose mask is not all zero.
pub fn ln_structured(
    w: &Tensor,
    mask: &Tensor,
    amount: Amount,
    n: u64,
    dim: i64,
) -> Result<Tensor> {
    same_shape(w, mask)?;
    let dims = w.dim() as i64;
    if dims < 2 {
        return Err(TchError::Shape(format!(
            "structured pruning needs a weight with at least two dimensions, not {:?}",
            w.size()
        )));
    }
    let dim = unit_dim(w, dim)?;
    let others: Vec<i64> = (0..dims).filter(|&d| d != dim).collect();
    let base = mask.f_to_kind(Kind::Float)?;
    let kept = base
        .f_sum_dim_intlist(others.as_slice(), false, Kind::Float)?
        .f_ne(0.0)?;
    let masked = w.detach().f_mul(&base.f_to_kind(w.kind())?)?;
    let units = w.size()[dim as usize];
    // PyTorch scores the kept slices only (`t[slc]`), so the norms are taken on that tensor.
    let candidates = if kept.f_sum(Kind::Int64)?.f_int64_value(&[])? == units {
        masked
    } else {
        let index: Vec<Option<&Tensor>> = (0..=dim)
            .map(|d| if d == dim { Some(&kept) } else { None })
            .collect();
        masked.f_index(&index)?
    };
    let norms = ln_units(&[(&candidates, dim)], n)?;
    let scores = Tensor::f_zeros([units], (norms.kind(), norms.device()))?
        .f_masked_scatter(&kept, &norms)?;
    let keep = keep_units(&scores, &kept, amount)?;
    let mut shape = vec![1; dims as usize];
    shape[dim as usize] = -1;
    base.f_mul(&keep.f_reshape(shape)?)
}

/// `dim` made non-negative, or an error when `w` has no such dimension.
fn unit_dim(w: &Tensor, dim: i64) -> Result<i64> {
    let dims = w.dim() as i64;
    let d = if dim < 0 { dim + dims } else { dim };
    if (0..dims).contains(&d) {
        Ok(d)
    } else {
        Err(TchError::Shape(format!(
            "no dimension {dim} in a tensor of shape {:?}",
            w.size()
        )))
    }
}

/// One score per unit for tensors whose units (slices along the given dimension) are pruned
/// together: for each tensor the Ln norm over all its other dimensions (`torch.norm(w, p=n,
/// dim=others)`; a 1-D tensor's slices are single entries), combined as `(Σ normⁿ)^(1/n)` (the
/// sum of the counts for n = 0), in fp32. For one tensor the result is `torch.norm`'s, unchanged
/// (not `(normⁿ)^(1/n)`, which rounds differently for n = 3). The norms are of the tensors as
/// given, so pass masked weights, as [`ln_structured`] does and as PyTorch scores them.
pub fn ln_units(ws: &[(&Tensor, i64)], n: u64) -> Result<Tensor> {
    let mut norms = Vec::with_capacity(ws.len());
    for &(w, dim) in ws {
        let dim = unit_dim(w, dim)?;
        let others: Vec<i64> = (0..w.dim() as i64).filter(|&d| d != dim).collect();
        let norm = if others.is_empty() {
            w.detach()
                .f_unsqueeze(1)?
                .f_norm_scalaropt_dim(n as i64, [1], false)?
        } else {
            w.detach()
                .f_norm_scalaropt_dim(n as i64, others.as_slice(), false)?
        };
        norms.push(norm);
    }
    let Some(first) = norms.first() else {
        return Err(TchError::Shape(
            "joint unit scores need at least one tensor".to_string(),
        ));
    };
    if norms.iter().any(|x| x.size() != first.size()) {
        let sizes: Vec<Vec<i64>> = norms.iter().map(Tensor::size).collect();
        return Err(TchError::Shape(format!(
            "tensors pruned together have different numbers of units: {sizes:?}"
        )));
    }
    if norms.len() == 1 {
        return Ok(norms.swap_remove(0));
    }
    let mut total = Tensor::f_zeros(first.size(), (Kind::Float, first.device()))?;
    for norm in &norms {
        let norm = norm.f_to_kind(Kind::Float)?;
        total = if n == 0 {
            total.f_add(&norm)?
        } else {
            total.f_add(&norm.f_pow_tensor_scalar(n as i64)?)?
        };
    }
    if n == 0 {
        Ok(total)
    } else {
        total.f_pow_tensor_scalar(1.0 / n as f64)
    }
}

/// The new 1-D unit mask (fp32): among the units still kept (`unit_mask` not zero), keeps the
/// ones with the largest scores, pruning `amount` of them (PyTorch's `ln_structured` rule: `topk`
/// of the kept units' scores, largest first, `kept - count` of them); pruned units stay pruned.
pub fn keep_units(scores: &Tensor, unit_mask: &Tensor, amount: Amount) -> Result<Tensor> {
    if scores.dim() != 1 || scores.size() != unit_mask.size() {
        return Err(TchError::Shape(format!(
            "unit scores of shape {:?} for a unit mask of shape {:?}",
            scores.size(),
            unit_mask.size()
        )));
    }
    let kept = unit_mask.f_ne(0.0)?;
    let candidates = scores.detach().f_masked_select(&kept)?;
    let total = candidates.numel() as i64;
    let k = checked_count(amount, total)?;
    let chosen = candidates.f_topk(total - k, 0, true, true)?.1;
    let keep = positions(&kept)?.f_index_select(0, &chosen)?;
    Tensor::f_zeros(scores.size(), (Kind::Float, scores.device()))?.f_index_fill(0, &keep, 1.0)
}

/// Prunes the smallest absolute values over several tensors together
/// (`prune.global_unstructured` with `L1Unstructured`): one `topk` over the concatenation of the
/// flattened weights, in the order given, among the entries whose mask is 1.
pub fn global_l1(ws: &[&Tensor], masks: &[&Tensor], amount: Amount) -> Result<Vec<Tensor>> {
    if ws.is_empty() || ws.len() != masks.len() {
        return Err(TchError::Shape(format!(
            "global pruning of {} tensors with {} masks",
            ws.len(),
            masks.len()
        )));
    }
    let mut flat_ws = Vec::with_capacity(ws.len());
    let mut flat_masks = Vec::with_capacity(ws.len());
    for (w, mask) in ws.iter().zip(masks) {
        same_shape(w, mask)?;
        flat_ws.push(w.detach().f_reshape([-1])?);
        flat_masks.push(mask.f_to_kind(Kind::Float)?.f_reshape([-1])?);
    }
    let joint = l1_unstructured(
        &Tensor::f_cat(&flat_ws, 0)?,
        &Tensor::f_cat(&flat_masks, 0)?,
        amount,
    )?;
    let sizes: Vec<i64> = ws.iter().map(|w| w.numel() as i64).collect();
    joint
        .f_split_with_sizes(sizes.as_slice(), 0)?
        .into_iter()
        .zip(ws)
        .map(|(part, w)| part.f_reshape(w.size()))
        .collect()
}

/// The sparsity a gradual schedule (Zhu & Gupta 2017) has reached at `step`.
///
/// Pruning happens at `start`, `start + every`, `start + 2·every`, … while before `end`, and at
/// `end` itself (so `end` need not be `start` plus a multiple of `every`). At a pruning step t the
/// target is `s_f + (s_i - s_f)·(1 - (t - start)/(end - start))³`; between pruning steps it stays
/// at the last one's. Before `start` it is 0 (nothing pruned yet); from `end` on it is `final_`.
/// `every = 0` counts as 1, and `end <= start` prunes once, at `start`, to `final_`.
pub fn gradual_sparsity(
    initial: f64,
    final_: f64,
    start: u64,
    end: u64,
    every: u64,
    step: u64,
) -> f64 {
    if step < start {
        return 0.0;
    }
    if step >= end {
        return final_;
    }
    let every = every.max(1);
    let last = start + (step - start) / every * every;
    let progress = (last - start) as f64 / (end - start) as f64;
    // `s_f + (s_i - s_f)·r` written as a weighted mean, which is exact at both ends.
    let r = (1.0 - progress).powi(3);
    initial * r + final_ * (1.0 - r)
}

/// Whether a gradual schedule prunes at `step` (see [`gradual_sparsity`]).
pub fn is_pruning_step(start: u64, end: u64, every: u64, step: u64) -> bool {
    let end = end.max(start);
    step == end || (start..end).contains(&step) && (step - start).is_multiple_of(every.max(1))
}

/// The fraction of the remaining weights each of `rounds` rounds of iterative pruning removes so
/// that `amount` is pruned in the end: `1 - (1 - amount)^(1/rounds)` (`rounds = 0` counts as 1).
pub fn iterative_round_amount(amount: f64, rounds: u64) -> f64 {
    1.0 - (1.0 - amount).powf(1.0 / rounds.max(1) as f64)
}

/// Multiplies `w` by `mask` in place, outside autograd, so pruned weights stay zero after an
/// optimizer step.
pub fn apply(w: &Tensor, mask: &Tensor) -> Result<()> {
    same_shape(w, mask)?;
    let mask = mask.f_to_kind(w.kind())?;
    tch::no_grad(|| w.shallow_clone().f_mul_(&mask)).map(|_| ())
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "prune_parity.rs"]
mod parity;
