//! Element-wise layers: `dropout` and the activations. Each computes one FLOP a value and keeps
//! the shape; only `prelu` has parameters (its slopes).

use super::spec::{given, Spec};
use super::Weight;

/// `dropout(p)`.
pub static DROPOUT: Spec = Spec {
    params: &[given("p", "0.5, in [0, 1)")],
    note: None,
    shapes: "unchanged",
};

/// An activation without parameters. A new one is its variant here (its word and its value on a
/// number), its place in [`Kind::ALL`](super::Kind::ALL) and its forward in the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Elementwise {
    /// ReLU.
    Relu,
    /// GELU (exact, with erf).
    Gelu,
    /// SiLU (swish): `x * sigmoid(x)`.
    Silu,
    /// Hyperbolic tangent.
    Tanh,
    /// Logistic sigmoid.
    Sigmoid,
}

impl Elementwise {
    /// Its word in the language.
    pub fn name(self) -> &'static str {
        match self {
            Elementwise::Relu => "relu",
            Elementwise::Gelu => "gelu",
            Elementwise::Silu => "silu",
            Elementwise::Tanh => "tanh",
            Elementwise::Sigmoid => "sigmoid",
        }
    }

    /// Its value at `x`, as PyTorch computes it: what a constant (a pruned unit's output)
    /// becomes through it.
    pub fn at(self, x: f64) -> f64 {
        match self {
            Elementwise::Relu => x.max(0.0),
            Elementwise::Gelu => gelu(x),
            Elementwise::Silu => x * sigmoid(x),
            Elementwise::Tanh => x.tanh(),
            Elementwise::Sigmoid => sigmoid(x),
        }
    }
}

/// Exact GELU, `x * Phi(x)`, with erf to 1.5e-7 (Abramowitz and Stegun 7.1.26).
fn gelu(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * z.abs());
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erf = (1.0 - poly * (-z * z).exp()).copysign(z);
    0.5 * x * (1.0 + erf)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Every [`Elementwise`] activation.
pub static PLAIN: Spec = Spec {
    params: &[],
    note: None,
    shapes: "unchanged",
};

/// `leaky_relu(negative_slope)`.
pub static LEAKY_RELU: Spec = Spec {
    params: &[given("negative_slope", "0.01")],
    note: None,
    shapes: "unchanged; `x` above 0, `negative_slope * x` below",
};

/// `elu(alpha)`.
pub static ELU: Spec = Spec {
    params: &[given("alpha", "1.0")],
    note: None,
    shapes: "unchanged; `x` above 0, `alpha * (exp(x) - 1)` below",
};

/// `prelu(num_parameters, init)`.
pub static PRELU: Spec = Spec {
    params: &[given("num_parameters", "1"), given("init", "0.25")],
    note: None,
    shapes: "unchanged; a leaky ReLU with learned slopes: one, or one per channel (`num_parameters` = `C` of `[C, ...]`)",
};

/// PReLU's slopes: one, or one per channel.
pub(super) fn prelu(out: &mut Vec<Weight>, parameters: i64) {
    out.push(Weight::plain("weight".into(), vec![parameters]));
}
