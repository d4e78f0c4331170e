//! The table of diagnostic codes. Codes are stable: a code is never reused or renumbered.
//! `docs/diagnostics.md` documents each one and a test keeps it in step with this table.
//! [`Problem::code`] gives each problem's code.

use super::problem::Problem;
use super::Severity;
use crate::diagnostic::problem::{Names, Reading, Running, Shapes, Strategies, Warnings};

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $name:literal, $sev:ident, $summary:literal; )*) => {
        /// A kind of problem Kiln reports. Each variant is one diagnostic type with a stable code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// Every code, in table order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable code, as in `K0102`.
            pub fn code(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }

            /// A short kebab-case name.
            pub fn name(self) -> &'static str {
                match self { $(Code::$variant => $name,)* }
            }

            /// Whether it is an error or a warning.
            pub fn severity(self) -> Severity {
                match self { $(Code::$variant => Severity::$sev,)* }
            }

            /// One sentence saying what the diagnostic means.
            pub fn summary(self) -> &'static str {
                match self { $(Code::$variant => $summary,)* }
            }
        }
    };
}

codes! {
    /// The file does not follow the grammar.
    Syntax = "K0001", "syntax-error", Error, "The file does not follow Kiln's grammar.";
    /// The file is not valid UTF-8.
    InvalidUtf8 = "K0002", "invalid-utf8", Error, "The file is not valid UTF-8 text.";
    /// A file could not be read.
    Io = "K0003", "unreadable-file", Error, "A file could not be read.";
    /// Brackets nest deeper than the parser allows.
    TooDeep = "K0004", "nesting-too-deep", Error, "Brackets or braces nest deeper than 64 levels.";
    /// Kiln itself failed; the problem is Kiln's, not the file's.
    Internal = "K0005", "internal-error", Error, "Kiln failed internally while checking the file; please report it.";

    /// A statement keyword that the enclosing block does not know.
    UnknownKeyword = "K0101", "unknown-keyword", Error, "A statement's keyword is not known in its block.";
    /// A layer kind that does not exist.
    UnknownLayer = "K0102", "unknown-layer", Error, "A layer kind that Kiln does not know.";
    /// An optimizer that does not exist.
    UnknownOptimizer = "K0103", "unknown-optimizer", Error, "An optimizer that Kiln does not know.";
    /// A loss that does not exist.
    UnknownLoss = "K0104", "unknown-loss", Error, "A loss function that Kiln does not know.";
    /// A device that does not exist.
    UnknownDevice = "K0105", "unknown-device", Error, "A device name that is not `cpu`, `cuda`, `cuda:N` or `auto`.";
    /// A named argument that the callee does not take.
    UnknownParameter = "K0106", "unknown-parameter", Error, "A named argument that the layer, optimizer or setting does not take.";
    /// A learning-rate schedule that does not exist.
    UnknownSchedule = "K0107", "unknown-schedule", Error, "A learning-rate schedule that Kiln does not know.";
    /// A metric that does not exist.
    UnknownMetric = "K0108", "unknown-metric", Error, "A metric that Kiln does not know.";
    /// A data source kind that does not exist.
    UnknownSource = "K0109", "unknown-source", Error, "A data source or generator that Kiln does not know.";
    /// A pruning method that does not exist.
    UnknownPruneMethod = "K0110", "unknown-prune-method", Error, "A pruning method that Kiln does not know.";
    /// A quantization scheme that does not exist.
    UnknownQuantScheme = "K0111", "unknown-quant-scheme", Error, "A quantization scheme that Kiln does not know.";
    /// A parallel strategy that does not exist.
    UnknownStrategy = "K0112", "unknown-strategy", Error, "A parallel strategy that Kiln does not know.";
    /// A name used as a choice that is not one of the allowed words.
    UnknownChoice = "K0113", "unknown-choice", Error, "A word that is not one of the values a setting accepts.";
    /// A reference to a layer, block or parameter that the model does not define.
    UnknownReference = "K0114", "unknown-reference", Error, "A placement, compression target or parameter group names no layer, block or parameter of the model.";
    /// The file declares no experiment, or more than one.
    ExperimentCount = "K0115", "experiment-count", Error, "A file must declare exactly one `experiment`.";
    /// A required setting is missing.
    MissingSetting = "K0116", "missing-setting", Error, "A setting the experiment needs is missing.";
    /// Two layers or blocks share a name.
    DuplicateName = "K0117", "duplicate-name", Error, "Two layers or blocks have the same name.";
    /// A setting is given twice in one place.
    DuplicateSetting = "K0118", "duplicate-setting", Error, "A setting is given more than once; Kiln never silently keeps one of them.";
    /// A value of the wrong type.
    WrongType = "K0119", "wrong-type", Error, "A value has the wrong type for its setting.";
    /// Too many, too few or misplaced arguments.
    WrongArguments = "K0120", "wrong-arguments", Error, "A statement or call has too many, too few or misplaced arguments.";
    /// A value outside its allowed range.
    OutOfRange = "K0121", "out-of-range", Error, "A value lies outside the range its setting allows.";
    /// An `extends` path that cannot be loaded.
    ExtendsNotFound = "K0122", "extends-not-found", Error, "The file named by `extends` cannot be read.";
    /// `extends` files that extend each other in a cycle.
    ExtendsCycle = "K0123", "extends-cycle", Error, "Files extend each other in a cycle.";
    /// A statement in a place where it cannot stand.
    Misplaced = "K0124", "misplaced-statement", Error, "A statement stands where it has no meaning (a label on a setting, a block where none is taken).";

    /// A pipeline with fewer than two stages.
    PipelineOneStage = "K0201", "pipeline-one-stage", Error, "A pipeline needs at least two stages.";
    /// Distributed data parallel without a world size.
    DdpWithoutWorldSize = "K0202", "ddp-without-world-size", Error, "Distributed data parallel needs a world size.";
    /// FP8 quantization of a layer placed on the CPU.
    Fp8OnCpu = "K0203", "fp8-on-cpu", Error, "FP8 needs a CUDA device with FP8 support; the layer is placed on the CPU.";
    /// INT4 quantization of a layer that is not linear.
    Int4NonLinear = "K0204", "int4-non-linear", Error, "INT4 weight-only quantization applies to linear layers only.";
    /// The global batch does not split into micro-batches, accumulation steps and replicas.
    BatchArithmetic = "K0205", "batch-arithmetic", Error, "Global batch must equal micro-batch x accumulation x data-parallel size.";
    /// Pipeline micro-batches that do not divide the batch.
    MicroBatches = "K0206", "micro-batches-indivisible", Error, "The number of pipeline micro-batches must divide the batch.";
    /// Attention heads that do not divide the embedding width.
    HeadsIndivisible = "K0207", "heads-indivisible", Error, "Attention heads must divide the embedding width.";
    /// More pipeline stages than layers.
    TooManyStages = "K0208", "too-many-stages", Error, "A pipeline cannot have more stages than layers.";
    /// A layer or block given two placements of its own.
    PlacementConflict = "K0209", "placement-conflict", Error, "A layer or block is given two placements of its own.";
    /// Settings that contradict each other.
    Inconsistent = "K0210", "inconsistent-strategy", Error, "Settings contradict each other (backend and devices, precision and device, ...).";
    /// A sweep with no values or too many trials.
    BadSweep = "K0211", "bad-sweep", Error, "A sweep is empty or makes more than 10,000 trials.";
    /// An INT4 group size that the kernels do not take, or that does not divide a layer's inputs.
    Int4GroupSize = "K0212", "int4-group-size", Error, "INT4 groups must be 32, 64, 128 or 256 input features and divide the layer's input features.";
    /// Quantization-aware training under fp16 autocast.
    QatFp16 = "K0213", "qat-fp16", Error, "Quantization-aware training cannot run under fp16 precision.";
    /// A compression target of a kind the step cannot apply to.
    CompressTargetKind = "K0215", "compress-target-kind", Error, "A compression target is a layer (or a block with no layer) the step cannot apply to.";
    /// Two quantizations of one layer, or one layer named twice in a step.
    CompressConflict = "K0217", "compress-conflict", Error, "A layer is quantized by two statements, or named twice in one compression step.";
    /// Structured pruning whose amount removes every unit.
    PruneLeavesNothing = "K0214", "prune-leaves-nothing", Error, "Structured pruning whose amount would leave a layer with no units.";
    /// A structured prune of output units whose group cannot be shrunk.
    CannotShrink = "K0216", "cannot-shrink", Error, "Structured pruning of output units that cannot be removed from the model (they reach the output, a residual joins the input, a consumer cannot be sliced, ...).";
    /// A per-channel normalisation whose values do not match the input's channels.
    NormalizeChannels = "K0218", "normalize-channels", Error, "`normalize` gives one value per channel, but not as many as the model's input has channels.";
    /// A data file disagrees with the experiment.
    DataMismatch = "K0220", "data-mismatch", Error, "A data file's header disagrees with the experiment: sample shape, counts, targets, members or columns, or a split it leaves empty.";
    /// A data file's header is malformed or unsupported.
    DataHeader = "K0221", "data-header", Error, "A data file's header is malformed, truncated, or of a kind Kiln does not read.";
    /// A parameter selected by two parameter groups.
    GroupOverlap = "K0226", "group-overlap", Error, "A parameter is selected by two parameter groups of the optimizer; each parameter belongs to one group.";
    /// Batch norm over one value per channel, whose variance is undefined.
    BatchNormOneValue = "K0227", "batch-norm-one-value", Error, "A batch norm layer would normalise one value per channel with batch statistics: a batch, micro-batch or replica's slice of one sample.";
    /// The plan does not fit a device's memory as `--device-memory` gives it.
    DoesNotFit = "K0228", "does-not-fit", Error, "The plan needs more memory on a device than `--device-memory` gives it.";
    /// A mesh whose dimensions Kiln does not run together yet.
    MeshNotRun = "K0229", "mesh-not-run", Error, "The mesh composes dimensions (or tensor parallel with compression) that this version of Kiln does not run together.";
    /// A head count or hidden width that the tensor-parallel degree does not divide.
    TensorIndivisible = "K0230", "tensor-indivisible", Error, "Tensor parallel splits attention by heads and a transformer block's MLP by its hidden width: the degree must divide them.";

    /// A layer receives a feature size other than the one it declares.
    ShapeMismatch = "K0301", "shape-mismatch", Error, "A layer's declared input size differs from the size it receives.";
    /// A layer receives a tensor of the wrong rank.
    RankMismatch = "K0302", "rank-mismatch", Error, "A layer receives a tensor with the wrong number of dimensions.";
    /// The loss cannot take the model's output or the data's targets.
    LossShape = "K0303", "loss-shape", Error, "The loss cannot take the model's output together with the data's targets.";
    /// A residual connection adds tensors of different shapes.
    ResidualShape = "K0304", "residual-shape", Error, "A residual block's output shape differs from its input shape.";
    /// A reshape to a different number of elements.
    ReshapeSize = "K0305", "reshape-size", Error, "A reshape must keep the number of elements.";
    /// A layer receives integer data where it needs floats, or the reverse.
    DtypeMismatch = "K0306", "dtype-mismatch", Error, "A layer receives integer token ids where it needs floats, or the reverse.";
    /// The data's samples do not fit the model's input.
    DataShape = "K0307", "data-shape", Error, "The data's sample shape does not match the model's `input`.";
    /// A layer would produce an empty dimension.
    EmptyDimension = "K0308", "empty-dimension", Error, "A layer shrinks a dimension to zero or below (kernel larger than its input).";
    /// Sequence-task targets over inputs that are not one sequence of ids, or with one class.
    SequenceTask = "K0309", "sequence-task", Error, "A sequence task's targets (`majority()`, `first()`, `argmax()`, and per token `copy()`, `reverse()`, `sort()`) need `randint` inputs of shape `[S]` and must give at least two classes; a data file's `per_token: true` targets need a model that reads token ids.";

    /// Data parallel over a single device.
    DataParallelOneDevice = "K0401", "data-parallel-one-device", Warning, "Data parallel over one device only adds overhead.";
    /// A device's memory need exceeds its declared capacity.
    MemoryExceeded = "K0402", "memory-exceeded", Warning, "The plan needs more memory on a device than its declared capacity.";
    /// Model parallel with every layer on one device.
    ModelParallelOneDevice = "K0403", "model-parallel-one-device", Warning, "Model parallel with every layer on one device does nothing.";
    /// A layer that does nothing.
    NoOpLayer = "K0404", "no-op-layer", Warning, "A layer has no effect (dropout 0, identity reshape).";
    /// A softmax before a loss that applies its own.
    DoubleSoftmax = "K0405", "double-softmax", Warning, "The model ends in softmax but the loss expects raw logits.";
    /// A setting that has no effect with the others chosen.
    IgnoredSetting = "K0406", "ignored-setting", Warning, "A setting has no effect with the other settings chosen.";
    /// A placement on one device while the experiment runs data parallel.
    PlacementIgnored = "K0407", "placement-ignored", Warning, "Per-layer placement is ignored under data parallel strategies.";
    /// Dropout on data-parallel replicas that share a device's random generator.
    DropoutSharedGenerator = "K0408", "dropout-shared-generator", Warning, "Data-parallel replicas on one device draw dropout masks from its one generator in thread order: runs are not reproducible.";
    /// Batch norm in a pipeline normalises each micro-batch on its own.
    PipelineBatchNorm = "K0410", "pipeline-batch-norm", Warning, "Batch norm in a pipeline computes its statistics per micro-batch, not over the batch.";
    /// Weight-only quantization that will not make a layer faster on its device.
    QuantNoSpeedup = "K0411", "quant-no-speedup", Warning, "A weight-only quantization shrinks the layer's weights but will not make it faster on its device at this batch.";
    /// A schedule or interval that lasts longer than the training.
    OutlastsTraining = "K0412", "outlasts-training", Warning, "A schedule, pruning schedule, evaluation interval or early-stopping patience lasts longer than the training.";
    /// A data file is not on this machine.
    DataFileMissing = "K0414", "data-file-missing", Warning, "A data file named by the experiment cannot be found or opened here; it may be on the training machine, and `kiln run` refuses it (K0502).";
    /// `reduce_on_plateau` with no validation metric to watch.
    PlateauWithoutValidation = "K0415", "plateau-without-validation", Error, "`reduce_on_plateau` has no validation evaluations to watch (no validation split, or `val_accuracy` without classes).";
    /// A `sequence` schedule whose parts do not fit together.
    BadSequence = "K0416", "bad-sequence", Error, "A `sequence` schedule's milestones do not increase, do not number one fewer than its schedules, or it holds `reduce_on_plateau`.";
    /// A parameter group that selects no parameter.
    EmptyGroup = "K0419", "empty-group", Warning, "A parameter group of the optimizer selects no parameter of the model.";
    /// A training batch whose class targets all weigh nothing.
    WeightlessBatch = "K0420", "weightless-batch", Error, "Every class target of a training batch is ignored (`ignore_index`) or of a class weighted 0, so its mean loss is undefined.";
    /// Fully sharded data parallel over a model with one unit of sharding.
    FsdpOneUnit = "K0421", "fsdp-one-unit", Warning, "Under `parallel fsdp` the model is one unit of sharding (it has no top-level block), gathered whole at every step.";
    /// A tensor-parallel degree that splits no layer of the model.
    TensorSplitsNothing = "K0422", "tensor-splits-nothing", Warning, "Tensor parallel splits no layer of the model: every tensor rank computes the same thing.";

    /// A device the experiment names is not on this machine.
    DeviceUnavailable = "K0501", "device-unavailable", Error, "A device the experiment runs on is not available on this machine.";
    /// A data file is missing.
    DataMissing = "K0502", "data-missing", Error, "A data file named by the experiment does not exist or cannot be read.";
    /// A data file is truncated, malformed or of the wrong shape.
    DataInvalid = "K0503", "data-invalid", Error, "A data file is truncated, malformed, or holds samples of the wrong shape or type.";
    /// The loss became NaN or infinite.
    NonFiniteLoss = "K0504", "non-finite-loss", Error, "The training loss became NaN or infinite.";
    /// A device ran out of memory.
    OutOfMemory = "K0505", "out-of-memory", Error, "A device ran out of memory during training.";
    /// The run was interrupted.
    Interrupted = "K0506", "interrupted", Error, "The run was interrupted (Ctrl-C, SIGTERM, SIGHUP); a checkpoint was written.";
    /// A resume whose checkpoint does not fit the experiment.
    ResumeIncompatible = "K0507", "resume-incompatible", Error, "The checkpoint to resume from was made by an incompatible experiment.";
    /// libtorch reported an error.
    TorchError = "K0508", "torch-error", Error, "libtorch reported an error while running a layer or step.";
    /// The run directory or a checkpoint could not be written or read.
    RunIo = "K0509", "run-io", Error, "The run directory or a checkpoint in it could not be written or read.";
    /// The run directory holds another run, or another process is writing it.
    RunDirTaken = "K0510", "run-dir-taken", Error, "The run directory holds another run, or another process is writing it.";
    /// A signal killed the runtime.
    RuntimeKilled = "K0511", "runtime-killed", Error, "A signal killed `kiln-runtime` (the out-of-memory killer, another process, a file-size limit, a crash).";
    /// A checkpoint whose checksum does not hold.
    CheckpointDamaged = "K0512", "checkpoint-damaged", Warning, "A checkpoint is damaged; the run resumes from the newest intact one.";
    /// A lock left by a process that died.
    StaleLock = "K0513", "stale-lock", Warning, "The run directory's lock was left by a process that died while writing the run.";
    /// Another rank of a distributed run stopped, or a collective failed.
    RankFailed = "K0514", "rank-failed", Error, "A rank of a distributed run stopped or could not be reached, so every rank stops.";
    /// The ranks of a distributed run did not all meet.
    RendezvousFailed = "K0515", "rendezvous-failed", Error, "The ranks of a distributed run did not all meet within the timeout.";
    /// The ranks of a distributed run run different experiments.
    RanksDiffer = "K0516", "ranks-differ", Error, "The ranks of a distributed run were started with different experiments or world sizes.";
    /// The distributed backend cannot run here.
    BackendUnavailable = "K0517", "backend-unavailable", Error, "The distributed backend cannot run on this machine.";
    /// `kiln eval` has no weights it can read.
    NoWeights = "K0519", "no-weights", Error, "`kiln eval` has no weights to evaluate: none were named, the weights file or checkpoint cannot be read, or the run directory holds neither final weights nor a checkpoint.";
    /// The weights given to `kiln eval` do not fit the model.
    WeightsMismatch = "K0520", "weights-mismatch", Error, "The weights given to `kiln eval` lack a tensor of the experiment's model, or hold one of another shape or dtype.";
    /// The split to evaluate has no samples.
    SplitEmpty = "K0521", "split-empty", Error, "The split `kiln eval` was asked for has no samples in the experiment.";
    /// `kiln eval` cannot evaluate an exported model as asked.
    ExportNotEvaluable = "K0522", "export-not-evaluable", Error, "`kiln eval` cannot evaluate an exported model as asked: a layer is stored as int4 or fp8, which cannot be read back, or `--uncompressed` was asked for.";
    /// A resume whose length ends before the steps the run has taken.
    ShorterThanTrained = "K0523", "shorter-than-trained", Error, "A resume asks for a length (or `--max-steps`) that ends before the steps the run has already taken; a finished run needs a longer one.";
    /// A finished run that cannot be continued from its end.
    NotExtendable = "K0524", "not-extendable", Error, "A finished run cannot be extended: it kept no checkpoint of its end, early stopping ended it, or it pruned after training.";
    /// A finished run resumed at the length it has.
    RunComplete = "K0525", "run-complete", Warning, "The finished run was resumed with the length it already has: nothing to train, nothing changed.";
    /// `kiln generate` given a model that is not a causal language model.
    NotGenerative = "K0526", "not-generative", Error, "`kiln generate` was given a run whose model is not a causal language model over token ids.";
}

impl Problem {
    /// The problem's stable code.
    pub fn code(&self) -> Code {
        match self {
            Problem::Reading(Reading::Syntax { .. }) => Code::Syntax,
            Problem::Reading(Reading::InvalidUtf8 { .. }) => Code::InvalidUtf8,
            Problem::Reading(Reading::Io { .. }) => Code::Io,
            Problem::Reading(Reading::TooDeep { .. }) => Code::TooDeep,
            Problem::Reading(Reading::Internal { .. }) => Code::Internal,
            Problem::Names(Names::UnknownKeyword { .. }) => Code::UnknownKeyword,
            Problem::Names(Names::UnknownLayer(_)) => Code::UnknownLayer,
            Problem::Names(Names::UnknownOptimizer(_)) => Code::UnknownOptimizer,
            Problem::Names(Names::UnknownLoss(_)) => Code::UnknownLoss,
            Problem::Names(Names::UnknownDevice { .. }) => Code::UnknownDevice,
            Problem::Names(Names::UnknownParameter { .. }) => Code::UnknownParameter,
            Problem::Names(Names::UnknownSchedule(_)) => Code::UnknownSchedule,
            Problem::Names(Names::UnknownMetric(_)) => Code::UnknownMetric,
            Problem::Names(Names::UnknownSource { .. }) => Code::UnknownSource,
            Problem::Names(Names::UnknownPruneMethod(_)) => Code::UnknownPruneMethod,
            Problem::Names(Names::UnknownQuantScheme(_)) => Code::UnknownQuantScheme,
            Problem::Names(Names::UnknownStrategy(_)) => Code::UnknownStrategy,
            Problem::Names(Names::UnknownChoice { .. }) => Code::UnknownChoice,
            Problem::Names(Names::UnknownReference { .. }) => Code::UnknownReference,
            Problem::Names(Names::ExperimentCount { .. }) => Code::ExperimentCount,
            Problem::Names(Names::MissingSetting { .. }) => Code::MissingSetting,
            Problem::Names(Names::DuplicateName { .. }) => Code::DuplicateName,
            Problem::Names(Names::DuplicateSetting { .. }) => Code::DuplicateSetting,
            Problem::Names(Names::WrongType { .. }) => Code::WrongType,
            Problem::Names(Names::WrongArguments { .. }) => Code::WrongArguments,
            Problem::Names(Names::OutOfRange { .. }) => Code::OutOfRange,
            Problem::Names(Names::ExtendsNotFound { .. }) => Code::ExtendsNotFound,
            Problem::Names(Names::ExtendsCycle { .. }) => Code::ExtendsCycle,
            Problem::Names(Names::Misplaced { .. }) => Code::Misplaced,
            Problem::Strategies(Strategies::PipelineOneStage { .. }) => Code::PipelineOneStage,
            Problem::Strategies(Strategies::DdpWithoutWorldSize { .. }) => {
                Code::DdpWithoutWorldSize
            }
            Problem::Strategies(Strategies::Fp8OnCpu { .. }) => Code::Fp8OnCpu,
            Problem::Strategies(Strategies::Int4NonLinear { .. }) => Code::Int4NonLinear,
            Problem::Strategies(Strategies::Int4GroupSize { .. }) => Code::Int4GroupSize,
            Problem::Strategies(Strategies::QatFp16 { .. }) => Code::QatFp16,
            Problem::Strategies(Strategies::CompressTargetKind { .. }) => Code::CompressTargetKind,
            Problem::Strategies(Strategies::CompressConflict { .. }) => Code::CompressConflict,
            Problem::Warnings(Warnings::QuantNoSpeedup { .. }) => Code::QuantNoSpeedup,
            Problem::Strategies(Strategies::PruneLeavesNothing { .. }) => Code::PruneLeavesNothing,
            Problem::Strategies(Strategies::CannotShrink { .. }) => Code::CannotShrink,
            Problem::Strategies(Strategies::BatchArithmetic { .. }) => Code::BatchArithmetic,
            Problem::Strategies(Strategies::MicroBatches { .. }) => Code::MicroBatches,
            Problem::Strategies(Strategies::HeadsIndivisible { .. }) => Code::HeadsIndivisible,
            Problem::Strategies(Strategies::TooManyStages { .. }) => Code::TooManyStages,
            Problem::Strategies(Strategies::MeshNotRun { .. }) => Code::MeshNotRun,
            Problem::Strategies(Strategies::TensorIndivisible { .. }) => Code::TensorIndivisible,
            Problem::Strategies(Strategies::PlacementConflict { .. }) => Code::PlacementConflict,
            Problem::Strategies(Strategies::Inconsistent { .. }) => Code::Inconsistent,
            Problem::Strategies(Strategies::BadSweep { .. }) => Code::BadSweep,
            Problem::Strategies(Strategies::NormalizeChannels { .. }) => Code::NormalizeChannels,
            Problem::Shapes(Shapes::ShapeMismatch { .. }) => Code::ShapeMismatch,
            Problem::Shapes(Shapes::RankMismatch { .. }) => Code::RankMismatch,
            Problem::Shapes(Shapes::LossShape { .. }) => Code::LossShape,
            Problem::Shapes(Shapes::ResidualShape { .. }) => Code::ResidualShape,
            Problem::Shapes(Shapes::ReshapeSize { .. }) => Code::ReshapeSize,
            Problem::Shapes(Shapes::DtypeMismatch { .. }) => Code::DtypeMismatch,
            Problem::Shapes(Shapes::DataShape { .. }) => Code::DataShape,
            Problem::Shapes(Shapes::SequenceTask { .. })
            | Problem::Shapes(Shapes::TokenTargets { .. }) => Code::SequenceTask,
            Problem::Shapes(Shapes::EmptyDimension { .. }) => Code::EmptyDimension,
            Problem::Warnings(Warnings::DataParallelOneDevice { .. }) => {
                Code::DataParallelOneDevice
            }
            Problem::Warnings(Warnings::MemoryExceeded { .. }) => Code::MemoryExceeded,
            Problem::Warnings(Warnings::ModelParallelOneDevice { .. }) => {
                Code::ModelParallelOneDevice
            }
            Problem::Warnings(Warnings::NoOpLayer { .. }) => Code::NoOpLayer,
            Problem::Warnings(Warnings::DoubleSoftmax { .. }) => Code::DoubleSoftmax,
            Problem::Warnings(Warnings::IgnoredSetting { .. }) => Code::IgnoredSetting,
            Problem::Warnings(Warnings::PlacementIgnored { .. }) => Code::PlacementIgnored,
            Problem::Warnings(Warnings::PipelineBatchNorm { .. }) => Code::PipelineBatchNorm,
            Problem::Warnings(Warnings::FsdpOneUnit { .. }) => Code::FsdpOneUnit,
            Problem::Warnings(Warnings::TensorSplitsNothing { .. }) => Code::TensorSplitsNothing,
            Problem::Warnings(Warnings::DropoutSharedGenerator { .. }) => {
                Code::DropoutSharedGenerator
            }
            Problem::Warnings(Warnings::OutlastsTraining { .. }) => Code::OutlastsTraining,
            Problem::Warnings(Warnings::PlateauWithoutValidation { .. }) => {
                Code::PlateauWithoutValidation
            }
            Problem::Warnings(Warnings::BadSequence { .. }) => Code::BadSequence,
            Problem::Running(Running::DeviceUnavailable { .. }) => Code::DeviceUnavailable,
            Problem::Strategies(Strategies::DataMismatch { .. }) => Code::DataMismatch,
            Problem::Strategies(Strategies::DataHeader { .. }) => Code::DataHeader,
            Problem::Warnings(Warnings::DataFileMissing { .. }) => Code::DataFileMissing,
            Problem::Strategies(Strategies::GroupOverlap { .. }) => Code::GroupOverlap,
            Problem::Strategies(Strategies::BatchNormOneValue { .. }) => Code::BatchNormOneValue,
            Problem::Strategies(Strategies::DoesNotFit { .. }) => Code::DoesNotFit,
            Problem::Warnings(Warnings::EmptyGroup { .. }) => Code::EmptyGroup,
            Problem::Warnings(Warnings::WeightlessBatch { .. }) => Code::WeightlessBatch,
            Problem::Running(Running::DataMissing { .. }) => Code::DataMissing,
            Problem::Running(Running::DataInvalid { .. }) => Code::DataInvalid,
            Problem::Running(Running::NonFiniteLoss { .. }) => Code::NonFiniteLoss,
            Problem::Running(Running::OutOfMemory { .. }) => Code::OutOfMemory,
            Problem::Running(Running::Interrupted { .. }) => Code::Interrupted,
            Problem::Running(Running::ResumeIncompatible { .. }) => Code::ResumeIncompatible,
            Problem::Running(Running::TorchError { .. }) => Code::TorchError,
            Problem::Running(Running::RunIo { .. }) => Code::RunIo,
            Problem::Running(Running::RunDirTaken { .. }) => Code::RunDirTaken,
            Problem::Running(Running::CheckpointDamaged { .. }) => Code::CheckpointDamaged,
            Problem::Running(Running::StaleLock { .. }) => Code::StaleLock,
            Problem::Running(Running::RuntimeKilled { .. }) => Code::RuntimeKilled,
            Problem::Running(Running::RankFailed { .. }) => Code::RankFailed,
            Problem::Running(Running::RendezvousFailed { .. }) => Code::RendezvousFailed,
            Problem::Running(Running::RanksDiffer { .. }) => Code::RanksDiffer,
            Problem::Running(Running::BackendUnavailable { .. }) => Code::BackendUnavailable,
            Problem::Running(Running::NoWeights { .. }) => Code::NoWeights,
            Problem::Running(Running::WeightsMismatch { .. }) => Code::WeightsMismatch,
            Problem::Running(Running::SplitEmpty { .. }) => Code::SplitEmpty,
            Problem::Running(Running::NotGenerative { .. }) => Code::NotGenerative,
            Problem::Running(Running::ExportNotEvaluable { .. }) => Code::ExportNotEvaluable,
            Problem::Running(Running::ShorterThanTrained { .. }) => Code::ShorterThanTrained,
            Problem::Running(Running::NotExtendable { .. }) => Code::NotExtendable,
            Problem::Running(Running::RunComplete { .. }) => Code::RunComplete,
        }
    }
}
