//! What an evaluation batch keeps in memory. Evaluation runs without gradients, so no layer's
//! output is kept for a backward pass: a device holds the batch and, at the widest moment, one
//! layer's input, output and what the layer makes while it runs ([`Activations::eval_peak`]),
//! for `eval_batch` samples. Weights, gradients and optimizer state stay where they are, so a
//! device's total counts the larger of its training and its evaluation activations.

use crate::ir::{Device, Experiment, Parallel};

use super::{sum, Activations, DeviceNeed};

/// Bytes an evaluation keeps at once on `device`, whose layers are those that `devices` places
/// there (in-process data parallelism evaluates on replica 0 alone; each process of a
/// distributed run evaluates its share in batches of `eval_batch`).
pub(super) fn bytes_on(
    e: &Experiment,
    acts: &Activations,
    devices: &[Device],
    device: Device,
) -> u64 {
    let batch = e.data.eval_batch;
    let everywhere = |_: usize| true;
    match &e.parallel {
        Parallel::Data {
            devices: replicas, ..
        } => {
            if replicas.first() == Some(&device) {
                acts.eval_peak(&everywhere, batch, true)
            } else {
                0
            }
        }
        Parallel::Distributed { .. } => acts.eval_peak(&everywhere, batch, true),
        Parallel::None | Parallel::Model | Parallel::Pipeline { .. } => {
            let here = |i: usize| devices.get(i) == Some(&device);
            acts.eval_peak(&here, batch, devices.first() == Some(&device))
        }
    }
}

/// Records a device's evaluation activations and counts in its total the larger of what a
/// training step holds besides its weights and optimizer state (gradients and activations, at
/// their backward peak where the plan has one) and what an evaluation does (its activations, with
/// the gradients the last step left), and the allocator's margin.
pub(super) fn add(need: &mut DeviceNeed, eval_bytes: u64) {
    need.eval_activation_bytes = eval_bytes;
    let training = need
        .backward_peak_bytes
        .unwrap_or(need.gradient_bytes.saturating_add(need.activation_bytes));
    need.total_bytes = sum([
        need.weight_bytes,
        need.optimizer_bytes,
        training.max(need.gradient_bytes.saturating_add(eval_bytes)),
        need.allocator_margin_bytes,
    ]);
}
