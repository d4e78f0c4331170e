//! The facts that [`Problem`](super::Problem) variants share, and the situations of the codes
//! that cover several cases (wrong arguments, out of range, inconsistent settings, ...).

use crate::ir::Shape;
use crate::span::Span;

/// A misspelled or unknown name, with the names that would have been accepted there.
#[derive(Clone, Debug, PartialEq)]
pub struct Unknown {
    /// Where the name is written.
    pub span: Span,
    /// The name as written.
    pub name: String,
    /// The names accepted in its place.
    pub candidates: Vec<String>,
}

/// What a layer produces, named where it is produced: the other end of a shape problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Producer {
    /// Where the producing layer (or `input`) is written.
    pub span: Span,
    /// How the producer is called in messages (`input`, `` `fc1` ``).
    pub name: String,
    /// The shape it produces.
    pub shape: Shape,
}

/// Allowed ranges for numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    /// `x > 0`.
    Positive,
    /// `x >= 0`.
    NonNegative,
    /// `0 <= x < 1`.
    UnitOpen,
    /// `0 <= x <= 1`.
    Unit,
    /// `0 < x <= 1`.
    UnitPositive,
    /// Any finite number.
    Any,
}

impl Range {
    /// Whether `x` lies in the range.
    pub fn holds(self, x: f64) -> bool {
        match self {
            Range::Positive => x > 0.0,
            Range::NonNegative => x >= 0.0,
            Range::UnitOpen => (0.0..1.0).contains(&x),
            Range::Unit => (0.0..=1.0).contains(&x),
            Range::UnitPositive => x > 0.0 && x <= 1.0,
            Range::Any => true,
        }
    }
}

/// The kind of value a setting expects, for wrong-type problems.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// A plain number.
    Number,
    /// An integer.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A string.
    String,
    /// A plain name.
    Name,
    /// A device.
    Device,
    /// A list of positive integers.
    Shape,
    /// A reshape target: positive integers, one of them possibly -1.
    ReshapeShape,
    /// A number of steps or epochs.
    Duration,
    /// A whole number of steps or epochs, found with another unit or sign.
    WholeDuration,
    /// A duration in steps only (gradual pruning).
    Steps,
    /// A byte size.
    Bytes,
    /// A positive whole number of seconds (`20s`, `2 min`).
    Seconds,
    /// A data source call.
    Source,
    /// A data generator call.
    Generator,
    /// A uint8 scaling: a number above 0 or `none`.
    Scale,
    /// A split's fraction or its own source.
    SplitPart,
    /// A metric.
    Metric,
    /// A list of devices.
    DeviceList,
    /// Adam's two betas.
    Betas,
    /// The optimizer's parameter groups: a list of `group(...)` calls.
    Groups,
    /// A name from a table (optimizer, schedule, loss, method), with the table.
    Callee {
        /// What the setting names (`an optimizer`).
        what: String,
        /// The names it accepts.
        known: Vec<String>,
    },
    /// A plain count for a setting that names its own unit, as `epochs` and `steps` do; the
    /// value was written with a unit (`epochs 500 steps`).
    Count {
        /// The setting (`epochs`).
        setting: &'static str,
        /// The count written.
        count: u64,
        /// The setting the unit names (`steps` for `500 steps`).
        meant: &'static str,
        /// The whole setting, from keyword to unit, which the fix rewrites.
        statement: Span,
    },
}

/// The statements that have a fixed form of several parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `memory cuda:0 80 GiB`.
    Memory,
    /// `place fc1 on cuda:0`.
    Place,
    /// `prune fc1 l1_unstructured(amount: 0.5)`.
    Prune,
    /// `quantize fc1 int8(per_channel)`.
    Quantize,
    /// `split(train: 0.8, val: 0.2)` or `split(train: npy(...), val: npy(...))`.
    Split,
}

/// The situations of K0120: a statement or call with too many, too few or misplaced arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum Arguments {
    /// A positional argument follows a named one.
    PositionalAfterNamed,
    /// More positional arguments than the callee has parameters.
    TooManyPositional {
        /// The layer, optimizer or setting called.
        callee: String,
        /// Its parameters.
        params: Vec<String>,
    },
    /// A required argument is missing.
    Missing {
        /// The layer, optimizer or setting called.
        callee: String,
        /// The parameter without a value.
        param: String,
    },
    /// A setting written with arguments in parentheses.
    NoParentheses {
        /// The setting's keyword.
        keyword: String,
    },
    /// A block statement written with values or arguments.
    OnlyBlock {
        /// The block's keyword.
        keyword: String,
    },
    /// A setting without its value.
    NoValue {
        /// The setting's keyword.
        keyword: String,
    },
    /// A setting with more than one value.
    ExtraValues {
        /// The setting's keyword.
        keyword: String,
    },
    /// A statement that needs a `{ ... }` block and has none.
    NoBlock {
        /// Its keyword.
        keyword: String,
        /// The statement written as it should be.
        example: &'static str,
    },
    /// A statement that needs a name and has none.
    NoName {
        /// Its keyword.
        keyword: String,
        /// The statement written as it should be.
        example: &'static str,
    },
    /// A source or generator named without its arguments.
    NoArguments {
        /// The source.
        callee: String,
    },
    /// A statement whose parts are not in its form.
    Form(Form),
    /// `normalize` with different numbers of means and standard deviations.
    NormalizeLengths {
        /// Means given.
        means: usize,
        /// Standard deviations given.
        stds: usize,
    },
    /// Values after a layer call other than a placement.
    AfterLayer {
        /// The layer's keyword.
        keyword: String,
    },
    /// A per-dimension parameter with the wrong number of values.
    SpatialValues {
        /// The parameter.
        param: String,
        /// Values wanted.
        dims: usize,
        /// Values given.
        given: usize,
    },
}

/// The situations of K0121: a value outside its allowed range.
#[derive(Clone, Debug, PartialEq)]
pub enum OutOfRange {
    /// A number outside a [`Range`].
    Number {
        /// What the number is (`the learning rate`).
        what: String,
        /// The range it must lie in.
        range: Range,
        /// The number given.
        value: f64,
    },
    /// A negative or absurdly large integer.
    NotUnsigned {
        /// The number given.
        value: f64,
    },
    /// An integer below its minimum.
    Below {
        /// What the integer is.
        what: String,
        /// Its minimum.
        min: u64,
        /// The integer given.
        value: u64,
    },
    /// A batch larger than the training split.
    BatchOverSamples {
        /// The batch.
        batch: u64,
        /// Training samples.
        train: u64,
        /// All samples.
        count: u64,
        /// The data source.
        source: Span,
    },
    /// `uniform` with `high` not above `low`.
    UniformBounds {
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// An image source's `size` that is not `[channels, height, width]` with 1 or 3 channels.
    ImageSize {
        /// The size given.
        size: Vec<i64>,
    },
    /// Augmentation (`crop`, `flip`) declared on a split's own source, which is never
    /// augmented.
    HeldOutAugment {
        /// The split: `val` or `test`.
        split: &'static str,
    },
    /// Split fractions summing to more than 1.
    SplitSum {
        /// Their sum.
        sum: f64,
    },
    /// A training split of 0.
    EmptyTrainSplit,
    /// A length in epochs whose optimizer steps cannot be counted (more than 2^64).
    EpochSteps {
        /// The epochs.
        epochs: u64,
        /// Optimizer steps in one epoch.
        per_epoch: u64,
        /// Training samples.
        samples: u64,
        /// The batch size.
        batch: u64,
    },
    /// Data parallel over an empty device list.
    NoDevices,
    /// More replicas than one machine holds.
    TooManyReplicas {
        /// Replicas asked for.
        replicas: u64,
        /// The most Kiln places on one machine.
        max: u64,
    },
    /// Structured pruning along a dimension other than 0 or 1.
    PruneDim {
        /// The dimension.
        dim: i64,
    },
    /// Gradual pruning whose end does not come after its start.
    GradualOrder {
        /// First step.
        start: u64,
        /// Last step.
        end: u64,
    },
    /// Gradual pruning whose initial sparsity is not below its final amount.
    GradualInitial {
        /// The initial sparsity.
        initial: f64,
        /// The final amount.
        amount: f64,
    },
    /// Iterative pruning that rewinds to a step the training never reaches.
    RewindTooLate {
        /// The rewind step.
        rewind: u64,
        /// The most steps the training can last.
        length: u64,
    },
    /// A model with more parameters than Kiln plans for.
    TooManyParameters {
        /// Its parameter count.
        params: u128,
    },
    /// A batch whose activations or FLOPs overflow the plan.
    BatchTooLarge {
        /// The batch.
        batch: u64,
        /// Activation values.
        values: u128,
        /// FLOPs.
        flops: u128,
    },
    /// Top-k accuracy with k above the class count.
    TopK {
        /// k.
        k: u64,
        /// Classes.
        classes: u64,
    },
    /// A model input holding more than 2^40 values per sample.
    InputTooLarge {
        /// The input shape.
        shape: Shape,
    },
    /// A layer output holding more than 2^40 values per sample.
    OutputTooLarge {
        /// The layer kind.
        kind: String,
        /// Its output shape.
        shape: Shape,
    },
    /// Pooling padding above half the kernel.
    PoolPadding {
        /// The padding.
        padding: i64,
        /// The kernel size.
        kernel: i64,
    },
    /// A reshape dimension that is neither positive nor -1.
    ReshapeDim {
        /// The dimension.
        dim: i64,
    },
    /// A reshape with more than one -1.
    ReshapeInferred,
    /// Convolution groups that do not divide the channels.
    ConvGroups {
        /// Groups.
        groups: i64,
        /// Input channels.
        inputs: i64,
        /// Output channels.
        outputs: i64,
    },
    /// Normalisation groups that do not divide the channels.
    NormGroups {
        /// Groups.
        groups: i64,
        /// Channels.
        channels: i64,
    },
    /// A dimension index outside the sample's rank.
    DimOutside {
        /// The index.
        dim: i64,
        /// What flows into the layer.
        producer: Producer,
    },
    /// Token ids beyond an embedding's rows.
    TokenIds {
        /// Rows of the embedding.
        vocab: u64,
        /// One past the largest token id.
        bound: u64,
        /// Where the ids come from.
        producer: Producer,
    },
    /// A padding id outside an embedding's rows.
    PadId {
        /// The padding id.
        pad: u64,
        /// Rows of the embedding.
        vocab: u64,
    },
    /// A sequence longer than a positional table.
    Positions {
        /// Rows of the table.
        max_len: u64,
        /// Length of the sequence.
        length: u64,
        /// What flows into the layer.
        producer: Producer,
    },
    /// Sinusoidal positions over an odd width.
    OddWidth {
        /// The width.
        width: u64,
        /// What flows into the layer.
        producer: Producer,
    },
}

/// The situations of K0124: a statement where it cannot stand.
#[derive(Clone, Debug, PartialEq)]
pub enum Misplaced {
    /// A label (`name:`) on a setting.
    Label {
        /// The setting's keyword.
        keyword: String,
    },
    /// A `{ ... }` block on a statement that takes none.
    Block {
        /// The statement's keyword.
        keyword: String,
    },
    /// A `{ ... }` block on a layer other than `block` or `residual`.
    LayerBlock {
        /// The layer kind.
        kind: String,
    },
}

/// The situations of K0210: settings that contradict each other.
#[derive(Clone, Debug, PartialEq)]
pub enum Inconsistent {
    /// Nesterov momentum without momentum, or with dampening.
    Nesterov {
        /// Momentum given.
        momentum: f64,
        /// Dampening given.
        dampening: f64,
    },
    /// Both `epochs` and `steps`.
    EpochsAndSteps {
        /// Where `epochs` is.
        epochs: Span,
    },
    /// Data parallel given both devices and a replica count.
    DevicesAndReplicas {
        /// Where the devices are.
        devices: Span,
    },
    /// Early stopping on a validation metric without a validation split.
    EarlyStopWithoutValidation {
        /// The watched metric.
        metric: String,
        /// The data source.
        source: Span,
    },
    /// The NCCL backend on the CPU.
    NcclOnCpu,
    /// Quantization-aware training under a strategy that copies the model (its observers live
    /// in one model).
    QatReplicated {
        /// The strategy, as the language names it.
        strategy: &'static str,
        /// The `parallel` statement.
        parallel: Span,
    },
    /// Pruning under `parallel fsdp`, whose ranks hold shards of the tensors pruning masks.
    PruneSharded {
        /// The `parallel` statement.
        parallel: Span,
    },
    /// Two pruning statements whose schedules lengthen training.
    TwoLengthenings {
        /// The first of them.
        first: Span,
    },
    /// fp16 training where a layer or replica runs on the CPU.
    Fp16OnCpu {
        /// What puts the model on the CPU (the `device`, a placement, the replicas).
        cpu: Span,
    },
    /// A layer that updates state in its forward (batch norm's running statistics) inside a
    /// group whose forward runs twice a step (`recompute`).
    RecomputeUpdatesState {
        /// The layer's name.
        layer: String,
        /// The layer's statement.
        at: Span,
    },
    /// Dropout in a recomputed group on threads that share libtorch's generator (replicas or
    /// stages on one CUDA device, or on the CPU in bf16/fp16): backward's run would not find the
    /// generator as its forward left it.
    RecomputeSharedGenerator {
        /// The strategy, as the language names it.
        strategy: &'static str,
        /// The `parallel` statement.
        parallel: Span,
    },
    /// Recomputed layers with quantization-aware training, whose observers update in forward.
    RecomputeQat {
        /// The `recompute`.
        recompute: Span,
    },
    /// The training data given both by `source` and by `split(train: SOURCE)`.
    TwoTrainingSources {
        /// The `source` statement.
        source: Span,
    },
    /// A split given as a fraction where there is no `source` to take it from.
    FractionWithoutSource {
        /// The split (`val`, `test`).
        split: &'static str,
        /// The training split's own source.
        train: Span,
    },
    /// A split's own source declares other classes or another sample shape than training's.
    SplitSourcesDiffer {
        /// The split (`val`, `test`).
        split: &'static str,
        /// `classes` or `shape`.
        what: &'static str,
        /// The training source.
        train: Span,
    },
    /// An experiment device that is none of the data-parallel replicas' devices.
    DeviceNotReplica {
        /// The experiment's device.
        device: crate::ir::Device,
        /// The replicas' devices.
        replicas: Span,
    },
}

/// The situations of K0406: a setting without effect.
#[derive(Clone, Debug, PartialEq)]
pub enum Ignored {
    /// `eval_every` without a validation split.
    EvalWithoutValidation,
    /// A checkpoint interval longer than the training.
    CheckpointAfterEnd,
    /// Accuracy measured on real-valued targets.
    AccuracyOnValues,
    /// Regression metrics (`mae`, `rmse`, `r2`) asked of a loss that is not a regression loss.
    RegressionMetrics {
        /// The metrics, as written.
        metrics: Vec<&'static str>,
        /// The loss's name.
        loss: &'static str,
    },
    /// An attention `window` at least as long as the sequence: it masks nothing.
    WindowCoversSequence,
}

/// The situations of K0211: a sweep that cannot be expanded.
#[derive(Clone, Debug, PartialEq)]
pub enum Sweep {
    /// A sweep inside another.
    Nested,
    /// `range` or `logspace` with other than plain positional numbers.
    Arguments,
    /// A range with no values.
    EmptyRange,
    /// A logspace with non-positive bounds or fewer than two values.
    Logspace,
    /// A sweep over something other than a list, `range` or `logspace`.
    NotAList,
    /// A sweep with no values.
    Empty,
    /// Sweeps whose grid exceeds the trial limit.
    TooManyTrials {
        /// Trials the grid would make.
        trials: u64,
        /// The limit.
        max: u64,
    },
}

/// How a loss and the model's output or targets disagree (K0303).
#[derive(Clone, Debug, PartialEq)]
pub enum LossShape {
    /// A classification loss on real-valued targets.
    ClassesOnValues {
        /// Target shape.
        targets: Shape,
    },
    /// A classification loss on a scalar output.
    ScalarOutput,
    /// A classification loss on an output of rank above one.
    NotFlat,
    /// A classification loss on per-token targets whose output is not a score per class for
    /// each token, `[..tokens, classes]`.
    TokenScores {
        /// The targets' per-sample shape.
        tokens: Shape,
    },
    /// Class count and output width differ.
    ClassCount {
        /// Classes in the data.
        classes: u64,
        /// Whether the classes are per token rather than per sample.
        per_token: bool,
    },
    /// A regression loss on class labels.
    ValuesOnClasses,
    /// `bce_with_logits` on class indices of more than two classes.
    BinaryOnClasses {
        /// Classes in the data.
        classes: u64,
    },
    /// A classification loss on one score per sample.
    OneClass,
    /// A loss option with one value per score (`weight`, `pos_weight`) of another length.
    WeightCount {
        /// The option.
        option: &'static str,
        /// Values given.
        given: usize,
        /// Values the output asks for.
        wants: i64,
    },
    /// A regression loss whose output and target shapes differ.
    Shapes {
        /// Target shape.
        targets: Shape,
    },
}

/// What a layer declares that disagrees with its input (K0301).
#[derive(Clone, Debug, PartialEq)]
pub enum Declared {
    /// A size: input features, input channels, features, channels.
    Size {
        /// What the size counts (`input features`).
        what: &'static str,
        /// The declared size.
        declared: i64,
        /// The size received.
        received: i64,
    },
    /// PReLU slopes that are neither one nor one per channel.
    Slopes {
        /// Slopes declared.
        declared: i64,
    },
    /// A normalized shape that is not the input's trailing dimensions.
    Trailing {
        /// The declared shape.
        shape: Shape,
    },
}

/// The situations of K0404: a layer without effect.
#[derive(Clone, Debug, PartialEq)]
pub enum NoOp {
    /// Dropout with p = 0.
    Dropout,
    /// A reshape to the shape it receives.
    Reshape {
        /// The shape kept.
        shape: Shape,
    },
}
