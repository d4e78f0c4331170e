//! Problems as facts. A [`Problem`] holds what was found (spans, names, candidates, numbers,
//! shapes) and nothing worded; [`Problem::diagnostic`] (in `wording.rs`) is the one place that
//! turns it into a sentence, labels, a help line and fixes.

use std::path::PathBuf;

use crate::ir::{Device, Kind, Shape};
use crate::span::Span;

pub use super::compress::{
    GroupedLayer, NoSpeedup, TargetNeed, WeightOnly, INT4_GROUP_SIZES, LARGE_BATCH,
    SMALL_LAYER_WEIGHTS,
};
pub use super::consistency::{Interval, Outlasts, TrainingLength};
pub use super::datafile::DataFit;
pub use super::evaluation::{Mismatch, NoWeights};
pub use super::extend::{Extension, Lengths};
pub use super::keywords::{Home, KeywordHint};
pub use super::runs::{Change, Resume, Taken};
pub use super::runtime::{Death, KilledRun, RunStage, Torch, Unavailable};
pub use super::schedule::Sequence;
pub use super::shapes::Window;
pub use super::situation::{
    Arguments, Declared, Expected, Form, Ignored, Inconsistent, LossShape, Misplaced, NoOp,
    OutOfRange, Producer, Range, Sweep, Unknown,
};
pub use super::syntax::{Habit, Within};
pub use super::unreadable::{FileKind, Unreadable};

/// One problem, as facts. Each variant is one [`Code`]; see `docs/diagnostics.md`.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// K0001: the text does not follow the grammar.
    Syntax {
        /// Where parsing stopped.
        span: Span,
        /// The whole token found there (`64`, `"text"`, `\n` at the end of a line); `None` at
        /// the end of the file.
        found: Option<String>,
        /// What the grammar accepts there, already joined (`a value or `]``); empty when the
        /// parser gives no list.
        expected: String,
        /// What the parser was in the middle of.
        within: Option<Within>,
        /// A habit from another format the error shows.
        habit: Option<Habit>,
        /// Why pest gave up, when it stopped on its call limit.
        gave_up: Option<String>,
    },
    /// K0002: the file is not UTF-8.
    InvalidUtf8 {
        /// The first invalid byte.
        span: Span,
        /// The file.
        path: PathBuf,
    },
    /// K0003: a file cannot be read.
    Io {
        /// The start of the file.
        span: Span,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: Unreadable,
    },
    /// K0004: brackets nest too deep.
    TooDeep {
        /// The bracket past the limit.
        span: Span,
        /// The limit.
        max: usize,
    },
    /// K0005: Kiln failed.
    Internal {
        /// The start of the file.
        span: Span,
    },
    /// K0101: an unknown keyword in a block.
    UnknownKeyword {
        /// The keyword and the block's keywords.
        unknown: Unknown,
        /// Where it stands (`data setting`, `top-level statement`).
        place: String,
        /// Where it belongs instead, or the colon that made it a keyword.
        hint: Option<KeywordHint>,
    },
    /// K0102.
    UnknownLayer(Unknown),
    /// K0103.
    UnknownOptimizer(Unknown),
    /// K0104.
    UnknownLoss(Unknown),
    /// K0105: a device name that does not parse.
    UnknownDevice {
        /// Where it is written.
        span: Span,
        /// As written (`gpu:0`).
        name: String,
    },
    /// K0106: a named argument the callee does not take.
    UnknownParameter {
        /// The argument's name and the callee's parameters.
        unknown: Unknown,
        /// The layer, optimizer or setting.
        callee: String,
    },
    /// K0107.
    UnknownSchedule(Unknown),
    /// K0108.
    UnknownMetric(Unknown),
    /// K0109: an unknown data source or generator.
    UnknownSource {
        /// The name and the known ones.
        unknown: Unknown,
        /// Whether it stands where a generator goes.
        generator: bool,
    },
    /// K0110.
    UnknownPruneMethod(Unknown),
    /// K0111.
    UnknownQuantScheme(Unknown),
    /// K0112.
    UnknownStrategy(Unknown),
    /// K0113: a word that is not one of a setting's choices.
    UnknownChoice {
        /// The word and the choices.
        unknown: Unknown,
        /// What is chosen (`mode`, `pruning schedule`).
        what: String,
    },
    /// K0114: a name that is no layer, block or parameter of the model.
    UnknownReference {
        /// The name and the model's names.
        unknown: Unknown,
        /// The parameter suffix (`.weight`) the name ends in, or nearly (`.weights`): set aside
        /// while looking for a similar name, then written after it.
        suffix: String,
    },
    /// K0115: no experiment, or another one.
    ExperimentCount {
        /// The start of the file, or the extra experiment.
        span: Span,
        /// The first experiment, when there is more than one.
        first: Option<Span>,
    },
    /// K0116: a required setting is missing from a block.
    MissingSetting {
        /// The block's keyword.
        span: Span,
        /// The block (`data`, `training`, `model`).
        block: &'static str,
        /// The setting, or the settings of which one is needed (`epochs`, `steps`).
        settings: &'static [&'static str],
        /// The setting written as it could be.
        example: &'static str,
    },
    /// K0117: two layers or blocks with one name.
    DuplicateName {
        /// The second definition.
        span: Span,
        /// The first.
        first: Span,
        /// The name.
        name: String,
    },
    /// K0118: a setting, argument or list item given twice.
    DuplicateSetting {
        /// The repeat.
        span: Span,
        /// The first one.
        first: Span,
        /// What is repeated, as written (`batch`, `memory cuda:0`).
        name: String,
    },
    /// K0119: a value of the wrong type.
    WrongType {
        /// The value.
        span: Span,
        /// What was expected.
        expected: Expected,
        /// What was found (`a string`).
        found: &'static str,
    },
    /// K0120.
    WrongArguments {
        /// The arguments or statement.
        span: Span,
        /// Which situation.
        situation: Arguments,
    },
    /// K0121.
    OutOfRange {
        /// The value.
        span: Span,
        /// Which situation.
        situation: OutOfRange,
    },
    /// K0122: a base file that cannot be read.
    ExtendsNotFound {
        /// The `extends` string.
        span: Span,
        /// The path tried.
        path: PathBuf,
        /// Why.
        reason: Unreadable,
    },
    /// K0123: files extending each other.
    ExtendsCycle {
        /// The `extends` string that closes the cycle.
        span: Span,
        /// The files of the cycle, as written, the first repeated at the end.
        cycle: Vec<PathBuf>,
    },
    /// K0124.
    Misplaced {
        /// The label, block or statement.
        span: Span,
        /// Which situation.
        situation: Misplaced,
    },
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
    /// K0301: a layer declares a size other than the one it receives.
    ShapeMismatch {
        /// The declared size.
        span: Span,
        /// The layer kind.
        layer: String,
        /// What is declared.
        declared: Declared,
        /// What flows in.
        producer: Producer,
    },
    /// K0302: a tensor of the wrong rank.
    RankMismatch {
        /// The layer.
        span: Span,
        /// The layer kind.
        layer: Kind,
        /// The rank it takes, in words (`a 1-D`).
        wants: String,
        /// What flows in.
        producer: Producer,
    },
    /// K0303.
    LossShape {
        /// The loss.
        span: Span,
        /// The loss's name.
        loss: String,
        /// The model's output shape and where it is produced.
        output: (Shape, Span),
        /// Where the targets come from.
        data: Span,
        /// Which disagreement.
        situation: LossShape,
    },
    /// K0304: a residual that changes the shape, reported at the layer that produced the new shape
    /// (the one to edit).
    ResidualShape {
        /// The `residual` keyword.
        span: Span,
        /// The input shape.
        input: Shape,
        /// The block's output.
        producer: Producer,
    },
    /// K0305: a reshape that changes the element count.
    ReshapeSize {
        /// The target shape.
        span: Span,
        /// The target dimensions.
        target: Shape,
        /// What flows in.
        producer: Producer,
    },
    /// K0306: integers where floats are needed, or the reverse.
    DtypeMismatch {
        /// The layer.
        span: Span,
        /// The layer kind.
        layer: String,
        /// Whether the layer receives integers (true) or floats (false).
        integers: bool,
        /// Where the values come from.
        producer: Producer,
    },
    /// K0307: model input and data samples differ.
    DataShape {
        /// The `input` shape.
        span: Span,
        /// The model's input.
        input: Shape,
        /// The data's sample shape and where it is declared.
        data: (Shape, Span),
        /// Whether they hold as many values, in dimensions that a reshape would scramble.
        scrambled: bool,
    },
    /// K0309: sequence-task targets over inputs that are not one sequence of token ids, or
    /// that give fewer than two classes.
    SequenceTask {
        /// The targets.
        span: Span,
        /// The task's word.
        task: String,
        /// The inputs' per-sample shape and where they are written.
        inputs: (Shape, Span),
        /// Whether the inputs are integer ids.
        integers: bool,
        /// The classes the task would give.
        classes: u64,
    },
    /// K0309: a file source's per-token targets for a model that does not read token ids.
    TokenTargets {
        /// The `per_token: true` argument.
        span: Span,
        /// The model's first layer.
        first: Span,
    },
    /// K0308: a layer that shrinks a dimension to nothing.
    EmptyDimension {
        /// The layer.
        span: Span,
        /// The layer kind.
        layer: String,
        /// The sliding window over the dimension that comes out empty.
        window: Window,
        /// What flows in.
        producer: Producer,
    },
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
    /// K0501.
    DeviceUnavailable {
        /// The device setting.
        span: Span,
        /// Which situation.
        situation: Unavailable,
    },
    /// K0502: a data file that cannot be read.
    DataMissing {
        /// The source.
        span: Span,
        /// What cannot be read and why, as the loader found it (`cannot read the data file
        /// ...: it does not exist (looked for ...)`).
        detail: String,
        /// What the loader says under the span (`file not found`).
        label: String,
        /// How to fix it, when the loader knows better than the general advice (the directory
        /// relative paths start from).
        help: Option<String>,
    },
    /// K0503: malformed data or initial weights.
    DataInvalid {
        /// The source, or the statement loading initial weights.
        span: Span,
        /// What is wrong, as found while reading (`truncated after 2 bytes`).
        detail: String,
        /// What the loader says under the span, when it says more than the general label.
        label: Option<String>,
        /// How to fix it, when the loader knows better than the general advice.
        help: Option<String>,
        /// Whether the initial weights (`--init`) are at fault rather than the data.
        weights: bool,
    },
    /// K0504: NaN or infinite loss.
    NonFiniteLoss {
        /// The learning rate.
        span: Span,
        /// NaN (true) or infinite.
        nan: bool,
        /// 1-based step.
        step: u64,
        /// 1-based epoch.
        epoch: u64,
        /// The learning rate at that step.
        lr: f64,
    },
    /// K0505: out of memory.
    OutOfMemory {
        /// The statement running, or the batch size once the run knows the failure came from
        /// its step.
        span: Span,
        /// libtorch's first line.
        detail: String,
        /// The batch and the plan's estimate per device (`cuda:0 3.2 GiB (activations 1.1
        /// GiB)`), once the run knows the failure came from its step.
        plan: Option<(u64, String)>,
        /// Where memory ran out, when the span points elsewhere (at the batch size).
        ran_out: Option<Span>,
    },
    /// K0506: a stop signal (SIGINT, SIGTERM, SIGHUP).
    Interrupted {
        /// The loss.
        span: Span,
        /// Steps done.
        step: u64,
        /// 1-based epoch.
        epoch: u64,
        /// The signal's name (`SIGTERM`); `None` when stopped otherwise.
        signal: Option<String>,
        /// The command that resumes the run (`kiln run small.exp --resume runs/small/...`);
        /// `None` in a process that does not write the run directory.
        resume: Option<String>,
    },
    /// K0507.
    ResumeIncompatible {
        /// What changed.
        span: Span,
        /// Which situation.
        situation: Resume,
    },
    /// K0508: libtorch failed, or the runtime met what the checks should have excluded.
    TorchError {
        /// The statement running.
        span: Span,
        /// Which situation.
        situation: Torch,
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
    /// K0510: the run directory holds another run or is being written.
    RunDirTaken {
        /// The experiment.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// Why it cannot be used.
        situation: Taken,
    },
    /// K0512: a checkpoint is damaged; an older intact one is used.
    CheckpointDamaged {
        /// The experiment.
        span: Span,
        /// Its sidecar.
        sidecar: PathBuf,
        /// What is wrong.
        reason: String,
        /// The step of the checkpoint used instead; `None` when no intact one is left.
        using: Option<u64>,
    },
    /// K0513: the run directory's lock was left by a process that died.
    StaleLock {
        /// The experiment.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// The process that held it, as `process 42 on host (since ...)`.
        holder: String,
    },
    /// K0509: the run directory failed.
    RunIo {
        /// The experiment.
        span: Span,
        /// What was done (`write`, `read`).
        action: String,
        /// The file, when one is at fault.
        path: Option<PathBuf>,
        /// The system's reason.
        error: String,
        /// What the run was doing.
        stage: RunStage,
    },
    /// K0511: a signal killed `kiln-runtime`.
    RuntimeKilled {
        /// The experiment's loss statement, in its training block.
        span: Span,
        /// The signal's name (`SIGKILL`).
        signal: String,
        /// Why, as far as can be told.
        cause: Death,
        /// The experiment file, as given to `kiln run`.
        file: PathBuf,
        /// The run directories the runtime had opened, in order.
        runs: Vec<KilledRun>,
    },
    /// K0514: another rank stopped mid-run, or a collective failed.
    RankFailed {
        /// The `parallel` statement.
        span: Span,
        /// The rank that saw the failure (`None` for the launcher of local ranks).
        rank: Option<usize>,
        /// The rank that stopped, when it can be told.
        stopped: Option<usize>,
        /// How it ended or what failed (`killed by SIGKILL`, c10d's message).
        detail: String,
    },
    /// K0515: the ranks did not all meet within the timeout.
    RendezvousFailed {
        /// The `parallel` statement.
        span: Span,
        /// The rank that waited.
        rank: usize,
        /// The ranks that never arrived (empty when the store itself could not be reached).
        missing: Vec<usize>,
        /// The store's address, `host:port`.
        address: String,
        /// The timeout in seconds.
        timeout_s: u64,
        /// c10d's message, when the store failed.
        detail: Option<String>,
    },
    /// K0516: two ranks run different experiments, or disagree on the world size.
    RanksDiffer {
        /// The `parallel` statement.
        span: Span,
        /// This rank.
        rank: usize,
        /// The rank that differs from it (`None`: this rank differs from how it was started).
        other: Option<usize>,
        /// Each difference, `what: this rank's → the other's`.
        differences: Vec<String>,
    },
    /// K0517: the backend cannot run here.
    BackendUnavailable {
        /// The `parallel` statement.
        span: Span,
        /// `gloo` or `nccl`.
        backend: String,
        /// Why.
        detail: String,
    },
    /// K0519: `kiln eval` has no weights it can read.
    NoWeights {
        /// The experiment.
        span: Span,
        /// Why there are none.
        situation: NoWeights,
    },
    /// K0520: the weights given to `kiln eval` do not fit the experiment's model.
    WeightsMismatch {
        /// The first layer whose tensors do not fit (the experiment when none is known).
        span: Span,
        /// The weights file.
        path: PathBuf,
        /// Every tensor that does not fit.
        mismatches: Vec<Mismatch>,
        /// Whether the experiment compresses, so its model also holds masks and observers.
        compresses: bool,
        /// Whether the file is a run's checkpoint (its tensors are named `param/fc1.weight`).
        checkpoint: bool,
    },
    /// K0522: `kiln eval` cannot evaluate an exported model as asked: a layer is stored in a
    /// form that cannot be read back, or its uncompressed form was asked for.
    ExportNotEvaluable {
        /// The experiment.
        span: Span,
        /// The exported weights file.
        path: PathBuf,
        /// The tensor stored in a form that cannot be read back; `None` when `--uncompressed`
        /// was asked for.
        tensor: Option<String>,
    },
    /// K0521: the split `kiln eval` was asked for has no samples.
    SplitEmpty {
        /// The data source.
        span: Span,
        /// `train`, `val` or `test`.
        split: String,
        /// The splits that have samples.
        available: Vec<String>,
    },
    /// K0523: a resume whose length, or `--max-steps`, ends before the steps the run has taken
    /// (or, for a finished run, does not go past them).
    ShorterThanTrained {
        /// The length in the experiment.
        span: Span,
        /// Where the run stands and what was asked.
        lengths: Lengths,
    },
    /// K0524: a finished run that cannot be continued from its end.
    NotExtendable {
        /// The length in the experiment, or the statement that keeps the run from being
        /// extended.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// Its final weights (`weights.safetensors`, or the newest version).
        weights: PathBuf,
        /// The steps the run took.
        trained: u64,
        /// Why it cannot be extended.
        situation: Extension,
    },
    /// K0525: a finished run resumed with the length it already has.
    RunComplete {
        /// The length in the experiment.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// How it ended, as `after 40 steps, train loss 0.1234, ...`; empty when its report
        /// cannot be read.
        detail: String,
    },
}
