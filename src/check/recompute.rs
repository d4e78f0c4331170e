//! Groups marked `recompute` (activation checkpointing): their forward runs twice a step, once
//! without keeping activations and again in backward, so a layer whose forward updates state
//! would update it twice: batch norm's running statistics, and quantization-aware training's
//! observers; and dropout drawn twice must find its generator as the forward left it, which
//! threads sharing libtorch's generator prevent. All three are refused (K0210). The facts they
//! rest on (which layers drop, where libtorch draws the masks, QAT) serve K0408 and K0402 too.

use super::cx::Cx;
use crate::diagnostic::problem::{Inconsistent, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{Compression, Device, Node, Parallel, Precision, QuantScheme};
use crate::span::Span;

/// How the run spreads its work, as far as recomputation cares: the strategy, its statement,
/// the precision and the experiment's device.
pub struct Spread<'a> {
    pub parallel: &'a Parallel,
    pub span: Span,
    pub precision: Precision,
    pub device: Device,
}

/// Checks every recomputed group of `nodes` against its layers, against `compression` and
/// against the threads the strategy runs at once; returns whether there was no error.
pub fn check(
    cx: &mut Cx,
    nodes: &[Node],
    compression: &[Compression],
    spread: Option<Spread>,
) -> bool {
    let mut groups = Vec::new();
    recomputed(nodes, &mut groups);
    let mut ok = true;
    for (at, inner) in &groups {
        let mut layers = Vec::new();
        batch_norms(inner, &mut layers);
        for (layer, span) in layers {
            cx.report(Problem::Strategies(Strategies::Inconsistent {
                span: *at,
                situation: Inconsistent::RecomputeUpdatesState { layer, at: span },
            }));
            ok = false;
        }
    }
    let qat = qat(compression);
    let dropout = groups
        .iter()
        .find(|(_, inner)| crate::ir::layers(inner).iter().any(|l| l.drops()));
    if let (Some((at, _)), Some(s)) = (dropout, spread) {
        if let Some(strategy) = shared_generator(&s) {
            cx.report(Problem::Strategies(Strategies::Inconsistent {
                span: *at,
                situation: Inconsistent::RecomputeSharedGenerator {
                    strategy,
                    parallel: s.span,
                },
            }));
            ok = false;
        }
    }
    if let (Some(span), Some((recompute, _))) = (qat, groups.first()) {
        cx.report(Problem::Strategies(Strategies::Inconsistent {
            span,
            situation: Inconsistent::RecomputeQat {
                recompute: *recompute,
            },
        }));
        ok = false;
    }
    ok
}

/// The quantization-aware training statement among `compression`, when there is one.
pub fn qat(compression: &[Compression]) -> Option<Span> {
    compression.iter().find_map(|c| match c {
        Compression::Quantize {
            scheme: QuantScheme::Qat { .. },
            span,
            ..
        } => Some(*span),
        _ => None,
    })
}

/// The strategy, when it runs threads at once that draw dropout masks from one of libtorch's
/// generators (Kiln draws fp32 CPU masks itself, from a stream per thread): data-parallel
/// replicas sharing a CUDA device, or sharing the CPU in bf16/fp16; pipeline stages on the CPU
/// in bf16/fp16.
fn shared_generator(s: &Spread) -> Option<&'static str> {
    let libtorch_draws = |d: Device| libtorch_draws(d, s.precision);
    match s.parallel {
        Parallel::Data { devices, .. } => devices
            .iter()
            .any(|d| libtorch_draws(*d) && devices.iter().filter(|e| *e == d).count() > 1)
            .then_some("data"),
        Parallel::Pipeline { .. } => {
            (s.device == Device::Cpu && libtorch_draws(Device::Cpu)).then_some("pipeline")
        }
        Parallel::None | Parallel::Model | Parallel::Distributed { .. } => None,
    }
}

/// Whether libtorch's generator, rather than Kiln (fp32 on the CPU), draws the dropout masks of
/// activations on `device` under `precision`.
pub fn libtorch_draws(device: Device, precision: Precision) -> bool {
    device != Device::Cpu || precision != Precision::Fp32
}

/// The outermost recomputed groups: the `recompute` span and the group's nodes.
fn recomputed<'n>(nodes: &'n [Node], out: &mut Vec<(Span, &'n [Node])>) {
    for node in nodes {
        match node {
            Node::Layer(l) => {
                if let Some(at) = l.recompute {
                    out.push((at, std::slice::from_ref(node)));
                }
            }
            Node::Block {
                nodes, recompute, ..
            }
            | Node::Residual {
                nodes, recompute, ..
            } => match recompute {
                Some(at) => out.push((*at, std::slice::from_ref(node))),
                None => recomputed(nodes, out),
            },
        }
    }
}

/// Whether a batch norm is among `nodes`.
pub fn holds_batch_norm(nodes: &[Node]) -> bool {
    let mut found = Vec::new();
    batch_norms(nodes, &mut found);
    !found.is_empty()
}

/// The batch norms among `nodes`, with their statements.
fn batch_norms(nodes: &[Node], out: &mut Vec<(String, Span)>) {
    for node in nodes {
        match node {
            Node::Layer(l) => {
                if l.batch_statistics() {
                    out.push((l.name.clone(), l.span));
                }
            }
            Node::Block { nodes, .. } | Node::Residual { nodes, .. } => batch_norms(nodes, out),
        }
    }
}
