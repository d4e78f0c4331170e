//! Fifty training steps against PyTorch for the layer options PyTorch users set: pooling's
//! `ceil_mode` and `count_include_pad`, batch norm without `affine` weights or running
//! statistics, and `transformer_block`'s `norm`, `activation`, `eps` and `bias` (against
//! `nn.TransformerEncoderLayer` itself).
//!
//! `tests/layers/training.py` (one process, the project's `.venv/bin/python`) builds each model in
//! PyTorch, saves its initial `state_dict` and 50 batches of labelled synthetic data, and trains
//! with `torch.optim.SGD`; this test writes the matching `.exp`, runs `kiln run --init` on the CPU
//! and compares the loss of every step, within 1e-5 relative, and `kiln plan`'s parameter count
//! with PyTorch's.

mod support;

use kiln::check::{check_path, FsLoader, Options};
use serde_json::{json, Value};
use support::parity::{self, floats};
use support::scratch;

/// Optimizer steps per case, one batch each.
const STEPS: usize = 50;
/// Samples per batch.
const BATCH: usize = 16;
/// Classes of the synthetic labels.
const CLASSES: usize = 4;
/// Largest relative difference allowed between Kiln's and PyTorch's loss at any step.
const LOSS_RTOL: f64 = 1e-5;

/// The cases: a name `training.py` knows, the per-sample input shape and the model block's
/// layers, named as `training.py`'s modules name their parameters.
const CASES: &[(&str, &str, &str)] = &[
    (
        "transformer-post",
        "[6, 8]",
        "l: transformer_block(2, hidden: 16, dropout: 0, norm: post, activation: relu, eps: 1e-6, bias: false)\n    mean(0)\n    head: linear(4)",
    ),
    (
        "transformer-pre",
        "[6, 8]",
        "l: transformer_block(2, hidden: 16, dropout: 0, activation: silu, eps: 1e-4)\n    mean(0)\n    head: linear(4)",
    ),
    (
        "norms",
        "[16]",
        "a: linear(16 -> 12, bias: false)\n    bn: batchnorm1d(momentum: 0.3, affine: false)\n    relu\n    b: linear(8)\n    bn2: batchnorm1d(track_running_stats: false)\n    tanh\n    head: linear(4)",
    ),
    (
        "pools2d",
        "[2, 9, 10]",
        "c: conv2d(2 -> 4, 3, padding: 1)\n    max_pool2d(2, ceil_mode: true)\n    relu\n    avg_pool2d(2, padding: 1, ceil_mode: true, count_include_pad: false)\n    flatten\n    head: linear(4)",
    ),
    (
        "pools1d",
        "[3, 17]",
        "c: conv1d(3 -> 4, 3)\n    max_pool1d(2, ceil_mode: true)\n    avg_pool1d(3, stride: 2, padding: 1, ceil_mode: true)\n    avg_pool1d(2, padding: 1, count_include_pad: false)\n    flatten\n    head: linear(4)",
    ),
];

/// The experiment of one case: the data in file order, plain SGD with momentum.
fn exp(name: &str, input: &str, layers: &str) -> String {
    format!(
        "experiment \"{name}\" {{\n  seed 7\n  data {{\n    source safetensors(\"data.safetensors\", inputs: \"inputs\", targets: \"targets\", classes: {CLASSES})\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input {input}\n    {layers}\n  }}\n  device cpu\n  optimizer sgd(lr: 0.05, momentum: 0.9)\n  train {{\n    steps {STEPS}\n    loss cross_entropy\n  }}\n}}\n"
    )
}

#[test]
fn layer_options_train_as_pytorch_for_fifty_steps() {
    let dir = scratch("layer-training");
    let spec: Vec<Value> = CASES
        .iter()
        .map(|(name, _, _)| {
            let case = dir.join(name);
            std::fs::create_dir_all(&case).expect("case directory");
            json!({
                "dir": case, "model": name, "seed": 7, "batch": BATCH, "steps": STEPS,
                "classes": CLASSES, "lr": 0.05, "momentum": 0.9,
            })
        })
        .collect();
    parity::reference("tests/layers/training.py", &json!(spec), &dir);

    let mut failures = Vec::new();
    for (name, input, layers) in CASES {
        let case = dir.join(name);
        let file = support::write(&case, "case.exp", &exp(name, input, layers));
        let reference = parity::json_file(&case.join("reference.json"));
        let checked = check_path(&file, &FsLoader, &Options::default());
        assert!(!checked.has_errors(), "{name}: {:#?}", checked.diagnostics);
        let params = kiln::plan::plan(&checked.trials[0]).totals.params;
        if Some(params) != reference["params"].as_u64() {
            failures.push(format!(
                "{name}: kiln plan counts {params} parameters, PyTorch {}",
                reference["params"]
            ));
        }
        let want = floats(&reference["losses"]);
        let got = parity::train(
            &file,
            Some(&case.join("init.safetensors")),
            &case.join("run"),
        )
        .losses;
        assert_eq!((got.len(), want.len()), (STEPS, STEPS), "{name}: steps");
        let first = want[..5].iter().sum::<f64>();
        let last = want[STEPS - 5..].iter().sum::<f64>();
        assert!(last < 0.97 * first, "{name}: the loss barely moves");
        failures.extend(parity::compare(name, "loss", &got, &want, LOSS_RTOL));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
