//! `conv1d` and `conv2d`.

use super::{Check, Checked, Flow, LayerCheck};
use crate::diagnostic::problem::{Declared, Names, OutOfRange, Window};
use crate::diagnostic::Problem;
use crate::ir::Kind;
use crate::ir::{Conv, LayerKind};

/// The check of `kind` when it is a convolution.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Conv1d => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, false)),
        Kind::Conv2d => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, true)),
        _ => return None,
    })
}

/// Checks a convolution of rank 2 (`two_d`) or 1.
pub(super) fn check(lc: &mut LayerCheck, flow: &Flow, two_d: bool) -> Option<Checked> {
    let (dims, want) = if two_d {
        (2, "[channels, height, width]")
    } else {
        (1, "[channels, length]")
    };
    let (declared_in, out) = lc.arrow("out_channels", "in_channels")?;
    let kernel = lc.sizes("kernel_size", dims, 1);
    let stride = lc.sizes("stride", dims, 1);
    let padding = lc.sizes("padding", dims, 0);
    let dilation = lc.sizes("dilation", dims, 1);
    let groups = lc.opt_uint("groups", 1);
    let bias = lc.bool_or("bias", true);
    let Some(out) = out else {
        lc.cx.missing(lc.kind.name(), "out_channels", lc.bound.span);
        return None;
    };
    let Some(kernel) = kernel? else {
        lc.cx.missing(lc.kind.name(), "kernel_size", lc.bound.span);
        return None;
    };
    let mut conv = Conv {
        inputs: 0,
        outputs: out,
        stride: stride?.unwrap_or(vec![1; dims]),
        padding: padding?.unwrap_or(vec![0; dims]),
        dilation: dilation?.unwrap_or(vec![1; dims]),
        groups: groups?.unwrap_or(1),
        bias: bias?,
        kernel,
    };
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, want, shape.len() == dims + 1)?;
    let inputs = shape[0];
    if let Some((d, at)) = declared_in {
        if d != inputs {
            let declared = Declared::Size {
                what: "input channels",
                declared: d,
                received: inputs,
            };
            lc.mismatch(at, flow, &shape, declared);
            return None;
        }
    }
    if inputs % conv.groups != 0 || conv.outputs % conv.groups != 0 {
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: lc.at("groups"),
            situation: OutOfRange::ConvGroups {
                groups: conv.groups,
                inputs,
                outputs: conv.outputs,
            },
        }));
        return None;
    }
    conv.inputs = inputs;
    let mut output = vec![conv.outputs];
    for i in 0..dims {
        let window = Window {
            axis: i,
            rank: dims,
            input: shape[i + 1],
            kernel: conv.kernel[i],
            stride: conv.stride[i],
            padding: conv.padding[i],
            dilation: conv.dilation[i],
            ceil_mode: false,
        };
        output.push(lc.window(window, &shape, flow)?);
    }
    let kind = if two_d {
        LayerKind::Conv2d { conv }
    } else {
        LayerKind::Conv1d { conv }
    };
    Some(Checked::new(kind, &shape, output))
}
