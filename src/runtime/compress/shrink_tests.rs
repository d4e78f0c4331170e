//! Shrinking a masked model computes what the masked model computed, with the plan's shapes.

use super::*;
use kiln::check::check_text;
use kiln::ir::{layers, Layer, LayerKind};
use kiln::plan::shrink::group;

/// The checked model of an experiment with this input and model body.
fn model(input: &str, body: &str) -> Vec<Node> {
    let text = format!(
        "experiment \"t\" {{
  data {{
    source synthetic(inputs: normal({input}), targets: randint(10), count: 64)
    batch 16
  }}
  model {{
    input {input}
    {body}
  }}
  device cpu
  optimizer sgd(lr: 0.1)
  train {{
    epochs 1
    loss cross_entropy
  }}
}}"
    );
    let checked = check_text("t.exp", text);
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    checked.trials[0].model.nodes.clone()
}

fn layer<'m>(nodes: &'m [Node], name: &str) -> &'m Layer {
    layers(nodes).into_iter().find(|l| l.name == name).unwrap()
}

/// Gives the norms trained-looking affine parameters and running statistics.
fn train_norms(net: &Net) {
    tch::no_grad(|| {
        for p in &net.params {
            if p.tensor.dim() == 1 {
                p.tensor
                    .shallow_clone()
                    .copy_(&Tensor::randn(p.tensor.size(), (Kind::Float, Device::Cpu)));
            }
        }
        for b in &net.buffers {
            let fresh = Tensor::rand(b.tensor.size(), (Kind::Float, Device::Cpu)) + 0.5;
            b.tensor.shallow_clone().copy_(&fresh);
        }
    });
}

/// The parameters' shapes of the shrunk model are the shrunk nodes' sizes, and their total is
/// the plan's parameter count.
fn shapes_are_planned(net: &Net, nodes: &[Node]) {
    let total: i64 = net.params.iter().map(|p| p.tensor.numel() as i64).sum();
    let planned: u64 = layers(nodes).iter().map(|l| l.params).sum();
    assert_eq!(total as u64, planned);
    for l in layers(nodes) {
        let weight = net
            .params
            .iter()
            .find(|p| p.name == format!("{}.weight", l.name));
        let expected = match &l.kind {
            LayerKind::Linear {
                inputs, outputs, ..
            } => vec![*outputs, *inputs],
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
                let mut s = vec![conv.outputs, conv.inputs / conv.groups];
                s.extend(&conv.kernel);
                s
            }
            LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
                vec![norm.features]
            }
            LayerKind::GroupNorm { channels, .. } => vec![*channels],
            LayerKind::LayerNorm { norm } => norm.shape.clone(),
            LayerKind::Prelu { parameters, .. } => vec![*parameters],
            _ => continue,
        };
        assert_eq!(weight.unwrap().tensor.size(), expected, "{}", l.name);
    }
}

/// Masks `targets` (keeping about two thirds of each group's units, at random), shrinks, and
/// compares the two models' outputs in evaluation mode.
fn masked_equals_shrunk(input: &[i64], body: &str, targets: &[&str]) {
    let (masked, shrunk) = masked_and_shrunk(input, body, targets);
    let diff = (&masked - &shrunk).abs().max().double_value(&[]);
    assert!(diff < 1e-5, "outputs differ by {diff}");
}

/// The outputs of the masked model and of the shrunk one, whose parameters are checked against
/// the plan's shrunk nodes.
fn masked_and_shrunk(input: &[i64], body: &str, targets: &[&str]) -> (Tensor, Tensor) {
    tch::manual_seed(7);
    let shape = format!("{input:?}");
    let nodes = model(&shape, body);
    let net = model::build(&nodes, Precision::Fp32, Some(Device::Cpu)).unwrap();
    train_norms(&net);
    let groups: Vec<Group> = targets
        .iter()
        .map(|t| group(&nodes, layer(&nodes, t)).unwrap())
        .collect();
    let keep: Vec<(&Group, Tensor)> = groups
        .iter()
        .map(|g| {
            let perm = Tensor::randperm(g.units, (Kind::Int64, Device::Cpu));
            (g, perm.narrow(0, 0, g.units * 2 / 3))
        })
        .collect();
    for (g, kept) in &keep {
        mask(&net, g, kept).unwrap();
    }
    let mut batch = vec![5i64];
    batch.extend(input);
    let x = Tensor::randn(batch, (Kind::Float, Device::Cpu));
    let masked = net.forward(&x, false).unwrap();
    let span = layer(&nodes, targets[0]).span;
    let (small, small_nodes) = shrink(
        &net,
        &nodes,
        &keep,
        Precision::Fp32,
        Some(Device::Cpu),
        span,
    )
    .unwrap();
    let shrunk = small.forward(&x, false).unwrap();
    assert!(
        small.params.iter().map(|p| p.tensor.numel()).sum::<usize>()
            < net.params.iter().map(|p| p.tensor.numel()).sum::<usize>()
    );
    shapes_are_planned(&small, &small_nodes);
    (masked, shrunk)
}

#[test]
fn mlp_shrinks_exactly() {
    masked_equals_shrunk(
        &[20],
        "fc1: linear(32)\n relu\n fc2: linear(24)\n gelu\n fc3: linear(10)",
        &["fc1", "fc2"],
    );
}

#[test]
fn a_sigmoid_constant_is_folded_into_the_next_bias() {
    masked_equals_shrunk(
        &[20],
        "fc1: linear(32)\n sigmoid\n fc2: linear(10)",
        &["fc1"],
    );
}

#[test]
fn cnn_with_batch_norm_shrinks_exactly() {
    let body = "c1: conv2d(8, kernel_size: 3, padding: 1)
    bn: batchnorm2d
    relu
    max_pool2d(2)
    c2: conv2d(6, kernel_size: 3, padding: 1)
    bn2: batchnorm2d
    relu
    flatten
    fc: linear(10)";
    masked_equals_shrunk(&[3, 8, 8], body, &["c1", "c2"]);
}

#[test]
fn conv1d_with_prelu_and_average_pooling_shrinks_exactly() {
    let body = "c1: conv1d(9, kernel_size: 3, padding: 1)
    bn: batchnorm1d
    p: prelu(num_parameters: 9)
    avg_pool1d(2)
    c2: conv1d(6, kernel_size: 3)
    elu
    flatten
    fc: linear(10)";
    masked_equals_shrunk(&[2, 12], body, &["c1", "c2"]);
}

/// Layer and group norms compute their statistics over fewer features once the units are gone,
/// so the shrunk model runs with the planned shapes but does not compute exactly the same.
#[test]
fn layer_and_group_norms_shrink_to_the_planned_shapes() {
    let body = "c1: conv1d(9, kernel_size: 3, padding: 1)
    gn: groupnorm(3)
    relu
    c2: conv1d(6, kernel_size: 3)
    flatten
    ln: layernorm
    fc: linear(10)";
    let (masked, shrunk) = masked_and_shrunk(&[2, 12], body, &["c1", "c2"]);
    assert_eq!(masked.size(), shrunk.size());
}

#[test]
fn residual_mlp_shrinks_both_sides_of_the_add() {
    let body = "fc0: linear(16)
    res: residual {
      fc1: linear(24)
      relu
      fc2: linear(16)
    }
    relu
    fc3: linear(10)";
    masked_equals_shrunk(&[12], body, &["res.fc2", "res.fc1"]);
}

#[test]
fn the_trainer_masks_producers_and_followers() {
    let nodes = model(
        "[3, 8, 8]",
        "c1: conv2d(4, kernel_size: 3)\n bn: batchnorm2d\n relu\n flatten\n fc: linear(10)",
    );
    let g = group(&nodes, layer(&nodes, "c1")).unwrap();
    let names: Vec<(String, i64)> = mask_targets(&g)
        .into_iter()
        .map(|t| (t.name, t.dim))
        .collect();
    let expected = [
        ("c1.weight", 0),
        ("c1.bias", 0),
        ("bn.weight", 0),
        ("bn.bias", 0),
    ];
    assert_eq!(names, expected.map(|(n, d)| (n.to_string(), d)));
    let entries = expand(&Tensor::from_slice(&[0i64, 2]), 3).unwrap();
    assert_eq!(Vec::<i64>::try_from(&entries).unwrap(), [0, 1, 2, 6, 7, 8]);
}
