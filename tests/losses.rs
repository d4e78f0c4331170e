//! Parity of the loss options with `torch.nn.functional`: from the same initial weights and the
//! same batches, `kiln run` reproduces, step by step over 50 SGD steps, the losses of a PyTorch
//! loop using `F.cross_entropy` (class weights, `ignore_index`, label smoothing), `F.nll_loss`
//! (class weights, `ignore_index`), `F.binary_cross_entropy_with_logits` (`pos_weight`, one
//! value or one per output), `F.huber_loss` (`delta`) and `F.smooth_l1_loss` (`beta`, 0
//! included) against several real-valued targets per sample. `tests/losses/reference.py` writes
//! the weights, the data and the reference losses.

mod support;

use serde_json::{json, Value};
use support::parity::{self, exp_value, floats};

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
        Case {
            name: "huber-default",
            loss: "huber",
            args: json!({}),
            outputs: 3,
            ignore_fraction: 0.0,
        },
        Case {
            name: "huber-delta",
            loss: "huber",
            args: json!({"delta": 0.3}),
            outputs: 3,
            ignore_fraction: 0.0,
        },
        Case {
            name: "smooth-l1-beta",
            loss: "smooth_l1",
            args: json!({"beta": 0.25}),
            outputs: 3,
            ignore_fraction: 0.0,
        },
        Case {
            name: "smooth-l1-beta-0",
            loss: "smooth_l1",
            args: json!({"beta": 0.0}),
            outputs: 2,
            ignore_fraction: 0.0,
        },
    ]
}

/// An argument as the `.exp` language writes it.
fn exp(case: &Case) -> String {
    let args: Vec<String> = case
        .args
        .as_object()
        .expect("named arguments")
        .iter()
        .map(|(k, v)| format!("{k}: {}", exp_value(v)))
        .collect();
    let (classes, last) = if ["bce_with_logits", "huber", "smooth_l1"].contains(&case.loss) {
        (String::new(), "")
    } else if case.loss == "nll" {
        (format!(", classes: {}", case.outputs), "    log_softmax\n")
    } else {
        (format!(", classes: {}", case.outputs), "")
    };
    let loss = if args.is_empty() {
        case.loss.to_string()
    } else {
        format!("{}({})", case.loss, args.join(", "))
    };
    format!(
        "experiment \"{name}\" {{\n  seed 7\n  data {{\n    source safetensors(\"data.safetensors\"{classes})\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input [8]\n    fc1: linear(8 -> 16)\n    relu\n    fc2: linear(16 -> {k})\n{last}  }}\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps {STEPS}\n    loss {loss}\n  }}\n}}\n",
        name = case.name,
        k = case.outputs,
    )
}

#[test]
fn loss_options_match_torch_functional_for_50_steps() {
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
    parity::reference("tests/losses/reference.py", &Value::Array(spec), &scratch);
    for case in &cases {
        let dir = scratch.join(case.name);
        let theirs = floats(&parity::json_file(&dir.join("reference.json"))["losses"]);
        let ours = parity::train(
            &dir.join("loss.exp"),
            Some(&dir.join("init.safetensors")),
            &dir.join("run"),
        )
        .losses;
        assert_eq!(ours.len(), STEPS, "{}: steps recorded", case.name);
        assert_eq!(theirs.len(), STEPS, "{}: reference steps", case.name);
        if let Some(failure) = parity::compare(case.name, "loss", &ours, &theirs, RTOL) {
            panic!("{failure}");
        }
        // The losses move: the options are not trivially equal on both sides.
        assert!(
            ours[0] != ours[STEPS - 1],
            "{}: the loss never changed",
            case.name
        );
    }
}
