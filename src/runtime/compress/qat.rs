//! Quantization-aware training: each `qat` linear runs on fake-quantized weights (int8,
//! symmetric, per channel or per tensor) and a fake-quantized input (int8, symmetric, per
//! tensor), so training sees the rounding the int8 model will do; the gradient passes straight
//! through the rounding. Moving-average min/max observers (PyTorch's, averaging constant 0.01)
//! follow the weights and inputs during training; their minima and maxima are buffers of the
//! model (`fc1.weight_fake_quant.min_val`, `fc1.activation_post_process.max_val`), so
//! checkpoints keep them. After training the layer becomes an int8 linear with the observers'
//! scales ([`converted`]).

use tch::{Kind, Tensor};

use super::super::failure::At;
use super::super::model::{Buffer, LinearSwap, Net};
use super::quant::{min_max, qparams_from_min_max, QConfig, QParams, AVERAGING_CONSTANT};
use kiln::diagnostic::problem::Torch;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Compression, Experiment, Granularity, QuantScheme};
use kiln::span::Span;

const WEIGHT: &str = "weight_fake_quant";
const INPUT: &str = "activation_post_process";

/// One observer's running minima and maxima (infinite until the first observation).
struct Observer {
    min: Tensor,
    max: Tensor,
    granularity: Granularity,
}

impl Observer {
    /// Registers the observer's buffers under `prefix` on the device of `like`.
    fn new(
        net: &mut Net,
        prefix: String,
        channels: Option<i64>,
        like: &Tensor,
    ) -> Result<Observer, tch::TchError> {
        let shape: Vec<i64> = channels.into_iter().collect();
        let opts = (Kind::Float, like.device());
        let min = Tensor::f_full(shape.as_slice(), f64::INFINITY, opts)?;
        let max = Tensor::f_full(shape.as_slice(), f64::NEG_INFINITY, opts)?;
        for (name, t) in [("min_val", &min), ("max_val", &max)] {
            net.buffers.push(Buffer {
                name: format!("{prefix}.{name}"),
                tensor: t.shallow_clone(),
            });
        }
        Ok(Observer {
            min,
            max,
            granularity: if channels.is_some() {
                Granularity::PerChannel
            } else {
                Granularity::PerTensor
            },
        })
    }

    /// Moves the minima and maxima towards those of `x` (taking them as they are the first
    /// time).
    fn observe(&self, x: &Tensor) -> Result<(), tch::TchError> {
        tch::no_grad(|| {
            let (lo, hi) = min_max(x, self.granularity)?;
            for (run, cur) in [(&self.min, lo), (&self.max, hi)] {
                let cur = cur.f_reshape(run.size())?;
                let moved = run.f_add(&cur.f_sub(run)?.f_mul_scalar(AVERAGING_CONSTANT)?)?;
                let next = run.f_isinf()?.f_where_self(&cur, &moved)?;
                run.shallow_clone().f_copy_(&next)?;
            }
            Ok(())
        })
    }

    fn qparams(&self) -> Result<QParams, tch::TchError> {
        let axis = (self.granularity == Granularity::PerChannel).then_some(0);
        qparams_from_min_max(&self.min, &self.max, QConfig::INT8_SYMMETRIC, axis)
    }

    /// Whether it has seen a tensor.
    fn seen(&self) -> Result<bool, tch::TchError> {
        Ok(self.min.f_isinf()?.f_any()?.f_int64_value(&[])? == 0)
    }
}

/// The swap of a `qat` linear: fake-quantized weight and input.
struct FakeQuant {
    weight: Observer,
    input: Observer,
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

/// Whether `name` is `outer` or inside it.
fn within(name: &str, outer: &str) -> bool {
    name.strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
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
            if !targets.iter().any(|t| within(&layer, &t.layer)) {
                continue;
            }
            let w = weight(net, &layer, *span)?;
            let rows = (*granularity == Granularity::PerChannel).then(|| w.size()[0]);
            let weight = Observer::new(net, format!("{layer}.{WEIGHT}"), rows, &w).at(*span)?;
            let input = Observer::new(net, format!("{layer}.{INPUT}"), None, &w).at(*span)?;
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
    let observer = |prefix: &str, g: Granularity| -> Result<Observer, Diagnostic> {
        Ok(Observer {
            min: buffer(format!("{layer}.{prefix}.min_val"))?,
            max: buffer(format!("{layer}.{prefix}.max_val"))?,
            granularity: g,
        })
    };
    let weights = observer(WEIGHT, granularity)?;
    let input = observer(INPUT, Granularity::PerTensor)?;
    // A model that never trained has observed nothing: its weights are observed now.
    if !weights.seen().at(span)? {
        weights.observe(&w).at(span)?;
    }
    let scale = if input.seen().at(span)? {
        input
            .qparams()
            .and_then(|p| p.scale.f_double_value(&[0]))
            .at(span)?
    } else {
        1.0
    };
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
    Problem::TorchError {
        span,
        situation: Torch::Lowering {
            layer: layer.to_string(),
            what: "tensor".into(),
            name: name.to_string(),
        },
    }
    .diagnostic()
}
