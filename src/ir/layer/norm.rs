//! Normalisation: `batchnorm1d`, `batchnorm2d`, `layernorm`, `rmsnorm`, `groupnorm`. Each
//! normalises and scales every value once (one FLOP a value); the affine parameters are per
//! channel or per normalised position, so structured pruning slices them with the units they
//! scale.

use super::memory::{fp32_copy, Keeps, Value};
use super::spec::{given, inferred, required, Param, Spec};
use super::Weight;

/// Layer normalisation's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    /// The trailing dimensions normalised over, and the shape of the affine parameters.
    pub shape: Vec<i64>,
    /// Added to the variance (to the mean square, for `rmsnorm`).
    pub eps: f64,
    /// RMS normalisation (`nn.RMSNorm`): divided by the root mean square, not centred, and
    /// scaled by a `weight` without a `bias`.
    pub rms: bool,
}

impl LayerNorm {
    /// The eps when none is given: `nn.LayerNorm`'s 1e-5, or for an RMS norm PyTorch's when
    /// `eps=None`, `torch.finfo(torch.float32).eps` (it computes in fp32 for fp16 and bf16
    /// inputs too).
    pub fn default_eps(rms: bool) -> f64 {
        if rms {
            f32::EPSILON as f64
        } else {
            1e-5
        }
    }
}

const BATCHNORM: &[Param] = &[
    inferred("num_features"),
    given("eps", "1e-5"),
    given("momentum", "0.1"),
    given("affine", "true"),
    given("track_running_stats", "true"),
];

/// `batchnorm1d(num_features, eps, momentum, affine, track_running_stats)`.
pub static BATCHNORM1D: Spec = Spec {
    params: BATCHNORM,
    note: None,
    shapes: "`[C]` or `[C, L]`, unchanged",
};

/// `batchnorm2d(num_features, eps, momentum, affine, track_running_stats)`.
pub static BATCHNORM2D: Spec = Spec {
    params: BATCHNORM,
    note: None,
    shapes: "`[C, H, W]`, unchanged",
};

/// `layernorm(normalized_shape, eps)`.
pub static LAYERNORM: Spec = Spec {
    params: &[
        given("normalized_shape", "the last dimension"),
        given("eps", "1e-5"),
    ],
    note: None,
    shapes: "unchanged",
};

/// `rmsnorm(normalized_shape, eps)`.
pub static RMSNORM: Spec = Spec {
    params: &[
        given("normalized_shape", "the last dimension"),
        given("eps", "1.1920929e-7, PyTorch's `eps=None` in fp32"),
    ],
    note: None,
    shapes: "unchanged; `nn.RMSNorm`: `x / sqrt(mean(x^2) + eps) * weight` over the normalized shape, no bias",
};

/// `groupnorm(num_groups, num_channels, eps)`.
pub static GROUPNORM: Spec = Spec {
    params: &[
        required("num_groups"),
        inferred("num_channels"),
        given("eps", "1e-5"),
    ],
    note: None,
    shapes: "`[C, ...]`, unchanged",
};

/// A norm's `weight` (and its `bias` when `bias`) of `shape`, under `prefix`.
pub(super) fn affine(out: &mut Vec<Weight>, prefix: &str, shape: &[i64], bias: bool) {
    out.push(Weight::norm(format!("{prefix}weight"), shape.to_vec()));
    if bias {
        out.push(Weight::norm(format!("{prefix}bias"), shape.to_vec()));
    }
}

/// A layer norm's `weight` and `bias` over its normalised shape (an RMS norm has no bias).
pub(super) fn layer(out: &mut Vec<Weight>, norm: &LayerNorm) {
    affine(out, "", &norm.shape, !norm.rms);
}

/// The normalised trailing `shape` of a layer norm on `input` after its units changed: the
/// input's last `shape.len()` dimensions.
pub(super) fn trailing(input: &[i64], shape: &[i64]) -> Vec<i64> {
    input[input.len().saturating_sub(shape.len())..].to_vec()
}

/// The fp32 input a norm computes on (norms but `rmsnorm` run in fp32, as under autocast): the
/// input itself when fp32, else a cast copy, which is what backward keeps (and whose gradient
/// its backward makes before the input's).
fn fp32_input(values: u64, given: Value) -> (bool, u64) {
    (given == Value::F32, fp32_copy(values, given))
}

/// Batch normalisation keeps its fp32 input; its per-channel statistics are a few bytes.
pub(super) fn keeps_batch(values: u64, features: i64, given: Value) -> Keeps {
    let (input, copy) = fp32_input(values, given);
    Keeps {
        input,
        inner: copy,
        fixed: 2 * 4 * features.max(0) as u64,
        backward: copy,
        ..Keeps::nothing(Value::F32)
    }
}

/// Group normalisation keeps its fp32 input and a mean and inverse deviation per group.
pub(super) fn keeps_group(values: u64, groups: i64, given: Value) -> Keeps {
    let (input, copy) = fp32_input(values, given);
    Keeps {
        input,
        inner: copy.saturating_add(2 * 4 * groups.max(0) as u64),
        backward: copy,
        ..Keeps::nothing(Value::F32)
    }
}

/// Layer normalisation keeps its fp32 input and a mean and inverse deviation per normalised
/// row. RMS normalisation (libtorch's `rms_norm` with a weight that trains, computed in fp32 and
/// left in its input's type) keeps its fp32 input (a copy of a bf16/fp16 one), the normalised
/// fp32 values that the weight scales and an inverse root mean square per row; its backward
/// holds two fp32 gradients of its size besides its output's and input's (and the copy's).
pub(super) fn keeps_layer(values: u64, norm: &LayerNorm, given: Value) -> Keeps {
    let row = norm.shape.iter().product::<i64>().max(1) as u64;
    let rows = values / row;
    if !norm.rms {
        let (input, copy) = fp32_input(values, given);
        return Keeps {
            input,
            inner: copy.saturating_add(2 * 4 * rows),
            backward: copy,
            ..Keeps::nothing(Value::F32)
        };
    }
    let (input, copy) = fp32_input(values, given);
    Keeps {
        input,
        inner: sum_of(copy, values.saturating_mul(4), 4 * rows),
        transient: copy,
        backward: values.saturating_mul(8).saturating_add(copy),
        ..Keeps::nothing(given)
    }
}

/// `a + b + c`, saturating.
fn sum_of(a: u64, b: u64, c: u64) -> u64 {
    a.saturating_add(b).saturating_add(c)
}
