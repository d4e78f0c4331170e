//! Normalisation: `batchnorm1d`, `batchnorm2d`, `layernorm`, `rmsnorm`, `groupnorm`. Each
//! normalises and scales every value once (one FLOP a value); the affine parameters are per
//! channel or per normalised position, so structured pruning slices them with the units they
//! scale.

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
