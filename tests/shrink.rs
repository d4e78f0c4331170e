//! Structured pruning's groups and shrunk models (`kiln::plan::shrink`) on small checked models.
//! (The plan cannot import the checker, so these live here rather than beside the code.)

use kiln::check::check_text;
use kiln::diagnostic::Code;
use kiln::ir::{layers, Elementwise, Kind, Layer, Node};
use kiln::plan::shrink::{group, groups, kept, shrink, Group, Place, Reason, Role, Slice};

fn slice(tensor: &'static str, dim: i64, block: i64, masked: bool) -> Slice {
    Slice {
        tensor,
        dim,
        block,
        masked,
    }
}

/// The checked model of an experiment with this input and model body.
fn model(input: &str, body: &str) -> Vec<Node> {
    model_of(&format!("normal({input})"), input, body)
}

/// The checked model of an experiment whose data are `inputs` (a generator).
fn model_of(inputs: &str, input: &str, body: &str) -> Vec<Node> {
    let checked = check_text("t.exp", experiment(inputs, input, body, ""));
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    checked.trials[0].model.nodes.clone()
}

/// An experiment's text with this data, model body and compress block body.
fn experiment(inputs: &str, input: &str, body: &str, compress: &str) -> String {
    let compress = if compress.is_empty() {
        String::new()
    } else {
        format!("compress {{\n{compress}\n}}")
    };
    format!(
        "experiment \"t\" {{
  data {{
    source synthetic(inputs: {inputs}, targets: randint(10), count: 64)
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
  {compress}
}}"
    )
}

fn layer<'m>(nodes: &'m [Node], name: &str) -> &'m Layer {
    let inner = format!(".{name}");
    layers(nodes)
        .into_iter()
        .find(|l| l.name == name || l.name.ends_with(&inner))
        .unwrap()
}

fn names(g: &Group, role: Role) -> Vec<&str> {
    g.role(role).map(|m| short(&m.layer)).collect()
}

/// A layer's name without its residual's or block's prefix.
fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap()
}

fn refusal(nodes: &[Node], target: &str) -> (Reason, String) {
    let e = group(nodes, layer(nodes, target)).unwrap_err();
    let at = match e.at {
        Place::Layer(l) => short(&l.name).to_string(),
        Place::Residual(_) => "residual".into(),
    };
    (e.reason, at)
}

/// Shrinking keeps every layer's parameters and FLOPs as the checker computes them: the same
/// model with the smaller sizes written out checks to the same nodes.
fn same_as_checked(shrunk: &[Node], written: &[Node]) {
    let (a, b) = (layers(shrunk), layers(written));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.kind, y.kind, "{}", x.name);
        assert_eq!((&x.input, &x.output), (&y.input, &y.output), "{}", x.name);
        assert_eq!((x.params, x.flops), (y.params, y.flops), "{}", x.name);
    }
}

#[test]
fn mlp_group_is_the_layer_and_its_consumer() {
    let nodes = model(
        "[20]",
        "fc1: linear(32)\n relu\n dropout(0.1)\n fc2: linear(10)",
    );
    let g = group(&nodes, layer(&nodes, "fc1")).unwrap();
    assert_eq!(g.units, 32);
    assert_eq!(names(&g, Role::Producer), ["fc1"]);
    assert_eq!(names(&g, Role::Consumer), ["fc2"]);
    assert_eq!(g.passes.len(), 2);
    let producer = g.role(Role::Producer).next().unwrap();
    assert_eq!(
        producer.tensors,
        [slice("weight", 0, 1, true), slice("bias", 0, 1, true)]
    );
    let consumer = g.role(Role::Consumer).next().unwrap();
    assert_eq!(consumer.tensors, [slice("weight", 1, 1, false)]);
    assert_eq!(consumer.fill, 0.0);
    let shrunk = shrink(&nodes, &[(&g, 20)]).unwrap();
    let written = model(
        "[20]",
        "fc1: linear(20)\n relu\n dropout(0.1)\n fc2: linear(10)",
    );
    same_as_checked(&shrunk, &written);
    // Keeping every unit gives the model back.
    same_as_checked(&shrink(&nodes, &[(&g, 32)]).unwrap(), &nodes);
}

#[test]
fn a_sigmoid_gives_the_consumer_a_constant_to_fold() {
    let nodes = model("[20]", "fc1: linear(32)\n sigmoid\n fc2: linear(10)");
    let g = group(&nodes, layer(&nodes, "fc1")).unwrap();
    assert_eq!(g.role(Role::Consumer).next().unwrap().fill, 0.5);
}

const CNN: &str = "c1: conv2d(8, kernel_size: 3, padding: 1)
    bn: batchnorm2d
    relu
    max_pool2d(2)
    c2: conv2d(6, kernel_size: 3, padding: 1)
    relu
    flatten
    fc: linear(10)";

#[test]
fn cnn_groups_follow_batch_norm_and_flatten() {
    let nodes = model("[3, 8, 8]", CNN);
    let g = group(&nodes, layer(&nodes, "c1")).unwrap();
    assert_eq!(names(&g, Role::Producer), ["c1"]);
    assert_eq!(names(&g, Role::Follower), ["bn"]);
    assert_eq!(names(&g, Role::Consumer), ["c2"]);
    let bn = g.role(Role::Follower).next().unwrap();
    assert_eq!(bn.tensors.len(), 4);
    let g2 = group(&nodes, layer(&nodes, "c2")).unwrap();
    let fc = g2.role(Role::Consumer).next().unwrap();
    assert_eq!(short(&fc.layer), "fc");
    // Each channel of c2 is 4 x 4 = 16 consecutive features after the flatten.
    assert_eq!(fc.tensors, [slice("weight", 1, 16, false)]);
    let shrunk = shrink(&nodes, &[(&g, 5), (&g2, 3)]).unwrap();
    let written = CNN
        .replace("conv2d(8", "conv2d(5")
        .replace("conv2d(6", "conv2d(3");
    same_as_checked(&shrunk, &model("[3, 8, 8]", &written));
}

const RESIDUAL: &str = "fc0: linear(16)
    res: residual {
      fc1: linear(24)
      relu
      fc2: linear(16)
    }
    relu
    fc3: linear(10)";

#[test]
fn a_residual_joins_the_producers_on_both_sides() {
    let nodes = model("[12]", RESIDUAL);
    let g = group(&nodes, layer(&nodes, "fc2")).unwrap();
    assert_eq!(names(&g, Role::Producer), ["fc0", "fc2"]);
    assert_eq!(names(&g, Role::Consumer), ["fc1", "fc3"]);
    assert_eq!(
        g,
        Group {
            target: "res.fc2".into(),
            ..group(&nodes, layer(&nodes, "fc0")).unwrap()
        }
    );
    let inner = group(&nodes, layer(&nodes, "fc1")).unwrap();
    assert_eq!(names(&inner, Role::Consumer), ["fc2"]);
    let shrunk = shrink(&nodes, &[(&g, 9), (&inner, 7)]).unwrap();
    let written = RESIDUAL
        .replace("linear(16)", "linear(9)")
        .replace("linear(24)", "linear(7)");
    same_as_checked(&shrunk, &model("[12]", &written));
}

#[test]
fn residual_chains_join_every_block() {
    let body = "fc0: linear(16)
    residual { a: linear(16) }
    residual { b: linear(8)\n relu\n c: linear(16) }
    fc3: linear(10)";
    let nodes = model("[12]", body);
    let g = group(&nodes, layer(&nodes, "c")).unwrap();
    assert_eq!(names(&g, Role::Producer), ["fc0", "a", "c"]);
    assert_eq!(names(&g, Role::Consumer), ["a", "b", "fc3"]);
}

#[test]
fn refusals_name_the_reason_and_the_place() {
    let mlp = model("[20]", "fc1: linear(32)\n relu\n fc2: linear(10)");
    assert_eq!(refusal(&mlp, "fc2"), (Reason::Output, "fc2".into()));
    let relu = layer(&mlp, "1");
    assert_eq!(
        group(&mlp, relu).unwrap_err().reason,
        Reason::NotUnits(Kind::Elementwise(Elementwise::Relu))
    );

    let input = model("[16]", "residual { fc1: linear(16) }\n fc2: linear(10)");
    assert_eq!(refusal(&input, "fc1"), (Reason::Input, "residual".into()));

    let reshape = model(
        "[16]",
        "fc1: linear(16)\n r: reshape([4, 4])\n flatten\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&reshape, "fc1"),
        (Reason::Consumer(Kind::Reshape), "r".into())
    );

    let mean = model(
        "[4, 6]",
        "fc1: linear(8)\n m: mean(dim: 1)\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&mean, "fc1"),
        (Reason::Mixes(Kind::Mean), "m".into())
    );

    let attention = model(
        "[4, 8]",
        "fc1: linear(8)\n a: attention(2)\n flatten\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&attention, "fc1"),
        (Reason::Consumer(Kind::Attention), "a".into())
    );

    let conv = model(
        "[3, 4, 4]",
        "c1: conv2d(4, kernel_size: 3, padding: 1)\n sigmoid\n c2: conv2d(4, kernel_size: 3)\n flatten\n fc: linear(10)",
    );
    assert_eq!(refusal(&conv, "c1"), (Reason::Constant(0.5), "c2".into()));

    let gn = model(
        "[3, 4, 4]",
        "c1: conv2d(8, kernel_size: 3, padding: 1)\n gn: groupnorm(4)\n flatten\n fc: linear(10)",
    );
    let g = group(&gn, layer(&gn, "c1")).unwrap();
    assert_eq!(
        g.indivisible(6).map(|(n, g)| (short(n), g)),
        Some(("gn", 4))
    );
    assert_eq!(g.indivisible(4), None);
    assert_eq!(
        shrink(&gn, &[(&g, 6)]).unwrap_err(),
        Reason::GroupNorm { groups: 4, kept: 6 }
    );
}

#[test]
fn followers_carry_their_per_channel_tensors() {
    let body = "c1: conv1d(8, kernel_size: 3, padding: 1)
    gn: groupnorm(2)
    p: prelu(num_parameters: 8)
    avg_pool1d(2)
    c2: conv1d(4, kernel_size: 3)
    flatten
    ln: layernorm
    fc: linear(10)";
    let nodes = model("[2, 12]", body);
    let g = group(&nodes, layer(&nodes, "c1")).unwrap();
    assert_eq!(names(&g, Role::Follower), ["gn", "p"]);
    assert_eq!(names(&g, Role::Consumer), ["c2"]);
    assert_eq!(g.indivisible(5).map(|(_, groups)| groups), Some(2));
    // c2's 4 channels of length 4 are 16 features: the layer norm's parameters and fc's
    // columns lose 4 entries per channel.
    let g2 = group(&nodes, layer(&nodes, "c2")).unwrap();
    let ln = g2.role(Role::Follower).next().unwrap();
    assert_eq!(ln.tensors[0], slice("weight", 0, 4, true));
    let written = body
        .replace("conv1d(8", "conv1d(6")
        .replace("num_parameters: 8", "num_parameters: 6")
        .replace("conv1d(4", "conv1d(3");
    let shrunk = shrink(&nodes, &[(&g, 6), (&g2, 3)]).unwrap();
    same_as_checked(&shrunk, &model("[2, 12]", &written));
}

#[test]
fn layers_that_mix_or_cannot_prune_their_features_refuse() {
    let embedded = model_of(
        "randint(50, shape: [6])",
        "[6]",
        "embedding(50, 8)\n res: residual { fc1: linear(8) }\n flatten\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&embedded, "res.fc1"),
        (Reason::Fixed(Kind::Embedding), "residual".into())
    );

    let block = model(
        "[4, 8]",
        "fc1: linear(8)\n t: transformer_block(2)\n flatten\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&block, "fc1"),
        (Reason::Consumer(Kind::TransformerBlock), "t".into())
    );

    let grouped = model(
        "[4, 6, 6]",
        "c1: conv2d(8, kernel_size: 3)\n c2: conv2d(8, kernel_size: 3, groups: 2)\n flatten\n fc: linear(10)",
    );
    assert_eq!(refusal(&grouped, "c1"), (Reason::Grouped, "c2".into()));
    assert_eq!(refusal(&grouped, "c2"), (Reason::Grouped, "c2".into()));

    let softmax = model("[20]", "fc1: linear(8)\n s: softmax\n fc2: linear(10)");
    assert_eq!(
        refusal(&softmax, "fc1"),
        (Reason::Mixes(Kind::Softmax), "s".into())
    );

    // A linear over the last dimension of [C, L] outputs: its units are not the channels
    // that a batch norm over [C, L] normalises.
    let other_axis = model(
        "[3, 8]",
        "fc1: linear(5)\n bn: batchnorm1d\n flatten\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&other_axis, "fc1"),
        (Reason::Mixes(Kind::BatchNorm1d), "bn".into())
    );

    // The residual adds conv channels (dimension 0) to a linear's units (dimension 1).
    let misaligned = model(
        "[2, 6]",
        "c1: conv1d(6, kernel_size: 1)\n res: residual { fc: linear(6) }\n flatten\n fc2: linear(10)",
    );
    assert_eq!(
        refusal(&misaligned, "c1"),
        (Reason::Mixes(Kind::Linear), "fc".into())
    );
    assert_eq!(
        refusal(&misaligned, "res.fc"),
        (Reason::Misaligned, "residual".into())
    );

    // A mean over another dimension keeps the units apart.
    let mean = model(
        "[4, 6]",
        "fc1: linear(8)\n m: mean(dim: 0)\n fc2: linear(10)",
    );
    let g = group(&mean, layer(&mean, "fc1")).unwrap();
    assert_eq!(names(&g, Role::Consumer), ["fc2"]);
}

#[test]
fn targets_of_one_group_must_keep_as_many_units() {
    let errors = |compress: &str| -> Vec<Code> {
        let text = experiment("normal([12])", "[12]", RESIDUAL, compress);
        let checked = check_text("t.exp", text);
        checked.diagnostics.iter().map(|d| d.code).collect()
    };
    let same = "prune [fc0, res.fc2] ln_structured(amount: 0.25, dim: 0)";
    assert_eq!(errors(same), []);
    let different = "prune fc0 ln_structured(amount: 0.25, dim: 0)\n prune res.fc2 ln_structured(amount: 0.5, dim: 0)";
    assert_eq!(errors(different), [Code::CannotShrink]);
    let nothing = "prune res.fc1 ln_structured(amount: 0.99, dim: 1)";
    assert_eq!(errors(nothing), [Code::PruneLeavesNothing]);
}

#[test]
fn an_experiments_structured_prunes_give_its_shrunk_model() {
    let compress = "prune [fc0, res] ln_structured(amount: 0.25, dim: 0)";
    let text = experiment("normal([12])", "[12]", RESIDUAL, compress);
    let checked = check_text("t.exp", text);
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    let e = &checked.trials[0];
    let found = groups(&e.model.nodes, &e.compression).unwrap();
    // fc0 and res.fc2 are one group (16 units, 12 kept); res.fc1 is its own (24, 18 kept).
    let kept_units: Vec<(i64, i64)> = found.iter().map(|(g, k)| (g.units, *k)).collect();
    assert_eq!(kept_units, [(16, 12), (24, 18)]);
    let keep: Vec<(&Group, i64)> = found.iter().map(|(g, k)| (g, *k)).collect();
    let shrunk = shrink(&e.model.nodes, &keep).unwrap();
    let written = RESIDUAL
        .replace("linear(16)", "linear(12)")
        .replace("linear(24)", "linear(18)");
    same_as_checked(&shrunk, &model("[12]", &written));
}

#[test]
fn kept_units_round_half_to_even_as_pytorch() {
    // round(0.5 * 5) = 2, round(0.5 * 3) = 2, round(0.35 * 10) = 4, round(0.45 * 10) = 4.
    assert_eq!(kept(5, 0.5), 3);
    assert_eq!(kept(3, 0.5), 1);
    assert_eq!(kept(10, 0.35), 6);
    assert_eq!(kept(10, 0.45), 6);
    assert_eq!(kept(4, 0.9), 0);
}
