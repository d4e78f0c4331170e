//! What crosses between devices per step: activations at each device boundary (model and
//! pipeline parallel), gradients all-reduced across data replicas, a pipeline's bubble.

use serde::Serialize;

use super::values;
use crate::ir::{Device, Experiment, Layer, Parallel};

/// Activations that cross from one device to another between consecutive layers.
#[derive(Serialize, Debug, PartialEq)]
pub struct Transfer {
    /// The layer whose output crosses.
    pub after: String,
    /// The layer that receives it.
    pub to_layer: String,
    /// Where it is computed.
    pub from: Device,
    /// Where it goes.
    pub to: Device,
    /// Bytes of activations sent forward per step (the whole batch); backward sends their
    /// gradients, as many bytes, the other way.
    pub bytes_per_step: u64,
}

/// What crosses between devices in one optimizer step.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct Communication {
    /// Activations at each device boundary of the model (model and pipeline parallel).
    pub transfers: Vec<Transfer>,
    /// The gradients all-reduced per step across replicas (data parallel, DDP).
    pub allreduce: Option<AllReduce>,
    /// The fraction of a pipeline step each stage idles, (p - 1) / (m + p - 1).
    pub pipeline_bubble: Option<f64>,
}

/// A gradient all-reduce.
#[derive(Serialize, Debug, PartialEq)]
pub struct AllReduce {
    /// Replicas (processes or devices) taking part.
    pub replicas: u64,
    /// Bytes of gradients reduced per step (fp32).
    pub bytes: u64,
    /// Bytes each replica sends, and receives, in a ring all-reduce: 2 (n - 1) / n of them.
    pub ring_bytes_per_replica: u64,
}

/// What crosses between devices per step: activations (and their gradients) between consecutive
/// layers on different devices, for the whole batch; gradients all-reduced across replicas; a
/// pipeline's bubble.
pub(super) fn communication(
    e: &Experiment,
    all: &[&Layer],
    devices: &[Device],
    gradient_bytes: u64,
) -> Communication {
    let act = e.train.precision.activation_bytes();
    let mut out = Communication::default();
    match &e.parallel {
        Parallel::Data { devices: d, .. } if d.len() > 1 => {
            out.allreduce = Some(all_reduce(d.len() as u64, gradient_bytes));
        }
        // The data ranks' gradients (under tensor parallel, each rank's pieces).
        Parallel::Distributed { sharding: None, .. } if e.parallel.data_parallel_size() > 1 => {
            out.allreduce = Some(all_reduce(e.parallel.data_parallel_size(), gradient_bytes));
        }
        Parallel::Data { .. } | Parallel::Distributed { .. } => {}
        Parallel::None | Parallel::Model | Parallel::Pipeline { .. } => {
            for (i, pair) in all.windows(2).enumerate() {
                let (from, to) = (devices[i], devices[i + 1]);
                if from != to {
                    out.transfers.push(Transfer {
                        after: pair[0].name.clone(),
                        to_layer: pair[1].name.clone(),
                        from,
                        to,
                        bytes_per_step: values(&pair[0].output)
                            .saturating_mul(e.data.batch)
                            .saturating_mul(act),
                    });
                }
            }
        }
    }
    if let Parallel::Pipeline {
        stages,
        micro_batches,
        ..
    } = &e.parallel
    {
        let (p, m) = (*stages as f64, *micro_batches as f64);
        out.pipeline_bubble = Some((p - 1.0) / (m + p - 1.0));
    }
    out
}

/// A ring all-reduce of `bytes` over `replicas` (at least 2).
pub(super) fn all_reduce(replicas: u64, bytes: u64) -> AllReduce {
    let ring = (bytes as f64) * 2.0 * (replicas - 1) as f64 / replicas as f64;
    AllReduce {
        replicas,
        bytes,
        ring_bytes_per_replica: ring.round() as u64,
    }
}
