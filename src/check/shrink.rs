//! Structured pruning against the model: an amount that keeps no unit (K0214), and output units
//! that cannot be removed at the end of training (K0216, see `plan::shrink`).

use super::cx::Cx;
use super::placement::within;
use crate::diagnostic::problem::Strategies;
use crate::diagnostic::Problem;
use crate::ir::{layers, Compression, Layer, LayerKind, Node, PruneMethod};
use crate::plan::shrink::{group, kept, Place, Reason, Role};
use crate::span::Span;

/// The shape of a layer's weight, for the layers structured pruning removes units from.
fn weight_shape(l: &Layer) -> Option<Vec<i64>> {
    match &l.kind {
        LayerKind::Linear {
            inputs, outputs, ..
        } => Some(vec![*outputs, *inputs]),
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
            let mut shape = vec![conv.outputs, conv.inputs / conv.groups.max(1)];
            shape.extend(&conv.kernel);
            Some(shape)
        }
        _ => None,
    }
}

/// Checks every `ln_structured` prune; false when one is an error.
pub(super) fn check_structured(cx: &mut Cx, nodes: &[Node], compression: &[Compression]) -> bool {
    let mut ok = true;
    let all = layers(nodes);
    // Each group's producers, the target that first pruned it and the units it keeps.
    let mut seen: Vec<(Vec<String>, &Layer, i64)> = Vec::new();
    for c in compression {
        let Compression::Prune {
            targets,
            method: PruneMethod::LnStructured { dim, .. },
            amount,
            ..
        } = c
        else {
            continue;
        };
        for t in targets {
            for l in all.iter().copied().filter(|l| within(&l.name, &t.layer)) {
                let Some(shape) = weight_shape(l) else {
                    if l.name == t.layer && *dim == 0 {
                        let reason = Reason::NotUnits(l.kind.kind());
                        cannot(cx, t.span, l, reason, Place::Layer(l));
                        ok = false;
                    }
                    continue;
                };
                let is_bias = t.param.as_deref() == Some("bias");
                let rank = if is_bias { 1 } else { shape.len() as i64 };
                let d = if *dim < 0 { dim + rank } else { *dim };
                let Some(&units) = shape.get(d as usize).filter(|_| d >= 0 && d < rank) else {
                    continue;
                };
                let keep = kept(units, *amount);
                if keep <= 0 {
                    cx.report(Problem::Strategies(Strategies::PruneLeavesNothing {
                        span: t.span,
                        layer: l.name.clone(),
                        layer_span: l.span,
                        units,
                        amount: *amount,
                        dim: d,
                    }));
                    ok = false;
                    continue;
                }
                if d != 0 {
                    continue;
                }
                match group(nodes, l) {
                    Err(r) => {
                        cannot(cx, t.span, l, r.reason, r.at);
                        ok = false;
                    }
                    Ok(g) => {
                        let producers: Vec<String> =
                            g.role(Role::Producer).map(|m| m.layer.clone()).collect();
                        match seen.iter().find(|(p, _, _)| *p == producers) {
                            Some((_, first, other)) if *other != keep => {
                                let reason = Reason::Amounts {
                                    kept: keep,
                                    other: *other,
                                };
                                cannot(cx, t.span, l, reason, Place::Layer(first));
                                ok = false;
                                continue;
                            }
                            Some(_) => {}
                            None => seen.push((producers, l, keep)),
                        }
                        if let Some((name, groups)) = g.indivisible(keep) {
                            let Some(norm) = all.iter().copied().find(|n| n.name == name) else {
                                continue;
                            };
                            let reason = Reason::GroupNorm { groups, kept: keep };
                            cannot(cx, t.span, l, reason, Place::Layer(norm));
                            ok = false;
                        }
                    }
                }
            }
        }
    }
    ok
}

/// Reports K0216 for the target at `span` on layer `l`.
fn cannot(cx: &mut Cx, span: Span, l: &Layer, reason: Reason, at: Place) {
    let (at, at_layer) = match at {
        Place::Layer(b) => (b.span, Some(b.name.clone())),
        Place::Residual(n) => (node_span(n), None),
    };
    cx.report(Problem::Strategies(Strategies::CannotShrink {
        span,
        layer: l.name.clone(),
        reason,
        at,
        at_layer,
    }));
}

fn node_span(n: &Node) -> Span {
    match n {
        Node::Layer(l) => l.span,
        Node::Block { span, .. } | Node::Residual { span, .. } => *span,
    }
}
