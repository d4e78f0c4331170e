//! Groups marked `recompute` (activation checkpointing): their forward runs twice a step, once
//! without keeping activations and again in backward, so a layer whose forward updates state
//! would update it twice: batch norm's running statistics, and quantization-aware training's
//! observers. Both are refused (K0210).

use super::cx::Cx;
use crate::diagnostic::problem::{Inconsistent, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{Compression, LayerKind, Node, QuantScheme};
use crate::span::Span;

/// Checks every recomputed group of `nodes` against its layers and against `compression`;
/// returns whether there was no error.
pub fn check(cx: &mut Cx, nodes: &[Node], compression: &[Compression]) -> bool {
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
    let qat = compression.iter().find_map(|c| match c {
        Compression::Quantize {
            scheme: QuantScheme::Qat { .. },
            span,
            ..
        } => Some(*span),
        _ => None,
    });
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
                if matches!(
                    l.kind,
                    LayerKind::BatchNorm1d { .. } | LayerKind::BatchNorm2d { .. }
                ) {
                    out.push((l.name.clone(), l.span));
                }
            }
            Node::Block { nodes, .. } | Node::Residual { nodes, .. } => batch_norms(nodes, out),
        }
    }
}
