//! `conv1d` and `conv2d`.

use tch::Tensor;

use super::{Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Conv;

/// `nn.Conv1d`/`nn.Conv2d`'s parameters: weight and bias `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
pub(super) fn init(i: &mut Init, conv: &Conv) -> Result<(), Diagnostic> {
    let fan_in = conv.inputs / conv.groups * conv.kernel.iter().product::<i64>();
    let bound = 1.0 / (fan_in as f64).sqrt();
    let mut shape = vec![conv.outputs, conv.inputs / conv.groups];
    shape.extend(&conv.kernel);
    let weight = i.uniform(&shape, bound)?;
    i.param("weight", weight);
    if conv.bias {
        let b = i.uniform(&[conv.outputs], bound)?;
        i.param("bias", b);
    }
    Ok(())
}

pub(super) fn forward(
    net: &Net,
    l: &LayerRun,
    conv: &Conv,
    x: &Tensor,
) -> Result<Tensor, Diagnostic> {
    let x = net.mm_input(l, x)?;
    let weight = net.weight(l, "weight")?;
    let bias = if conv.bias {
        Some(net.weight(l, "bias")?)
    } else {
        None
    };
    // `convolution` is what `conv1d` and `conv2d` call, for either rank.
    let output_padding = vec![0; conv.kernel.len()];
    x.f_convolution(
        &weight,
        bias.as_ref(),
        conv.stride.as_slice(),
        conv.padding.as_slice(),
        conv.dilation.as_slice(),
        false,
        output_padding.as_slice(),
        conv.groups,
    )
    .at(l.span)
}
