//! Compression checks that need each layer's device: FP8 on the CPU (K0203) and weight-only
//! quantization that will not speed a CPU layer up (K0411); and the steps against the strategy
//! and each other (K0210).

use super::super::cx::Cx;
use crate::diagnostic::problem::Inconsistent;
use crate::diagnostic::problem::{
    NoSpeedup, Strategies, Warnings, WeightOnly, LARGE_BATCH, SMALL_LAYER_WEIGHTS,
};
use crate::diagnostic::Problem;
use crate::ir::{
    layers, Compression, Device, Duration, LayerKind, Node, Parallel, PruneSchedule, QuantScheme,
};
use crate::span::Span;

/// Checks the compression steps against the placed model; `batch` is the global batch. Returns
/// whether there was no error (K0411 is a warning).
pub fn check_placed(cx: &mut Cx, compression: &[Compression], nodes: &[Node], batch: u64) -> bool {
    let all = layers(nodes);
    let mut ok = true;
    for c in compression {
        let Compression::Quantize {
            targets, scheme, ..
        } = c
        else {
            continue;
        };
        let weight_only = match scheme {
            QuantScheme::Int8 { dynamic: false, .. } => Some(WeightOnly::Int8),
            QuantScheme::Int4 { .. } => Some(WeightOnly::Int4),
            QuantScheme::Int8 { dynamic: true, .. }
            | QuantScheme::Fp8 { .. }
            | QuantScheme::Qat { .. }
            | QuantScheme::Cast { .. } => None,
        };
        for t in targets {
            let Some(l) = all.iter().find(|l| l.name == t.layer) else {
                continue;
            };
            if l.device != Device::Cpu {
                continue;
            }
            if matches!(scheme, QuantScheme::Fp8 { .. }) {
                cx.report(Problem::Strategies(Strategies::Fp8OnCpu {
                    span: t.span,
                    layer: l.name.clone(),
                    layer_span: l.span,
                }));
                ok = false;
            }
            let (
                Some(scheme),
                LayerKind::Linear {
                    inputs, outputs, ..
                },
            ) = (weight_only, &l.kind)
            else {
                continue;
            };
            let (inputs, outputs) = (*inputs as u64, *outputs as u64);
            let why = if batch >= LARGE_BATCH {
                NoSpeedup::LargeBatch
            } else if inputs.saturating_mul(outputs) < SMALL_LAYER_WEIGHTS {
                NoSpeedup::SmallLayer
            } else {
                continue;
            };
            cx.report(Problem::Warnings(Warnings::QuantNoSpeedup {
                span: t.span,
                layer: l.name.clone(),
                layer_span: l.span,
                inputs,
                outputs,
                batch,
                scheme,
                why,
            }));
        }
    }
    ok
}

/// Checks the compression steps against the rest of the experiment: quantization-aware
/// training keeps its observers in one model, so strategies that copy or split the model are
/// refused; pruning keeps masks of whole tensors, so a strategy that shards them is refused; and at most one pruning schedule may lengthen training (fine-tuning or rounds).
/// Returns whether there was no error.
pub fn check_combined(
    cx: &mut Cx,
    compression: &[Compression],
    parallel: &Parallel,
    parallel_span: Span,
) -> bool {
    let mut ok = true;
    let strategy = match parallel {
        Parallel::Data { .. } => Some("data"),
        Parallel::Pipeline { .. } => Some("pipeline"),
        Parallel::Distributed { sharding: None, .. } => Some("ddp"),
        Parallel::Distributed {
            sharding: Some(_), ..
        } => Some("fsdp"),
        Parallel::None | Parallel::Model => None,
    };
    // Tensor parallel splits the linears that pruning masks and quantization replaces.
    if parallel.tensor_degree() > 1 {
        if let Some(c) = compression.first() {
            let (Compression::Prune { span, .. } | Compression::Quantize { span, .. }) = c;
            cx.report(Problem::Strategies(Strategies::MeshNotRun {
                span: *span,
                what: "compression under tensor parallel".into(),
                other: Some(parallel_span),
            }));
            return false;
        }
    }
    let mut first: Option<Span> = None;
    for c in compression {
        match c {
            Compression::Quantize {
                scheme: QuantScheme::Qat { .. },
                span,
                ..
            } => {
                if let Some(strategy) = strategy {
                    cx.report(Problem::Strategies(Strategies::Inconsistent {
                        span: *span,
                        situation: Inconsistent::QatReplicated {
                            strategy,
                            parallel: parallel_span,
                        },
                    }));
                    ok = false;
                }
            }
            Compression::Prune { schedule, span, .. } => {
                if strategy == Some("fsdp") {
                    cx.report(Problem::Strategies(Strategies::Inconsistent {
                        span: *span,
                        situation: Inconsistent::PruneSharded {
                            parallel: parallel_span,
                        },
                    }));
                    ok = false;
                }
                let lengthens = matches!(
                    schedule,
                    PruneSchedule::Iterative { .. }
                        | PruneSchedule::After {
                            finetune: Duration::Steps(1..) | Duration::Epochs(1..)
                        }
                );
                if !lengthens {
                    continue;
                }
                match first {
                    Some(f) => {
                        cx.report(Problem::Strategies(Strategies::Inconsistent {
                            span: *span,
                            situation: Inconsistent::TwoLengthenings { first: f },
                        }));
                        ok = false;
                    }
                    None => first = Some(*span),
                }
            }
            Compression::Quantize { .. } => {}
        }
    }
    ok
}
