//! Normalisation: `batchnorm1d`, `batchnorm2d`, `layernorm`, `groupnorm`. Each normalises and
//! scales every value once (one FLOP a value); the affine parameters are per channel or per
//! normalised position, so structured pruning slices them with the units they scale.

use super::spec::{given, inferred, required, Param, Spec};
use super::Weight;

/// Layer normalisation's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    /// The trailing dimensions normalised over, and the shape of the affine parameters.
    pub shape: Vec<i64>,
    /// Added to the variance.
    pub eps: f64,
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

/// A layer norm's `weight` and `bias` over its normalised shape.
pub(super) fn layer(out: &mut Vec<Weight>, norm: &LayerNorm) {
    affine(out, "", &norm.shape, true);
}

/// The normalised trailing `shape` of a layer norm on `input` after its units changed: the
/// input's last `shape.len()` dimensions.
pub(super) fn trailing(input: &[i64], shape: &[i64]) -> Vec<i64> {
    input[input.len().saturating_sub(shape.len())..].to_vec()
}
