//! What an evaluation batch keeps in memory. Evaluation runs without gradients, so no layer's
//! output is kept for a backward pass: a device holds the batch's input and, at the widest
//! moment, one layer's input and output together. Per sample that is
//! `input + max over the device's layers of (layer input + layer output)` values, times
//! `eval_batch` and the activation's bytes. Weights, gradients and optimizer state stay where
//! they are, so a device's total counts the larger of its training and its evaluation
//! activations.

use crate::ir::{Device, Experiment, Layer, Parallel};

use super::{sum, values, DeviceNeed};

/// Values per sample an evaluation keeps at once on `device`, whose layers are those of `all`
/// placed there by `devices` (in-process data parallelism evaluates on replica 0 alone; each
/// process of a distributed run evaluates its share in batches of `eval_batch`).
pub(super) fn values_on(e: &Experiment, all: &[&Layer], devices: &[Device], device: Device) -> u64 {
    let everything = || whole(e, all);
    match &e.parallel {
        Parallel::Data {
            devices: replicas, ..
        } => {
            if replicas.first() == Some(&device) {
                everything()
            } else {
                0
            }
        }
        Parallel::Distributed { .. } => everything(),
        Parallel::None | Parallel::Model | Parallel::Pipeline { .. } => {
            let here = all
                .iter()
                .copied()
                .enumerate()
                .zip(devices)
                .filter(|(_, d)| **d == device)
                .map(|(l, _)| l);
            peak(e, here, devices.first() == Some(&device))
        }
    }
}

/// Values per sample an evaluation of the whole model keeps at once on one device.
pub(super) fn whole(e: &Experiment, all: &[&Layer]) -> u64 {
    peak(e, all.iter().copied().enumerate(), true)
}

/// The widest moment of `layers` (each with its index in the model): a layer's input and
/// output, plus the model's input while a later layer than the first runs on the device that
/// holds it (`holds_input`); the first layer's input is the model's input.
fn peak<'l>(
    e: &Experiment,
    layers: impl Iterator<Item = (usize, &'l Layer)>,
    holds_input: bool,
) -> u64 {
    let input = values(&e.model.input);
    layers
        .map(|(i, l)| {
            let both = sum([values(&l.input), values(&l.output)]);
            if holds_input && i > 0 {
                sum([both, input])
            } else {
                both
            }
        })
        .max()
        .unwrap_or(0)
}

/// Records a device's evaluation activations and counts in its total the larger of what a
/// training step holds besides its weights and optimizer state (gradients and activations, at
/// their backward peak where the plan has one) and what an evaluation does (its activations, with
/// the gradients the last step left).
pub(super) fn add(need: &mut DeviceNeed, eval_bytes: u64) {
    need.eval_activation_bytes = eval_bytes;
    let training = need
        .backward_peak_bytes
        .unwrap_or(need.gradient_bytes.saturating_add(need.activation_bytes));
    need.total_bytes = sum([
        need.weight_bytes,
        need.optimizer_bytes,
        training.max(need.gradient_bytes.saturating_add(eval_bytes)),
    ]);
}
