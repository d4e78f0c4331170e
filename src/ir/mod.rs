//! The typed experiment, below every other module: `check` produces it, `plan` costs it and the
//! runtime lowers it; it depends on nothing but spans. The checked experiment: a typed description with every value validated and every shape
//! inferred. The runtime lowers this, never the syntax tree. Spans are kept where a runtime
//! failure must point back into the `.exp` file.

use serde::Serialize;

use crate::span::Span;

mod compress;
mod data;
mod layer;
mod loss;
mod optim;
mod parallel;
mod params;
mod sample;
pub mod tensor;
mod train;

pub use compress::{Compression, Granularity, PruneMethod, PruneSchedule, QuantScheme, Target};
pub use data::{
    steps_per_epoch, Augment, Data, DataPlacement, Generator, HeldOut, Normalize, ReadData,
    SequenceTask, Source, Split, Targets,
};
pub use layer::{
    spec, BatchNorm, Block, BlockActivation, Conv, Elementwise, Fallback, Keeps, Kind, LayerKind,
    LayerNorm, Param, Pass, Pool, Runs, Scores, Spec, Value, Weight,
};
pub use loss::{Loss, Metric};
pub use optim::{OneCycle, Optimizer, OptimizerKind, ParamGroup, Plateau, PlateauMetric, Schedule};
pub use parallel::{rank_micro_batches, ParallelPlan, Parallelism, Ranks};
pub use params::{tensors, Tensor, CLASSES};
pub use sample::{
    count_fit, input_fit, sample_fit, target_fit, CountMisfit, InputMisfit, Layout, SampleFit,
    TargetMisfit,
};
pub use train::{Checkpoint, EarlyStop, Precision, Train};

/// A per-sample tensor shape (the batch dimension is implicit), printed as `[16, 14, 14]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<i64>);

impl Shape {
    /// The number of values one sample holds (saturating, so absurd sizes never wrap).
    pub fn numel(&self) -> i64 {
        numel(&self.0)
    }
}

/// The number of values a shape holds (saturating, so absurd sizes never wrap).
pub fn numel(shape: &[i64]) -> i64 {
    shape.iter().fold(1i64, |n, d| n.saturating_mul(*d))
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
        /// `recompute`, when the block's activations are recomputed in backward.
        recompute: Option<Span>,
    },
    /// `x + f(x)` over its nodes.
    Residual {
        /// The nodes computing `f`.
        nodes: Vec<Node>,
        /// The `residual` statement.
        span: Span,
        /// `recompute`, when the residual's activations are recomputed in backward.
        recompute: Option<Span>,
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
    /// `recompute`, when the layer's activations are recomputed in backward.
    pub recompute: Option<Span>,
}

impl Layer {
    /// Whether it applies dropout in training.
    pub fn drops(&self) -> bool {
        match self.kind {
            LayerKind::Dropout { p } => p > 0.0,
            LayerKind::Attention { dropout, .. } | LayerKind::TransformerBlock { dropout, .. } => {
                dropout > 0.0
            }
            _ => false,
        }
    }

    /// Whether it normalises by the statistics of the rows it is given (batch norm in
    /// training).
    pub fn batch_statistics(&self) -> bool {
        matches!(
            self.kind,
            LayerKind::BatchNorm1d { .. } | LayerKind::BatchNorm2d { .. }
        )
    }
}

/// Whether training `e` depends on how a batch's rows are split between processes, beyond
/// rounding: batch norm (each process normalises by its rows' statistics), or dropout whose
/// masks are not placed by the rows of the batch: Kiln draws fp32 masks on the CPU by each
/// element's place in the step's batch, the same however the batch is cut; libtorch's dropout
/// (on CUDA, or on bf16/fp16 activations) draws each process's masks from its own generator.
pub fn split_matters(e: &Experiment) -> bool {
    let placed = e.train.precision == Precision::Fp32;
    layers(&e.model.nodes)
        .iter()
        .any(|l| l.batch_statistics() || (l.drops() && !(placed && l.device == Device::Cpu)))
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
    /// Several processes over a mesh of `world_size` ranks: `tensor` ranks split each layer
    /// that tensor parallel splits ([`tensor`]), and the `world_size / tensor` groups of them
    /// replicate the model (`ddp`, gradients summed by c10d) or shard it (`fsdp`).
    #[serde(rename = "ddp")]
    Distributed {
        /// `gloo` or `nccl`.
        backend: Backend,
        /// Number of processes: the product of the mesh's degrees.
        world_size: u64,
        /// The tensor-parallel degree (1: none). Ranks `t·k .. t·k + t - 1` are one tensor
        /// group, consecutive as torchrun numbers a machine's local ranks, so that the group
        /// stays inside a machine.
        #[serde(skip_serializing_if = "is_one")]
        tensor: u64,
        /// Seconds a rendezvous or a collective may wait for the other ranks (`timeout`, 60 by
        /// default). Not part of what the run computes, so a resume may change it.
        #[serde(skip)]
        timeout_s: u64,
        /// The `parallel` statement, where the runtime's distributed failures point.
        #[serde(skip)]
        span: Span,
        /// `fsdp`: how the ranks shard the model; `None` for `ddp`, where each holds all of it.
        #[serde(skip_serializing_if = "Option::is_none")]
        sharding: Option<Sharding>,
    },
}

/// How the ranks of `parallel fsdp` shard the model: each rank holds 1/N of every parameter, of
/// its gradient and of its optimizer state, and gathers a unit's parameters (a top-level block,
/// or the model's other layers together) while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sharding {
    /// Whether a block's gathered parameters are freed after its forward pass and gathered
    /// again for its backward pass (`true`, ZeRO-3), or kept until the step's backward pass
    /// ends (`false`, ZeRO-2).
    pub reshard_after_forward: bool,
}

impl Parallel {
    /// How many replicas split the batch.
    pub fn data_parallel_size(&self) -> u64 {
        match self {
            Parallel::Data { devices, .. } => devices.len() as u64,
            Parallel::Distributed {
                world_size, tensor, ..
            } => world_size / tensor.max(&1),
            Parallel::None | Parallel::Model | Parallel::Pipeline { .. } => 1,
        }
    }

    /// The tensor-parallel degree: 1 unless a mesh names one.
    pub fn tensor_degree(&self) -> u64 {
        match self {
            Parallel::Distributed { tensor, .. } => *tensor,
            Parallel::None
            | Parallel::Model
            | Parallel::Data { .. }
            | Parallel::Pipeline { .. } => 1,
        }
    }
}

/// Whether a degree is 1 (left out of the serialised strategy).
fn is_one(n: &u64) -> bool {
    *n == 1
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
