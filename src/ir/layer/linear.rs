//! `linear`: `y = x W^T + b` over the last dimension.

use super::memory::{cast_weights, product_input, Keeps, Pass, Value};
use super::spec::{given, inferred, required, Spec};
use super::{count, Weight};
use crate::ir::numel;

/// `linear(out_features, bias, in_features)`.
pub static LINEAR: Spec = Spec {
    params: &[
        required("out_features"),
        given("bias", "true"),
        inferred("in_features"),
    ],
    note: Some("or `linear(in -> out)`"),
    shapes: "`[..., in]` -> `[..., out]`",
};

/// `nn.Linear`'s `weight` `[out, in]` and `bias` `[out]`, under `prefix`; pruning applies to both.
pub(super) fn weights(out: &mut Vec<Weight>, prefix: &str, inputs: i64, outputs: i64, bias: bool) {
    out.push(Weight::prunable(
        format!("{prefix}weight"),
        vec![outputs, inputs],
    ));
    if bias {
        out.push(Weight::prunable(format!("{prefix}bias"), vec![outputs]));
    }
}

/// Two FLOPs per multiply-add, for every position of the input (each row of `[..., in]`).
pub(super) fn flops(input: &[i64], inputs: i64, outputs: i64) -> u64 {
    let (i, o) = (inputs as f64, outputs as f64);
    let positions = (numel(input).max(0) as f64 / i).max(1.0);
    count(2.0 * positions * i * o)
}

/// The output: the input with its last dimension `outputs`.
pub(super) fn output(input: &[i64], outputs: i64) -> Vec<i64> {
    let mut y = input.to_vec();
    if let Some(last) = y.last_mut() {
        *last = outputs;
    }
    y
}

/// What a matrix product keeps (linear and convolution layers alike): its input, or under
/// bf16/fp16 the cast copy of an fp32 input, and the weights as it used them (their cast copies
/// under bf16/fp16, the parameters themselves in fp32). Its output is new, in the compute type.
/// Backward makes the copy's gradient before the input's.
pub(super) fn keeps(inputs: u64, params: u64, given: Value, pass: Pass) -> Keeps {
    let (input, copy) = product_input(inputs, given, pass);
    Keeps {
        input,
        inner: copy,
        fixed: cast_weights(params, pass),
        backward: copy,
        ..Keeps::nothing(pass.compute())
    }
}
