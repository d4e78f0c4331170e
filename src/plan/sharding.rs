//! `parallel fsdp` in the plan: the units the ranks shard, what one rank holds at its peak, and
//! what the all-gathers and reduce-scatters move each step. The arithmetic follows the runtime
//! (`src/runtime/parallel/fsdp.rs`):
//!
//! - Units: each top-level block with parameters, and the other top-level layers together (the
//!   root). A tensor of `n` values is cut into W shards of `ceil(n/W)`; a rank keeps one of each.
//! - Weights: the shards, plus the parameters gathered whole at once: with
//!   `reshard_after_forward: true` the root and the largest block (a block is freed after its
//!   forward pass, and in backward as soon as its gradients are accumulated, before the block
//!   before it is gathered); with `false` every unit, from the forward pass to its reduction.
//! - Gradients: the shards' gradients, plus the whole gradients a backward pass holds before
//!   their reduction: the largest block's and the root's (the root's layers come first and
//!   last); without resharding, every unit's while the micro-batches before the last accumulate.
//! - Buffers of the collectives, which the runtime keeps for reuse, so a rank holds the most a
//!   step needs at once, each the size of the largest block (`W` shards end to end; the root's
//!   apart): with resharding, the gather of the block before the one in backward and the two
//!   reductions in flight; without, the reductions (and, in the forward pass, the gather of the
//!   next unit while the current one is copied out). On the CPU a gather is an all-to-all of the
//!   shard repeated for every rank, and a reduction an all-to-all and a sum, each with an input
//!   and an output buffer; on CUDA a gather fills one buffer and a reduction's output is a shard.
//!   The gathers' buffers count with the weights, the reductions' with the gradients.
//! - Optimizer state: the optimizer's bytes per parameter, on the shards.
//! - Per step, with resharding, for every micro-batch: each unit is all-gathered before its
//!   forward pass and each block again before its backward pass, and each unit's gradients are
//!   reduce-scattered once its backward pass is done. Without resharding the micro-batches
//!   before the last keep the units gathered and their gradients whole (as DDP's `no_sync`), so
//!   each unit is gathered and reduced once a step, and its gradients held whole until then. A
//!   ring moves (W-1)/W of each collective's whole in and out of every rank.

use serde::Serialize;

use crate::ir::{layers, tensor, tensors, Device, Experiment, Node, Parallel};

/// One unit of sharding.
#[derive(Serialize, Debug, PartialEq)]
pub struct UnitRow {
    /// The block's name, or `root` for the other top-level layers together.
    pub name: String,
    /// Its parameters.
    pub params: u64,
    /// The parameters of one rank's shards of them (`ceil(n/W)` per tensor).
    pub shard_params: u64,
}

/// How the ranks of `parallel fsdp` shard the model, and what a rank holds.
#[derive(Serialize, Debug, PartialEq)]
pub struct Sharding {
    /// The ranks.
    pub world_size: u64,
    /// Whether blocks are freed after their forward pass.
    pub reshard_after_forward: bool,
    /// The units, blocks in order, the root last.
    pub units: Vec<UnitRow>,
    /// Parameters of one rank's shards of every unit.
    pub shard_params: u64,
    /// Parameters gathered whole at once, at the peak.
    pub gathered_params: u64,
    /// Values in the buffers of the gathers a step holds at once.
    pub gather_buffers: u64,
    /// Gradient values held whole at once before their reduction, at the peak.
    pub unreduced_gradients: u64,
    /// Values in the buffers of the reductions a step holds at once.
    pub reduce_buffers: u64,
    /// Bytes all-gathered per step (every rank's shards, fp32).
    pub all_gather_bytes: u64,
    /// Bytes reduce-scattered per step (fp32 gradients).
    pub reduce_scatter_bytes: u64,
    /// Bytes each rank sends, and receives, per step (ring): (W-1)/W of both.
    pub ring_bytes_per_rank: u64,
}

impl Sharding {
    /// The sharding of `e`, when it trains under `parallel fsdp`.
    pub fn of(e: &Experiment) -> Option<Sharding> {
        let Parallel::Distributed {
            world_size,
            sharding: Some(s),
            ..
        } = &e.parallel
        else {
            return None;
        };
        // Under tensor parallel each rank shards its pieces over the ranks that hold the same.
        let degree = e.parallel.tensor_degree();
        let w = (world_size / degree).max(1);
        let pieces: std::collections::HashMap<String, u64> = match degree {
            1 => Default::default(),
            _ => tensor::rank_tensors(&e.model.nodes, degree)
                .into_iter()
                .collect(),
        };
        let unit = |name: &str, nodes: &[Node]| {
            let all: Vec<u64> = layers(nodes)
                .iter()
                .flat_map(|l| tensors(l))
                .map(|t| pieces.get(&t.name).copied().unwrap_or(t.count))
                .collect();
            UnitRow {
                name: name.to_string(),
                params: all.iter().sum(),
                shard_params: all.iter().map(|n| n.div_ceil(w)).sum(),
            }
        };
        let mut units = Vec::new();
        let mut rest = Vec::new();
        for node in &e.model.nodes {
            match node {
                Node::Block { name, nodes, .. } => units.push(unit(name, nodes)),
                other => rest.push(other.clone()),
            }
        }
        units.push(unit("root", &rest));
        units.retain(|u| u.params > 0);
        let root = units.iter().find(|u| u.name == "root");
        let largest = units
            .iter()
            .filter(|u| u.name != "root")
            .max_by_key(|u| u.shard_params);
        let params = |u: Option<&UnitRow>| u.map_or(0, |u| u.params);
        let padded = |u: &UnitRow| u.shard_params * w;
        let flat = |u: Option<&UnitRow>| u.map_or(0, padded);
        let all: u64 = units.iter().map(|u| u.params).sum();
        let micro_batches = e.train.accumulate.max(1);
        let gathered = if s.reshard_after_forward {
            params(root) + params(largest)
        } else {
            all
        };
        // Without resharding, the micro-batches before the last keep every gradient whole.
        let unreduced = if s.reshard_after_forward || micro_batches == 1 {
            params(root) + params(largest)
        } else {
            all
        };
        // The buffers at the peak, in buffers of the largest block's size: (gathers,
        // reductions). The root's are its gather's (its reduction's are as many and come
        // later, in the same buffers).
        let cpu = e.device == Device::Cpu;
        let (gathers, reductions, root_buffers) = match (w, cpu) {
            (1, _) => (0.0, 1.0, 1.0),
            // A gather's input and output; two reductions in flight, an input and an output
            // each.
            (_, true) if s.reshard_after_forward => (2.0, 4.0, 2.0),
            (_, true) => (0.0, 4.0, 2.0),
            // A gather's output; two reductions' inputs and outputs (a shard each).
            (_, false) => (1.0, 2.0 + 2.0 / w as f64, 1.0),
        };
        let times = |n: f64, values: u64| (n * values as f64).round() as u64;
        let gather_buffers = times(gathers, flat(largest)) + times(root_buffers, flat(root));
        let reduce_buffers = times(reductions, flat(largest));
        let whole: u64 = units.iter().map(padded).sum();
        // With resharding every micro-batch gathers each unit (and each block once more for its
        // backward pass) and reduces it; without, a step gathers and reduces each unit once.
        let (all_gather, reduce_scatter) = if s.reshard_after_forward {
            let again: u64 = units.iter().filter(|u| u.name != "root").map(padded).sum();
            (
                4 * micro_batches * (whole + again),
                4 * micro_batches * whole,
            )
        } else {
            (4 * whole, 4 * whole)
        };
        let ring = ((all_gather + reduce_scatter) as f64 * (w - 1) as f64 / w as f64).round();
        Some(Sharding {
            world_size: w,
            reshard_after_forward: s.reshard_after_forward,
            shard_params: units.iter().map(|u| u.shard_params).sum(),
            units,
            gathered_params: gathered,
            gather_buffers,
            unreduced_gradients: unreduced,
            reduce_buffers,
            all_gather_bytes: all_gather,
            reduce_scatter_bytes: reduce_scatter,
            ring_bytes_per_rank: ring as u64,
        })
    }
}
