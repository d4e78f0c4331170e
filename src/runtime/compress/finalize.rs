//! After training: the compressed model made from the trained one. Pruning masks are already in
//! the weights; structured pruning's units are removed (the layers rebuilt smaller); quantized
//! linears get their kernels. The result is a model of its own, so the trained one stays as it
//! is to be measured against.

use tch::{Device, Kind, Tensor};

use super::super::failure::At;
use super::super::model::{self, LinearSwap, Net};
use super::pruner::target_params;
use super::qat;
use super::quant::{QLinear, QuantMethod};
use super::shrink;
use kiln::diagnostic::problem::{Running, Strategies, Torch};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{
    Compression, Experiment, Granularity, Node, Precision, PruneMethod, PruneSchedule, QuantScheme,
};
use kiln::plan::shrink::{Group, Role};
use kiln::rundir::CompressedLayer;
use kiln::span::Span;

/// The compressed model and what compression did to each layer.
pub struct Final {
    /// The compressed model (quantized linears run their kernels).
    pub net: Net,
    /// Each compressed layer.
    pub layers: Vec<CompressedLayer>,
    /// Bytes of every parameter of the trained model (fp32).
    pub bytes_before: u64,
    /// Bytes of every parameter of the compressed model, as exported.
    pub bytes_after: u64,
    /// The compressed model's tensors by name, as exported: quantized layers' stored pieces
    /// (`fc1.weight_int8`, `fc1.weight_scale`, ...), every other parameter and buffer in fp32.
    pub tensors: Vec<(String, Tensor)>,
    /// How each quantized layer is stored, for the export's manifest.
    pub quantized: Vec<(String, String)>,
}

/// A quantized linear layer's kernel in place of its forward.
pub struct Kernel(pub QLinear);

impl LinearSwap for Kernel {
    fn forward(
        &self,
        x: &Tensor,
        _weight: &Tensor,
        _bias: Option<&Tensor>,
        _train: bool,
    ) -> Result<Tensor, tch::TchError> {
        self.0.forward(x)
    }
}

/// A plain copy of the trained model (no masks, observers or swaps): the uncompressed model
/// as it would be deployed, built from `nodes` on the devices `over` gives.
pub fn plain_copy(
    exp: &Experiment,
    nodes: &[Node],
    trained: &Net,
    over: Option<Device>,
) -> Result<Net, Diagnostic> {
    let span = exp.span;
    let net = model::build(nodes, exp.train.precision, over)?;
    tch::no_grad(|| -> Result<(), Diagnostic> {
        for p in &net.params {
            if let Some(src) = trained.params.iter().find(|q| q.name == p.name) {
                p.tensor.shallow_clone().f_copy_(&src.tensor).at(span)?;
            }
        }
        for b in &net.buffers {
            if let Some(src) = trained.buffers.iter().find(|q| q.name == b.name) {
                b.tensor.shallow_clone().f_copy_(&src.tensor).at(span)?;
            }
        }
        Ok(())
    })?;
    Ok(net)
}

/// The compressed form of the trained `trained`, built from the checked model `nodes` on the
/// devices `over` puts them (as the trained model was built).
pub fn finalize(
    exp: &Experiment,
    nodes: &[Node],
    trained: &Net,
    over: Option<Device>,
) -> Result<Final, Diagnostic> {
    let span = exp.span;
    let plain = plain_copy(exp, nodes, trained, over)?;
    // The checker refused every group that cannot shrink (K0216).
    let groups = kiln::plan::shrink::groups(nodes, &exp.compression).unwrap_or_default();
    let mut net = if groups.is_empty() {
        plain
    } else {
        let mut keep = Vec::new();
        for (g, _) in &groups {
            keep.push((g, kept_units(trained, g, span)?));
        }
        shrink::shrink(&plain, nodes, &keep, exp.train.precision, over, span)?.0
    };
    let mut methods: Vec<(String, Vec<String>)> = Vec::new();
    let mut note = |layer: &str, what: String| match methods.iter_mut().find(|(n, _)| n == layer) {
        Some((_, m)) => m.push(what),
        None => methods.push((layer.to_string(), vec![what])),
    };
    for c in &exp.compression {
        if let Compression::Prune {
            targets,
            method,
            amount,
            schedule,
            ..
        } = c
        {
            for t in targets {
                for i in target_params(trained, t) {
                    let name = &trained.params[i].name;
                    let layer = name.rsplit_once('.').map_or(name.as_str(), |(l, _)| l);
                    note(layer, prune_words(*method, *amount, *schedule));
                }
            }
        }
    }
    for (g, _) in &groups {
        for m in &g.members {
            if m.layer != g.target {
                note(&m.layer, format!("units removed with {}", g.target));
            }
        }
    }
    let mut quantized = Vec::new();
    let mut kernels: Vec<(String, QLinear)> = Vec::new();
    for c in &exp.compression {
        let Compression::Quantize {
            targets,
            scheme,
            span,
        } = c
        else {
            continue;
        };
        for (layer, device) in net.linears() {
            // The checker names each layer a step applies to (a block becomes its layers).
            if !targets.iter().any(|t| t.layer == layer) {
                continue;
            }
            if kernels.iter().any(|(n, _)| *n == layer) {
                continue;
            }
            let q = quantize(&net, trained, &layer, device, *scheme, *span)?;
            note(&layer, scheme_words(*scheme));
            quantized.push((layer.clone(), scheme_words(*scheme)));
            kernels.push((layer, q));
        }
    }
    let bytes = |t: &Tensor| (t.numel() * t.kind().elt_size_in_bytes()) as u64;
    let mut layers = Vec::new();
    for (layer, what) in &methods {
        let weight = format!("{layer}.weight");
        let before: Vec<&Tensor> = trained
            .params
            .iter()
            .filter(|p| p.name.rsplit_once('.').is_some_and(|(l, _)| l == layer))
            .map(|p| &p.tensor)
            .collect();
        let after: Vec<&Tensor> = net
            .params
            .iter()
            .filter(|p| p.name.rsplit_once('.').is_some_and(|(l, _)| l == layer))
            .map(|p| &p.tensor)
            .collect();
        let w_before = trained.params.iter().find(|p| p.name == weight);
        let w_after = net.params.iter().find(|p| p.name == weight);
        let (Some(w_before), Some(w_after)) = (w_before, w_after) else {
            continue;
        };
        let nonzero = w_after
            .tensor
            .f_count_nonzero(None::<i64>)
            .and_then(|t| t.f_int64_value(&[]))
            .at(span)?;
        let bytes_after = match kernels.iter().find(|(n, _)| n == layer) {
            Some((_, q)) => q.bytes() as u64,
            None => after.iter().map(|t| bytes(t)).sum(),
        };
        layers.push(CompressedLayer {
            name: layer.clone(),
            method: what.join(" + "),
            sparsity: 1.0 - nonzero as f64 / w_before.tensor.numel().max(1) as f64,
            shape_before: w_before.tensor.size(),
            shape_after: w_after.tensor.size(),
            bytes_before: before.iter().map(|t| bytes(t)).sum(),
            bytes_after,
        });
    }
    let mut tensors = Vec::new();
    let mut bytes_after = 0;
    for p in &net.params {
        let layer = p.name.rsplit_once('.').map_or("", |(l, _)| l);
        if kernels.iter().any(|(n, _)| n == layer) {
            continue;
        }
        bytes_after += bytes(&p.tensor);
        tensors.push((p.name.clone(), p.tensor.shallow_clone()));
    }
    for (layer, q) in &kernels {
        bytes_after += q.bytes() as u64;
        for (local, t) in q.tensors() {
            tensors.push((format!("{layer}.{local}"), t));
        }
    }
    for b in &net.buffers {
        tensors.push((b.name.clone(), b.tensor.shallow_clone()));
    }
    for (layer, q) in kernels {
        net.swap_linear(&layer, Box::new(Kernel(q)));
    }
    Ok(Final {
        net,
        layers,
        bytes_before: trained.params.iter().map(|p| bytes(&p.tensor)).sum(),
        bytes_after,
        tensors,
        quantized,
    })
}

/// The units a structured group keeps: the rows of its first producer's weight mask that are not
/// all zero.
fn kept_units(trained: &Net, g: &Group, span: Span) -> Result<Tensor, Diagnostic> {
    let Some(producer) = g.role(Role::Producer).next() else {
        return Tensor::f_arange(g.units, (Kind::Int64, Device::Cpu)).at(span);
    };
    let name = format!("{}.weight_mask", producer.layer);
    let Some(mask) = trained.buffers.iter().find(|b| b.name == name) else {
        return Err(Problem::Running(Running::TorchError {
            span,
            situation: Torch::Lowering {
                layer: producer.layer.clone(),
                what: "buffer".into(),
                name,
            },
        })
        .diagnostic());
    };
    let others: Vec<i64> = (1..mask.tensor.dim() as i64).collect();
    mask.tensor
        .f_sum_dim_intlist(others.as_slice(), false, Kind::Float)
        .and_then(|t| t.f_ne(0.0))
        .and_then(|t| t.f_nonzero())
        .and_then(|t| t.f_flatten(0, -1))
        .at(span)
}

/// The quantized form of the linear `layer` of `net`.
fn quantize(
    net: &Net,
    trained: &Net,
    layer: &str,
    device: Device,
    scheme: QuantScheme,
    span: Span,
) -> Result<QLinear, Diagnostic> {
    let find = |name: String| {
        net.params
            .iter()
            .find(|p| p.name == name)
            .map(|p| &p.tensor)
    };
    let Some(weight) = find(format!("{layer}.weight")) else {
        return Err(Problem::Running(Running::TorchError {
            span,
            situation: Torch::Lowering {
                layer: layer.to_string(),
                what: "parameter".into(),
                name: "weight".into(),
            },
        })
        .diagnostic());
    };
    let bias = find(format!("{layer}.bias"));
    if matches!(scheme, QuantScheme::Fp8 { .. }) && device == Device::Cpu {
        return Err(Problem::Strategies(Strategies::Fp8OnCpu {
            span,
            layer: layer.to_string(),
            layer_span: span,
        })
        .diagnostic());
    }
    match conversion(scheme) {
        Conversion::Kernel(method) => QLinear::new(weight, bias, method).at(span),
        Conversion::Observed(granularity) => {
            let (params, activation_scale) = qat::converted(trained, layer, granularity, span)?;
            QLinear::int8_static(weight, bias, &params, activation_scale).at(span)
        }
    }
}

/// How a scheme's layers become quantized linears after training.
pub enum Conversion {
    /// Quantized from the trained weight, to run this kernel.
    Kernel(QuantMethod),
    /// `qat`: converted from the observers training kept, with weight scales of this
    /// granularity ([`QLinear::int8_static`]).
    Observed(Granularity),
}

/// How the layers of `scheme` are converted after training.
pub fn conversion(scheme: QuantScheme) -> Conversion {
    // The int8 and int4 kernels are vectorised for bf16 inputs only.
    let fast = Kind::BFloat16;
    Conversion::Kernel(match scheme {
        QuantScheme::Int8 {
            granularity,
            symmetric,
            dynamic: false,
        } => QuantMethod::Int8WeightOnly {
            granularity,
            symmetric,
            activations: fast,
        },
        QuantScheme::Int8 {
            granularity,
            symmetric,
            dynamic: true,
        } => QuantMethod::Int8Dynamic {
            granularity,
            symmetric,
        },
        QuantScheme::Int4 { group_size } => QuantMethod::Int4 {
            group_size: group_size as i64,
            activations: fast,
        },
        QuantScheme::Fp8 { granularity } => QuantMethod::Fp8 { granularity },
        QuantScheme::Cast { to } => QuantMethod::Cast {
            kind: if to == Precision::Fp16 {
                Kind::Half
            } else {
                Kind::BFloat16
            },
        },
        QuantScheme::Qat { granularity } => return Conversion::Observed(granularity),
    })
}

/// A pruning statement as the report names it: `l1_unstructured 50% after training`.
fn prune_words(method: PruneMethod, amount: f64, schedule: PruneSchedule) -> String {
    let method = match method {
        PruneMethod::L1Unstructured => "l1_unstructured".to_string(),
        PruneMethod::RandomUnstructured => "random_unstructured".to_string(),
        PruneMethod::LnStructured { n, dim } => format!("ln_structured(n: {n}, dim: {dim})"),
        PruneMethod::GlobalL1 => "global_unstructured".to_string(),
    };
    let when = match schedule {
        PruneSchedule::Before => "before training",
        PruneSchedule::After { .. } => "after training",
        PruneSchedule::Gradual { .. } => "gradual",
        PruneSchedule::Iterative { .. } => "iterative",
    };
    format!("{method} {}% {when}", 100.0 * amount)
}

/// A quantization scheme as the report names it: `int8 per_channel`.
fn scheme_words(scheme: QuantScheme) -> String {
    let g = |g: Granularity| match g {
        Granularity::PerChannel => "per_channel",
        Granularity::PerTensor => "per_tensor",
    };
    match scheme {
        QuantScheme::Int8 {
            granularity,
            symmetric,
            dynamic,
        } => format!(
            "int8 {}{}{}",
            g(granularity),
            if symmetric { "" } else { " affine" },
            if dynamic { " dynamic" } else { "" }
        ),
        QuantScheme::Int4 { group_size } => format!("int4 group {group_size}"),
        QuantScheme::Fp8 { granularity } => match granularity {
            Granularity::PerChannel => "fp8 per_row".to_string(),
            Granularity::PerTensor => "fp8 per_tensor".to_string(),
        },
        QuantScheme::Qat { granularity } => format!("qat int8 {}", g(granularity)),
        QuantScheme::Cast { to } => format!("{to} weights"),
    }
}
