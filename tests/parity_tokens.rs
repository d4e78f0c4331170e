//! Parity with PyTorch for a class per token: from the same initial weights and the same
//! synthetic sequences, `kiln run` reproduces the losses of a PyTorch training loop over 50
//! steps, within 1e-5 relative. The model scores every token (`[S, V]`, no pooling) and the
//! loss is PyTorch's over the flattened tokens, `F.cross_entropy(out.reshape(-1, V),
//! y.reshape(-1))`, with class weights, `ignore_index` and label smoothing, and `F.nll_loss`.
//!
//! The first epoch's training accuracy is PyTorch's fraction of correct tokens not ignored.
//! `kiln eval` of the initial weights over every sample, in batches of 7 (`eval_batch`), gives
//! PyTorch's loss over all the tokens within 1e-6 relative, and the fraction of correct tokens
//! not ignored.
//!
//! `tests/parity_tokens/reference.py` draws the data as Kiln's `synthetic` source does for
//! `copy()`, `reverse()` and `sort()`, saves the initial `state_dict` and trains with AdamW.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

const STEPS: usize = 50;
const BATCH: usize = 16;
const VOCAB: usize = 6;
const LENGTH: usize = 8;
const LOSS_RTOL: f64 = 1e-5;
const EVAL_RTOL: f64 = 1e-6;
/// One CPU thread on both sides: the same kernels in the same order.
const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

/// One case: its name, the task, the loss and the loss's options.
struct Case {
    name: &'static str,
    task: &'static str,
    loss: &'static str,
    args: Value,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "reverse",
            task: "reverse",
            loss: "cross_entropy",
            args: json!({}),
        },
        Case {
            name: "sort-weight-ignore-smoothing",
            task: "sort",
            loss: "cross_entropy",
            // Ignoring id 0 drops a different number of tokens from every batch.
            args: json!({"weight": [1.0, 2.0, 0.5, 3.0, 1.5, 1.0], "ignore_index": 0, "label_smoothing": 0.1}),
        },
        Case {
            name: "copy-nll-weight-ignore",
            task: "copy",
            loss: "nll",
            args: json!({"weight": [0.5, 1.0, 2.0, 1.0, 0.25, 3.0], "ignore_index": 5}),
        },
    ]
}

/// The loss's options as the language writes them: `(weight: [1, 2], ignore_index: 0)`.
fn options(args: &Value) -> String {
    let words: Vec<String> = args
        .as_object()
        .expect("an object")
        .iter()
        .map(|(k, v)| format!("{k}: {v}").replace(',', ", "))
        .collect();
    if words.is_empty() {
        String::new()
    } else {
        format!("({})", words.join(", "))
    }
}

fn exp(c: &Case) -> String {
    let last = if c.loss == "nll" {
        "    log_softmax\n"
    } else {
        ""
    };
    format!(
        "experiment \"parity-{name}\" {{\n  seed 5\n  data {{\n    source synthetic(inputs: randint({VOCAB}, shape: [{LENGTH}]), targets: {task}(), count: {count})\n    shuffle false\n    batch {BATCH}\n    eval_batch 7\n  }}\n  model {{\n    input [{LENGTH}]\n    embed: embedding({VOCAB}, 16)\n    pos: positional(max_len: {LENGTH})\n    block: transformer_block(2, hidden: 32, dropout: 0)\n    head: linear({VOCAB})\n{last}  }}\n  device cpu\n  optimizer adamw(lr: 1e-2, weight_decay: 0.01)\n  train {{\n    steps {STEPS}\n    loss {loss}{options}\n  }}\n}}\n",
        name = c.name,
        task = c.task,
        count = STEPS * BATCH,
        loss = c.loss,
        options = options(&c.args),
    )
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `kiln eval` of the initial weights on the training split (every sample): loss and accuracy.
fn kiln_eval(name: &str, dir: &Path) -> (f64, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("eval")
        .arg(dir.join("parity.exp"))
        .arg("--weights")
        .arg(dir.join("init.safetensors"))
        .args(["--split", "train", "--device", "cpu", "--format", "json"])
        .env("NO_COLOR", "1")
        .envs(SINGLE_THREADED)
        .output()
        .expect("kiln starts");
    assert!(
        out.status.success(),
        "{name}: `kiln eval` failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON from kiln eval");
    (
        v["loss"].as_f64().expect("a loss"),
        v["accuracy"].as_f64().expect("an accuracy"),
    )
}

/// Kiln's loss per step, from the run's `steps.jsonl`, and the first epoch's training
/// accuracy, from its `metrics.jsonl`.
fn kiln_losses(name: &str, dir: &Path) -> (Vec<f64>, f64) {
    let runs = dir.join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("run")
        .arg(dir.join("parity.exp"))
        .args(["--device", "cpu", "--quiet", "--runs-dir"])
        .arg(&runs)
        .arg("--init")
        .arg(dir.join("init.safetensors"))
        .env("NO_COLOR", "1")
        .envs(SINGLE_THREADED)
        .output()
        .expect("kiln starts");
    assert!(
        out.status.success(),
        "{name}: `kiln run` failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run: PathBuf = std::fs::read_dir(runs.join(format!("parity-{name}")))
        .expect("the runs")
        .next()
        .expect("a run")
        .expect("an entry")
        .path();
    let text = std::fs::read_to_string(run.join("steps.jsonl")).expect("steps.jsonl");
    let losses = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v["loss"].as_f64().expect("a loss")
        })
        .collect();
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics.jsonl");
    let first: Value =
        serde_json::from_str(metrics.lines().next().expect("a record")).expect("a JSON line");
    let accuracy = first["train_accuracy"]
        .as_f64()
        .expect("a training accuracy");
    (losses, accuracy)
}

#[test]
fn per_token_losses_match_pytorch_step_for_step() {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the parity tests need {}",
        python.display()
    );
    let scratch = std::env::temp_dir().join(format!("kiln-token-parity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut spec = Vec::new();
    for c in cases() {
        let dir = scratch.join(c.name);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        std::fs::write(dir.join("parity.exp"), exp(&c)).expect("write .exp");
        spec.push(json!({
            "dir": dir, "task": c.task, "loss": c.loss, "args": c.args, "seed": 5,
            "vocab": VOCAB, "length": LENGTH, "count": STEPS * BATCH, "batch": BATCH,
            "steps": STEPS, "lr": 1e-2, "weight_decay": 0.01,
        }));
    }
    let spec_path = scratch.join("spec.json");
    std::fs::write(&spec_path, Value::Array(spec).to_string()).expect("write spec");
    let out = Command::new(&python)
        .arg(root().join("tests/parity_tokens/reference.py"))
        .arg(&spec_path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "tests/parity_tokens/reference.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    for c in cases() {
        let dir = scratch.join(c.name);
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
        )
        .expect("reference json");
        let want: Vec<f64> = reference["losses"]
            .as_array()
            .expect("losses")
            .iter()
            .map(|x| x.as_f64().expect("a loss"))
            .collect();
        let (loss, accuracy) = kiln_eval(c.name, &dir);
        let (want_loss, want_accuracy) = (
            reference["eval"]["loss"].as_f64().expect("a loss"),
            reference["eval"]["accuracy"].as_f64().expect("an accuracy"),
        );
        if (loss - want_loss).abs() > EVAL_RTOL * want_loss.abs()
            || (accuracy - want_accuracy).abs() > 1e-9
        {
            failures.push(format!(
                "{}: kiln eval gives loss {loss:e} and accuracy {accuracy}, PyTorch {want_loss:e} and {want_accuracy}",
                c.name
            ));
        }
        let (got, train_accuracy) = kiln_losses(c.name, &dir);
        // Predictions agree but for a near tie or two, in all the batch's tokens.
        let want_train = reference["train_accuracy"].as_f64().expect("an accuracy");
        if (train_accuracy - want_train).abs() > 2.0 / (STEPS * BATCH * LENGTH) as f64 {
            failures.push(format!(
                "{}: training accuracy {train_accuracy}, PyTorch {want_train}",
                c.name
            ));
        }
        assert_eq!((got.len(), want.len()), (STEPS, STEPS), "{}: steps", c.name);
        let first: f64 = want[..5].iter().sum::<f64>() / 5.0;
        let last: f64 = want[STEPS - 5..].iter().sum::<f64>() / 5.0;
        assert!(
            last < 0.9 * first,
            "{}: the loss barely moves ({first} -> {last})",
            c.name
        );
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs() / b.abs())
            .fold(0.0, |w: f64, d| {
                if w.is_nan() || d.is_nan() {
                    f64::NAN
                } else {
                    w.max(d)
                }
            });
        if worst.is_nan() || worst > LOSS_RTOL {
            failures.push(format!(
                "{}: worst relative difference {worst:.3e} (Kiln {got:?}, PyTorch {want:?})",
                c.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&scratch);
}
