//! Every layer kind's memory facts against a run's live tensors: for each kind, a model where
//! that kind's activations dominate (a `prelu` before it makes its input a tensor that requires
//! grad and that nothing else keeps, a `dropout` after it reads its output without keeping it and
//! gives it a gradient of its size), trained for two steps on the
//! CPU with `KILN_MEMORY_PROFILE` at two shapes, the second in bf16 where the run's precision
//! changes what the kind keeps; the peak of tensors alive at once (Kiln's host allocator counts
//! them) within 10% of the plan's total. A kind whose fact were wrong by one of its tensors would
//! miss by more: each model's tensors are a few of the kind's size.

mod support;

use std::path::Path;
use std::time::Duration;

use kiln::ir::Kind;
use support::ranks::{finish, runtime};
use support::{s, scratch, text, write};

/// One model around one layer kind.
struct Case {
    /// A name for the run.
    name: &'static str,
    /// The per-sample input shape (`[256, 64]`), or a token sequence (`tokens 512`).
    input: &'static str,
    /// The layer under test, as written in a model.
    layer: &'static str,
    /// Samples per batch.
    batch: u64,
    /// The run's precision.
    precision: &'static str,
}

const fn case(
    name: &'static str,
    input: &'static str,
    layer: &'static str,
    batch: u64,
    precision: &'static str,
) -> Case {
    Case {
        name,
        input,
        layer,
        batch,
        precision,
    }
}

/// Two cases for every layer kind.
const CASES: &[Case] = &[
    case("linear", "[256, 64]", "linear(64)", 128, "fp32"),
    case("linear-bf16", "[512, 64]", "linear(96)", 128, "bf16"),
    case(
        "conv1d",
        "[16, 2048]",
        "conv1d(16, 3, padding: 1)",
        128,
        "fp32",
    ),
    case(
        "conv1d-bf16",
        "[16, 4096]",
        "conv1d(24, 5, padding: 2)",
        64,
        "bf16",
    ),
    case(
        "conv2d",
        "[16, 32, 32]",
        "conv2d(16, 3, padding: 1)",
        128,
        "fp32",
    ),
    case(
        "conv2d-bf16",
        "[8, 64, 64]",
        "conv2d(8, 3, padding: 1)",
        64,
        "bf16",
    ),
    case("max_pool1d", "[32, 2048]", "max_pool1d(2)", 64, "fp32"),
    case("max_pool1d-4", "[16, 8192]", "max_pool1d(4)", 64, "fp32"),
    case("max_pool2d", "[16, 64, 64]", "max_pool2d(2)", 64, "fp32"),
    case("max_pool2d-3", "[8, 96, 96]", "max_pool2d(3)", 64, "fp32"),
    case("avg_pool1d", "[32, 2048]", "avg_pool1d(2)", 64, "fp32"),
    case("avg_pool1d-4", "[16, 8192]", "avg_pool1d(4)", 64, "fp32"),
    case("avg_pool2d", "[16, 64, 64]", "avg_pool2d(2)", 64, "fp32"),
    case("avg_pool2d-4", "[8, 96, 96]", "avg_pool2d(4)", 64, "fp32"),
    case(
        "adaptive_avg_pool1d",
        "[32, 2048]",
        "adaptive_avg_pool1d(512)",
        64,
        "fp32",
    ),
    case(
        "adaptive_avg_pool1d-big",
        "[16, 8192]",
        "adaptive_avg_pool1d(4096)",
        64,
        "fp32",
    ),
    case(
        "adaptive_avg_pool2d",
        "[16, 64, 64]",
        "adaptive_avg_pool2d(16)",
        64,
        "fp32",
    ),
    case(
        "adaptive_avg_pool2d-big",
        "[8, 96, 96]",
        "adaptive_avg_pool2d(48)",
        64,
        "fp32",
    ),
    case("batchnorm1d", "[32, 2048]", "batchnorm1d", 64, "fp32"),
    case("batchnorm1d-bf16", "[16, 8192]", "batchnorm1d", 64, "bf16"),
    case("batchnorm2d", "[16, 64, 64]", "batchnorm2d", 64, "fp32"),
    case("batchnorm2d-bf16", "[8, 96, 96]", "batchnorm2d", 64, "bf16"),
    case("layernorm", "[256, 64]", "layernorm", 128, "fp32"),
    case("layernorm-bf16", "[512, 96]", "layernorm", 64, "bf16"),
    case("rmsnorm", "[256, 64]", "rmsnorm", 128, "fp32"),
    case("rmsnorm-bf16", "[512, 96]", "rmsnorm", 64, "bf16"),
    case("groupnorm", "[16, 64, 64]", "groupnorm(4)", 64, "fp32"),
    case("groupnorm-bf16", "[8, 96, 96]", "groupnorm(2)", 64, "bf16"),
    case("dropout", "[256, 64]", "dropout(0.5)", 128, "fp32"),
    case("dropout-bf16", "[512, 96]", "dropout(0.2)", 64, "bf16"),
    case("relu", "[256, 64]", "relu", 128, "fp32"),
    case("relu-big", "[512, 96]", "relu", 64, "fp32"),
    case("leaky_relu", "[256, 64]", "leaky_relu", 128, "fp32"),
    case("leaky_relu-big", "[512, 96]", "leaky_relu(0.2)", 64, "fp32"),
    case("elu", "[256, 64]", "elu", 128, "fp32"),
    case("elu-big", "[512, 96]", "elu(0.5)", 64, "fp32"),
    case("prelu", "[256, 64]", "prelu", 128, "fp32"),
    case("prelu-bf16", "[512, 96]", "prelu(512)", 64, "bf16"),
    case("gelu", "[256, 64]", "gelu", 128, "fp32"),
    case("gelu-big", "[512, 96]", "gelu", 64, "fp32"),
    case("silu", "[256, 64]", "silu", 128, "fp32"),
    case("silu-big", "[512, 96]", "silu", 64, "fp32"),
    case("tanh", "[256, 64]", "tanh", 128, "fp32"),
    case("tanh-big", "[512, 96]", "tanh", 64, "fp32"),
    case("sigmoid", "[256, 64]", "sigmoid", 128, "fp32"),
    case("sigmoid-big", "[512, 96]", "sigmoid", 64, "fp32"),
    case("softmax", "[256, 64]", "softmax", 128, "fp32"),
    case("softmax-bf16", "[512, 96]", "softmax(dim: 0)", 64, "bf16"),
    case("log_softmax", "[256, 64]", "log_softmax", 128, "fp32"),
    case("log_softmax-bf16", "[512, 96]", "log_softmax", 64, "bf16"),
    case("flatten", "[256, 64]", "flatten", 128, "fp32"),
    case("flatten-3d", "[16, 64, 64]", "flatten", 64, "fp32"),
    case("reshape", "[256, 64]", "reshape([64, 256])", 128, "fp32"),
    case(
        "reshape-3d",
        "[16, 64, 64]",
        "reshape([64, 1024])",
        64,
        "fp32",
    ),
    case("mean", "[256, 64]", "mean(dim: 1)", 128, "fp32"),
    case("mean-3d", "[16, 64, 64]", "mean(dim: 0)", 64, "fp32"),
    case(
        "embedding",
        "tokens 256",
        "embedding(1000, 64)",
        128,
        "fp32",
    ),
    case(
        "embedding-pad",
        "tokens 512",
        "embedding(1000, 96, pad: 0)",
        64,
        "fp32",
    ),
    case("positional", "[256, 64]", "positional(256)", 128, "fp32"),
    case(
        "positional-bf16",
        "[512, 96]",
        "positional(512)",
        64,
        "bf16",
    ),
    case("sinusoidal", "[256, 64]", "sinusoidal", 128, "fp32"),
    case("sinusoidal-bf16", "[512, 96]", "sinusoidal", 64, "bf16"),
    case("attention", "[256, 64]", "attention(heads: 4)", 64, "fp32"),
    case(
        "attention-dropout",
        "[256, 64]",
        "attention(heads: 4, dropout: 0.1, causal: true)",
        32,
        "fp32",
    ),
    case(
        "attention-bf16",
        "[512, 96]",
        "attention(heads: 4, causal: true, window: 64)",
        32,
        "bf16",
    ),
    case(
        "attention-bf16-dropout",
        "[256, 96]",
        "attention(heads: 2, dropout: 0.1)",
        32,
        "bf16",
    ),
    case(
        "transformer_block",
        "[256, 64]",
        "transformer_block(heads: 4, dropout: 0)",
        64,
        "fp32",
    ),
    case(
        "transformer_block-dropout",
        "[256, 64]",
        "transformer_block(heads: 4, causal: true)",
        32,
        "fp32",
    ),
    case(
        "transformer_block-post",
        "[256, 64]",
        "transformer_block(heads: 4, norm: post, activation: relu, dropout: 0)",
        64,
        "fp32",
    ),
    case(
        "transformer_block-bf16",
        "[256, 96]",
        "transformer_block(heads: 4, causal: true)",
        32,
        "bf16",
    ),
];

/// The experiment of a case.
fn experiment(c: &Case) -> String {
    let (inputs, input, before) = match c.input.strip_prefix("tokens ") {
        Some(n) => (
            format!("randint(1000, shape: [{n}])"),
            format!("[{n}]"),
            String::new(),
        ),
        None => (
            format!("normal({})", c.input),
            c.input.to_string(),
            "    prelu\n".to_string(),
        ),
    };
    // Dropout reads the kind's output without keeping it (it keeps its mask) and gives it a
    // gradient of its size, as a network's next layer does; a mean and a flatten of what is left
    // feed the head.
    let after = match word(c.layer) {
        "flatten" => "",
        "mean" => "    flatten\n",
        _ => "    dropout(0.5)\n    mean(dim: 0)\n    flatten\n",
    };
    format!(
        "experiment \"{name}\" {{\n  seed 5\n  data {{\n    source synthetic(inputs: {inputs}, targets: randint(2), count: {count})\n    batch {batch}\n  }}\n  model {{\n    input {input}\n{before}    under_test: {layer}\n{after}    head: linear(2)\n  }}\n  device cpu\n  optimizer sgd(lr: 0.01)\n  train {{\n    steps 2\n    loss cross_entropy\n    precision {precision}\n  }}\n}}\n",
        name = c.name,
        count = 2 * c.batch,
        batch = c.batch,
        layer = c.layer,
        precision = c.precision,
    )
}

/// The plan's tensors (its total less the allocator's margin) and the peak of tensors alive at
/// once, in MiB, of a case's run.
fn measured(dir: &Path, c: &Case) -> (f64, f64) {
    let exp = write(dir, &format!("{}.exp", c.name), &experiment(c));
    let child = runtime(&["run", s(&exp), "--quiet", "--run-dir", s(&dir.join(c.name))])
        .env("KILN_MEMORY_PROFILE", "1")
        .spawn()
        .expect("start");
    let (out, _) = finish(child, Duration::from_secs(120));
    let all = text(&out);
    assert!(out.status.success(), "{}: {all}", c.name);
    let line = all
        .lines()
        .find(|l| l.contains("memory profile: rank"))
        .unwrap_or_else(|| panic!("{}: no memory profile in {all}", c.name));
    let mib = |after: &str| -> f64 {
        let at = line.find(after).expect("the field") + after.len();
        line[at..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    (mib("the plan's tensors "), mib("tensors alive at once: "))
}

/// Runs the cases whose layer word is one of `kinds` and fails with every miss at once.
fn within_ten_percent(kinds: &[&str]) {
    let dir = scratch(&format!("layer-memory-{}", kinds[0]));
    let mut misses = Vec::new();
    let mut ran = 0;
    for c in CASES.iter().filter(|c| kinds.contains(&word(c.layer))) {
        let (plan, live) = measured(&dir, c);
        ran += 1;
        if (live - plan).abs() > 0.1 * plan {
            misses.push(format!(
                "{}: tensors alive at once {live} MiB, the plan {plan} MiB ({:+.1}%)",
                c.name,
                100.0 * (plan - live) / live
            ));
        }
    }
    assert!(ran >= 2 * kinds.len(), "{ran} cases for {kinds:?}");
    assert!(misses.is_empty(), "{}", misses.join("\n"));
}

/// The layer word a case's layer is written with.
fn word(layer: &str) -> &str {
    layer.split('(').next().unwrap_or(layer)
}

#[test]
fn every_kind_has_two_memory_cases() {
    for kind in Kind::ALL {
        let n = CASES
            .iter()
            .filter(|c| word(c.layer) == kind.name())
            .count();
        assert!(n >= 2, "`{}` has {n} memory cases", kind.name());
    }
    for c in CASES {
        assert!(
            Kind::from_name(word(c.layer)).is_some(),
            "{}: no such kind",
            c.layer
        );
    }
}

#[test]
fn products_keep_what_the_plan_says() {
    within_ten_percent(&["linear", "conv1d", "conv2d", "prelu"]);
}

#[test]
fn pools_keep_what_the_plan_says() {
    within_ten_percent(&[
        "max_pool1d",
        "max_pool2d",
        "avg_pool1d",
        "avg_pool2d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
    ]);
}

#[test]
fn norms_keep_what_the_plan_says() {
    within_ten_percent(&[
        "batchnorm1d",
        "batchnorm2d",
        "layernorm",
        "rmsnorm",
        "groupnorm",
    ]);
}

#[test]
fn activations_keep_what_the_plan_says() {
    within_ten_percent(&[
        "dropout",
        "relu",
        "leaky_relu",
        "elu",
        "gelu",
        "silu",
        "tanh",
        "sigmoid",
        "softmax",
        "log_softmax",
    ]);
}

#[test]
fn shapes_and_sequences_keep_what_the_plan_says() {
    within_ten_percent(&[
        "flatten",
        "reshape",
        "mean",
        "embedding",
        "positional",
        "sinusoidal",
    ]);
}

#[test]
fn attention_keeps_what_the_plan_says() {
    within_ten_percent(&["attention", "transformer_block"]);
}
