//! Layer kinds: [`Kind`], the word a file writes (`conv2d`), and [`LayerKind`], the checked layer
//! with every size resolved. Each `LayerKind` variant is exactly one `Kind`, so the checker, the
//! plan and the runtime all match on them exhaustively: a new kind that one of them forgets does
//! not compile.
//!
//! Each family's pure facts live in one file under `layer/`: its kinds' [`Spec`], the trainable
//! tensors with their shapes, the FLOPs, and how its sizes follow an input whose units changed
//! (structured pruning). The checker adds arguments, spans and diagnostics to them, the plan
//! costs and shrinks models with them, and the runtime adds the forward pass.

mod activation;
mod attention;
mod conv;
mod embedding;
mod facts;
mod linear;
mod memory;
mod norm;
mod pool;
mod positional;
mod shape;
mod spec;

pub use activation::Elementwise;
pub use facts::Weight;
pub use memory::{Keeps, Pass, Runs, Scores, Value};
pub use norm::LayerNorm;
pub use spec::{Fallback, Param, Spec};

use facts::count;

/// The layer kinds of the language, one per word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Linear,
    Conv1d,
    Conv2d,
    MaxPool1d,
    MaxPool2d,
    AvgPool1d,
    AvgPool2d,
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    LayerNorm,
    RmsNorm,
    GroupNorm,
    Dropout,
    /// An activation without parameters.
    Elementwise(Elementwise),
    LeakyRelu,
    Elu,
    Prelu,
    Softmax,
    LogSoftmax,
    Flatten,
    Reshape,
    Mean,
    Embedding,
    Positional,
    Sinusoidal,
    Attention,
    TransformerBlock,
}

impl Kind {
    /// Every kind, in the order the language reference lists them.
    pub const ALL: &'static [Kind] = &[
        Kind::Linear,
        Kind::Conv1d,
        Kind::Conv2d,
        Kind::MaxPool1d,
        Kind::MaxPool2d,
        Kind::AvgPool1d,
        Kind::AvgPool2d,
        Kind::AdaptiveAvgPool1d,
        Kind::AdaptiveAvgPool2d,
        Kind::BatchNorm1d,
        Kind::BatchNorm2d,
        Kind::LayerNorm,
        Kind::RmsNorm,
        Kind::GroupNorm,
        Kind::Dropout,
        Kind::Elementwise(Elementwise::Relu),
        Kind::LeakyRelu,
        Kind::Elu,
        Kind::Prelu,
        Kind::Elementwise(Elementwise::Gelu),
        Kind::Elementwise(Elementwise::Silu),
        Kind::Elementwise(Elementwise::Tanh),
        Kind::Elementwise(Elementwise::Sigmoid),
        Kind::Softmax,
        Kind::LogSoftmax,
        Kind::Flatten,
        Kind::Reshape,
        Kind::Mean,
        Kind::Embedding,
        Kind::Positional,
        Kind::Sinusoidal,
        Kind::Attention,
        Kind::TransformerBlock,
    ];

    /// The kind's word in the language.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Linear => "linear",
            Kind::Conv1d => "conv1d",
            Kind::Conv2d => "conv2d",
            Kind::MaxPool1d => "max_pool1d",
            Kind::MaxPool2d => "max_pool2d",
            Kind::AvgPool1d => "avg_pool1d",
            Kind::AvgPool2d => "avg_pool2d",
            Kind::AdaptiveAvgPool1d => "adaptive_avg_pool1d",
            Kind::AdaptiveAvgPool2d => "adaptive_avg_pool2d",
            Kind::BatchNorm1d => "batchnorm1d",
            Kind::BatchNorm2d => "batchnorm2d",
            Kind::LayerNorm => "layernorm",
            Kind::RmsNorm => "rmsnorm",
            Kind::GroupNorm => "groupnorm",
            Kind::Dropout => "dropout",
            Kind::Elementwise(e) => e.name(),
            Kind::LeakyRelu => "leaky_relu",
            Kind::Elu => "elu",
            Kind::Prelu => "prelu",
            Kind::Softmax => "softmax",
            Kind::LogSoftmax => "log_softmax",
            Kind::Flatten => "flatten",
            Kind::Reshape => "reshape",
            Kind::Mean => "mean",
            Kind::Embedding => "embedding",
            Kind::Positional => "positional",
            Kind::Sinusoidal => "sinusoidal",
            Kind::Attention => "attention",
            Kind::TransformerBlock => "transformer_block",
        }
    }

    /// The spatial dimensions after the channels of the one input rank this kind takes
    /// (`conv2d`'s `[C, H, W]`: 2), or `None` for kinds that take other inputs.
    pub fn spatial(self) -> Option<usize> {
        match self {
            Kind::Conv2d
            | Kind::MaxPool2d
            | Kind::AvgPool2d
            | Kind::BatchNorm2d
            | Kind::AdaptiveAvgPool2d => Some(2),
            Kind::Conv1d | Kind::MaxPool1d | Kind::AvgPool1d | Kind::AdaptiveAvgPool1d => Some(1),
            Kind::Linear
            | Kind::BatchNorm1d
            | Kind::LayerNorm
            | Kind::RmsNorm
            | Kind::GroupNorm
            | Kind::Dropout
            | Kind::Elementwise(_)
            | Kind::LeakyRelu
            | Kind::Elu
            | Kind::Prelu
            | Kind::Softmax
            | Kind::LogSoftmax
            | Kind::Flatten
            | Kind::Reshape
            | Kind::Mean
            | Kind::Embedding
            | Kind::Positional
            | Kind::Sinusoidal
            | Kind::Attention
            | Kind::TransformerBlock => None,
        }
    }

    /// The kind a word names, if any.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Layer kinds with every size resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum LayerKind {
    /// `y = x W^T + b` over the last dimension.
    Linear {
        inputs: i64,
        outputs: i64,
        bias: bool,
    },
    /// 1-D convolution over `[channels, length]`.
    Conv1d { conv: Conv },
    /// 2-D convolution over `[channels, height, width]`.
    Conv2d { conv: Conv },
    /// 1-D max pooling.
    MaxPool1d { pool: Pool },
    /// 2-D max pooling.
    MaxPool2d { pool: Pool },
    /// 1-D average pooling.
    AvgPool1d { pool: Pool },
    /// 2-D average pooling.
    AvgPool2d { pool: Pool },
    /// Adaptive 1-D average pooling to a fixed length.
    AdaptiveAvgPool1d { output: Vec<i64> },
    /// Adaptive 2-D average pooling to a fixed size.
    AdaptiveAvgPool2d { output: Vec<i64> },
    /// Batch normalisation over the channels of `[C]` or `[C, L]`.
    BatchNorm1d { norm: BatchNorm },
    /// Batch normalisation over the channels of `[C, H, W]`.
    BatchNorm2d { norm: BatchNorm },
    /// Layer normalisation over the trailing dimensions, or RMS normalisation (`rmsnorm`).
    LayerNorm { norm: LayerNorm },
    /// Group normalisation.
    GroupNorm {
        groups: i64,
        channels: i64,
        eps: f64,
    },
    /// Dropout with drop probability `p`.
    Dropout { p: f64 },
    /// An activation without parameters.
    Elementwise(Elementwise),
    /// Leaky ReLU: `x` above 0, `negative_slope * x` below.
    LeakyRelu { negative_slope: f64 },
    /// ELU: `x` above 0, `alpha * (exp(x) - 1)` below.
    Elu { alpha: f64 },
    /// PReLU: a leaky ReLU whose slope is learned, one per channel or one for all.
    Prelu { parameters: i64, init: f64 },
    /// Softmax along a per-sample dimension.
    Softmax { dim: i64 },
    /// Log-softmax along a per-sample dimension.
    LogSoftmax { dim: i64 },
    /// Flattens every per-sample dimension into one.
    Flatten,
    /// Reshapes each sample.
    Reshape { shape: Vec<i64> },
    /// Mean over one per-sample dimension.
    Mean { dim: i64 },
    /// Token embedding; ids equal to `pad` get a zero row that is not trained and are masked
    /// out of attention and of the mean over the sequence.
    Embedding {
        vocab: i64,
        dim: i64,
        pad: Option<i64>,
    },
    /// Positions added to `[sequence, width]`: a learned table of `max_len` rows, or the fixed
    /// sinusoids of Vaswani et al. when `learned` is false.
    Positional {
        max_len: i64,
        width: i64,
        learned: bool,
    },
    /// Multi-head self-attention over `[sequence, width]`.
    Attention {
        width: i64,
        heads: i64,
        dropout: f64,
        causal: bool,
        /// Local attention: a query attends only to keys fewer than this many positions away.
        window: Option<i64>,
    },
    /// Transformer block: attention and MLP, each residual, as `nn.TransformerEncoderLayer`.
    TransformerBlock {
        width: i64,
        heads: i64,
        hidden: i64,
        dropout: f64,
        causal: bool,
        /// Local attention, as in [`LayerKind::Attention`].
        window: Option<i64>,
        /// Where the layer norms stand, the MLP's activation, their eps and the biases.
        block: Block,
    },
}

impl LayerKind {
    /// The word of the language this layer was written with.
    pub fn kind(&self) -> Kind {
        match self {
            LayerKind::Linear { .. } => Kind::Linear,
            LayerKind::Conv1d { .. } => Kind::Conv1d,
            LayerKind::Conv2d { .. } => Kind::Conv2d,
            LayerKind::MaxPool1d { .. } => Kind::MaxPool1d,
            LayerKind::MaxPool2d { .. } => Kind::MaxPool2d,
            LayerKind::AvgPool1d { .. } => Kind::AvgPool1d,
            LayerKind::AvgPool2d { .. } => Kind::AvgPool2d,
            LayerKind::AdaptiveAvgPool1d { .. } => Kind::AdaptiveAvgPool1d,
            LayerKind::AdaptiveAvgPool2d { .. } => Kind::AdaptiveAvgPool2d,
            LayerKind::BatchNorm1d { .. } => Kind::BatchNorm1d,
            LayerKind::BatchNorm2d { .. } => Kind::BatchNorm2d,
            LayerKind::LayerNorm { norm } if norm.rms => Kind::RmsNorm,
            LayerKind::LayerNorm { .. } => Kind::LayerNorm,
            LayerKind::GroupNorm { .. } => Kind::GroupNorm,
            LayerKind::Dropout { .. } => Kind::Dropout,
            LayerKind::Elementwise(e) => Kind::Elementwise(*e),
            LayerKind::LeakyRelu { .. } => Kind::LeakyRelu,
            LayerKind::Elu { .. } => Kind::Elu,
            LayerKind::Prelu { .. } => Kind::Prelu,
            LayerKind::Softmax { .. } => Kind::Softmax,
            LayerKind::LogSoftmax { .. } => Kind::LogSoftmax,
            LayerKind::Flatten => Kind::Flatten,
            LayerKind::Reshape { .. } => Kind::Reshape,
            LayerKind::Mean { .. } => Kind::Mean,
            LayerKind::Embedding { .. } => Kind::Embedding,
            LayerKind::Positional { learned: true, .. } => Kind::Positional,
            LayerKind::Positional { learned: false, .. } => Kind::Sinusoidal,
            LayerKind::Attention { .. } => Kind::Attention,
            LayerKind::TransformerBlock { .. } => Kind::TransformerBlock,
        }
    }
}

/// Convolution sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// Input channels.
    pub inputs: i64,
    /// Output channels.
    pub outputs: i64,
    /// Kernel size per spatial dimension.
    pub kernel: Vec<i64>,
    /// Stride per spatial dimension.
    pub stride: Vec<i64>,
    /// Zero padding per spatial dimension.
    pub padding: Vec<i64>,
    /// Dilation per spatial dimension.
    pub dilation: Vec<i64>,
    /// Channel groups.
    pub groups: i64,
    /// Whether a bias is added.
    pub bias: bool,
}

/// Pooling sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Kernel per spatial dimension.
    pub kernel: Vec<i64>,
    /// Stride per spatial dimension.
    pub stride: Vec<i64>,
    /// Padding per spatial dimension.
    pub padding: Vec<i64>,
    /// Whether the output size rounds up (a last, partial window), as PyTorch's `ceil_mode`.
    pub ceil_mode: bool,
    /// Whether average pooling divides by the whole window, padding included (PyTorch's
    /// `count_include_pad`); max pooling ignores it.
    pub count_include_pad: bool,
}

/// Batch normalisation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNorm {
    /// Channels normalised.
    pub features: i64,
    /// Added to the variance.
    pub eps: f64,
    /// Running statistics' update factor.
    pub momentum: f64,
    /// Whether the layer has a learned `weight` and `bias`.
    pub affine: bool,
    /// Whether the layer keeps running statistics (used in evaluation); without them it
    /// normalises with the batch's statistics in evaluation too.
    pub track_running_stats: bool,
}

/// A transformer block's options, as `nn.TransformerEncoderLayer` names them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block {
    /// Layer norms before each sublayer (`norm_first=True`), or after each residual sum.
    pub norm_first: bool,
    /// The MLP's activation.
    pub activation: BlockActivation,
    /// The layer norms' eps (`layer_norm_eps`).
    pub eps: f64,
    /// Whether the projections, the MLP and the layer norms have biases.
    pub bias: bool,
}

/// The activation between a transformer block's two MLP layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockActivation {
    /// ReLU.
    Relu,
    /// GELU (exact, with erf).
    Gelu,
    /// SiLU.
    Silu,
    /// Hyperbolic tangent.
    Tanh,
}

impl BlockActivation {
    /// Every activation, as the language names them.
    pub const ALL: &'static [(&'static str, BlockActivation)] = &[
        ("gelu", BlockActivation::Gelu),
        ("relu", BlockActivation::Relu),
        ("silu", BlockActivation::Silu),
        ("tanh", BlockActivation::Tanh),
    ];
}

/// The spec of a layer kind.
pub fn spec(kind: Kind) -> &'static Spec {
    match kind {
        Kind::Linear => &linear::LINEAR,
        Kind::Conv1d => &conv::CONV1D,
        Kind::Conv2d => &conv::CONV2D,
        Kind::MaxPool1d => &pool::MAX_POOL1D,
        Kind::MaxPool2d => &pool::MAX_POOL2D,
        Kind::AvgPool1d => &pool::AVG_POOL1D,
        Kind::AvgPool2d => &pool::AVG_POOL2D,
        Kind::AdaptiveAvgPool1d => &pool::ADAPTIVE1D,
        Kind::AdaptiveAvgPool2d => &pool::ADAPTIVE2D,
        Kind::BatchNorm1d => &norm::BATCHNORM1D,
        Kind::BatchNorm2d => &norm::BATCHNORM2D,
        Kind::LayerNorm => &norm::LAYERNORM,
        Kind::RmsNorm => &norm::RMSNORM,
        Kind::GroupNorm => &norm::GROUPNORM,
        Kind::Dropout => &activation::DROPOUT,
        Kind::Elementwise(_) => &activation::PLAIN,
        Kind::LeakyRelu => &activation::LEAKY_RELU,
        Kind::Elu => &activation::ELU,
        Kind::Prelu => &activation::PRELU,
        Kind::Softmax | Kind::LogSoftmax => &shape::SOFTMAX,
        Kind::Flatten => &shape::FLATTEN,
        Kind::Reshape => &shape::RESHAPE,
        Kind::Mean => &shape::MEAN,
        Kind::Embedding => &embedding::EMBEDDING,
        Kind::Positional => &positional::POSITIONAL,
        Kind::Sinusoidal => &positional::SINUSOIDAL,
        Kind::Attention => &attention::ATTENTION,
        Kind::TransformerBlock => &attention::TRANSFORMER_BLOCK,
    }
}
