//! Parity of the loss options with `torch.nn.functional`: from the same initial weights and the
//! same batches, `kiln run` reproduces, step by step over 50 SGD steps, the losses of a PyTorch
//! loop using `F.cross_entropy` (class weights, `ignore_index`, label smoothing), `F.nll_loss`
//! (class weights, `ignore_index`) and `F.binary_cross_entropy_with_logits` (`pos_weight`, one
//! value or one per output). `tests/losses/reference.py` writes the weights, the data and the
//! reference losses.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// Optimizer steps per case, one batch each.
const STEPS: usize = 50;
/// Samples per batch.
const BATCH: usize = 32;
/// Largest relative difference allowed between Kiln's and PyTorch's loss at any step (fp32).
const RTOL: f64 = 1e-5;

/// One comparison: the loss as Kiln writes it, as the reference calls it, and the data.
struct Case {
    name: &'static str,
    loss: &'static str,
    /// The loss's arguments, named as in both Kiln and `torch.nn.functional`.
    args: Value,
    /// The model's output scores.
    outputs: usize,
    /// Fraction of the labels set to `ignore_index`.
    ignore_fraction: f64,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "ce-weight-ignore-smoothing",
            loss: "cross_entropy",
            args: json!({"weight": [1.0, 2.0, 0.5, 3.0, 1.5], "ignore_index": 2, "label_smoothing": 0.1}),
            outputs: 5,
            ignore_fraction: 0.2,
        },
        Case {
            name: "ce-ignore-outside-classes",
            loss: "cross_entropy",
            args: json!({"ignore_index": -1, "weight": [0.2, 1.0, 1.0, 4.0, 1.0]}),
            outputs: 5,
            ignore_fraction: 0.3,
        },
        Case {
            name: "nll-weight-ignore",
            loss: "nll",
            args: json!({"weight": [1.0, 0.25, 2.0, 1.0, 0.5], "ignore_index": 4}),
            outputs: 5,
            ignore_fraction: 0.1,
        },
        Case {
            name: "bce-pos-weight-list",
            loss: "bce_with_logits",
            args: json!({"pos_weight": [3.0, 0.5, 1.5]}),
            outputs: 3,
            ignore_fraction: 0.0,
        },
        Case {
            name: "bce-pos-weight-one",
            loss: "bce_with_logits",
            args: json!({"pos_weight": 2.5}),
            outputs: 3,
            ignore_fraction: 0.0,
        },
    ]
}

/// An argument as the `.exp` language writes it.
fn exp_value(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(exp_value).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

fn exp(case: &Case) -> String {
    let args: Vec<String> = case
        .args
        .as_object()
        .expect("named arguments")
        .iter()
        .map(|(k, v)| format!("{k}: {}", exp_value(v)))
        .collect();
    let (classes, last) = if case.loss == "bce_with_logits" {
        (String::new(), "")
    } else if case.loss == "nll" {
        (format!(", classes: {}", case.outputs), "    log_softmax\n")
    } else {
        (format!(", classes: {}", case.outputs), "")
    };
    format!(
        "experiment \"{name}\" {{\n  seed 7\n  data {{\n    source safetensors(\"data.safetensors\"{classes})\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input [8]\n    fc1: linear(8 -> 16)\n    relu\n    fc2: linear(16 -> {k})\n{last}  }}\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps {STEPS}\n    loss {loss}({args})\n  }}\n}}\n",
        name = case.name,
        k = case.outputs,
        loss = case.loss,
        args = args.join(", "),
    )
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// The loss of every step of the run in `runs`.
fn kiln_losses(dir: &Path, name: &str) -> Vec<f64> {
    let runs = dir.join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("run")
        .arg(dir.join("loss.exp"))
        .args(["--device", "cpu", "--quiet", "--runs-dir"])
        .arg(&runs)
        .arg("--init")
        .arg(dir.join("init.safetensors"))
        .env("NO_COLOR", "1")
        .envs([("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")])
        .output()
        .expect("kiln starts");
    assert!(
        out.status.success(),
        "{name}: `kiln run` failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run: PathBuf = std::fs::read_dir(runs.join(name))
        .expect("run directory")
        .map(|e| e.expect("entry").path())
        .find(|p| p.is_dir())
        .expect("one run");
    std::fs::read_to_string(run.join("steps.jsonl"))
        .expect("steps.jsonl")
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("a step")["loss"]
                .as_f64()
                .expect("a loss")
        })
        .collect()
}

#[test]
fn loss_options_match_torch_functional_for_50_steps() {
    let python = support::root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the loss parity test needs the project's .venv with torch"
    );
    let scratch = support::scratch("losses-parity");
    let cases = cases();
    let spec: Vec<Value> = cases
        .iter()
        .map(|c| {
            let dir = scratch.join(c.name);
            std::fs::create_dir_all(&dir).expect("case directory");
            std::fs::write(dir.join("loss.exp"), exp(c)).expect("write the experiment");
            json!({"dir": dir, "loss": c.loss, "args": c.args, "outputs": c.outputs, "seed": 3,
                   "batch": BATCH, "steps": STEPS, "lr": 0.1, "ignore_fraction": c.ignore_fraction})
        })
        .collect();
    let spec_path = scratch.join("spec.json");
    std::fs::write(&spec_path, Value::Array(spec).to_string()).expect("write the spec");
    let out = Command::new(&python)
        .arg(support::root().join("tests/losses/reference.py"))
        .arg(&spec_path)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "reference.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for case in &cases {
        let dir = scratch.join(case.name);
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
        )
        .expect("reference json");
        let theirs = floats(&reference["losses"]);
        let ours = kiln_losses(&dir, case.name);
        assert_eq!(ours.len(), STEPS, "{}: steps recorded", case.name);
        assert_eq!(theirs.len(), STEPS, "{}: reference steps", case.name);
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let rel = (a - b).abs() / b.abs().max(f64::MIN_POSITIVE);
            assert!(
                rel <= RTOL,
                "{}: step {}: kiln {a} vs torch {b} (relative {rel:e})",
                case.name,
                i + 1
            );
        }
        // The losses move: the options are not trivially equal on both sides.
        assert!(
            ours[0] != ours[STEPS - 1],
            "{}: the loss never changed",
            case.name
        );
    }
}
