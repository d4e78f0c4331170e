//! The training loop: its length, loss, evaluation, early stopping, precision and checkpoints.

use serde::Serialize;

use super::{Duration, Loss, Metric};
use crate::span::Span;

/// Numeric precision of the forward and backward passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Plain fp32.
    Fp32,
    /// bf16 autocast, fp32 master weights.
    Bf16,
    /// fp16 autocast with loss scaling, fp32 master weights.
    Fp16,
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        })
    }
}

impl Precision {
    /// Bytes per stored activation.
    pub fn activation_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Bf16 | Precision::Fp16 => 2,
        }
    }
}

/// Early stopping.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EarlyStop {
    /// Watched metric (`val_loss`, `val_accuracy`, ...).
    pub metric: String,
    /// Evaluations without improvement before stopping.
    pub patience: u64,
    /// Smallest change that counts as improvement.
    pub min_delta: f64,
    /// Whether larger is better.
    pub maximize: bool,
}

/// Checkpointing.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Checkpoint {
    /// Interval.
    pub every: Duration,
    /// How many to keep.
    pub keep: u64,
}

/// The training loop.
#[derive(Clone, Debug)]
pub struct Train {
    /// How long to train.
    pub length: Duration,
    /// The value of `epochs` or `steps`, for a length the data cannot reach.
    pub length_span: Span,
    /// The loss.
    pub loss: Loss,
    /// The loss statement.
    pub loss_span: Span,
    /// Metrics reported.
    pub metrics: Vec<Metric>,
    /// Evaluation interval.
    pub eval_every: Duration,
    /// Early stopping, if any.
    pub early_stop: Option<EarlyStop>,
    /// Precision.
    pub precision: Precision,
    /// Checkpointing, if any.
    pub checkpoint: Option<Checkpoint>,
    /// Gradient accumulation steps.
    pub accumulate: u64,
    /// Per-replica micro-batch: batch / (accumulate x data-parallel size).
    pub micro_batch: u64,
    /// Clip gradients to this total norm.
    pub clip_norm: Option<f64>,
    /// Clip each gradient element to this magnitude.
    pub clip_value: Option<f64>,
}
