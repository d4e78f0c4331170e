//! Quantization-aware training: each `qat` linear runs on fake-quantized weights (int8,
//! symmetric, per channel or per tensor) and a fake-quantized input (int8, symmetric, per
//! tensor), so training sees the rounding the int8 model will do; the gradient passes straight
//! through the rounding. Moving-average min/max observers (PyTorch's, averaging constant 0.01)
//! follow the weights and inputs during training; their minima and maxima are buffers of the
//! model (`fc1.weight_fake_quant.min_val`, `fc1.activation_post_process.max_val`), so
//! checkpoints keep them. After training the layer becomes an int8 linear with the observers'
//! scales ([`converted`]).

use tch::Tensor;

use super::super::failure::At;
use super::super::model::{Buffer, LinearSwap, Net};
use super::quant::{MovingAverageObserver, QConfig, QParams};
use kiln::diagnostic::problem::{Running, Torch};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Compression, Experiment, Granularity, QuantScheme};
use kiln::span::Span;

const WEIGHT: &str = "weight_fake_quant";
const INPUT: &str = "activation_post_process";

/// An observer whose running minima and maxima are registered as buffers of `net` under
/// `prefix` (`min_val`, `max_val`), on the device of `like`.
fn observer(
    net: &mut Net,
    prefix: String,
    granularity: Granularity,
    like: &Tensor,
) -> Result<MovingAverageObserver, tch::TchError> {
    let channels = (granularity == Granularity::PerChannel).then(|| like.size()[0]);
    let (min, max) = MovingAverageObserver::empty(channels, like.device())?;
    for (name, t) in [("min_val", &min), ("max_val", &max)] {
        net.buffers.push(Buffer {
            name: format!("{prefix}.{name}"),
            tensor: t.shallow_clone(),
        });
    }
    Ok(MovingAverageObserver::new(
        QConfig::INT8_SYMMETRIC,
        granularity,
        min,
        max,
    ))
}

/// The swap of a `qat` linear: fake-quantized weight and input.
struct FakeQuant {
    weight: MovingAverageObserver,
    input: MovingAverageObserver,
}

impl LinearSwap for FakeQuant {
    fn forward(
        &self,
        x: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        train: bool,
    ) -> Result<Tensor, tch::TchError> {
        if train || !self.weight.seen()? {
            self.weight.observe(weight)?;
        }
        if train || !self.input.seen()? {
            self.input.observe(x)?;
        }
        let w = self.weight.qparams()?.fake_quantize(weight)?;
        let x = self.input.qparams()?.fake_quantize(x)?;
        x.f_linear(&w, bias)
    }
}

/// Puts fake quantization on every linear that a `qat` statement of `exp` names.
pub fn install(exp: &Experiment, net: &mut Net) -> Result<(), Diagnostic> {
    for c in &exp.compression {
        let Compression::Quantize {
            targets,
            scheme: QuantScheme::Qat { granularity },
            span,
        } = c
        else {
            continue;
        };
        for (layer, _) in net.linears() {
            // The checker names each layer a step applies to (a block becomes its layers).
            if !targets.iter().any(|t| t.layer == layer) {
                continue;
            }
            let w = weight(net, &layer, *span)?;
            let prefix = format!("{layer}.{WEIGHT}");
            let weight = observer(net, prefix, *granularity, &w).at(*span)?;
            let prefix = format!("{layer}.{INPUT}");
            let input = observer(net, prefix, Granularity::PerTensor, &w).at(*span)?;
            net.swap_linear(&layer, Box::new(FakeQuant { weight, input }));
        }
    }
    Ok(())
}

/// The int8 conversion of a `qat` linear of the trained model: its weight observer's scales
/// and its input observer's scale.
pub fn converted(
    trained: &Net,
    layer: &str,
    granularity: Granularity,
    span: Span,
) -> Result<(QParams, f64), Diagnostic> {
    let buffer = |name: String| {
        trained
            .buffers
            .iter()
            .find(|b| b.name == name)
            .map(|b| b.tensor.shallow_clone())
            .ok_or_else(|| lowering(layer, &name, span))
    };
    let w = weight(trained, layer, span)?;
    let observer = |prefix: &str, g: Granularity| -> Result<MovingAverageObserver, Diagnostic> {
        Ok(MovingAverageObserver::new(
            QConfig::INT8_SYMMETRIC,
            g,
            buffer(format!("{layer}.{prefix}.min_val"))?,
            buffer(format!("{layer}.{prefix}.max_val"))?,
        ))
    };
    let weights = observer(WEIGHT, granularity)?;
    let input = observer(INPUT, Granularity::PerTensor)?;
    // A model that never took a training step has observed its weights only when it was
    // evaluated: they are observed now.
    if !weights.seen().at(span)? {
        weights.observe(&w).at(span)?;
    }
    if !input.seen().at(span)? {
        return Err(lowering(layer, &format!("{INPUT}.min_val"), span));
    }
    let scale = input
        .qparams()
        .and_then(|p| p.scale.f_double_value(&[0]))
        .at(span)?;
    Ok((weights.qparams().at(span)?, scale))
}

fn weight(net: &Net, layer: &str, span: Span) -> Result<Tensor, Diagnostic> {
    let name = format!("{layer}.weight");
    net.params
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.tensor.shallow_clone())
        .ok_or_else(|| lowering(layer, "weight", span))
}

fn lowering(layer: &str, name: &str, span: Span) -> Diagnostic {
    Problem::Running(Running::TorchError {
        span,
        situation: Torch::Lowering {
            layer: layer.to_string(),
            what: "tensor".into(),
            name: name.to_string(),
        },
    })
    .diagnostic()
}
