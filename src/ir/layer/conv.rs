//! `conv1d` and `conv2d`.

use super::memory::{Keeps, Pass, Value};
use super::spec::{given, inferred, required, Param, Spec};
use super::{count, linear, Weight};
use crate::ir::Conv;

const PARAMS: &[Param] = &[
    required("out_channels"),
    required("kernel_size"),
    given("stride", "1"),
    given("padding", "0"),
    given("dilation", "1"),
    given("groups", "1"),
    given("bias", "true"),
    inferred("in_channels"),
];

/// `conv1d(out_channels, kernel_size, stride, padding, dilation, groups, bias, in_channels)`.
pub static CONV1D: Spec = Spec {
    params: PARAMS,
    note: Some("or `conv1d(in -> out, k)`"),
    shapes: "`[C, L]` -> `[out, L']`",
};

/// As `conv1d`, with sizes a number or `[h, w]`.
pub static CONV2D: Spec = Spec {
    params: PARAMS,
    note: Some("or `conv2d(in -> out, k)`; sizes are a number or `[h, w]`"),
    shapes: "`[C, H, W]` -> `[out, H', W']`",
};

/// `weight` `[out, in / groups, kernel...]` and `bias` `[out]`; pruning applies to both.
pub(super) fn weights(out: &mut Vec<Weight>, conv: &Conv) {
    let mut shape = vec![conv.outputs, conv.inputs / conv.groups.max(1)];
    shape.extend(&conv.kernel);
    out.push(Weight::prunable("weight".into(), shape));
    if conv.bias {
        out.push(Weight::prunable("bias".into(), vec![conv.outputs]));
    }
}

/// Two FLOPs per multiply-add: each output value reads `in / groups` channels of the kernel.
pub(super) fn flops(conv: &Conv, output: &[i64]) -> u64 {
    let kernel: f64 = conv.kernel.iter().map(|k| *k as f64).product();
    let per_group = (conv.inputs / conv.groups.max(1)) as f64;
    let positions: f64 = output.iter().skip(1).map(|d| *d as f64).product();
    count(2.0 * per_group * kernel * conv.outputs as f64 * positions)
}

/// A convolution keeps what a linear layer keeps ([`linear::keeps`]); its backward (oneDNN's on the CPU) also makes
/// buffers of its input's and its output's size.
pub(super) fn keeps(inputs: u64, outputs: u64, params: u64, given: Value, pass: Pass) -> Keeps {
    let k = linear::keeps(inputs, params, given, pass);
    Keeps {
        backward: k.backward.saturating_add(
            (inputs.saturating_add(outputs)).saturating_mul(pass.compute().bytes()),
        ),
        ..k
    }
}
