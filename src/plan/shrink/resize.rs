//! The shrunk model: every layer resized to the units kept, its shapes, parameters and FLOPs
//! computed as the checker computes them.

use std::collections::HashMap;

use super::{Group, Reason, Role};
use crate::ir::{Layer, Node, Shape};

/// The model with each group's producers reduced to the kept number of units, every size,
/// shape, parameter and FLOP count resolved again; a group norm that no longer divides is refused.
pub fn shrink(nodes: &[Node], keep: &[(&Group, i64)]) -> Result<Vec<Node>, Reason> {
    let mut outputs: HashMap<&str, i64> = HashMap::new();
    for (g, kept) in keep {
        if let Some((_, groups)) = g.indivisible(*kept) {
            return Err(Reason::GroupNorm {
                groups,
                kept: *kept,
            });
        }
        for m in g.role(Role::Producer) {
            outputs.insert(&m.layer, *kept);
        }
    }
    let input = crate::ir::layers(nodes)
        .first()
        .map(|l| l.input.clone())
        .unwrap_or_default();
    Ok(resize(nodes, input, &outputs).0)
}

fn resize(nodes: &[Node], mut x: Shape, outputs: &HashMap<&str, i64>) -> (Vec<Node>, Shape) {
    let mut out = Vec::new();
    for node in nodes {
        let node = match node {
            Node::Layer(l) => {
                let l = resize_layer(l, &x, outputs);
                x = l.output.clone();
                Node::Layer(l)
            }
            Node::Block {
                name,
                nodes,
                span,
                recompute,
            } => {
                let (nodes, y) = resize(nodes, x, outputs);
                x = y;
                Node::Block {
                    name: name.clone(),
                    nodes,
                    span: *span,
                    recompute: *recompute,
                }
            }
            Node::Residual {
                nodes,
                span,
                recompute,
            } => {
                let (nodes, y) = resize(nodes, x, outputs);
                x = y;
                Node::Residual {
                    nodes,
                    span: *span,
                    recompute: *recompute,
                }
            }
        };
        out.push(node);
    }
    (out, x)
}

/// `l` on the input `x`: sizes, output, parameters and FLOPs as the checker computes them
/// (each family's facts, `LayerKind::resize`, `params` and `flops`).
fn resize_layer(l: &Layer, x: &Shape, outputs: &HashMap<&str, i64>) -> Layer {
    let mut l = l.clone();
    let units = outputs.get(l.name.as_str()).copied();
    if l.input == *x && units.is_none() {
        return l;
    }
    let y = Shape(l.kind.resize(x, units, &l.output));
    l.params = l.kind.params();
    l.flops = l.kind.flops(x, &y);
    l.input = x.clone();
    l.output = y;
    l
}
