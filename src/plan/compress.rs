//! The compression section of the plan: each compressed layer's weight bytes before and after
//! its steps, the whole model's, and the steps in words.
//!
//! A quantized layer's bytes after compression are those of the tensors it is stored as
//! ([`super::stored`]), padding included, exactly as `kiln export` writes them and the run's
//! report counts them. Other layers stay fp32. Unstructured pruning leaves the dense bytes as
//! they are and reports the sparsity; structured pruning keeps `C - round(amount·C)` of the
//! layer's C units along its dimension and scales its bytes with them.

use serde::Serialize;

use crate::ir::{
    Compression, Duration, Granularity, Layer, LayerKind, Node, PruneMethod, PruneSchedule,
    QuantScheme,
};

/// One compressed layer.
#[derive(Serialize, Debug, PartialEq)]
pub struct CompressedLayer {
    /// The layer's qualified name.
    pub layer: String,
    /// Its steps in words, in the order the file gives them.
    pub steps: Vec<String>,
    /// Bytes of its parameters in fp32.
    pub bytes_before: u64,
    /// Bytes of its parameters once compressed.
    pub bytes_after: u64,
    /// The fraction of its weight entries set to zero by unstructured pruning, when the layer
    /// alone decides it (global pruning spreads its amount over all its targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f64>,
    /// Global pruning's sparsity over all its targets together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global: Option<Global>,
    /// What structured pruning keeps of the layer's own units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

/// Global pruning's sparsity, shared by its targets.
#[derive(Serialize, Debug, PartialEq)]
pub struct Global {
    /// The fraction of all its targets' entries set to zero.
    pub sparsity: f64,
    /// How many tensors it is spread over.
    pub targets: usize,
}

/// Units kept by structured pruning.
#[derive(Serialize, Debug, PartialEq)]
pub struct Kept {
    /// Units kept: `units - round(amount * units)`.
    pub units: u64,
    /// Units the dimension had.
    pub of: u64,
    /// `output units` or `inputs`.
    pub along: &'static str,
}

/// The compression section of a plan.
#[derive(Serialize, Debug, PartialEq)]
pub struct CompressionPlan {
    /// Every compressed layer, in model order.
    pub layers: Vec<CompressedLayer>,
    /// Bytes of the whole model's parameters in fp32.
    pub model_bytes_before: u64,
    /// Bytes of the whole model's parameters once compressed (other layers stay fp32).
    pub model_bytes_after: u64,
    /// `model_bytes_before / model_bytes_after`.
    pub ratio: f64,
}

/// A layer's parameters as compression sees them: a weight of `outputs` x `inputs` units (a
/// convolution's kernel folded into its inputs) and a bias.
struct Shape2 {
    weight: u64,
    outputs: u64,
    inputs: u64,
    bias: u64,
}

fn shape_of(l: &Layer) -> Option<Shape2> {
    let (outputs, inputs, bias) = match &l.kind {
        LayerKind::Linear {
            inputs,
            outputs,
            bias,
        } => (
            *outputs as u64,
            *inputs as u64,
            u64::from(*bias) * *outputs as u64,
        ),
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => (
            conv.outputs as u64,
            (conv.inputs / conv.groups.max(1)) as u64,
            u64::from(conv.bias) * conv.outputs as u64,
        ),
        LayerKind::Embedding { vocab, dim, .. } => (*vocab as u64, *dim as u64, 0),
        _ => return None,
    };
    Some(Shape2 {
        weight: l.params.saturating_sub(bias),
        outputs,
        inputs,
        bias,
    })
}

/// `round(x)` with ties to even, as Python's `round` (PyTorch's pruning counts).
fn round_half_even(x: f64) -> u64 {
    let r = x.round();
    let tie = (x - x.trunc()).abs() == 0.5;
    (if tie && r % 2.0 != 0.0 { r - 1.0 } else { r }) as u64
}

/// A percentage without needless decimals: `50%`, `12.5%`.
pub fn percent(x: f64) -> String {
    let p = (x * 1000.0).round() / 10.0;
    format!("{p}%")
}

fn duration(d: &Duration) -> String {
    match d {
        Duration::Steps(1) => "1 step".into(),
        Duration::Steps(n) => format!("{n} steps"),
        Duration::Epochs(1) => "1 epoch".into(),
        Duration::Epochs(n) => format!("{n} epochs"),
    }
}

/// A pruning schedule in words, as in `gradual 0 -> 90% over steps 100..2000 every 100`.
pub fn schedule_words(schedule: &PruneSchedule, amount: f64) -> String {
    match schedule {
        PruneSchedule::Before => "before training".into(),
        PruneSchedule::After {
            finetune: Duration::Steps(0) | Duration::Epochs(0),
        } => "after training".into(),
        PruneSchedule::After { finetune } => {
            format!("after training, then {} of fine-tuning", duration(finetune))
        }
        PruneSchedule::Gradual {
            start,
            end,
            every,
            initial,
        } => format!(
            "gradual {} -> {} over steps {start}..{end} every {every}",
            if *initial == 0.0 {
                "0".to_string()
            } else {
                percent(*initial)
            },
            percent(amount)
        ),
        PruneSchedule::Iterative { rounds, rewind } => {
            let each = 1.0 - (1.0 - amount).powf(1.0 / *rounds as f64);
            format!(
                "iterative, {rounds} round{} of {} of the remaining weights, rewinding to step {rewind}",
                if *rounds == 1 { "" } else { "s" },
                percent(each)
            )
        }
    }
}

fn method_words(method: &PruneMethod, targets: usize) -> String {
    match method {
        PruneMethod::L1Unstructured => "l1_unstructured".into(),
        PruneMethod::RandomUnstructured => "random_unstructured".into(),
        PruneMethod::LnStructured { n, dim } => format!("ln_structured (n {n}, dim {dim})"),
        PruneMethod::GlobalL1 => format!("global_unstructured over {targets} tensors"),
    }
}

fn granularity_words(g: Granularity, fp8: bool) -> &'static str {
    match (g, fp8) {
        (Granularity::PerTensor, _) => "per tensor",
        (Granularity::PerChannel, false) => "per channel",
        (Granularity::PerChannel, true) => "per row",
    }
}

/// A quantization scheme in words.
pub fn scheme_words(scheme: &QuantScheme) -> String {
    match scheme {
        QuantScheme::Int8 {
            granularity,
            symmetric,
            dynamic,
        } => format!(
            "int8 {}, {}, {}",
            granularity_words(*granularity, false),
            if *symmetric { "symmetric" } else { "affine" },
            if *dynamic {
                "dynamic activations"
            } else {
                "weights only"
            }
        ),
        QuantScheme::Int4 { group_size } => format!("int4, groups of {group_size}"),
        QuantScheme::Fp8 { granularity } => {
            format!("fp8 e4m3 {}", granularity_words(*granularity, true))
        }
        QuantScheme::Qat { granularity } => {
            format!("qat, then int8 {}", granularity_words(*granularity, false))
        }
        QuantScheme::Cast { to } => format!("{to} weights"),
    }
}

/// The expected shrink of structured pruning along `dim`: the kept units and the new shape.
/// This is the layer's own share; `plan::shrink` works out the whole model's shrunk sizes,
/// the consuming layers' inputs included.
fn shrink(s: &mut Shape2, dim: i64, amount: f64) -> Option<(u64, u64)> {
    let units = match dim {
        0 => s.outputs,
        1 | -1 => s.inputs,
        _ => return None,
    };
    let kept = units - round_half_even(amount * units as f64).min(units);
    let per_unit = s.weight / units.max(1);
    s.weight = per_unit * kept;
    if dim == 0 {
        s.bias = s.bias.min(kept);
        s.outputs = kept;
    } else {
        s.inputs = kept;
    }
    Some((kept, units))
}

/// The model after structured pruning removes its output units (`plan::shrink`): every
/// layer whose size changes, shrunk. Empty when nothing is removed, or when the checker refuses
/// the removal (K0216).
fn shrunk_layers(compression: &[Compression], nodes: &[Node]) -> Vec<Layer> {
    let Ok(groups) = super::shrink::groups(nodes, compression) else {
        return Vec::new();
    };
    if groups.is_empty() {
        return Vec::new();
    }
    let keep: Vec<(&super::shrink::Group, i64)> = groups.iter().map(|(g, k)| (g, *k)).collect();
    let Ok(shrunk) = super::shrink::shrink(nodes, &keep) else {
        return Vec::new();
    };
    // Looked up by name: a model of thousands of layers must not compare every pair.
    let before: std::collections::HashMap<&str, u64> = crate::ir::layers(nodes)
        .into_iter()
        .map(|b| (b.name.as_str(), b.params))
        .collect();
    crate::ir::layers(&shrunk)
        .into_iter()
        .filter(|l| before.get(l.name.as_str()) != Some(&l.params))
        .cloned()
        .collect()
}

/// The compression section of a plan, or `None` when the experiment compresses nothing.
/// Structured pruning of output units is costed on the model it leaves: the pruned layer, the
/// layers its units flow through and the layers that consume them all shrink.
pub fn compression(
    compression: &[Compression],
    all: &[&Layer],
    nodes: &[Node],
) -> Option<CompressionPlan> {
    if compression.is_empty() {
        return None;
    }
    let shrunk = shrunk_layers(compression, nodes);
    let model_bytes_before = all.iter().fold(0u64, |n, l| n.saturating_add(4 * l.params));
    let mut rows = Vec::new();
    let mut saved: u64 = 0;
    for l in all {
        let small = shrunk.iter().find(|s| s.name == l.name);
        let Some(mut shape) = shape_of(small.unwrap_or(l)) else {
            continue;
        };
        let mut row = CompressedLayer {
            layer: l.name.clone(),
            steps: Vec::new(),
            bytes_before: 4 * l.params,
            bytes_after: 4 * l.params,
            sparsity: None,
            global: None,
            kept: None,
        };
        let mut quantized = None;
        for c in compression {
            match c {
                Compression::Prune {
                    targets,
                    method,
                    amount,
                    schedule,
                    ..
                } => {
                    let Some(t) = targets.iter().find(|t| t.layer == l.name) else {
                        continue;
                    };
                    let of = match t.param.as_deref() {
                        Some("bias") => " of the bias",
                        _ => "",
                    };
                    row.steps.push(format!(
                        "prune {} {}{of}, {}",
                        method_words(method, targets.len()),
                        percent(*amount),
                        schedule_words(schedule, *amount)
                    ));
                    match method {
                        PruneMethod::LnStructured { dim: 0, .. } if small.is_some() => {
                            let units = shape_of(l).map_or(0, |s| s.outputs);
                            row.kept = Some(Kept {
                                units: shape.outputs,
                                of: units,
                                along: "output units",
                            });
                        }
                        PruneMethod::LnStructured { dim, .. } if t.param.is_none() => {
                            row.kept = shrink(&mut shape, *dim, *amount).map(|(units, of)| Kept {
                                units,
                                of,
                                along: if *dim == 0 { "output units" } else { "inputs" },
                            });
                        }
                        PruneMethod::LnStructured { .. } => {}
                        PruneMethod::GlobalL1 => {
                            row.global = Some(Global {
                                sparsity: *amount,
                                targets: targets.len(),
                            });
                        }
                        PruneMethod::L1Unstructured | PruneMethod::RandomUnstructured => {
                            let left = 1.0 - row.sparsity.unwrap_or(0.0);
                            row.sparsity = Some(1.0 - left * (1.0 - amount));
                        }
                    }
                }
                Compression::Quantize {
                    targets, scheme, ..
                } => {
                    if targets.iter().any(|t| t.layer == l.name) {
                        row.steps.push(format!("quantize {}", scheme_words(scheme)));
                        quantized = Some(*scheme);
                    }
                }
            }
        }
        if row.steps.is_empty() {
            match small {
                Some(small) => row.steps.push(format!(
                    "units removed: {} -> {} parameters",
                    l.params, small.params
                )),
                None => continue,
            }
        }
        row.bytes_after = match &quantized {
            Some(scheme) => super::stored::stored_bytes(
                scheme,
                shape.outputs,
                shape.inputs,
                shape.bias > 0,
                l.device,
            ),
            None => 4 * (shape.weight + shape.bias),
        };
        saved = saved.saturating_add(row.bytes_before.saturating_sub(row.bytes_after));
        rows.push(row);
    }
    let model_bytes_after = model_bytes_before.saturating_sub(saved);
    Some(CompressionPlan {
        layers: rows,
        model_bytes_before,
        model_bytes_after,
        ratio: model_bytes_before as f64 / model_bytes_after.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_half_to_even_as_pytorch() {
        // 0.5·5 → 2, 0.5·3 → 2, 0.35·10 → 4 (3.5 rounds to even), 0.45·10 → 4 (4.5 to even).
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(1.5), 2);
        assert_eq!(round_half_even(3.5), 4);
        assert_eq!(round_half_even(4.5), 4);
        assert_eq!(round_half_even(128.0), 128);
        assert_eq!(round_half_even(2.6), 3);
    }

    #[test]
    fn schedules_read_as_sentences() {
        let g = PruneSchedule::Gradual {
            start: 100,
            end: 2000,
            every: 100,
            initial: 0.0,
        };
        assert_eq!(
            schedule_words(&g, 0.9),
            "gradual 0 -> 90% over steps 100..2000 every 100"
        );
        let a = PruneSchedule::After {
            finetune: Duration::Epochs(2),
        };
        assert_eq!(
            schedule_words(&a, 0.5),
            "after training, then 2 epochs of fine-tuning"
        );
        let i = PruneSchedule::Iterative {
            rounds: 2,
            rewind: 500,
        };
        // 1 - (1 - 0.75)^(1/2) = 0.5.
        assert_eq!(
            schedule_words(&i, 0.75),
            "iterative, 2 rounds of 50% of the remaining weights, rewinding to step 500"
        );
    }
}
