//! Structured pruning made physical: pruned units removed from their layers and consumers.
//!
//! `kiln::plan::shrink` finds, statically, each structured target's group: the producers whose
//! outputs are the units (joined by residual adds), the followers that carry them with
//! per-channel tensors, and the consumers that mix them. Training masks the group through
//! [`mask_targets`] (the producers' rows and biases, the followers' affine parameters), so a
//! pruned unit holds a constant after its activations. At the end, [`shrink`] slices every
//! member tensor to the kept units, builds the smaller model from the shrunk nodes and copies the
//! tensors in by name; a linear consumer whose pruned inputs hold a non-zero constant (after a
//! sigmoid) gets it folded into its bias, so the shrunk model computes what the masked one did.

use std::collections::HashMap;

use tch::{Device, Kind, TchError, Tensor};

use crate::runtime::failure::{torch_failure, At};
use crate::runtime::model::{self, Net};
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Node, Precision};
use kiln::plan::shrink::{Group, Role};
use kiln::span::Span;

/// One tensor the trainer masks for a group: the pruned units' entries along `dim` are zeroed.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskTarget {
    /// The parameter's `state_dict` name (`fc1.weight`).
    pub name: String,
    /// The dimension along which the units lie.
    pub dim: i64,
    /// Consecutive entries per unit along `dim` (unit `j` is entries `j*block .. (j+1)*block`).
    pub block: i64,
}

/// Every parameter masked for `group`: exactly the producers' and followers' tensors that
/// [`shrink`] slices, with the same unit-to-entry mapping.
pub fn mask_targets(group: &Group) -> Vec<MaskTarget> {
    group
        .members
        .iter()
        .flat_map(|m| {
            m.tensors.iter().filter(|s| s.masked).map(|s| MaskTarget {
                name: format!("{}.{}", m.layer, s.tensor),
                dim: s.dim,
                block: s.block,
            })
        })
        .collect()
}

/// The entry indices of `units` (1-D int64) when each unit is `block` consecutive entries.
pub fn expand(units: &Tensor, block: i64) -> Result<Tensor, TchError> {
    if block == 1 {
        return Ok(units.shallow_clone());
    }
    let offsets = Tensor::f_arange(block, (Kind::Int64, units.device()))?;
    units
        .f_mul_scalar(block)?
        .f_unsqueeze(1)?
        .f_add(&offsets.f_unsqueeze(0)?)?
        .f_flatten(0, -1)
}

/// A 0/1 mask of `len` entries along `dim` of a tensor of rank `rank`, 1 at `kept` (entries),
/// shaped to broadcast against the tensor.
fn entry_mask(
    kept: &Tensor,
    len: i64,
    dim: i64,
    rank: usize,
    dev: Device,
) -> Result<Tensor, TchError> {
    let mask = Tensor::f_zeros([len], (Kind::Float, dev))?.f_index_fill(0, kept, 1.0)?;
    let mut shape = vec![1i64; rank];
    shape[dim as usize] = len;
    mask.f_reshape(shape)
}

/// A tensor of `net` (parameter or buffer) by `state_dict` name.
fn tensor<'n>(net: &'n Net, name: &str) -> Option<&'n Tensor> {
    net.params
        .iter()
        .find(|p| p.name == name)
        .map(|p| &p.tensor)
        .or_else(|| {
            net.buffers
                .iter()
                .find(|b| b.name == name)
                .map(|b| &b.tensor)
        })
}

/// Zeroes the pruned units of `group` in `net`'s masked tensors, keeping the units `kept`
/// (1-D int64), as masked training does after every step.
#[cfg(test)]
pub fn mask(net: &Net, group: &Group, kept: &Tensor) -> Result<(), TchError> {
    tch::no_grad(|| {
        for t in mask_targets(group) {
            let Some(p) = tensor(net, &t.name) else {
                return Err(TchError::Shape(format!(
                    "the model has no tensor `{}`",
                    t.name
                )));
            };
            let entries = expand(&kept.f_to_device(p.device())?, t.block)?;
            let len = p.size()[t.dim as usize];
            let m = entry_mask(&entries, len, t.dim, p.dim(), p.device())?;
            let _ = p.shallow_clone().f_mul_(&m.f_to_kind(p.kind())?)?;
        }
        Ok(())
    })
}

/// The model with every group's pruned units removed: `keep` gives, per group, the kept unit
/// indices (1-D int64, any order); a group given again (for another target in it) is sliced
/// once, with the units first given. The smaller model is built from the shrunk nodes (on
/// `device`, or the nodes' placements) and returned with them; `span` is where a failure points.
pub fn shrink(
    net: &Net,
    nodes: &[Node],
    keep: &[(&Group, Tensor)],
    precision: Precision,
    device: Option<Device>,
    span: Span,
) -> Result<(Net, Vec<Node>), Diagnostic> {
    let mut sorted: Vec<(&Group, Tensor)> = Vec::new();
    for (g, kept) in keep {
        if sorted.iter().any(|(h, _)| h.members == g.members) {
            continue;
        }
        let (values, _) = kept.f_sort(0, false).at(span)?;
        sorted.push((*g, values.f_to_kind(Kind::Int64).at(span)?));
    }
    let counts: Vec<(&Group, i64)> = sorted.iter().map(|(g, k)| (*g, k.size()[0])).collect();
    let shrunk_nodes = kiln::plan::shrink::shrink(nodes, &counts).map_err(|r| {
        let message = format!("the pruned model cannot be built: {r:?}");
        torch_failure(&message, span).diagnostic()
    })?;
    let small = model::build(&shrunk_nodes, precision, device)?;
    let sliced = tch::no_grad(|| slice_all(net, &sorted)).at(span)?;
    tch::no_grad(|| {
        let targets = small
            .params
            .iter()
            .map(|p| (&p.name, &p.tensor))
            .chain(small.buffers.iter().map(|b| (&b.name, &b.tensor)));
        for (name, dst) in targets {
            let src = match sliced.get(name.as_str()) {
                Some(t) => t.shallow_clone(),
                None => match tensor(net, name) {
                    Some(t) => t.shallow_clone(),
                    None => {
                        let e = TchError::Shape(format!("the model has no tensor `{name}`"));
                        return Err(e);
                    }
                },
            };
            if src.size() != dst.size() {
                return Err(TchError::Shape(format!(
                    "`{name}` is {:?} after slicing, the shrunk model's is {:?}",
                    src.size(),
                    dst.size()
                )));
            }
            dst.shallow_clone().f_copy_(&src)?;
        }
        Ok(())
    })
    .at(span)?;
    Ok((small, shrunk_nodes))
}

/// Every member tensor of every group, sliced to its kept units (biases of linear consumers
/// with the pruned inputs' constant folded in), by `state_dict` name.
fn slice_all(net: &Net, keep: &[(&Group, Tensor)]) -> Result<HashMap<String, Tensor>, TchError> {
    let mut out: HashMap<String, Tensor> = HashMap::new();
    for (g, kept) in keep {
        for m in &g.members {
            let weight = format!("{}.weight", m.layer);
            if m.role == Role::Consumer && m.fill != 0.0 {
                fold(net, &mut out, m, kept, &weight)?;
            }
            for s in &m.tensors {
                let name = format!("{}.{}", m.layer, s.tensor);
                let current = match out.remove(&name) {
                    Some(t) => t,
                    None => match tensor(net, &name) {
                        Some(t) => t.detach(),
                        None => continue,
                    },
                };
                let entries = expand(&kept.f_to_device(current.device())?, s.block)?;
                out.insert(name, current.f_index_select(s.dim, &entries)?);
            }
        }
    }
    Ok(out)
}

/// Adds to a linear consumer's bias what its pruned inputs contributed: `fill` times the sum of
/// their weight columns (`b += W[:, pruned] · fill`).
fn fold(
    net: &Net,
    out: &mut HashMap<String, Tensor>,
    m: &kiln::plan::shrink::Member,
    kept: &Tensor,
    weight: &str,
) -> Result<(), TchError> {
    let bias = format!("{}.bias", m.layer);
    let missing = |n: &str| TchError::Shape(format!("the model has no tensor `{n}`"));
    let w = match out.get(weight) {
        Some(t) => t.shallow_clone(),
        None => tensor(net, weight).ok_or_else(|| missing(weight))?.detach(),
    };
    let b = match out.remove(&bias) {
        Some(t) => t,
        None => tensor(net, &bias).ok_or_else(|| missing(&bias))?.detach(),
    };
    let Some(s) = m.tensors.first() else {
        out.insert(bias, b);
        return Ok(());
    };
    let entries = expand(&kept.f_to_device(w.device())?, s.block)?;
    let len = w.size()[s.dim as usize];
    let keep_mask = entry_mask(&entries, len, s.dim, w.dim(), w.device())?;
    let pruned = w.f_mul(&keep_mask.f_neg()?.f_add_scalar(1.0)?)?;
    let folded = b.f_add(
        &pruned
            .f_sum_dim_intlist(Some([s.dim].as_slice()), false, None::<Kind>)?
            .f_mul_scalar(m.fill)?,
    )?;
    out.insert(bias, folded);
    Ok(())
}

#[cfg(test)]
#[path = "shrink_tests.rs"]
mod tests;
