//! Strategies and arithmetic: settings that must agree with each other (K02xx).

use crate::diagnostic::compress::{GroupedLayer, TargetNeed};
use crate::diagnostic::datafile::DataFit;
use crate::diagnostic::situation::{Inconsistent, Producer, Sweep};
use crate::ir::{Device, Kind, Shape};
use crate::span::Span;

/// Strategies and arithmetic: settings that must agree with each other (K02xx).
#[derive(Clone, Debug, PartialEq)]
pub enum Strategies {
    /// K0201: a pipeline of one stage.
    PipelineOneStage {
        /// The stage count.
        span: Span,
        /// The stages.
        stages: u64,
    },
    /// K0202: `ddp` without `world_size`.
    DdpWithoutWorldSize {
        /// The arguments.
        span: Span,
    },
    /// K0203: FP8 on a CPU layer.
    Fp8OnCpu {
        /// The quantization target.
        span: Span,
        /// The layer.
        layer: String,
        /// Where the layer is defined.
        layer_span: Span,
    },
    /// K0204: INT4 on a layer that is not linear.
    Int4NonLinear {
        /// The quantization target.
        span: Span,
        /// The layer.
        layer: String,
        /// Where the layer is defined.
        layer_span: Span,
    },
    /// K0212: an INT4 group size the kernels do not take (`layer` is `None`), or one that
    /// does not divide a layer's input features.
    Int4GroupSize {
        /// The group size, or the target whose layer it does not divide.
        span: Span,
        /// The group size.
        group_size: u64,
        /// The layer it does not divide.
        layer: Option<GroupedLayer>,
    },
    /// K0213: quantization-aware training under fp16 autocast.
    QatFp16 {
        /// The `qat` scheme.
        span: Span,
        /// The `precision` setting.
        precision: Span,
    },
    /// K0215: a compression target the step cannot apply to.
    CompressTargetKind {
        /// The target's name.
        span: Span,
        /// The step, in words (`pruning`, `int8 quantization`).
        step: String,
        /// The target as written.
        target: String,
        /// The layer's kind; `None` for a block.
        kind: Option<Kind>,
        /// Where the layer or block is defined.
        layer_span: Span,
        /// What the step needs.
        need: TargetNeed,
    },
    /// K0217: a layer quantized twice, or named twice in one step.
    CompressConflict {
        /// The second mention.
        span: Span,
        /// The layer.
        layer: String,
        /// The first mention.
        first: Span,
        /// Whether both mentions are in one statement.
        same_statement: bool,
    },
    /// K0214: structured pruning that keeps no unit.
    PruneLeavesNothing {
        /// The pruning target.
        span: Span,
        /// The pruned layer.
        layer: String,
        /// Where the layer is defined.
        layer_span: Span,
        /// The units along the pruned dimension.
        units: i64,
        /// The amount.
        amount: f64,
        /// The pruned dimension (0: output units, 1: input features).
        dim: i64,
    },
    /// K0216: structured pruning of output units that cannot be removed.
    CannotShrink {
        /// The pruning target.
        span: Span,
        /// The pruned layer.
        layer: String,
        /// Why.
        reason: crate::plan::shrink::Reason,
        /// Where it is blocked (a layer or a residual).
        at: Span,
        /// The blocking layer's name; `None` at a residual.
        at_layer: Option<String>,
    },
    /// K0205: batch, accumulation and replicas do not multiply out.
    BatchArithmetic {
        /// The batch, or the declared micro-batch.
        span: Span,
        /// The global batch.
        batch: u64,
        /// Accumulation steps and where they are set.
        accumulate: (u64, Option<Span>),
        /// Data-parallel replicas and where they are set.
        replicas: (u64, Option<Span>),
        /// A declared micro-batch that disagrees, and the global batch's span.
        micro: Option<(u64, Span)>,
    },
    /// K0206: micro-batches that do not divide the batch.
    MicroBatches {
        /// The micro-batch count.
        span: Span,
        /// Micro-batches.
        micro_batches: u64,
        /// The per-step batch they split.
        per_step: u64,
        /// The global batch and its span.
        batch: (u64, Span),
        /// Accumulation steps and where they are set, when above one.
        accumulate: Option<(u64, Span)>,
    },
    /// K0207: attention heads that do not divide the width.
    HeadsIndivisible {
        /// The head count.
        span: Span,
        /// Heads.
        heads: i64,
        /// What flows in; its last dimension is the width.
        producer: Producer,
    },
    /// K0208: more stages than layers.
    TooManyStages {
        /// The stage count.
        span: Span,
        /// Stages.
        stages: u64,
        /// Top-level layers.
        layers: u64,
    },
    /// K0229: a mesh whose dimensions are not run together yet.
    MeshNotRun {
        /// The degree (or compression step) that cannot join the others.
        span: Span,
        /// What it composes with, in words (`fsdp with tensor parallel`).
        what: String,
        /// The other degree, where it is written.
        other: Option<Span>,
    },
    /// K0230: heads or a hidden width that the tensor degree does not divide.
    TensorIndivisible {
        /// The layer.
        span: Span,
        /// The layer's name.
        layer: String,
        /// `heads` or `hidden`.
        what: &'static str,
        /// Its size.
        size: i64,
        /// The tensor degree.
        degree: u64,
        /// Where the degree is written.
        degree_span: Span,
    },
    /// K0209: a layer or block given two placements of its own.
    PlacementConflict {
        /// The second placement.
        span: Span,
        /// The layer or block placed.
        name: String,
        /// The second device.
        device: Device,
        /// The first placement: where, what, on which device.
        first: (Span, String, Device),
    },
    /// K0210.
    Inconsistent {
        /// The later of the two settings.
        span: Span,
        /// Which situation.
        situation: Inconsistent,
    },
    /// K0211.
    BadSweep {
        /// The sweep.
        span: Span,
        /// Which situation.
        situation: Sweep,
    },
    /// K0218: a per-channel `normalize` whose values do not match the input's channels.
    NormalizeChannels {
        /// The `normalize` statement.
        span: Span,
        /// Values given per statistic.
        values: usize,
        /// The input's first dimension, which `normalize` takes for channels.
        channels: i64,
        /// The model's input shape.
        input: Shape,
        /// The model's `input` statement.
        input_span: Span,
    },
    /// K0220: a data file disagrees with the experiment.
    DataMismatch {
        /// Where the file is named (or the setting that disagrees).
        span: Span,
        /// The file, as written.
        file: String,
        /// How it disagrees.
        situation: DataFit,
    },
    /// K0221: a data file's header is malformed or of a kind Kiln does not read.
    DataHeader {
        /// Where the file is named.
        span: Span,
        /// The file, as written.
        file: String,
        /// Why, a clause (`it is not an IDX file: ...`).
        reason: String,
    },
    /// K0226: a parameter selected by two parameter groups.
    GroupOverlap {
        /// The selector of the later group that picks the parameter again.
        span: Span,
        /// The parameter, by `state_dict` name.
        param: String,
        /// The later group's selector, as written.
        selector: String,
        /// The earlier group's selector that picked it first.
        first: Span,
        /// That selector, as written.
        first_selector: String,
    },
    /// K0228: the plan needs more memory on a device than `--device-memory` gives it.
    DoesNotFit {
        /// The `parallel` statement of a distributed run, else the batch.
        span: Span,
        /// The device.
        device: Device,
        /// Bytes needed: weights, gradients, optimizer state, activations.
        need: [u64; 4],
        /// All bytes needed.
        total: u64,
        /// Bytes available.
        capacity: u64,
        /// Changes that lower the need, each with the bytes needed then, fewest first.
        changes: Vec<(String, u64)>,
    },
    /// K0227: batch norm normalising one value per channel with batch statistics.
    BatchNormOneValue {
        /// The batch norm layer (a secondary label when the cause is known).
        span: Span,
        /// Its name.
        layer: String,
        /// The statement that makes a pass of one sample (`batch` or `eval_batch`), and how;
        /// `None` when the pass is met at run time.
        cause: Option<(Span, String)>,
        /// Whether the pass is an evaluation's (a layer without running statistics).
        evaluation: bool,
    },
}
