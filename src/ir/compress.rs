//! Compression: pruning and quantization steps and what they apply to.

use serde::Serialize;

use super::{Duration, Precision};
use crate::span::Span;

/// What a compression step applies to.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// Qualified layer name.
    pub layer: String,
    /// `weight` or `bias`; `None` for the layer's weight.
    pub param: Option<String>,
    /// Where the target is named.
    pub span: Span,
}

/// A compression step.
#[derive(Clone, Debug)]
pub enum Compression {
    /// Sets weights to zero (and, when structured, removes whole units at the end).
    Prune {
        /// Layers or parameters pruned.
        targets: Vec<Target>,
        /// How weights are chosen.
        method: PruneMethod,
        /// Fraction pruned in the end, in [0, 1] (of the entries, or of the units when
        /// structured).
        amount: f64,
        /// When pruning happens.
        schedule: PruneSchedule,
        /// The statement.
        span: Span,
    },
    /// Lowers weight precision (after training, or during it for `qat`).
    Quantize {
        /// Layers quantized.
        targets: Vec<Target>,
        /// The number format and its options.
        scheme: QuantScheme,
        /// The statement.
        span: Span,
    },
}

/// Pruning methods, as in `torch.nn.utils.prune`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PruneMethod {
    /// Smallest absolute values first, per tensor (`l1_unstructured`).
    L1Unstructured,
    /// Uniformly random entries, per tensor (`random_unstructured`).
    RandomUnstructured,
    /// Whole slices along `dim` with the smallest Ln norm (`ln_structured`).
    LnStructured {
        /// The norm's order.
        n: u64,
        /// The dimension whose slices are removed (0: output units, 1: input features).
        dim: i64,
    },
    /// Smallest absolute values over all targets together (`global_unstructured` with L1).
    GlobalL1,
}

/// When pruning happens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PruneSchedule {
    /// Once, before the first step; the masks are kept through training.
    Before,
    /// Once, after training, followed by `finetune` more training with the masks kept.
    After {
        /// Fine-tuning after pruning (zero: none).
        finetune: Duration,
    },
    /// Sparsity grown along Zhu & Gupta's cubic ramp from `initial` to the amount, pruning at
    /// `start`, every `every` steps, until `end`.
    Gradual {
        /// First pruning step.
        start: u64,
        /// Step at which the final amount is reached.
        end: u64,
        /// Interval in steps.
        every: u64,
        /// Sparsity at `start`, in [0, amount).
        initial: f64,
    },
    /// Iterative magnitude pruning with rewinding: train, prune `1 - (1 - amount)^(1/rounds)` of
    /// the remaining weights, rewind the unpruned ones to their values at step `rewind`, and
    /// train again; `rounds` times, then a last training.
    Iterative {
        /// Number of pruning rounds.
        rounds: u64,
        /// The step whose weights the survivors are rewound to.
        rewind: u64,
    },
}

/// Quantization schemes with their options.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantScheme {
    /// 8-bit integer weights (after training).
    Int8 {
        /// One scale per output channel or one per tensor.
        granularity: Granularity,
        /// Symmetric (zero point 0) or affine (min/max) ranges.
        symmetric: bool,
        /// Whether activations are quantized too, per row at run time (`dynamic`).
        dynamic: bool,
    },
    /// 4-bit integer weights in groups of input features, weight-only (linear layers).
    Int4 {
        /// Input features per scale and zero point: 32, 64, 128 or 256.
        group_size: u64,
    },
    /// FP8 (e4m3) weights and activations through scaled matrix products (CUDA, compute
    /// capability 8.9 or more).
    Fp8 {
        /// One scale per tensor, or one per row of weights and of activations.
        granularity: Granularity,
    },
    /// Quantization-aware training: weights fake-quantized per channel (or per tensor) and
    /// activations per tensor, with moving-average observers, then converted to int8.
    Qat {
        /// Weight scale granularity.
        granularity: Granularity,
    },
    /// Weights stored and multiplied in bf16 or fp16.
    Cast {
        /// `Bf16` or `Fp16`.
        to: Precision,
    },
}

/// Quantization scale granularity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// One scale per tensor.
    PerTensor,
    /// One scale per output channel (for FP8: per row of weights and of activations).
    PerChannel,
}
