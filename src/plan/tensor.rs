//! What a tensor-parallel mesh costs a rank (`parallel mesh(tensor: T, data: D)`): which layers
//! are split and how (`ir::tensor`), the parameters a rank keeps (its pieces of the split
//! layers' cut tensors, the rest whole), and the collectives over the tensor group per step: one
//! all-reduce of a row split's output (and of a vocabulary split's lookups) in forward and one of
//! a column split's input gradient in backward, each a ring all-reduce sending and receiving
//! `2(T - 1)/T` of its bytes; the all-gather of a gathered head's outputs in forward, a ring
//! all-gather sending and receiving `(T - 1)/T` of the whole outputs' bytes.

use serde::Serialize;

use super::values;
use crate::ir::tensor::{rank_tensors, splits, Split};
use crate::ir::Experiment;

/// A layer and how the tensor degree splits it.
#[derive(Serialize, Debug, PartialEq)]
pub struct SplitRow {
    /// The layer's qualified name.
    pub layer: String,
    /// How it is split, in words (`columns (outputs)`, `replicated`).
    pub how: String,
}

/// Tensor parallel's plan for one rank.
#[derive(Serialize, Debug, PartialEq)]
pub struct TensorPlan {
    /// The tensor degree: ranks per tensor group.
    pub degree: u64,
    /// The data degree: tensor groups, each on its rows of the batch (replicas, or fsdp's
    /// shards).
    pub data: u64,
    /// Each layer with parameters or between a split pair, and how it is split.
    pub splits: Vec<SplitRow>,
    /// Parameters a rank keeps.
    pub rank_params: u64,
    /// All-reduces over the tensor group per step (forward and backward, every micro-batch).
    pub sums_per_step: u64,
    /// Bytes those all-reduces sum per step, on a rank.
    pub sum_bytes_per_step: u64,
    /// All-gathers of a head's outputs per step (every micro-batch).
    pub gathers_per_step: u64,
    /// Bytes of the whole outputs those all-gathers make per step, on a rank.
    pub gather_bytes_per_step: u64,
    /// Bytes a rank sends, and receives, for them all (ring): `2(T - 1)/T` of the sums' bytes
    /// and `(T - 1)/T` of the gathers'.
    pub ring_bytes_per_rank: u64,
}

/// The plan of `e`'s tensor dimension, when its degree is more than 1.
pub fn of(e: &Experiment) -> Option<TensorPlan> {
    let degree = e.parallel.tensor_degree();
    if degree < 2 {
        return None;
    }
    let data = e.parallel.data_parallel_size().max(1);
    let split = splits(&e.model.nodes, degree);
    let rank_params = rank_tensors(&e.model.nodes, degree)
        .iter()
        .map(|(_, n)| n)
        .sum();
    // Rows a data rank runs per step, every micro-batch together.
    let rows = e.data.batch.div_ceil(data);
    let act = e.train.precision.activation_bytes();
    let (mut sums, mut bytes, mut gathers, mut gathered) = (0u64, 0u64, 0u64, 0u64);
    for (layer, how) in &split {
        let (forward, backward) = match how {
            Split::Rows | Split::Vocab => (1, 0),
            Split::Columns | Split::Gathered => (0, 1),
            Split::Heads => (1, 1),
            Split::Block => (2, 2),
            Split::Between | Split::Replicated(_) => (0, 0),
        };
        sums += (forward + backward) * e.train.accumulate;
        bytes += (forward * values(&layer.output) + backward * values(&layer.input))
            .saturating_mul(rows)
            .saturating_mul(act);
        if *how == Split::Gathered {
            gathers += e.train.accumulate;
            gathered += values(&layer.output)
                .saturating_mul(rows)
                .saturating_mul(act);
        }
    }
    let share = (degree - 1) as f64 / degree as f64;
    let ring = bytes as f64 * 2.0 * share + gathered as f64 * share;
    Some(TensorPlan {
        degree,
        data,
        splits: split
            .iter()
            .filter(|(l, s)| l.params > 0 || *s == Split::Between)
            .map(|(l, s)| SplitRow {
                layer: l.name.clone(),
                how: s.words().into(),
            })
            .collect(),
        rank_params,
        sums_per_step: sums,
        sum_bytes_per_step: bytes,
        gathers_per_step: gathers,
        gather_bytes_per_step: gathered,
        ring_bytes_per_rank: ring.round() as u64,
    })
}
