//! Parity with PyTorch itself: from the same initial weights and the same batches, `kiln run`
//! reproduces the losses of a plain PyTorch training loop step by step.
//!
//! `tests/parity/reference.py` (run once, with the project's `.venv/bin/python`) builds each model
//! in PyTorch, saves its initial `state_dict` and 50 batches of MNIST digits as safetensors, and
//! trains 50 steps with `torch.optim` under Kiln's cosine schedule and `clip_grad_norm_`. For every
//! case this test then writes the matching `.exp`, runs `kiln run --init init.safetensors` on the
//! CPU and compares the loss of every step (recorded before the update) with PyTorch's.

mod support;

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};
use support::parity::{self, compare, exp_value, floats, worst};

/// Optimizer steps per case, one batch each.
const STEPS: usize = 50;
/// Samples per batch.
const BATCH: usize = 32;
/// Linear warmup of the cosine schedule, in steps.
const WARMUP: usize = 5;
/// Largest relative difference allowed between Kiln's and PyTorch's loss at any step.
const LOSS_RTOL: f64 = 1e-4;
/// Learning rates are computed by the same formula in f64 on both sides.
const LR_RTOL: f64 = 1e-12;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Model {
    Mlp,
    Cnn,
}

impl Model {
    fn name(self) -> &'static str {
        match self {
            Model::Mlp => "mlp",
            Model::Cnn => "cnn",
        }
    }

    /// The model block, with the layer names of `reference.py`'s modules.
    fn block(self) -> &'static str {
        match self {
            Model::Mlp => concat!(
                "  model {\n",
                "    input [784]\n",
                "    fc1: linear(784 -> 256)\n",
                "    relu\n",
                "    fc2: linear(256 -> 10)\n",
                "  }\n",
            ),
            Model::Cnn => concat!(
                "  model {\n",
                "    input [1, 28, 28]\n",
                "    conv1: conv2d(1 -> 16, 3, padding: 1)\n",
                "    relu\n",
                "    max_pool2d(2)\n",
                "    conv2: conv2d(16 -> 32, 3, padding: 1)\n",
                "    relu\n",
                "    max_pool2d(2)\n",
                "    flatten\n",
                "    head: linear(1568 -> 10)\n",
                "  }\n",
            ),
        }
    }
}

/// One comparison: a model, an optimizer with its arguments (named as in both Kiln and
/// `torch.optim`), the cosine schedule's floor and the clipping norm.
struct Case {
    model: Model,
    optimizer: &'static str,
    args: Vec<(&'static str, Value)>,
    min_lr: f64,
    clip_norm: f64,
}

impl Case {
    fn name(&self) -> String {
        format!("parity-{}-{}", self.model.name(), self.optimizer)
    }

    /// The case as `reference.py` reads it.
    fn spec(&self, dir: &Path, mnist: &Path) -> Value {
        let mut optimizer = serde_json::Map::new();
        optimizer.insert("kind".into(), json!(self.optimizer));
        for (k, v) in &self.args {
            optimizer.insert((*k).into(), v.clone());
        }
        json!({
            "dir": dir,
            "mnist": mnist,
            "model": self.model.name(),
            "seed": 7,
            "batch": BATCH,
            "steps": STEPS,
            "warmup": WARMUP,
            "min_lr": self.min_lr,
            "clip_norm": self.clip_norm,
            "optimizer": optimizer,
        })
    }

    /// The same case as an experiment file.
    fn exp(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|(k, v)| format!("{k}: {}", exp_value(v)))
            .collect();
        let mut text = format!("experiment \"{}\" {{\n", self.name());
        text += "  seed 7\n";
        text += "  data {\n";
        text += "    source safetensors(\"data.safetensors\", inputs: \"inputs\", targets: \"targets\", classes: 10)\n";
        text += "    shuffle false\n";
        let _ = writeln!(text, "    batch {BATCH}");
        text += "  }\n";
        text += self.model.block();
        text += "  device cpu\n";
        let _ = writeln!(text, "  optimizer {}({})", self.optimizer, args.join(", "));
        let _ = writeln!(
            text,
            "  schedule cosine(warmup: {WARMUP} steps, min_lr: {:e})",
            self.min_lr
        );
        text += "  train {\n";
        let _ = writeln!(text, "    steps {STEPS}");
        text += "    loss cross_entropy\n";
        let _ = writeln!(text, "    clip_norm {}", self.clip_norm);
        text += "  }\n}\n";
        text
    }
}

/// The eight cases: every optimizer with weight decay, on both models. Where torch.optim has
/// further switches, the two models take different ones so that both code paths are compared:
/// the MLP's SGD, Adam and AdamW run fused (Kiln's default, against `fused=True`), the CNN's
/// with `fused: false` (against the single-tensor rules, `foreach=False`).
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for model in [Model::Mlp, Model::Cnn] {
        let cnn = model == Model::Cnn;
        out.push(Case {
            model,
            optimizer: "sgd",
            args: vec![
                ("lr", json!(0.05)),
                ("momentum", json!(0.9)),
                ("nesterov", json!(true)),
                ("weight_decay", json!(5e-3)),
                ("fused", json!(!cnn)),
            ],
            min_lr: 1e-3,
            clip_norm: if cnn { 2.5 } else { 2.3 },
        });
        out.push(Case {
            model,
            optimizer: "adam",
            args: vec![
                ("lr", json!(2e-3)),
                ("betas", json!([0.9, 0.99])),
                ("weight_decay", json!(1e-2)),
                ("fused", json!(!cnn)),
            ],
            min_lr: 1e-4,
            clip_norm: if cnn { 3.5 } else { 2.7 },
        });
        out.push(Case {
            model,
            optimizer: "adamw",
            args: vec![
                ("lr", json!(2e-3)),
                ("weight_decay", json!(0.1)),
                ("amsgrad", json!(cnn)),
                ("fused", json!(!cnn)),
            ],
            min_lr: 1e-4,
            clip_norm: if cnn { 3.5 } else { 2.7 },
        });
        out.push(Case {
            model,
            optimizer: "rmsprop",
            args: if cnn {
                vec![
                    ("lr", json!(1e-3)),
                    ("alpha", json!(0.9)),
                    ("weight_decay", json!(1e-2)),
                ]
            } else {
                vec![
                    ("lr", json!(5e-4)),
                    ("momentum", json!(0.5)),
                    ("centered", json!(true)),
                    ("weight_decay", json!(1e-2)),
                ]
            },
            min_lr: 1e-5,
            clip_norm: if cnn { 3.8 } else { 2.3 },
        });
    }
    out
}

#[test]
fn losses_match_pytorch_step_for_step() {
    let scratch = support::scratch("parity");
    let cases = cases();
    let dirs: Vec<_> = cases.iter().map(|c| scratch.join(c.name())).collect();
    for dir in &dirs {
        std::fs::create_dir_all(dir).expect("scratch directory");
    }
    let mnist = support::root().join("data/mnist");
    let spec: Vec<Value> = cases
        .iter()
        .zip(&dirs)
        .map(|(c, d)| c.spec(d, &mnist))
        .collect();
    parity::reference("tests/parity/reference.py", &json!(spec), &scratch);

    let mut report = String::new();
    let mut failures = Vec::new();
    for (case, dir) in cases.iter().zip(&dirs) {
        std::fs::write(dir.join("parity.exp"), case.exp()).expect("write .exp");
        let reference = parity::json_file(&dir.join("reference.json"));
        let want = floats(&reference["losses"]);
        let want_lr = floats(&reference["lrs"]);
        let norms = floats(&reference["grad_norms"]);
        assert_eq!(
            want.len(),
            STEPS,
            "{}: the reference has {} losses",
            case.name(),
            want.len()
        );

        // The comparison covers clipping only if it changes some steps and leaves others.
        let clipped = norms.iter().filter(|n| **n > case.clip_norm).count();
        assert!(
            clipped > 0 && clipped < STEPS,
            "{}: clip_norm {} clips {clipped} of {STEPS} steps (gradient norms {norms:.2?}); pick one that clips some",
            case.name(),
            case.clip_norm
        );
        // And if training moves the loss.
        let (first, last) = (
            want[..5].iter().sum::<f64>() / 5.0,
            want[STEPS - 5..].iter().sum::<f64>() / 5.0,
        );
        assert!(
            last < 0.9 * first,
            "{}: PyTorch's loss barely moves ({first:.4} -> {last:.4})",
            case.name()
        );

        let steps = parity::train(
            &dir.join("parity.exp"),
            Some(&dir.join("init.safetensors")),
            &dir.join("run"),
        );
        let (got, got_lr) = (steps.losses, steps.lrs);
        assert_eq!(
            got.len(),
            STEPS,
            "{}: Kiln recorded {} steps, expected {STEPS}",
            case.name(),
            got.len()
        );
        let (lr_step, lr_diff) = worst(&got_lr, &want_lr);
        let (step, diff) = worst(&got, &want);
        let _ = writeln!(
            report,
            "{:<22} worst loss rel diff {diff:.3e} (step {step:>2}), worst lr rel diff {lr_diff:.1e}, clipped {clipped}/{STEPS} steps, loss {:.4} -> {:.4}",
            case.name(),
            want[0],
            want[STEPS - 1]
        );
        if lr_diff > LR_RTOL {
            failures.push(format!(
                "{}: the learning rate differs from step {lr_step}: Kiln {:e}, reference {:e}",
                case.name(),
                got_lr[lr_step - 1],
                want_lr[lr_step - 1]
            ));
        }
        if diff.is_nan() || diff > LOSS_RTOL {
            let from = got
                .iter()
                .zip(&want)
                .position(|(a, b)| (a - b).abs() > LOSS_RTOL * b.abs() || a.is_nan())
                .map_or(step, |i| i + 1);
            failures.push(format!(
                "{}: losses differ from step {from} on (worst at step {step}: Kiln {:e}, PyTorch {:e}, relative difference {diff:.3e} > {LOSS_RTOL:e}); files in {}",
                case.name(),
                got[step - 1],
                want[step - 1],
                dir.display()
            ));
        }
    }
    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "Kiln does not match PyTorch:\n{}\n\n{report}",
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Largest relative difference allowed between two implementations of one optimizer on the
/// MLP, at any of the 50 steps.
const FUSED_RTOL: f64 = 1e-6;

/// ATen's fused kernels (Kiln's default for SGD, Adam and AdamW) against the single-tensor rules
/// (`fused: false`), and against `torch.optim` with `fused=True` and with `foreach=True`: the
/// same losses step by step on the MLP, for SGD with Nesterov momentum, Adam with `amsgrad` and
/// AdamW.
#[test]
fn fused_optimizers_match_unfused_and_torch() {
    let scratch = support::scratch("parity-fused");
    let mnist = support::root().join("data/mnist");
    let optimizers: [(&str, Vec<(&str, Value)>); 3] = [
        (
            "sgd",
            vec![
                ("lr", json!(0.05)),
                ("momentum", json!(0.9)),
                ("nesterov", json!(true)),
                ("weight_decay", json!(5e-3)),
            ],
        ),
        (
            "adam",
            vec![
                ("lr", json!(2e-3)),
                ("weight_decay", json!(1e-2)),
                ("amsgrad", json!(true)),
            ],
        ),
        (
            "adamw",
            vec![("lr", json!(2e-3)), ("weight_decay", json!(0.1))],
        ),
    ];
    // For each optimizer: Kiln fused and unfused, PyTorch fused and foreach.
    let mut runs = Vec::new();
    let mut spec = Vec::new();
    for (optimizer, args) in &optimizers {
        let case = |fused: bool| {
            let mut args = args.clone();
            args.push(("fused", json!(fused)));
            Case {
                model: Model::Mlp,
                optimizer,
                args,
                min_lr: 1e-4,
                clip_norm: 2.5,
            }
        };
        let (fused, single) = (case(true), case(false));
        let dir = |what: &str| scratch.join(format!("{optimizer}-{what}"));
        for (what, torch) in [("torch-fused", &fused), ("torch-foreach", &single)] {
            let d = dir(what);
            std::fs::create_dir_all(&d).expect("scratch directory");
            let mut s = torch.spec(&d, &mnist);
            if what == "torch-foreach" {
                s["optimizer"]["foreach"] = json!(true);
            }
            spec.push(s);
        }
        runs.push((
            *optimizer,
            fused,
            single,
            dir("torch-fused"),
            dir("torch-foreach"),
        ));
    }
    parity::reference("tests/parity/reference.py", &json!(spec), &scratch);

    let mut failures = Vec::new();
    for (optimizer, fused, single, torch_fused, torch_foreach) in &runs {
        let init = torch_fused.join("init.safetensors");
        let mut losses = Vec::new();
        for (what, case) in [("fused", fused), ("unfused", single)] {
            let dir = scratch.join(format!("{optimizer}-kiln-{what}"));
            std::fs::create_dir_all(&dir).expect("scratch directory");
            std::fs::copy(
                torch_fused.join("data.safetensors"),
                dir.join("data.safetensors"),
            )
            .expect("copy the batches");
            std::fs::write(dir.join("parity.exp"), case.exp()).expect("write .exp");
            losses
                .push(parity::train(&dir.join("parity.exp"), Some(&init), &dir.join("run")).losses);
        }
        let reference =
            |dir: &Path| floats(&parity::json_file(&dir.join("reference.json"))["losses"]);
        let (ours, single) = (&losses[0], &losses[1]);
        let pairs = [
            ("fused / unfused", ours, single.clone()),
            ("fused / torch fused=True", ours, reference(torch_fused)),
            ("fused / torch foreach=True", ours, reference(torch_foreach)),
        ];
        for (what, a, b) in pairs {
            let name = format!("{optimizer} {what}");
            failures.extend(compare(&name, "loss", a, &b, FUSED_RTOL));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&scratch);
}
