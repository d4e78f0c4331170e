//! The layer parity table: each case is a few lines of a `.exp` model block and the PyTorch
//! modules that compute the same thing, named as Kiln names the layers (`l: linear(...)` is
//! `("l", "nn.Linear(...)")`, so both have the weight `l.weight`). `reference.py` evaluates the
//! PyTorch expressions; `SelfAttention`, `TransformerBlock`, `EncoderLayer` (PyTorch's own
//! `nn.TransformerEncoderLayer`), `Reshape` and `Mean` are defined there. Layers without
//! parameters get any name on the PyTorch side.

/// Training or evaluation behaviour (dropout, batch statistics).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// `model.train()`.
    Train,
    /// `model.eval()`.
    Eval,
}

/// A case's per-sample input.
pub enum Input {
    /// Normal floats of this shape.
    Float(&'static [i64]),
    /// Integer ids of this shape in `[0, high)`.
    Int(&'static [i64], u64),
}

/// One model, compared in each of its modes and precisions.
pub struct Case {
    /// The layer kind under test, as the language spells it.
    pub kind: &'static str,
    /// What this case of the kind covers.
    pub label: &'static str,
    /// The per-sample input.
    pub input: Input,
    /// Samples per batch.
    pub batch: i64,
    /// The layers of the `.exp` model block, one per line.
    pub exp: &'static str,
    /// The PyTorch modules, in order, as (name, Python expression).
    pub torch: Vec<(&'static str, &'static str)>,
    /// The modes compared: training only where the two behave the same.
    pub modes: &'static [Mode],
    /// The precisions compared: `false` for fp32, `true` for bf16.
    pub precisions: &'static [bool],
}

const TRAIN: &[Mode] = &[Mode::Train];
const BOTH: &[Mode] = &[Mode::Train, Mode::Eval];
const FP32: &[bool] = &[false];
const FP32_BF16: &[bool] = &[false, true];

/// A case in training mode and fp32, on a batch of 4.
fn case(
    kind: &'static str,
    label: &'static str,
    input: Input,
    exp: &'static str,
    torch: &[(&'static str, &'static str)],
) -> Case {
    Case {
        kind,
        label,
        input,
        batch: 4,
        exp,
        torch: torch.to_vec(),
        modes: TRAIN,
        precisions: FP32,
    }
}

impl Case {
    /// Compared in training and in evaluation mode.
    fn both_modes(mut self) -> Case {
        self.modes = BOTH;
        self
    }

    /// Compared in fp32 and under bf16 mixed precision.
    fn bf16(mut self) -> Case {
        self.precisions = FP32_BF16;
        self
    }

    fn batch(mut self, batch: i64) -> Case {
        self.batch = batch;
        self
    }
}

/// Every case: each layer kind alone (its variants: bias, strides, groups, causal masks), and
/// chains that put normalisations and softmax between matrix products, where bf16 mixed
/// precision changes what they receive.
pub fn cases() -> Vec<Case> {
    use Input::{Float, Int};
    let mut cases = vec![
        case("linear", "bias", Float(&[16]), "l: linear(16 -> 8)", &[("l", "nn.Linear(16, 8)")]).bf16(),
        case("linear", "no-bias-3d", Float(&[5, 16]), "l: linear(8, bias: false)", &[("l", "nn.Linear(16, 8, bias=False)")]).bf16(),
        case("conv1d", "plain", Float(&[3, 20]), "l: conv1d(3 -> 6, 3)", &[("l", "nn.Conv1d(3, 6, 3)")]).bf16(),
        case(
            "conv1d",
            "stride-padding-dilation-groups",
            Float(&[4, 21]),
            "l: conv1d(4 -> 6, 3, stride: 2, padding: 2, dilation: 2, groups: 2)",
            &[("l", "nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)")],
        )
        .bf16(),
        case(
            "conv1d",
            "depthwise-no-bias",
            Float(&[4, 12]),
            "l: conv1d(4 -> 4, 5, padding: 2, groups: 4, bias: false)",
            &[("l", "nn.Conv1d(4, 4, 5, padding=2, groups=4, bias=False)")],
        ),
        case("conv2d", "plain", Float(&[3, 9, 9]), "l: conv2d(3 -> 5, 3, padding: 1)", &[("l", "nn.Conv2d(3, 5, 3, padding=1)")]).bf16(),
        case(
            "conv2d",
            "rectangular-strided-dilated-grouped",
            Float(&[4, 10, 11]),
            "l: conv2d(4 -> 6, [3, 2], stride: [2, 1], padding: [1, 0], dilation: [1, 2], groups: 2, bias: false)",
            &[("l", "nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2, bias=False)")],
        )
        .bf16(),
        case("max_pool1d", "padded", Float(&[3, 17]), "max_pool1d(3, stride: 2, padding: 1)", &[("p", "nn.MaxPool1d(3, stride=2, padding=1)")]),
        case("max_pool2d", "plain", Float(&[2, 8, 8]), "max_pool2d(2)", &[("p", "nn.MaxPool2d(2)")]),
        case(
            "max_pool2d",
            "rectangular-padded",
            Float(&[2, 9, 10]),
            "max_pool2d([3, 2], stride: [2, 2], padding: [1, 0])",
            &[("p", "nn.MaxPool2d((3, 2), stride=(2, 2), padding=(1, 0))")],
        ),
        case("avg_pool1d", "padded", Float(&[3, 17]), "avg_pool1d(4, stride: 3, padding: 2)", &[("p", "nn.AvgPool1d(4, stride=3, padding=2)")]),
        case("avg_pool2d", "padded", Float(&[2, 9, 10]), "avg_pool2d(3, stride: 2, padding: 1)", &[("p", "nn.AvgPool2d(3, stride=2, padding=1)")]),
        case("adaptive_avg_pool1d", "overlapping", Float(&[3, 17]), "adaptive_avg_pool1d(5)", &[("p", "nn.AdaptiveAvgPool1d(5)")]),
        case("adaptive_avg_pool2d", "rectangular", Float(&[2, 9, 10]), "adaptive_avg_pool2d([4, 3])", &[("p", "nn.AdaptiveAvgPool2d((4, 3))")]),
        case("batchnorm1d", "features", Float(&[6]), "l: batchnorm1d", &[("l", "nn.BatchNorm1d(6)")]).both_modes().batch(8),
        case(
            "batchnorm1d",
            "channels-length-eps-momentum",
            Float(&[6, 7]),
            "l: batchnorm1d(6, eps: 1e-3, momentum: 0.3)",
            &[("l", "nn.BatchNorm1d(6, eps=1e-3, momentum=0.3)")],
        )
        .both_modes(),
        case("batchnorm2d", "plain", Float(&[4, 5, 6]), "l: batchnorm2d", &[("l", "nn.BatchNorm2d(4)")]).both_modes(),
        case("layernorm", "last-dim", Float(&[5, 8]), "l: layernorm", &[("l", "nn.LayerNorm(8)")]),
        case("layernorm", "two-dims-eps", Float(&[5, 8]), "l: layernorm([5, 8], eps: 1e-3)", &[("l", "nn.LayerNorm([5, 8], eps=1e-3)")]),
        case("groupnorm", "channels-length", Float(&[6, 7]), "l: groupnorm(3)", &[("l", "nn.GroupNorm(3, 6)")]),
        case("groupnorm", "images-eps", Float(&[4, 5, 5]), "l: groupnorm(2, eps: 1e-3)", &[("l", "nn.GroupNorm(2, 4, eps=1e-3)")]),
        case("dropout", "p-0.3", Float(&[256]), "dropout(0.3)", &[("d", "Dropout(0.3)")]).both_modes().batch(8),
        case("relu", "plain", Float(&[5, 8]), "relu", &[("a", "nn.ReLU()")]),
        case("gelu", "plain", Float(&[5, 8]), "gelu", &[("a", "nn.GELU()")]),
        case("silu", "plain", Float(&[5, 8]), "silu", &[("a", "nn.SiLU()")]),
        case("tanh", "plain", Float(&[5, 8]), "tanh", &[("a", "nn.Tanh()")]),
        case("sigmoid", "plain", Float(&[5, 8]), "sigmoid", &[("a", "nn.Sigmoid()")]),
        case("leaky_relu", "default", Float(&[5, 8]), "leaky_relu", &[("a", "nn.LeakyReLU()")]),
        case("leaky_relu", "slope", Float(&[5, 8]), "leaky_relu(negative_slope: 0.2)", &[("a", "nn.LeakyReLU(0.2)")]),
        case("elu", "default", Float(&[5, 8]), "elu", &[("a", "nn.ELU()")]),
        case("elu", "alpha", Float(&[5, 8]), "elu(alpha: 0.5)", &[("a", "nn.ELU(alpha=0.5)")]),
        case("prelu", "shared", Float(&[5, 8]), "l: prelu", &[("l", "nn.PReLU()")]),
        case(
            "prelu",
            "per-channel",
            Float(&[4, 6]),
            "l: prelu(num_parameters: 4, init: 0.1)",
            &[("l", "nn.PReLU(4, init=0.1)")],
        )
        .bf16(),
        case("softmax", "last-dim", Float(&[5, 8]), "softmax", &[("s", "nn.Softmax(dim=-1)")]),
        case("softmax", "first-dim", Float(&[5, 8]), "softmax(dim: 0)", &[("s", "nn.Softmax(dim=1)")]),
        case("log_softmax", "last-dim", Float(&[5, 8]), "log_softmax", &[("s", "nn.LogSoftmax(dim=-1)")]),
        case("log_softmax", "first-dim", Float(&[5, 8]), "log_softmax(0)", &[("s", "nn.LogSoftmax(dim=1)")]),
        case("flatten", "plain", Float(&[2, 3, 4]), "flatten", &[("f", "nn.Flatten()")]),
        case("reshape", "with-minus-one", Float(&[4, 6]), "reshape([3, -1, 2])", &[("r", "Reshape(3, -1, 2)")]),
        case("mean", "first-dim", Float(&[4, 6]), "mean(0)", &[("m", "Mean(0)")]),
        case("mean", "last-dim", Float(&[4, 6, 3]), "mean(-1)", &[("m", "Mean(-1)")]),
        case("embedding", "sequence", Int(&[7], 20), "l: embedding(20, 8)", &[("l", "nn.Embedding(20, 8)")]),
        case("embedding", "grid", Int(&[3, 4], 11), "l: embedding(11, 5)", &[("l", "nn.Embedding(11, 5)")]),
        case("attention", "plain", Float(&[6, 8]), "l: attention(2)", &[("l", "SelfAttention(8, 2)")]).bf16(),
        case("attention", "causal", Float(&[6, 8]), "l: attention(4, causal: true)", &[("l", "SelfAttention(8, 4, causal=True)")]).bf16(),
        case("attention", "dropout", Float(&[6, 8]), "l: attention(2, dropout: 0.2)", &[("l", "SelfAttention(8, 2, dropout=0.2)")]).both_modes(),
        case(
            "transformer_block",
            "no-dropout",
            Float(&[6, 8]),
            "l: transformer_block(2, hidden: 16, dropout: 0)",
            &[("l", "TransformerBlock(8, 2, 16, dropout=0.0)")],
        )
        .bf16(),
        case(
            "transformer_block",
            "causal-dropout",
            Float(&[6, 8]),
            "l: transformer_block(2, causal: true)",
            &[("l", "TransformerBlock(8, 2, 32, dropout=0.1, causal=True)")],
        )
        .both_modes()
        .bf16(),
        // Chains: what a normalisation or softmax receives from a bf16 matrix product. A product
        // feeding a batch norm has no bias: in training mode its gradient is zero in exact
        // arithmetic, so its computed value is rounding noise that no relative bound can judge.
        // And no max pool follows a norm: Kiln's fp32 norm output and autocast's bf16 one can
        // order two near-equal values differently, and the pool then routes a gradient to
        // another element (a 6% difference in the input gradient, for the same arithmetic).
        case(
            "layernorm",
            "between-linears",
            Float(&[16]),
            "a: linear(16 -> 32)\nl: layernorm\ngelu\nb: linear(8)",
            &[("a", "nn.Linear(16, 32)"), ("l", "nn.LayerNorm(32)"), ("g", "nn.GELU()"), ("b", "nn.Linear(32, 8)")],
        )
        .bf16(),
        case(
            "batchnorm1d",
            "between-linears",
            Float(&[16]),
            "a: linear(16 -> 8, bias: false)\nl: batchnorm1d\ntanh\nb: linear(4)",
            &[("a", "nn.Linear(16, 8, bias=False)"), ("l", "nn.BatchNorm1d(8)"), ("t", "nn.Tanh()"), ("b", "nn.Linear(8, 4)")],
        )
        .both_modes()
        .bf16()
        .batch(8),
        case(
            "batchnorm2d",
            "between-convolutions",
            Float(&[3, 10, 10]),
            "a: conv2d(3 -> 4, 3, bias: false)\nl: batchnorm2d\nrelu\navg_pool2d(2)\nb: conv2d(4 -> 4, 3)",
            &[
                ("a", "nn.Conv2d(3, 4, 3, bias=False)"),
                ("l", "nn.BatchNorm2d(4)"),
                ("r", "nn.ReLU()"),
                ("p", "nn.AvgPool2d(2)"),
                ("b", "nn.Conv2d(4, 4, 3)"),
            ],
        )
        .both_modes()
        .bf16(),
        case(
            "groupnorm",
            "between-convolutions",
            Float(&[3, 16]),
            "a: conv1d(3 -> 4, 3)\nl: groupnorm(2)\nsilu\navg_pool1d(2)\nb: conv1d(4 -> 2, 3)",
            &[
                ("a", "nn.Conv1d(3, 4, 3)"),
                ("l", "nn.GroupNorm(2, 4)"),
                ("s", "nn.SiLU()"),
                ("p", "nn.AvgPool1d(2)"),
                ("b", "nn.Conv1d(4, 2, 3)"),
            ],
        )
        .bf16(),
        case(
            "softmax",
            "between-linears",
            Float(&[16]),
            "a: linear(16 -> 8)\nsoftmax\nb: linear(4)",
            &[("a", "nn.Linear(16, 8)"), ("s", "nn.Softmax(dim=-1)"), ("b", "nn.Linear(8, 4)")],
        )
        .bf16(),
        case(
            "log_softmax",
            "between-linears",
            Float(&[16]),
            "a: linear(16 -> 8)\nlog_softmax\nsigmoid\nb: linear(4)",
            &[("a", "nn.Linear(16, 8)"), ("s", "nn.LogSoftmax(dim=-1)"), ("g", "nn.Sigmoid()"), ("b", "nn.Linear(8, 4)")],
        )
        .bf16(),
        case(
            "embedding",
            "mean-linear",
            Int(&[7], 20),
            "e: embedding(20, 8)\nmean(0)\nb: linear(4)",
            &[("e", "nn.Embedding(20, 8)"), ("m", "Mean(0)"), ("b", "nn.Linear(8, 4)")],
        )
        .bf16(),
    ];
    cases.extend(options());
    cases.extend(masks());
    cases.extend(rms());
    cases
}

/// The layer options PyTorch users set: pooling's `ceil_mode` and `count_include_pad`, batch
/// norm without `affine` weights or running statistics, and the transformer block's `norm`,
/// `activation`, `eps` and `bias` (against `nn.TransformerEncoderLayer` itself where no dropout
/// is drawn), then positions and padding masks. They come after the other cases, so that those
/// keep their seeds.
fn options() -> Vec<Case> {
    use Input::{Float, Int};
    vec![
        case("max_pool1d", "ceil-mode", Float(&[3, 16]), "max_pool1d(3, stride: 2, padding: 1, ceil_mode: true)", &[("p", "nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True)")]).both_modes(),
        case(
            "max_pool2d",
            "ceil-mode-rectangular",
            Float(&[2, 9, 10]),
            "max_pool2d([3, 2], stride: [2, 3], ceil_mode: true)",
            &[("p", "nn.MaxPool2d((3, 2), stride=(2, 3), ceil_mode=True)")],
        )
        .both_modes(),
        case(
            "avg_pool1d",
            "ceil-mode-exclude-pad",
            Float(&[3, 16]),
            "avg_pool1d(4, stride: 3, padding: 2, ceil_mode: true, count_include_pad: false)",
            &[("p", "nn.AvgPool1d(4, stride=3, padding=2, ceil_mode=True, count_include_pad=False)")],
        )
        .both_modes(),
        case(
            "avg_pool1d",
            "ceil-mode-include-pad",
            Float(&[3, 16]),
            "avg_pool1d(4, stride: 3, padding: 2, ceil_mode: true)",
            &[("p", "nn.AvgPool1d(4, stride=3, padding=2, ceil_mode=True)")],
        ),
        case(
            "avg_pool2d",
            "exclude-pad",
            Float(&[2, 9, 10]),
            "avg_pool2d(3, stride: 2, padding: 1, count_include_pad: false)",
            &[("p", "nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)")],
        )
        .both_modes(),
        case(
            "avg_pool2d",
            "ceil-mode-exclude-pad",
            Float(&[2, 8, 11]),
            "avg_pool2d([3, 2], stride: [2, 3], padding: [1, 1], ceil_mode: true, count_include_pad: false)",
            &[("p", "nn.AvgPool2d((3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True, count_include_pad=False)")],
        )
        .both_modes(),
        case("batchnorm1d", "no-affine", Float(&[6, 7]), "l: batchnorm1d(affine: false)", &[("l", "nn.BatchNorm1d(6, affine=False)")]).both_modes(),
        case(
            "batchnorm1d",
            "batch-statistics-only",
            Float(&[6]),
            "l: batchnorm1d(track_running_stats: false)",
            &[("l", "nn.BatchNorm1d(6, track_running_stats=False)")],
        )
        .both_modes()
        .batch(8),
        case(
            "batchnorm2d",
            "neither",
            Float(&[4, 5, 6]),
            "l: batchnorm2d(eps: 1e-3, affine: false, track_running_stats: false)",
            &[("l", "nn.BatchNorm2d(4, eps=1e-3, affine=False, track_running_stats=False)")],
        )
        .both_modes(),
        case(
            "batchnorm2d",
            "no-affine-momentum",
            Float(&[4, 5, 6]),
            "l: batchnorm2d(momentum: 0.5, affine: false)",
            &[("l", "nn.BatchNorm2d(4, momentum=0.5, affine=False)")],
        )
        .both_modes(),
        case(
            "transformer_block",
            "post-relu-eps-no-bias-dropout",
            Float(&[6, 8]),
            "l: transformer_block(2, hidden: 16, norm: post, activation: relu, eps: 1e-6, bias: false)",
            &[("l", "TransformerBlock(8, 2, 16, dropout=0.1, norm='post', activation='relu', eps=1e-6, bias=False)")],
        )
        .both_modes()
        .bf16(),
        case(
            "transformer_block",
            "pytorch-post-relu-eps-no-bias",
            Float(&[6, 8]),
            "l: transformer_block(2, hidden: 16, dropout: 0, norm: post, activation: relu, eps: 1e-6, bias: false)",
            &[("l", "EncoderLayer(8, 2, 16, dropout=0.0, activation='relu', layer_norm_eps=1e-6, bias=False)")],
        )
        .both_modes(),
        case(
            "transformer_block",
            "post-gelu-causal",
            Float(&[6, 8]),
            "l: transformer_block(2, hidden: 16, dropout: 0, causal: true, norm: post)",
            &[("l", "TransformerBlock(8, 2, 16, dropout=0.0, causal=True, norm='post')")],
        )
        .both_modes(),
        case(
            "transformer_block",
            "pytorch-pre-silu",
            Float(&[6, 8]),
            "l: transformer_block(4, hidden: 12, dropout: 0, activation: silu, eps: 1e-4)",
            &[("l", "EncoderLayer(8, 4, 12, dropout=0.0, activation=F.silu, layer_norm_eps=1e-4, norm_first=True)")],
        )
        .both_modes(),
        case(
            "transformer_block",
            "pre-tanh-no-bias",
            Float(&[6, 8]),
            "l: transformer_block(2, hidden: 16, activation: tanh, bias: false)",
            &[("l", "TransformerBlock(8, 2, 16, activation='tanh', bias=False)")],
        )
        .both_modes(),
        // Positions and padding, appended so that the cases above keep their seeds.
        case("embedding", "pad", Int(&[7], 5), "l: embedding(5, 8, pad: 0)", &[("l", "nn.Embedding(5, 8, padding_idx=0)")]),
        case("positional", "learned", Float(&[6, 8]), "l: positional(max_len: 10)", &[("l", "Positional(10, 8)")]).bf16(),
        case("sinusoidal", "plain", Float(&[6, 8]), "sinusoidal", &[("p", "Sinusoidal(8)")]),
        // Padding masks: ids equal to the embedding's `pad` are keys that no query attends to,
        // as `key_padding_mask` and `src_key_padding_mask` make them, and `mean(0)` skips them.
        case(
            "attention",
            "padding-mask",
            Int(&[6], 5),
            "e: embedding(5, 8, pad: 0)\nl: attention(2)",
            &[("e", "nn.Embedding(5, 8, padding_idx=0)"), ("l", "SelfAttention(8, 2)")],
        ),
        case(
            "transformer_block",
            "padding-mask-mean",
            Int(&[6], 5),
            "e: embedding(5, 8, pad: 0)\np: positional(max_len: 6)\nl: transformer_block(2, hidden: 16, dropout: 0)\nmean(0)\nb: linear(3)",
            &[
                ("e", "nn.Embedding(5, 8, padding_idx=0)"),
                ("p", "Positional(6, 8)"),
                ("l", "nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation='gelu', norm_first=True, batch_first=True)"),
                ("m", "Mean(0)"),
                ("b", "nn.Linear(8, 3)"),
            ],
        ),
    ]
}

/// Local attention: `window: K` is the boolean `attn_mask` of `|i - j| >= K` (with `causal`,
/// also `j > i`), combined with the padding mask. With ids in [0, 3) and pad 0, some queries
/// have only padding within their window: PyTorch's attention gives them zeros (then the output
/// projection's bias), and so does Kiln.
fn masks() -> Vec<Case> {
    use Input::{Float, Int};
    vec![
        case("attention", "window", Float(&[7, 8]), "l: attention(2, window: 3)", &[("l", "SelfAttention(8, 2, window=3)")]).both_modes().bf16(),
        case(
            "attention",
            "window-causal-dropout",
            Float(&[7, 8]),
            "l: attention(2, dropout: 0.2, causal: true, window: 2)",
            &[("l", "SelfAttention(8, 2, dropout=0.2, causal=True, window=2)")],
        )
        .both_modes(),
        case(
            "attention",
            "window-padding",
            Int(&[8], 3),
            "e: embedding(3, 8, pad: 0)\nl: attention(2, window: 2)",
            &[("e", "nn.Embedding(3, 8, padding_idx=0)"), ("l", "SelfAttention(8, 2, window=2)")],
        )
        .both_modes(),
        case(
            "attention",
            "window-causal-padding",
            Int(&[8], 3),
            "e: embedding(3, 8, pad: 0)\nl: attention(4, causal: true, window: 2)",
            &[("e", "nn.Embedding(3, 8, padding_idx=0)"), ("l", "SelfAttention(8, 4, causal=True, window=2)")],
        )
        .both_modes(),
        case(
            "transformer_block",
            "window-dropout",
            Float(&[7, 8]),
            "l: transformer_block(2, hidden: 16, window: 3)",
            &[("l", "TransformerBlock(8, 2, 16, window=3)")],
        )
        .both_modes()
        .bf16(),
        case(
            "transformer_block",
            "pytorch-window",
            Float(&[7, 8]),
            "l: transformer_block(2, hidden: 16, dropout: 0, norm: post, window: 2)",
            &[("l", "LocalEncoderLayer(8, 2, 16, 2, dropout=0.0, activation='gelu')")],
        )
        .both_modes(),
        case(
            "transformer_block",
            "pytorch-window-causal-padding-mean",
            Int(&[8], 3),
            "e: embedding(3, 8, pad: 0)\nl: transformer_block(2, hidden: 16, dropout: 0, causal: true, window: 2)\nmean(0)\nb: linear(3)",
            &[
                ("e", "nn.Embedding(3, 8, padding_idx=0)"),
                ("l", "LocalEncoderLayer(8, 2, 16, 2, causal=True, dropout=0.0, activation='gelu', norm_first=True)"),
                ("m", "Mean(0)"),
                ("b", "nn.Linear(8, 3)"),
            ],
        )
        .both_modes(),
    ]
}

/// `rmsnorm` against `nn.RMSNorm` (PyTorch's default eps when none is given; autocast leaves
/// it in its input's type), alone and between linears, where bf16 reaches it; and `silu`
/// between linears in bf16.
fn rms() -> Vec<Case> {
    use Input::Float;
    vec![
        case(
            "rmsnorm",
            "last-dim",
            Float(&[5, 8]),
            "l: rmsnorm",
            &[("l", "nn.RMSNorm(8)")],
        )
        .bf16(),
        case(
            "rmsnorm",
            "two-dims-eps",
            Float(&[5, 8]),
            "l: rmsnorm([5, 8], eps: 1e-3)",
            &[("l", "nn.RMSNorm([5, 8], eps=1e-3)")],
        ),
        case(
            "rmsnorm",
            "between-linears",
            Float(&[16]),
            "a: linear(16 -> 8)\nl: rmsnorm\nb: linear(4)",
            &[
                ("a", "nn.Linear(16, 8)"),
                ("l", "nn.RMSNorm(8)"),
                ("b", "nn.Linear(8, 4)"),
            ],
        )
        .bf16(),
        case(
            "silu",
            "between-linears",
            Float(&[16]),
            "a: linear(16 -> 8)\nsilu\nb: linear(4)",
            &[
                ("a", "nn.Linear(16, 8)"),
                ("s", "nn.SiLU()"),
                ("b", "nn.Linear(8, 4)"),
            ],
        )
        .bf16(),
    ]
}
