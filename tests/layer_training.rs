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

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::check::{check_path, FsLoader, Options};
use serde_json::{json, Value};
use support::{root, s, scratch};

/// Optimizer steps per case, one batch each.
const STEPS: usize = 50;
/// Samples per batch.
const BATCH: usize = 16;
/// Classes of the synthetic labels.
const CLASSES: usize = 4;
/// Largest relative difference allowed between Kiln's and PyTorch's loss at any step.
const LOSS_RTOL: f64 = 1e-5;

/// Both sides run libtorch on one CPU thread: the same kernels, reducing in the same order.
const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

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

/// The numbers of a JSON array.
fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// Kiln's loss per step, from the only run directory under `runs`.
fn kiln_losses(runs: &Path) -> Vec<f64> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(runs)
        .expect("runs directory")
        .flat_map(|e| std::fs::read_dir(e.expect("entry").path()).expect("experiment directory"))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "one run directory in {}", runs.display());
    let run = dirs.pop().expect("one run");
    let text = std::fs::read_to_string(run.join("steps.jsonl")).expect("steps.jsonl");
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            v["loss"].as_f64().expect("a loss")
        })
        .collect()
}

#[test]
fn layer_options_train_as_pytorch_for_fifty_steps() {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "this test needs PyTorch in the project's virtualenv: run scripts/setup.sh"
    );
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
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, serde_json::to_string(&spec).expect("json")).expect("spec");
    let out = Command::new(&python)
        .arg(root().join("tests/layers/training.py"))
        .arg(&spec_path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "tests/layers/training.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut failures = Vec::new();
    for (name, input, layers) in CASES {
        let case = dir.join(name);
        let file = support::write(&case, "case.exp", &exp(name, input, layers));
        let runs = case.join("runs");
        let out = support::kiln(&["run", s(&file), "--device", "cpu", "--quiet", "--runs-dir"])
            .arg(&runs)
            .arg("--init")
            .arg(case.join("init.safetensors"))
            .envs(SINGLE_THREADED)
            .output()
            .expect("kiln starts");
        assert!(out.status.success(), "{name}: {}", support::text(&out));
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(case.join("reference.json")).expect("reference.json"),
        )
        .expect("reference json");
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
        let got = kiln_losses(&runs);
        assert_eq!((got.len(), want.len()), (STEPS, STEPS), "{name}: steps");
        let first = want[..5].iter().sum::<f64>();
        let last = want[STEPS - 5..].iter().sum::<f64>();
        assert!(last < 0.97 * first, "{name}: the loss barely moves");
        let (step, diff) = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs() / b.abs())
            .enumerate()
            .fold(
                (0, 0.0),
                |w, (i, d)| if d > w.1 || d.is_nan() { (i + 1, d) } else { w },
            );
        eprintln!("{name:<18} worst loss rel diff {diff:.2e} (step {step})");
        if diff.is_nan() || diff > LOSS_RTOL {
            failures.push(format!(
                "{name}: step {step}: Kiln {}, PyTorch {} (relative difference {diff:.2e})",
                got[step - 1],
                want[step - 1]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
