//! The checks that tie the parallel strategy to the model: placements it ignores, stages it
//! cannot make, replicas that share a generator, batch norm per micro-batch, fsdp's units, and
//! the pipeline's stage boundaries.

use crate::check::cx::Cx;
use crate::check::parallel::ParallelIn;
use crate::check::placement::Placement;
use crate::check::recompute::libtorch_draws;
use crate::diagnostic::problem::{Inconsistent, Strategies, Warnings};
use crate::diagnostic::Problem;
use crate::ir::{layers, tensor, Device, Node, Parallel, Precision};

pub(super) fn check_strategy(
    cx: &mut Cx,
    p: &ParallelIn,
    nodes: &[Node],
    default: Device,
    placements: &[Placement],
    precision: Precision,
    whole: bool,
) -> bool {
    let all = layers(nodes);
    let mut ok = true;
    let devices: Vec<Device> = {
        let mut d: Vec<Device> = all.iter().map(|l| l.device).collect();
        d.sort();
        d.dedup();
        d
    };
    match &p.parallel {
        Parallel::Model if devices.len() < 2 => {
            cx.report(Problem::Warnings(Warnings::ModelParallelOneDevice {
                span: p.span,
                device: devices.first().copied().unwrap_or(default),
            }));
        }
        Parallel::Pipeline { stages, .. } => {
            let top = nodes.len() as u64;
            if *stages > top {
                cx.report(Problem::Strategies(Strategies::TooManyStages {
                    span: p.stages_span.unwrap_or(p.span),
                    stages: *stages,
                    layers: top,
                }));
                ok = false;
            }
        }
        Parallel::Data { .. } | Parallel::Distributed { .. } => {
            if let Some(first) = placements.first() {
                cx.report(Problem::Warnings(Warnings::PlacementIgnored {
                    span: first.span,
                    parallel: p.span,
                }));
            }
        }
        Parallel::None | Parallel::Model => {}
    }
    if let Parallel::Data { devices: dp, .. } = &p.parallel {
        if dp.len() == 1 {
            cx.report(Problem::Warnings(Warnings::DataParallelOneDevice {
                span: p.span,
            }));
        }
        shared_generator(cx, p, dp, &all, precision);
    }
    // fsdp shards by top-level blocks: without one the model is a single unit, gathered whole.
    if let Parallel::Distributed {
        sharding: Some(_), ..
    } = &p.parallel
    {
        if !nodes.iter().any(|n| matches!(n, Node::Block { .. })) {
            cx.report(Problem::Warnings(Warnings::FsdpOneUnit { span: p.span }));
        }
    }
    ok &= tensor_splits(cx, p, nodes, whole);
    if let Parallel::Distributed {
        backend: crate::ir::Backend::Nccl,
        ..
    } = &p.parallel
    {
        if default == Device::Cpu {
            cx.report(Problem::Strategies(Strategies::Inconsistent {
                span: p.backend_span.unwrap_or(p.span),
                situation: Inconsistent::NcclOnCpu,
            }));
            ok = false;
        }
    }
    ok
}

/// A tensor degree against the model: heads and hidden widths it must divide (K0230), and a
/// warning when it splits no layer of a model that checked `whole` (K0422). Returns whether
/// there was no error.
fn tensor_splits(cx: &mut Cx, p: &ParallelIn, nodes: &[Node], whole: bool) -> bool {
    let degree = p.parallel.tensor_degree();
    if degree == 1 {
        return true;
    }
    let degree_span = p.tensor_span.unwrap_or(p.span);
    let wrong = tensor::indivisible(nodes, degree);
    for w in &wrong {
        cx.report(Problem::Strategies(Strategies::TensorIndivisible {
            span: w.layer.span,
            layer: w.layer.name.clone(),
            what: w.what,
            size: w.size,
            degree,
            degree_span,
        }));
    }
    if whole
        && wrong.is_empty()
        && !tensor::splits(nodes, degree)
            .iter()
            .any(|(_, s)| s.splits())
    {
        cx.report(Problem::Warnings(Warnings::TensorSplitsNothing {
            span: degree_span,
            degree,
        }));
    }
    wrong.is_empty()
}

/// Warns of batch norm in a pipeline, whose statistics come from one micro-batch at a time
/// (`micro` samples per step, cut into the pipeline's micro-batches).
pub(super) fn pipeline_batch_norm(cx: &mut Cx, p: &ParallelIn, nodes: &[Node], micro: u64) {
    let Parallel::Pipeline { micro_batches, .. } = p.parallel else {
        return;
    };
    let norm = layers(nodes).into_iter().find(|l| {
        matches!(
            l.kind,
            crate::ir::LayerKind::BatchNorm1d { .. } | crate::ir::LayerKind::BatchNorm2d { .. }
        )
    });
    if let Some(l) = norm {
        cx.report(Problem::Warnings(Warnings::PipelineBatchNorm {
            span: l.span,
            layer: l.name.clone(),
            parallel: p.span,
            samples: micro / micro_batches.max(1),
        }));
    }
}

/// K0408: dropout on data-parallel replicas that share a device whose generator draws their
/// masks, which then come from it in thread order: a CUDA device, or the CPU when the
/// activations are bf16/fp16. Kiln draws fp32 CPU masks itself, each replica from a key stream
/// of its own, so CPU replicas in fp32 are reproducible.
fn shared_generator(
    cx: &mut Cx,
    p: &ParallelIn,
    replicas: &[Device],
    all: &[&crate::ir::Layer],
    precision: Precision,
) {
    let shared = replicas.iter().find_map(|d| {
        let n = replicas.iter().filter(|e| *e == d).count() as u64;
        (n > 1 && libtorch_draws(*d, precision)).then_some((*d, n))
    });
    let dropout = all.iter().find(|l| l.drops());
    if let (Some((device, n)), Some(layer)) = (shared, dropout) {
        cx.report(Problem::Warnings(Warnings::DropoutSharedGenerator {
            span: layer.span,
            parallel: p.dp_span.unwrap_or(p.span),
            device,
            replicas: n,
        }));
    }
}

/// Cuts a pipeline's top-level nodes into stages of about equal forward FLOPs, none empty.
pub(super) fn finish_pipeline(parallel: Parallel, nodes: &[Node]) -> Parallel {
    let Parallel::Pipeline {
        stages,
        micro_batches,
        schedule,
        ..
    } = parallel
    else {
        return parallel;
    };
    // Balance stages by forward FLOPs over top-level nodes, keeping each stage non-empty.
    let cost: Vec<u64> = nodes
        .iter()
        .map(|n| {
            layers(std::slice::from_ref(n))
                .iter()
                .map(|l| l.flops.max(1))
                .sum()
        })
        .collect();
    let total: u64 = cost.iter().sum();
    let mut boundaries = vec![0];
    let mut acc = 0;
    for (i, c) in cost.iter().enumerate() {
        let remaining_nodes = nodes.len() - i;
        let remaining_stages = stages as usize - boundaries.len();
        let target = total * boundaries.len() as u64 / stages;
        if i > *boundaries.last().unwrap_or(&0)
            && boundaries.len() < stages as usize
            && (acc >= target || remaining_nodes == remaining_stages)
        {
            boundaries.push(i);
        }
        acc += c;
    }
    Parallel::Pipeline {
        stages,
        micro_batches,
        schedule,
        boundaries,
    }
}
