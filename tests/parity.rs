//! Parity with PyTorch itself: from the same initial weights and the same batches, `kiln run`
//! reproduces the losses of a plain PyTorch training loop step by step.
//!
//! `tests/parity/reference.py` (run once, with the project's `.venv/bin/python`) builds each model
//! in PyTorch, saves its initial `state_dict` and 50 batches of MNIST digits as safetensors, and
//! trains 50 steps with `torch.optim` under Kiln's cosine schedule and `clip_grad_norm_`. For every
//! case this test then writes the matching `.exp`, runs `kiln run --init init.safetensors` on the
//! CPU and compares the loss of every step (recorded before the update) with PyTorch's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

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

/// Both sides run libtorch on one CPU thread: the same kernels in the same order, and no
/// OpenMP spinning when the test machine is busy (two threads made a run up to 10x slower).
const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

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

/// A JSON value written in the `.exp` language (numbers, booleans and lists of numbers).
fn exp_value(v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().expect("a number");
            if f == 0.0 || (1e-3..1e3).contains(&f.abs()) {
                format!("{f}")
            } else {
                format!("{f:e}")
            }
        }
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(exp_value).collect::<Vec<_>>().join(", ")
        ),
        other => panic!("no .exp spelling for {other}"),
    }
}

/// The eight cases: every optimizer with weight decay, on both models. Where torch.optim has
/// further switches, the two models take different ones so that both code paths are compared.
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

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The project's Python, which has torch; a missing one fails the test, never skips it.
fn python() -> PathBuf {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the parity tests need PyTorch in the project's virtualenv, and `{}` is missing: \
         run `bash scripts/quickstart.sh` (or scripts/setup.sh) to create it",
        python.display()
    );
    python
}

/// The numbers of a JSON array.
fn floats(v: &Value, what: &str) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what} is not an array"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("{what} holds {x}")))
        .collect()
}

/// The only subdirectory of `dir`.
fn only_subdir(dir: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "expected one directory in {}, found {dirs:?}",
        dir.display()
    );
    dirs.into_iter().next().expect("one directory")
}

/// Kiln's (loss, lr) per step, from the run's `steps.jsonl`.
fn kiln_steps(case: &Case, dir: &Path) -> (Vec<f64>, Vec<f64>) {
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
        "{}: `kiln run` failed ({}):\n{}{}",
        case.name(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = only_subdir(&runs.join(case.name()));
    let path = run.join("steps.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let (mut losses, mut lrs) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}:{}: {e}: {line}", path.display(), i + 1));
        assert_eq!(
            v["step"].as_u64(),
            Some(i as u64 + 1),
            "{}:{}: steps out of order: {line}",
            path.display(),
            i + 1
        );
        losses.push(
            v["loss"]
                .as_f64()
                .unwrap_or_else(|| panic!("{}:{}: no loss: {line}", path.display(), i + 1)),
        );
        lrs.push(
            v["lr"]
                .as_f64()
                .unwrap_or_else(|| panic!("{}:{}: no lr: {line}", path.display(), i + 1)),
        );
    }
    (losses, lrs)
}

/// The worst relative difference of two series: (step, difference), steps 1-based.
fn worst(ours: &[f64], theirs: &[f64]) -> (usize, f64) {
    ours.iter()
        .zip(theirs)
        .map(|(a, b)| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE))
        .enumerate()
        .fold((0, 0.0), |best, (i, d)| {
            if d > best.1 || d.is_nan() {
                (i + 1, d)
            } else {
                best
            }
        })
}

#[test]
fn losses_match_pytorch_step_for_step() {
    let python = python();
    let scratch = std::env::temp_dir().join(format!("kiln-parity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let cases = cases();
    let dirs: Vec<PathBuf> = cases.iter().map(|c| scratch.join(c.name())).collect();
    for dir in &dirs {
        std::fs::create_dir_all(dir).expect("scratch directory");
    }
    let mnist = root().join("data/mnist");
    let spec: Vec<Value> = cases
        .iter()
        .zip(&dirs)
        .map(|(c, d)| c.spec(d, &mnist))
        .collect();
    let spec_path = scratch.join("spec.json");
    std::fs::write(
        &spec_path,
        serde_json::to_string_pretty(&spec).expect("json"),
    )
    .expect("write spec");

    let out = Command::new(&python)
        .arg(root().join("tests/parity/reference.py"))
        .arg(&spec_path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "the PyTorch reference `tests/parity/reference.py` failed ({}) with {}:\n{}{}",
        out.status,
        python.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let mut report = String::new();
    let mut failures = Vec::new();
    for (case, dir) in cases.iter().zip(&dirs) {
        std::fs::write(dir.join("parity.exp"), case.exp()).expect("write .exp");
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
        )
        .expect("reference json");
        let want = floats(&reference["losses"], "losses");
        let want_lr = floats(&reference["lrs"], "lrs");
        let norms = floats(&reference["grad_norms"], "grad_norms");
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

        let (got, got_lr) = kiln_steps(case, dir);
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
