//! Warnings: what runs but is likely not meant (K04xx; a few are errors).

use crate::diagnostic::compress::{NoSpeedup, WeightOnly};
use crate::diagnostic::consistency::{Outlasts, TrainingLength};
use crate::diagnostic::schedule::Sequence;
use crate::diagnostic::situation::{Ignored, NoOp};
use crate::ir::Device;
use crate::span::Span;
use std::path::PathBuf;

/// Warnings: what runs but is likely not meant (K04xx; a few are errors).
#[derive(Clone, Debug, PartialEq)]
pub enum Warnings {
    /// K0401: data parallel over one device.
    DataParallelOneDevice {
        /// The `parallel` statement.
        span: Span,
    },
    /// K0402: a device needs more memory than it has.
    MemoryExceeded {
        /// The `memory` line, or the batch.
        span: Span,
        /// The device.
        device: Device,
        /// Bytes needed: weights, gradients, optimizer state, activations.
        need: [u64; 4],
        /// All bytes needed.
        total: u64,
        /// Bytes available.
        capacity: u64,
        /// The batch and its span, when the capacity comes from the file.
        batch: Option<(u64, Span)>,
        /// The top-level blocks whose `recompute` would lower the need, with the total then.
        recompute: Option<(Vec<String>, u64)>,
    },
    /// K0403: model parallel on one device.
    ModelParallelOneDevice {
        /// The `parallel` statement.
        span: Span,
        /// The one device.
        device: Device,
    },
    /// K0404.
    NoOpLayer {
        /// The layer.
        span: Span,
        /// Which layer.
        situation: NoOp,
    },
    /// K0405: softmax before a loss that applies its own.
    DoubleSoftmax {
        /// The softmax.
        span: Span,
        /// The loss.
        loss: Span,
    },
    /// K0406.
    IgnoredSetting {
        /// The setting.
        span: Span,
        /// Which situation.
        situation: Ignored,
    },
    /// K0407: placement under data parallel.
    PlacementIgnored {
        /// The first placement.
        span: Span,
        /// The `parallel` statement.
        parallel: Span,
    },
    /// K0421: `parallel fsdp` over a model without top-level blocks.
    /// K0422: a tensor degree that splits no layer.
    TensorSplitsNothing {
        /// The tensor degree.
        span: Span,
        /// The degree.
        degree: u64,
    },
    FsdpOneUnit {
        /// The `parallel` statement.
        span: Span,
    },
    /// K0410: batch norm in a pipelined model.
    PipelineBatchNorm {
        /// The first batch-norm layer.
        span: Span,
        /// Its name.
        layer: String,
        /// The `parallel` statement.
        parallel: Span,
        /// Samples per micro-batch.
        samples: u64,
    },
    /// K0411: a weight-only quantization that will not speed a CPU layer up.
    QuantNoSpeedup {
        /// The quantization target.
        span: Span,
        /// The layer.
        layer: String,
        /// Where the layer is defined.
        layer_span: Span,
        /// Its input features.
        inputs: u64,
        /// Its output features.
        outputs: u64,
        /// The batch.
        batch: u64,
        /// The scheme.
        scheme: WeightOnly,
        /// Why it will not help.
        why: NoSpeedup,
    },
    /// K0412: a schedule or interval that lasts longer than the training.
    OutlastsTraining {
        /// The setting.
        span: Span,
        /// What outlasts the training.
        situation: Outlasts,
        /// The training's length.
        length: TrainingLength,
    },
    /// K0415: `reduce_on_plateau` without validation evaluations to watch.
    PlateauWithoutValidation {
        /// The `schedule` statement.
        span: Span,
        /// The data source.
        source: Span,
        /// Whether it watches `val_accuracy` on targets without classes (rather than lacking
        /// a validation split).
        accuracy: bool,
    },
    /// K0416: a `sequence` schedule whose schedules and milestones do not fit together.
    BadSequence {
        /// The offending part.
        span: Span,
        /// What is wrong.
        situation: Sequence,
    },
    /// K0408: dropout on data-parallel replicas that share a device.
    DropoutSharedGenerator {
        /// The first dropout layer.
        span: Span,
        /// The `parallel` statement.
        parallel: Span,
        /// The shared device.
        device: Device,
        /// How many replicas share it.
        replicas: u64,
    },
    /// K0414: a data file cannot be found or opened here (it may be on the training machine).
    DataFileMissing {
        /// Where the file is named.
        span: Span,
        /// The file, as written.
        file: String,
        /// Where it was looked for.
        resolved: PathBuf,
        /// Why it cannot be opened (`it does not exist`).
        reason: String,
        /// The directory relative paths resolve from: the declaring `.exp` file's.
        base: PathBuf,
        /// Names close to it that exist, as they would be written.
        nearby: Vec<String>,
    },
    /// K0419: a parameter group that selects no parameter.
    EmptyGroup {
        /// The group's `group(...)` call.
        span: Span,
        /// Its selectors, as written.
        selectors: Vec<String>,
    },
    /// K0420: a training batch whose class targets all weigh nothing.
    WeightlessBatch {
        /// The `loss` statement.
        span: Span,
        /// The loss's `ignore_index`.
        ignore_index: i64,
    },
}
