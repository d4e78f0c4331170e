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

/// `relu`, `gelu`, `silu`, `tanh`, `sigmoid`.
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
