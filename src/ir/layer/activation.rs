//! Element-wise layers: `dropout` and the activations. Each computes one FLOP a value and keeps
//! the shape; only `prelu` has parameters (its slopes).

use super::memory::{
    cast_weights, dropout_mask, fp32_copy, product_input, Keeps, Pass, Runs, Value,
};
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

/// Dropout in training draws a mask of its input's size, which backward keeps (not the input);
/// outside training, or with `p` 0, its output is its input. libtorch's CPU dropout (values
/// other than fp32) draws the mask through an int32 buffer of its size, alive before the output
/// is made.
pub(super) fn keeps_dropout(values: u64, p: f64, given: Value, pass: Pass) -> Keeps {
    if !pass.drops(p) {
        return Keeps::view();
    }
    let draws = pass.runs != Runs::Cuda && given != Value::F32;
    Keeps {
        inner: dropout_mask(values, given, pass.runs),
        transient: if draws {
            values.saturating_mul(4u64.saturating_sub(given.bytes()))
        } else {
            0
        },
        ..Keeps::nothing(given)
    }
}

/// ReLU, tanh and sigmoid keep their output, GELU and SiLU their input.
pub(super) fn keeps_elementwise(e: Elementwise, given: Value) -> Keeps {
    match e {
        Elementwise::Relu | Elementwise::Tanh | Elementwise::Sigmoid => Keeps::output(given),
        Elementwise::Gelu | Elementwise::Silu => Keeps::input(given),
    }
}

/// Kiln's leaky ReLU (`where(x > 0, x, slope * x)`) keeps the boolean of `x > 0`; the scaled
/// input is alive while the choice is made.
pub(super) fn keeps_leaky(values: u64, given: Value) -> Keeps {
    Keeps {
        inner: values,
        transient: values.saturating_mul(given.bytes()),
        ..Keeps::nothing(given)
    }
}

/// Kiln's ELU keeps its input (which `clamp_max` saves), the boolean of `x > 0` and
/// `expm1`'s output; `alpha` times that is alive while the choice is made, and its backward
/// (through `where`, the product, `expm1` and `clamp_max`) holds two gradients of its size
/// besides its output's and input's.
pub(super) fn keeps_elu(values: u64, given: Value) -> Keeps {
    Keeps {
        inner: values.saturating_add(values.saturating_mul(given.bytes())),
        transient: values.saturating_mul(given.bytes()),
        backward: values.saturating_mul(2 * given.bytes()),
        ..Keeps::input(given)
    }
}

/// PReLU runs in the compute type, as autocast runs it: it keeps its input (or the cast copy)
/// and its slopes as cast. Its backward makes the input's gradient whether or not the input
/// needs one, and the slopes' gradient per value in fp32 (and its cast under bf16/fp16) before
/// summing it.
pub(super) fn keeps_prelu(values: u64, params: u64, given: Value, pass: Pass) -> Keeps {
    let (input, copy) = product_input(values, given, pass);
    Keeps {
        input,
        inner: copy,
        fixed: cast_weights(params, pass),
        input_gradient: input,
        backward: copy.saturating_add(values.saturating_mul(match pass.compute() {
            Value::F32 => 4,
            _ => 4 + pass.compute().bytes(),
        })),
        ..Keeps::nothing(pass.compute())
    }
}

/// Softmax and log-softmax run in fp32 and keep their output; a bf16/fp16 input's fp32 copy is
/// alive while they run.
pub(super) fn keeps_softmax(values: u64, given: Value) -> Keeps {
    Keeps {
        transient: fp32_copy(values, given),
        ..Keeps::output(Value::F32)
    }
}
