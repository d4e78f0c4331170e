//! Parity with PyTorch for a class per token: from the same initial weights and the same
//! synthetic sequences, `kiln run` reproduces the losses of a PyTorch training loop over 50
//! steps, within 1e-5 relative. The model scores every token (`[S, V]`, no pooling) and the
//! loss is PyTorch's over the flattened tokens, `F.cross_entropy(out.reshape(-1, V),
//! y.reshape(-1))`, with class weights, `ignore_index` and label smoothing, and `F.nll_loss`.
//! The first epoch's training accuracy is PyTorch's fraction of correct tokens not ignored.
//! `kiln eval` of the initial weights over every sample, in batches of 7 (`eval_batch`), gives
//! PyTorch's loss over all the tokens within 1e-6 relative, and the fraction of correct tokens
//! not ignored.
//!
//! `tests/parity_tokens/reference.py` draws the data as Kiln's `synthetic` source does for
//! `copy()`, `reverse()` and `sort()`, saves the initial `state_dict` and trains with AdamW.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::parity::{self, floats};

const STEPS: usize = 50;
const BATCH: usize = 16;
const VOCAB: usize = 6;
const LENGTH: usize = 8;
const LOSS_RTOL: f64 = 1e-5;
const EVAL_RTOL: f64 = 1e-6;

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
        .map(|(k, v)| format!("{k}: {}", parity::exp_value(v)))
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

/// `kiln eval` of the initial weights on the training split (every sample): loss and accuracy.
fn kiln_eval(name: &str, dir: &Path) -> (f64, f64) {
    let exp = dir.join("parity.exp");
    let init = dir.join("init.safetensors");
    let out = support::kiln(&["eval", support::s(&exp), "--weights", support::s(&init)])
        .args(["--split", "train", "--device", "cpu", "--format", "json"])
        .envs(parity::SINGLE_THREADED)
        .output()
        .expect("kiln starts");
    assert!(
        out.status.success(),
        "{name}: `kiln eval` failed:\n{}",
        support::text(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON from kiln eval");
    (
        v["loss"].as_f64().expect("a loss"),
        v["accuracy"].as_f64().expect("an accuracy"),
    )
}

#[test]
fn per_token_losses_match_pytorch_step_for_step() {
    let scratch = support::scratch("token-parity");
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
    parity::reference(
        "tests/parity_tokens/reference.py",
        &Value::Array(spec),
        &scratch,
    );
    let mut failures = Vec::new();
    for c in cases() {
        let dir = scratch.join(c.name);
        let reference = parity::json_file(&dir.join("reference.json"));
        let number = |v: &Value| v.as_f64().expect("a number");

        let (loss, accuracy) = kiln_eval(c.name, &dir);
        let (want_loss, want_accuracy) = (
            number(&reference["eval"]["loss"]),
            number(&reference["eval"]["accuracy"]),
        );
        if (loss - want_loss).abs() > EVAL_RTOL * want_loss.abs()
            || (accuracy - want_accuracy).abs() > 1e-12
        {
            failures.push(format!(
                "{}: kiln eval gives loss {loss:e} and accuracy {accuracy}, PyTorch {want_loss:e} and {want_accuracy}",
                c.name
            ));
        }

        let run = dir.join("run");
        let got = parity::train(
            &dir.join("parity.exp"),
            Some(&dir.join("init.safetensors")),
            &run,
        )
        .losses;
        let want = floats(&reference["losses"]);
        assert_eq!((got.len(), want.len()), (STEPS, STEPS), "{}: steps", c.name);
        let first: f64 = want[..5].iter().sum::<f64>() / 5.0;
        let last: f64 = want[STEPS - 5..].iter().sum::<f64>() / 5.0;
        assert!(
            last < 0.9 * first,
            "{}: the loss barely moves ({first} -> {last})",
            c.name
        );
        failures.extend(parity::compare(c.name, "loss", &got, &want, LOSS_RTOL));

        // Predictions agree but for a near tie or two among all the epoch's tokens.
        let records = parity::json_lines(&run.join("metrics.jsonl"));
        let train_accuracy = number(&records[0]["train_accuracy"]);
        let want_train = number(&reference["train_accuracy"]);
        if (train_accuracy - want_train).abs() > 2.0 / (STEPS * BATCH * LENGTH) as f64 {
            failures.push(format!(
                "{}: training accuracy {train_accuracy}, PyTorch {want_train}",
                c.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&scratch);
}
