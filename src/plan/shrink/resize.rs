//! The shrunk model: every layer resized to the units kept, its shapes, parameters and FLOPs
//! computed as the checker computes them.

use std::collections::HashMap;

use super::{Group, Reason, Role};
use crate::ir::{Layer, LayerKind, Node, Shape};

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
            Node::Block { name, nodes, span } => {
                let (nodes, y) = resize(nodes, x, outputs);
                x = y;
                Node::Block {
                    name: name.clone(),
                    nodes,
                    span: *span,
                }
            }
            Node::Residual { nodes, span } => {
                let (nodes, y) = resize(nodes, x, outputs);
                x = y;
                Node::Residual { nodes, span: *span }
            }
        };
        out.push(node);
    }
    (out, x)
}

/// Saturating element count, as the checker computes it.
fn numel(shape: &[i64]) -> i64 {
    shape.iter().fold(1i64, |n, d| n.saturating_mul(*d))
}

/// `l` on the input `x`: sizes, output, parameters and FLOPs as the checker computes them.
fn resize_layer(l: &Layer, x: &Shape, outputs: &HashMap<&str, i64>) -> Layer {
    let mut l = l.clone();
    if l.input == *x && !outputs.contains_key(l.name.as_str()) {
        return l;
    }
    let count = |v: f64| v as u64;
    let n = numel(x).max(0) as u64;
    let first = x.first().copied().unwrap_or(0);
    let mut y = x.clone();
    match &mut l.kind {
        LayerKind::Linear {
            inputs,
            outputs: o,
            bias,
        } => {
            *inputs = x.last().copied().unwrap_or(0);
            *o = outputs.get(l.name.as_str()).copied().unwrap_or(*o);
            if let Some(last) = y.0.last_mut() {
                *last = *o;
            }
            let (i, of) = (*inputs as f64, *o as f64);
            let positions = (n as f64 / i).max(1.0);
            l.params = count(i * of + if *bias { of } else { 0.0 });
            l.flops = count(2.0 * positions * i * of);
        }
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
            conv.inputs = first;
            conv.outputs = outputs
                .get(l.name.as_str())
                .copied()
                .unwrap_or(conv.outputs);
            y = l.output.clone();
            y.0[0] = conv.outputs;
            let kernel: f64 = conv.kernel.iter().map(|k| *k as f64).product();
            let per_group = (conv.inputs / conv.groups) as f64;
            let o = conv.outputs as f64;
            let positions: f64 = y[1..].iter().map(|d| *d as f64).product();
            l.params = count(o * per_group * kernel + if conv.bias { o } else { 0.0 });
            l.flops = count(2.0 * per_group * kernel * o * positions);
        }
        LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
            norm.features = first;
            let params = if norm.affine { 2 * first as u64 } else { 0 };
            (l.params, l.flops) = (params, n);
        }
        LayerKind::LayerNorm { shape, .. } => {
            *shape = x[x.len().saturating_sub(shape.len())..].to_vec();
            (l.params, l.flops) = (count(2.0 * numel(shape) as f64), n);
        }
        LayerKind::GroupNorm { channels, .. } => {
            *channels = first;
            (l.params, l.flops) = (2 * first as u64, n);
        }
        LayerKind::Prelu { parameters, .. } => {
            if *parameters > 1 {
                *parameters = first;
            }
            (l.params, l.flops) = (*parameters as u64, n);
        }
        LayerKind::MaxPool1d { pool }
        | LayerKind::MaxPool2d { pool }
        | LayerKind::AvgPool1d { pool }
        | LayerKind::AvgPool2d { pool } => {
            y = l.output.clone();
            y.0[0] = first;
            l.flops = count(numel(&y) as f64 * numel(&pool.kernel) as f64);
        }
        LayerKind::AdaptiveAvgPool1d { .. } | LayerKind::AdaptiveAvgPool2d { .. } => {
            y = l.output.clone();
            y.0[0] = first;
            l.flops = n;
        }
        LayerKind::Flatten => y = Shape(vec![numel(x)]),
        LayerKind::Mean { dim } => {
            y.0.remove(*dim as usize);
            l.flops = n;
        }
        LayerKind::Dropout { .. }
        | LayerKind::Relu
        | LayerKind::LeakyRelu { .. }
        | LayerKind::Elu { .. }
        | LayerKind::Gelu
        | LayerKind::Silu
        | LayerKind::Tanh
        | LayerKind::Sigmoid
        | LayerKind::Softmax { .. }
        | LayerKind::LogSoftmax { .. } => l.flops = n,
        LayerKind::Reshape { .. }
        | LayerKind::Embedding { .. }
        | LayerKind::Positional { .. }
        | LayerKind::Attention { .. }
        | LayerKind::TransformerBlock { .. } => y = l.output.clone(),
    }
    l.input = x.clone();
    l.output = y;
    l
}
