//! The typed experiment, below every other module: `check` produces it, `plan` costs it and the
//! runtime lowers it; it depends on nothing but spans. The checked experiment: a typed description with every value validated and every shape
//! inferred. The runtime lowers this, never the syntax tree. Spans are kept where a runtime
//! failure must point back into the `.exp` file.

use serde::Serialize;

use crate::span::Span;

mod layer;
mod loss;
mod parallel;
mod params;
mod sample;

pub use layer::{BatchNorm, Block, BlockActivation, Conv, Kind, LayerKind, Pool};
pub use loss::{Loss, Metric};
pub use parallel::{ParallelPlan, Parallelism, Ranks};
pub use params::{tensors, Tensor, CLASSES};
pub use sample::{sample_fit, Layout, SampleFit};

/// A per-sample tensor shape (the batch dimension is implicit), printed as `[16, 14, 14]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<i64>);

impl Shape {
    /// The number of values one sample holds (saturating, so absurd sizes never wrap).
    pub fn numel(&self) -> i64 {
        self.0.iter().fold(1i64, |n, d| n.saturating_mul(*d))
    }
}

impl std::ops::Deref for Shape {
    type Target = Vec<i64>;
    fn deref(&self) -> &Vec<i64> {
        &self.0
    }
}

impl std::ops::DerefMut for Shape {
    fn deref_mut(&mut self) -> &mut Vec<i64> {
        &mut self.0
    }
}

impl From<Vec<i64>> for Shape {
    fn from(dims: Vec<i64>) -> Shape {
        Shape(dims)
    }
}

impl From<&[i64]> for Shape {
    fn from(dims: &[i64]) -> Shape {
        Shape(dims.to_vec())
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Element type of a tensor flowing between layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Floating point values.
    Float,
    /// Integer token ids or class labels.
    Int,
}

/// Where a layer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// The CPU.
    Cpu,
    /// A CUDA device by index (`cuda` alone is `cuda:0`).
    Cuda(u32),
    /// CUDA when available, else the CPU, decided at run time.
    Auto,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Auto => write!(f, "auto"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;

    /// Reads `cpu`, `cuda`, `cuda:N` or `auto`, as the language, the command line and the
    /// runtime all write devices.
    fn from_str(text: &str) -> Result<Device, String> {
        match text {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            "auto" => Ok(Device::Auto),
            other => other
                .strip_prefix("cuda:")
                .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|i| i.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("expected cpu, cuda, cuda:N or auto, not `{other}`")),
        }
    }
}

impl Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A length of training time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Duration {
    /// Optimizer steps.
    Steps(u64),
    /// Passes over the training split.
    Epochs(u64),
}

/// The whole checked experiment (one trial of a sweep).
#[derive(Clone, Debug)]
pub struct Experiment {
    /// The experiment's name.
    pub name: String,
    /// Its `experiment` keyword: where failures of the run as a whole point.
    pub span: Span,
    /// Free text.
    pub description: Option<String>,
    /// Free labels.
    pub tags: Vec<String>,
    /// The seed for every random generator.
    pub seed: u64,
    /// The sweep values of this trial, as `(setting, value)`; empty without a sweep.
    pub trial: Vec<(String, String)>,
    /// The warnings it silences (`allow`), by code (`K0411`).
    pub allow: Vec<String>,
    /// Every setting once `extends` is resolved and sweeps substituted, as `(path, value)`
    /// (`data.batch`, `64`), for the run's report; see `check::effective`.
    pub settings: Vec<(String, String)>,
    /// The data pipeline.
    pub data: Data,
    /// The model.
    pub model: Model,
    /// The device layers go to unless placed elsewhere.
    pub device: Device,
    /// The `device` statement (the experiment's keyword when there is none).
    pub device_span: Span,
    /// Declared device capacities in bytes.
    pub memory: Vec<(Device, u64, Span)>,
    /// How work is spread over devices and processes.
    pub parallel: Parallel,
    /// Pruning and quantization.
    pub compression: Vec<Compression>,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The learning-rate schedule.
    pub schedule: Schedule,
    /// The training loop.
    pub train: Train,
}

/// The data pipeline.
#[derive(Clone, Debug)]
pub struct Data {
    /// Where samples come from.
    pub source: Source,
    /// The `source` statement, for runtime data errors.
    pub source_span: Span,
    /// Fractions of the samples for each split.
    pub split: Split,
    /// Input scaling of `source` (see [`HeldOut::scale`]).
    pub scale: Option<f64>,
    /// How `source`'s samples are laid out (`layout: channels_last`).
    pub layout: Layout,
    /// The validation split's own source, when `split` names one instead of a fraction.
    pub val: Option<HeldOut>,
    /// The test split's own source, when `split` names one instead of a fraction.
    pub test: Option<HeldOut>,
    /// Global batch size.
    pub batch: u64,
    /// The `batch` statement, for out-of-memory reports.
    pub batch_span: Span,
    /// Whether an epoch leaves out its last, partial training batch (`drop_last`, false by
    /// default as in PyTorch's `DataLoader`).
    pub drop_last: bool,
    /// Samples per evaluation batch (`eval_batch`, the training `batch` by default).
    pub eval_batch: u64,
    /// Whether to reshuffle the training split every epoch.
    pub shuffle: bool,
    /// Per-channel (or scalar) normalisation of inputs.
    pub normalize: Option<Normalize>,
    /// What a target is.
    pub targets: Targets,
    /// The class label the loss ignores (its `ignore_index`), which the data may hold besides
    /// the classes.
    pub ignore_label: Option<i64>,
    /// The vocabulary of the model's first layer, an `embedding`, when a file source feeds it
    /// token ids: the runtime refuses ids outside `[0, vocab)`.
    pub token_vocab: Option<u64>,
    /// What `kiln check` read from the data files' headers; `None` for synthetic data and for
    /// files it could not read (absent here, or a loader that reads no data files).
    pub read: Option<ReadData>,
}

impl Data {
    /// The number of samples, when known: a synthetic source's `count`, or the count `kiln
    /// check` read from the files' headers (`None` when the files were not read, or when a CSV
    /// file is too large to count its rows).
    pub fn samples(&self) -> Option<u64> {
        match &self.source {
            Source::Synthetic { count, .. } => Some(*count),
            _ => self.read.as_ref().and_then(|r| r.samples),
        }
    }

    /// Optimizer steps in one epoch of `train` training samples: see [`steps_per_epoch`].
    pub fn steps_per_epoch(&self, train: u64) -> u64 {
        steps_per_epoch(train, self.batch, self.drop_last)
    }

    /// Whether there is a validation split: a fraction of `source`, or its own source.
    pub fn has_val(&self) -> bool {
        self.split.val > 0.0 || self.val.is_some()
    }
}

/// Batches in one epoch of `samples` samples in batches of `batch`: the last one partial, or
/// left out with `drop_last` (as PyTorch's `DataLoader`). The one count of an epoch's steps:
/// `kiln check`, `kiln run`, `kiln eval`, `kiln export` and the loader all read it.
pub fn steps_per_epoch(samples: u64, batch: u64, drop_last: bool) -> u64 {
    match batch {
        0 => 0,
        _ if drop_last => samples / batch,
        _ => samples.div_ceil(batch),
    }
}

/// A split's own source (`split(val: npy(...))`): all of its samples go to that split, in file
/// order.
#[derive(Clone, Debug)]
pub struct HeldOut {
    /// Where the samples come from.
    pub source: Source,
    /// The source's call, for runtime data errors.
    pub span: Span,
    /// What uint8 inputs are divided by as they are read (`scale: 255`); `None` keeps them
    /// (`scale: none`). By default 255 for IDX files and `None` for every other format.
    pub scale: Option<f64>,
    /// How its samples are laid out (`layout: channels_last`).
    pub layout: Layout,
}

/// What the checker read from the headers of a source's files.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadData {
    /// The number of samples; `None` when it is not known from a bounded read (a large CSV).
    pub samples: Option<u64>,
    /// The per-sample input shape as the file stores it (`[28, 28]` for MNIST).
    pub sample: Vec<u64>,
}

/// Fractions of the data given to each split (they sum to at most 1).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Split {
    /// Training fraction.
    pub train: f64,
    /// Validation fraction.
    pub val: f64,
    /// Test fraction.
    pub test: f64,
}

impl Split {
    /// Samples of `n` in each split, in order train, val, test: `floor(fraction x n)` each, no
    /// more than those left. The checker counts steps and the runtime splits with it.
    ///
    /// A relative tolerance of 1e-12 keeps `0.29 x 100` at 29 despite its rounding in binary.
    pub fn counts(&self, n: u64) -> (u64, u64, u64) {
        let count = |f: f64, left: u64| -> u64 {
            let c = (f.max(0.0) * n as f64 * (1.0 + 1e-12)).floor();
            (c as u64).min(left)
        };
        let train = count(self.train, n);
        let val = count(self.val, n - train);
        let test = count(self.test, n - train - val);
        (train, val, test)
    }
}

/// `(x - mean) / std`, per channel when lists are given.
#[derive(Clone, Debug, Serialize)]
pub struct Normalize {
    /// Means.
    pub mean: Vec<f64>,
    /// Standard deviations.
    pub std: Vec<f64>,
}

/// What the training targets are.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Targets {
    /// Class indices; the number of classes when known.
    Classes(Option<u64>),
    /// Real values of this per-sample shape.
    Values(Shape),
    /// Not known statically (a file source without `classes` or `shape`).
    Unknown,
    /// A class index per token: targets of per-sample shape `shape` (the inputs' shape), each
    /// one of `classes` classes when known; the model gives a score per class for each token,
    /// `[..shape, classes]`.
    Tokens {
        /// The number of classes, when known.
        classes: Option<u64>,
        /// The per-sample shape of the targets.
        shape: Shape,
    },
}

/// Where the samples come from.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Generated samples, as `torch.randn(count, *shape)`.
    Synthetic {
        /// Input generator.
        inputs: Generator,
        /// Target generator.
        targets: Generator,
        /// Number of samples.
        count: u64,
    },
    /// MNIST-format IDX files, optionally gzipped.
    Idx {
        /// Images file.
        images: String,
        /// Labels file.
        labels: String,
    },
    /// Two `.npy` arrays.
    Npy {
        /// Inputs array.
        inputs: String,
        /// Targets array.
        targets: String,
    },
    /// An `.npz` archive with two named arrays.
    Npz {
        /// The archive.
        path: String,
        /// Key of the inputs.
        inputs: String,
        /// Key of the targets.
        targets: String,
    },
    /// A CSV file with one target column.
    Csv {
        /// The file.
        path: String,
        /// The target column's name.
        target: String,
        /// Whether the first row is a header.
        header: bool,
    },
    /// A safetensors file with two named tensors.
    Safetensors {
        /// The file.
        path: String,
        /// Name of the inputs tensor.
        inputs: String,
        /// Name of the targets tensor.
        targets: String,
    },
}

/// A random generator of per-sample tensors.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Generator {
    /// Normal distribution.
    Normal {
        /// Per-sample shape.
        shape: Shape,
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
    /// Uniform distribution on `[low, high)`.
    Uniform {
        /// Per-sample shape.
        shape: Shape,
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// Uniform integers on `[0, high)`.
    Randint {
        /// Per-sample shape.
        shape: Shape,
        /// Exclusive upper bound.
        high: u64,
    },
    /// Classes computed from a sequence of `randint` inputs: one per sequence, or one per
    /// token for the per-token tasks.
    Task(SequenceTask),
}

/// Classes computed from a sequence of token ids `x[0..S)` in `[0, V)`: one per sequence, or
/// one per token (`copy`, `reverse`, `sort`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SequenceTask {
    /// The most frequent id, the smallest on ties (`V` classes; order-blind).
    Majority,
    /// The first id, `x[0]` (`V` classes; depends on order).
    First,
    /// The position of the largest id, the first on ties (`S` classes; depends on order).
    Argmax,
    /// Per token: the ids themselves, `y[i] = x[i]` (`V` classes per token).
    Copy,
    /// Per token: the ids in reverse order, `y[i] = x[S-1-i]` (`V` classes per token).
    Reverse,
    /// Per token: the ids sorted ascending, `y = sorted(x)` (`V` classes per token).
    Sort,
}

impl SequenceTask {
    /// Every task.
    pub const ALL: &'static [SequenceTask] = &[
        SequenceTask::Majority,
        SequenceTask::First,
        SequenceTask::Argmax,
        SequenceTask::Copy,
        SequenceTask::Reverse,
        SequenceTask::Sort,
    ];

    /// The task's word in the language, written as a call: `majority()`.
    pub fn name(self) -> &'static str {
        match self {
            SequenceTask::Majority => "majority",
            SequenceTask::First => "first",
            SequenceTask::Argmax => "argmax",
            SequenceTask::Copy => "copy",
            SequenceTask::Reverse => "reverse",
            SequenceTask::Sort => "sort",
        }
    }

    /// Whether the task gives a class per token (targets of the inputs' shape `[S]`) rather
    /// than one per sequence.
    pub fn per_token(self) -> bool {
        matches!(
            self,
            SequenceTask::Copy | SequenceTask::Reverse | SequenceTask::Sort
        )
    }

    /// The number of classes over sequences of `length` ids below `vocab`.
    pub fn classes(self, vocab: u64, length: u64) -> u64 {
        match self {
            SequenceTask::Majority
            | SequenceTask::First
            | SequenceTask::Copy
            | SequenceTask::Reverse
            | SequenceTask::Sort => vocab,
            SequenceTask::Argmax => length,
        }
    }
}

/// The per-sample shape of a class: a scalar.
static SCALAR: Shape = Shape(Vec::new());

impl Generator {
    /// The per-sample shape it generates; for a sequence task, a scalar (a per-token task's
    /// targets take the inputs' shape, which the task alone does not know).
    pub fn shape(&self) -> &Shape {
        match self {
            Generator::Normal { shape, .. }
            | Generator::Uniform { shape, .. }
            | Generator::Randint { shape, .. } => shape,
            Generator::Task(_) => &SCALAR,
        }
    }
}

/// The model: an input shape and a tree of layers.
#[derive(Clone, Debug)]
pub struct Model {
    /// Per-sample input shape.
    pub input: Shape,
    /// Input element type.
    pub input_dtype: DType,
    /// Layers, blocks and residual connections in order.
    pub nodes: Vec<Node>,
    /// Per-sample output shape.
    pub output: Shape,
}

/// One element of the model tree.
#[derive(Clone, Debug)]
pub enum Node {
    /// A layer.
    Layer(Layer),
    /// A named group of nodes.
    Block {
        /// The block's name.
        name: String,
        /// Its nodes.
        nodes: Vec<Node>,
        /// The `block` statement.
        span: Span,
    },
    /// `x + f(x)` over its nodes.
    Residual {
        /// The nodes computing `f`.
        nodes: Vec<Node>,
        /// The `residual` statement.
        span: Span,
    },
}

/// One checked layer.
#[derive(Clone, Debug)]
pub struct Layer {
    /// Qualified name (`encoder.fc1`, or `layer3` when unnamed).
    pub name: String,
    /// What it computes, with every size resolved.
    pub kind: LayerKind,
    /// Per-sample input shape.
    pub input: Shape,
    /// Per-sample output shape.
    pub output: Shape,
    /// Output element type.
    pub dtype: DType,
    /// Number of trainable parameters.
    pub params: u64,
    /// Forward FLOPs for one sample.
    pub flops: u64,
    /// Where it runs.
    pub device: Device,
    /// The layer's statement.
    pub span: Span,
}

/// How the work is spread.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Parallel {
    /// One device (or the placement, without model-parallel intent).
    None,
    /// One replica per listed device (a device listed twice holds two), the batch split
    /// between them.
    Data {
        /// The replicas' devices, replica 0 (which holds the optimizer) first.
        devices: Vec<Device>,
        /// The devices list or replica count, where a missing device points.
        #[serde(skip)]
        span: Span,
    },
    /// Layers on the devices they are placed on.
    Model,
    /// Consecutive stages on their own devices, fed micro-batches.
    Pipeline {
        /// Number of stages.
        stages: u64,
        /// Micro-batches per batch.
        micro_batches: u64,
        /// `gpipe` or `1f1b`.
        schedule: PipelineSchedule,
        /// The first top-level node of each stage.
        boundaries: Vec<usize>,
    },
    /// Several processes, one replica each, gradients averaged by c10d.
    #[serde(rename = "ddp")]
    Distributed {
        /// `gloo` or `nccl`.
        backend: Backend,
        /// Number of processes.
        world_size: u64,
        /// Seconds a rendezvous or a collective may wait for the other ranks (`timeout`, 60 by
        /// default). Not part of what the run computes, so a resume may change it.
        #[serde(skip)]
        timeout_s: u64,
        /// The `parallel` statement, where the runtime's distributed failures point.
        #[serde(skip)]
        span: Span,
    },
}

impl Parallel {
    /// How many replicas split the batch.
    pub fn data_parallel_size(&self) -> u64 {
        match self {
            Parallel::Data { devices, .. } => devices.len() as u64,
            Parallel::Distributed { world_size, .. } => *world_size,
            _ => 1,
        }
    }
}

/// Pipeline schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PipelineSchedule {
    /// All forwards, then all backwards.
    #[serde(rename = "gpipe")]
    GPipe,
    /// One forward, one backward, interleaved.
    #[serde(rename = "1f1b")]
    OneFOneB,
}

/// c10d backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Gloo (CPU and CUDA).
    Gloo,
    /// NCCL (CUDA only).
    Nccl,
}

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

/// Optimizers, with the hyper-parameters of their PyTorch namesakes.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    /// The algorithm.
    pub kind: OptimizerKind,
    /// Learning rate.
    pub lr: f64,
    /// L2 penalty (decoupled for AdamW).
    pub weight_decay: f64,
    /// The `optimizer` statement.
    pub span: Span,
    /// The learning rate's value, for NaN reports.
    pub lr_span: Span,
    /// Parameter groups with settings of their own, in the order written; a parameter in none
    /// of them takes the settings above.
    pub groups: Vec<ParamGroup>,
}

/// A parameter group: parameters chosen by layer, block and class, with their own settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParamGroup {
    /// The selectors as written (`biases`, `encoder`, `fc1.weight`).
    pub select: Vec<String>,
    /// The algorithm with the group's settings (the same algorithm as the optimizer's).
    pub kind: OptimizerKind,
    /// Learning rate, scaled by the schedule as the optimizer's is.
    pub lr: f64,
    /// L2 penalty (decoupled for AdamW).
    pub weight_decay: f64,
    /// The parameters it holds, by `state_dict` name, in the model's order.
    pub params: Vec<String>,
    /// Their number of scalars.
    pub count: u64,
    /// The group's `group(...)` call.
    #[serde(skip)]
    pub span: Span,
}

/// Optimizer algorithms.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Stochastic gradient descent.
    Sgd {
        /// Momentum factor.
        momentum: f64,
        /// Dampening for momentum.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// Adam.
    Adam {
        /// Betas.
        betas: (f64, f64),
        /// Epsilon.
        eps: f64,
        /// AMSGrad variant.
        amsgrad: bool,
    },
    /// AdamW (decoupled weight decay).
    AdamW {
        /// Betas.
        betas: (f64, f64),
        /// Epsilon.
        eps: f64,
        /// AMSGrad variant.
        amsgrad: bool,
    },
    /// RMSprop.
    RmsProp {
        /// Smoothing constant.
        alpha: f64,
        /// Epsilon.
        eps: f64,
        /// Momentum factor.
        momentum: f64,
        /// Centered variant.
        centered: bool,
    },
}

impl Optimizer {
    /// The optimizer's name in the language.
    pub fn name(&self) -> &'static str {
        match self.kind {
            OptimizerKind::Sgd { .. } => "sgd",
            OptimizerKind::Adam { .. } => "adam",
            OptimizerKind::AdamW { .. } => "adamw",
            OptimizerKind::RmsProp { .. } => "rmsprop",
        }
    }

    /// Bytes of optimizer state per fp32 parameter: the most any group keeps.
    pub fn state_bytes_per_param(&self) -> u64 {
        let groups = self.groups.iter().map(|g| state_bytes(&g.kind));
        groups.fold(state_bytes(&self.kind), u64::max)
    }
}

/// Bytes of optimizer state per fp32 parameter under `kind`.
fn state_bytes(kind: &OptimizerKind) -> u64 {
    match *kind {
        OptimizerKind::Sgd { momentum, .. } => {
            if momentum > 0.0 {
                4
            } else {
                0
            }
        }
        OptimizerKind::Adam { amsgrad, .. } | OptimizerKind::AdamW { amsgrad, .. } => {
            if amsgrad {
                12
            } else {
                8
            }
        }
        OptimizerKind::RmsProp {
            momentum, centered, ..
        } => 4 + if momentum > 0.0 { 4 } else { 0 } + if centered { 4 } else { 0 },
    }
}

/// Learning-rate schedules.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// The optimizer's rate throughout.
    Constant,
    /// Multiply by `gamma` every `every`.
    Step {
        /// Interval.
        every: Duration,
        /// Factor.
        gamma: f64,
    },
    /// Multiply by `gamma` every epoch.
    Exponential {
        /// Factor.
        gamma: f64,
    },
    /// Cosine decay to `min_lr`, after an optional linear warmup.
    Cosine {
        /// Warmup length.
        warmup: Option<Duration>,
        /// Final rate.
        min_lr: f64,
        /// The warmup's first factor of the rate (`LinearLR`'s `start_factor`); `None` for the
        /// default ramp `(step + 1) / warmup`.
        #[serde(skip_serializing_if = "Option::is_none")]
        start: Option<f64>,
    },
    /// Linear warmup, then constant.
    Warmup {
        /// Warmup length.
        length: Duration,
        /// The first factor of the rate (`LinearLR`'s `start_factor`); `None` for the default
        /// ramp `(step + 1) / length`.
        #[serde(skip_serializing_if = "Option::is_none")]
        start: Option<f64>,
    },
    /// One-cycle (`OneCycleLR`): warm up to `max_lr`, then anneal.
    OneCycle(OneCycle),
    /// Linear change of the rate's factor (`LinearLR`).
    Linear {
        /// The factor at the first step.
        start: f64,
        /// The factor reached after `length`.
        end: f64,
        /// How long the change lasts; `None` for the whole training.
        length: Option<Duration>,
    },
    /// `ReduceLROnPlateau`, fed by the validation evaluations.
    ReduceOnPlateau(Plateau),
    /// Schedules one after another (`SequentialLR`): schedule `i + 1` starts at milestone `i`.
    Sequence {
        /// The schedules.
        schedules: Vec<Schedule>,
        /// Where each schedule after the first starts.
        milestones: Vec<Duration>,
    },
}

/// The settings of `one_cycle`, as `torch.optim.lr_scheduler.OneCycleLR` names them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OneCycle {
    /// Peak rate.
    pub max_lr: f64,
    /// Fraction of training spent warming up.
    pub pct_start: f64,
    /// The first rate is `max_lr / div_factor`.
    pub div_factor: f64,
    /// The last rate is the first divided by `final_div_factor`.
    pub final_div_factor: f64,
    /// Whether the rate comes back down to the first rate before the final annealing.
    pub three_phase: bool,
    /// Cosine (`true`) or linear annealing.
    pub cosine: bool,
    /// The momentum (or Adam's beta1) range cycled inversely to the rate, as `(base, max)`;
    /// `None` when momentum is not cycled.
    pub momentum: Option<(f64, f64)>,
}

/// The settings of `reduce_on_plateau`, as `torch.optim.lr_scheduler.ReduceLROnPlateau` names
/// them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plateau {
    /// The validation metric watched.
    pub metric: PlateauMetric,
    /// Whether a larger metric is better.
    pub maximize: bool,
    /// The rate is multiplied by this on a plateau.
    pub factor: f64,
    /// Evaluations without improvement tolerated.
    pub patience: u64,
    /// The least improvement that counts.
    pub threshold: f64,
    /// Whether `threshold` is relative (`rel`) or absolute (`abs`).
    pub relative: bool,
    /// Evaluations to wait after a reduction before counting again.
    pub cooldown: u64,
    /// The rate never goes below this.
    pub min_lr: f64,
}

/// What `reduce_on_plateau` watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlateauMetric {
    /// The validation loss.
    ValLoss,
    /// The validation accuracy.
    ValAccuracy,
}

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

/// Every layer of a node tree, in order.
pub fn layers(nodes: &[Node]) -> Vec<&Layer> {
    fn walk<'a>(nodes: &'a [Node], out: &mut Vec<&'a Layer>) {
        for n in nodes {
            match n {
                Node::Layer(l) => out.push(l),
                Node::Block { nodes, .. } | Node::Residual { nodes, .. } => walk(nodes, out),
            }
        }
    }
    let mut out = Vec::new();
    walk(nodes, &mut out);
    out
}
