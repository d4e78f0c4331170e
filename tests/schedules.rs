//! Learning-rate schedules against PyTorch's own `torch.optim.lr_scheduler` classes: from the
//! same initial weights and batches, `kiln run` reproduces the learning rate and the loss of every
//! step of a PyTorch loop that steps `OneCycleLR` (with its momentum cycling), `LinearLR`,
//! `SequentialLR` or `ReduceLROnPlateau`; a resumed `reduce_on_plateau` run continues as an
//! uninterrupted one; and under data parallelism, the pipeline and DDP it takes one device's rates.
//!
//! `tests/schedules/reference.py` (run once, with the project's `.venv/bin/python`) builds a small
//! MLP, saves its initial weights and a labelled point cloud as safetensors, and trains 50 steps
//! per case. This test writes the matching `.exp` for each case, runs `kiln run --init` on the
//! CPU and compares the records of `steps.jsonl` (and the validation losses of `metrics.jsonl`).

mod support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::parity::{self, floats, json_lines, worst};
use support::{killed_run, run, s, same_computation, scratch, text, write};

/// Optimizer steps per case.
const STEPS: usize = 50;
/// Samples, of which `TRAIN` train and the rest validate.
const SAMPLES: usize = 400;
/// Training samples: `split(train: 0.8)` of `SAMPLES`.
const TRAIN: usize = 320;
/// Samples per batch.
const BATCH: usize = 16;
/// Largest relative difference allowed between Kiln's and PyTorch's loss at any step (fp32).
const LOSS_RTOL: f64 = 1e-5;
/// Rates: the same closed forms in f64 (PyTorch's chainable forms agree to rounding).
const LR_RTOL: f64 = 1e-9;

/// One comparison: an optimizer and a schedule, written for Kiln and for PyTorch.
struct Case {
    name: &'static str,
    /// `optimizer ...` in the `.exp` file.
    optimizer: &'static str,
    /// The optimizer as `reference.py` builds it.
    torch_optimizer: Value,
    /// `schedule ...` in the `.exp` file.
    schedule: &'static str,
    /// The scheduler as `reference.py` builds it.
    scheduler: Value,
    /// Validation every this many steps (for `reduce_on_plateau`).
    eval_every: Option<usize>,
}

impl Case {
    fn spec(&self, dir: &Path) -> Value {
        json!({
            "dir": dir,
            "seed": 7,
            "samples": SAMPLES,
            "train": TRAIN,
            "batch": BATCH,
            "steps": STEPS,
            "eval_every": self.eval_every,
            "optimizer": self.torch_optimizer,
            "scheduler": self.scheduler,
        })
    }

    fn exp(&self) -> String {
        let mut text = format!(
            "experiment \"sched-{}\" {{\n  seed 7\n  data {{\n",
            self.name
        );
        text += "    source safetensors(\"data.safetensors\", inputs: \"inputs\", targets: \"targets\", classes: 4)\n";
        text += "    split(train: 0.8, val: 0.2)\n    shuffle false\n";
        let _ = writeln!(text, "    batch {BATCH}\n  }}");
        text += "  model {\n    input [8]\n    fc1: linear(8 -> 32)\n    relu\n    fc2: linear(32 -> 4)\n  }\n";
        text += "  device cpu\n";
        let _ = writeln!(text, "  optimizer {}", self.optimizer);
        let _ = writeln!(text, "  schedule {}", self.schedule);
        let _ = writeln!(
            text,
            "  train {{\n    steps {STEPS}\n    loss cross_entropy"
        );
        if let Some(n) = self.eval_every {
            let _ = writeln!(text, "    metrics [accuracy]\n    eval_every {n} steps");
        }
        text += "  }\n}\n";
        text
    }
}

fn cases() -> Vec<Case> {
    let sgd = json!({"kind": "sgd", "lr": 0.1, "momentum": 0.9});
    vec![
        Case {
            name: "one-cycle-sgd",
            optimizer: "sgd(lr: 0.1, momentum: 0.9)",
            torch_optimizer: sgd.clone(),
            schedule: "one_cycle(max_lr: 0.2)",
            scheduler: json!({"kind": "one_cycle", "max_lr": 0.2}),
            eval_every: None,
        },
        Case {
            name: "one-cycle-adamw",
            optimizer: "adamw(lr: 1e-3)",
            torch_optimizer: json!({"kind": "adamw", "lr": 1e-3}),
            schedule: "one_cycle(max_lr: 0.01)",
            scheduler: json!({"kind": "one_cycle", "max_lr": 0.01}),
            eval_every: None,
        },
        Case {
            name: "one-cycle-options",
            optimizer: "adam(lr: 1e-3)",
            torch_optimizer: json!({"kind": "adam", "lr": 1e-3}),
            schedule: "one_cycle(max_lr: 0.01, pct_start: 0.25, div_factor: 10, final_div_factor: 100, three_phase: true, anneal: linear, base_momentum: 0.8, max_momentum: 0.9)",
            scheduler: json!({"kind": "one_cycle", "max_lr": 0.01, "pct_start": 0.25, "div_factor": 10.0,
                "final_div_factor": 100.0, "three_phase": true, "anneal_strategy": "linear",
                "base_momentum": 0.8, "max_momentum": 0.9}),
            eval_every: None,
        },
        Case {
            name: "one-cycle-no-momentum",
            optimizer: "rmsprop(lr: 1e-3, momentum: 0.5)",
            torch_optimizer: json!({"kind": "rmsprop", "lr": 1e-3, "momentum": 0.5}),
            schedule: "one_cycle(max_lr: 0.005, cycle_momentum: false)",
            scheduler: json!({"kind": "one_cycle", "max_lr": 0.005, "cycle_momentum": false}),
            eval_every: None,
        },
        Case {
            name: "linear",
            optimizer: "sgd(lr: 0.1, momentum: 0.9)",
            torch_optimizer: sgd.clone(),
            schedule: "linear(start_factor: 1, end_factor: 0.05)",
            scheduler: json!({"kind": "linear", "start_factor": 1.0, "end_factor": 0.05, "total_iters": STEPS}),
            eval_every: None,
        },
        Case {
            name: "sequence",
            optimizer: "adam(lr: 0.01)",
            torch_optimizer: json!({"kind": "adam", "lr": 0.01}),
            schedule: "sequence([warmup(5 steps, start_factor: 0.1), linear(start_factor: 1, end_factor: 0.5, length: 10), cosine(min_lr: 1e-4)], milestones: [5 steps, 20 steps])",
            scheduler: json!({"kind": "sequential", "milestones": [5, 20], "schedulers": [
                {"kind": "linear", "start_factor": 0.1, "end_factor": 1.0, "total_iters": 5},
                {"kind": "linear", "start_factor": 1.0, "end_factor": 0.5, "total_iters": 10},
                {"kind": "cosine", "T_max": STEPS - 20, "eta_min": 1e-4}]}),
            eval_every: None,
        },
        Case {
            name: "cosine-warmup-start",
            optimizer: "sgd(lr: 0.1, momentum: 0.9)",
            torch_optimizer: sgd.clone(),
            schedule: "cosine(warmup: 5 steps, min_lr: 1e-3, start_factor: 0.2)",
            scheduler: json!({"kind": "sequential", "milestones": [5], "schedulers": [
                {"kind": "linear", "start_factor": 0.2, "end_factor": 1.0, "total_iters": 5},
                {"kind": "cosine", "T_max": STEPS - 5, "eta_min": 1e-3}]}),
            eval_every: None,
        },
        Case {
            name: "plateau-loss",
            optimizer: "sgd(lr: 0.3, momentum: 0.9)",
            torch_optimizer: json!({"kind": "sgd", "lr": 0.3, "momentum": 0.9}),
            schedule: "reduce_on_plateau(factor: 0.5, patience: 0, threshold: 0.02)",
            scheduler: json!({"kind": "plateau", "factor": 0.5, "patience": 0, "threshold": 0.02}),
            eval_every: Some(5),
        },
        Case {
            name: "plateau-accuracy",
            optimizer: "adamw(lr: 0.02)",
            torch_optimizer: json!({"kind": "adamw", "lr": 0.02}),
            schedule: "reduce_on_plateau(monitor: val_accuracy, factor: 0.3, patience: 0, threshold: 0.01, threshold_mode: abs, cooldown: 1, min_lr: 0.003)",
            scheduler: json!({"kind": "plateau", "mode": "max", "factor": 0.3, "patience": 0,
                "threshold": 0.01, "threshold_mode": "abs", "cooldown": 1, "min_lr": 0.003}),
            eval_every: Some(5),
        },
    ]
}

#[test]
fn schedules_match_pytorch_step_for_step() {
    let scratch = scratch("schedules");
    let cases = cases();
    let dirs: Vec<PathBuf> = cases.iter().map(|c| scratch.join(c.name)).collect();
    for dir in &dirs {
        std::fs::create_dir_all(dir).expect("case directory");
    }
    let spec: Vec<Value> = cases.iter().zip(&dirs).map(|(c, d)| c.spec(d)).collect();
    parity::reference("tests/schedules/reference.py", &json!(spec), &scratch);

    let mut report = String::new();
    let mut failures = Vec::new();
    for (case, dir) in cases.iter().zip(&dirs) {
        let exp = write(dir, "case.exp", &case.exp());
        let reference = parity::json_file(&dir.join("reference.json"));
        let (want, want_lr) = (floats(&reference["losses"]), floats(&reference["lrs"]));
        let momenta = floats(&reference["momenta"]);
        let steps = parity::train(&exp, Some(&dir.join("init.safetensors")), &dir.join("run"));
        let (got, got_lr) = (steps.losses, steps.lrs);
        assert_eq!(
            got.len(),
            STEPS,
            "{}: {} steps recorded",
            case.name,
            got.len()
        );

        // The comparison covers what the case is about only if it changes something.
        let distinct = |xs: &[f64]| {
            let mut v: Vec<u64> = xs.iter().map(|x| x.to_bits()).collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        assert!(
            distinct(&want_lr) > 1,
            "{}: PyTorch's rate never changes",
            case.name
        );
        if case.scheduler.get("cycle_momentum").is_none() && case.name.starts_with("one-cycle") {
            assert!(
                distinct(&momenta) > 1,
                "{}: momentum is not cycled",
                case.name
            );
        }
        if case.eval_every.is_some() {
            let evals: Vec<f64> = json_lines(&dir.join("run/metrics.jsonl"))
                .iter()
                .filter(|v| v.get("train_loss").is_none())
                .filter_map(|v| v["loss"].as_f64())
                .collect();
            let want_val = floats(&reference["val_losses"]);
            let (i, d) = worst(&evals, &want_val);
            if evals.len() < want_val.len() || d > LOSS_RTOL {
                failures.push(format!(
                    "{}: validation losses differ (evaluation {i}, {d:.3e}): Kiln {evals:?}, PyTorch {want_val:?}",
                    case.name
                ));
            }
        }
        let (lr_i, lr_d) = worst(&got_lr, &want_lr);
        let (i, d) = worst(&got, &want);
        let _ = writeln!(
            report,
            "{:<24} worst loss rel diff {d:.2e} (step {i}), worst lr rel diff {lr_d:.1e}, {} rates",
            case.name,
            distinct(&want_lr)
        );
        if lr_d > LR_RTOL {
            failures.push(format!(
                "{}: the rate of step {lr_i} differs: Kiln {:e}, PyTorch {:e}",
                case.name,
                got_lr[lr_i - 1],
                want_lr[lr_i - 1]
            ));
        }
        if d.is_nan() || d > LOSS_RTOL {
            failures.push(format!(
                "{}: the loss of step {i} differs: Kiln {:e}, PyTorch {:e} ({d:.3e}); files in {}",
                case.name,
                got[i - 1],
                want[i - 1],
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

/// A `reduce_on_plateau` run killed and resumed from a checkpoint takes the rates of an
/// uninterrupted run: the schedule's state (rate, best value, counts) is in the checkpoint.
#[test]
fn a_resumed_plateau_run_continues_exactly() {
    let dir = scratch("plateau-resume");
    let source = r#"experiment "plateau-resume" {
  seed 5
  data {
    source synthetic(inputs: normal([8]), targets: randint(4), count: 256)
    split(train: 0.75, val: 0.25)
    batch 16
  }
  model {
    input [8]
    linear(8 -> 32)
    relu
    linear(32 -> 4)
  }
  device cpu
  optimizer sgd(lr: 0.5, momentum: 0.9)
  schedule reduce_on_plateau(factor: 0.5, patience: 1, cooldown: 2, threshold: 0.01)
  train {
    steps 480
    loss cross_entropy
    eval_every 8 steps
    checkpoint(every: 16 steps, keep: 2)
  }
}
"#;
    let exp = write(&dir, "plateau.exp", source);
    let whole = dir.join("whole");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&whole)]);
    assert!(o.status.success(), "{}", text(&o));
    let cut = dir.join("cut");
    killed_run(&exp, &cut, 160);
    let o = run(&["run", s(&exp), "--quiet", "--resume", s(&cut)]);
    assert!(o.status.success(), "{}", text(&o));
    let rates = |d: &Path| -> Vec<(u64, f64)> {
        json_lines(&d.join("steps.jsonl"))
            .iter()
            .map(|v| {
                (
                    v["step"].as_u64().expect("step"),
                    v["lr"].as_f64().expect("lr"),
                )
            })
            .collect()
    };
    let (a, b) = (rates(&whole), rates(&cut));
    assert_eq!(a.len(), 480);
    let reduced = a.iter().filter(|(_, lr)| *lr < 0.5).count();
    assert!(
        reduced > 0 && a[159].1 < 0.5,
        "the rate was not reduced before the cut: {a:?}"
    );
    // A resume restores the plateau's state exactly: the same computation.
    same_computation(a, b, "the resumed run's rates");
}

/// `reduce_on_plateau` under every strategy takes the rates of one device: the validations it
/// watches are of the whole split, whichever devices or processes computed them.
#[test]
fn plateau_rates_are_those_of_one_device_under_every_strategy() {
    let dir = scratch("plateau-strategies");
    let exp = |name: &str, parallel: &str, stages: bool| {
        let layers = if stages {
            "    block stage1 {\n      fc1: linear(16)\n      tanh\n    }\n    block stage2 {\n      fc2: linear(3)\n    }\n"
        } else {
            "    fc1: linear(16)\n    tanh\n    fc2: linear(3)\n"
        };
        let source = format!(
            "experiment \"{name}\" {{\n  seed 5\n  data {{\n    source synthetic(inputs: normal([8]), targets: randint(3), count: 500)\n    split(train: 0.8, val: 0.2)\n    batch 24\n  }}\n  model {{\n    input [8]\n{layers}  }}\n  device cpu\n  {parallel}\n  optimizer sgd(lr: 0.5, momentum: 0.9)\n  schedule reduce_on_plateau(factor: 0.5, patience: 0)\n  train {{\n    steps 60\n    loss cross_entropy\n    eval_every 5 steps\n  }}\n}}\n"
        );
        write(&dir, &format!("{name}.exp"), &source)
    };
    let records = |name: &str, parallel: &str, stages: bool| {
        let steps = parity::train(&exp(name, parallel, stages), None, &dir.join(name));
        (steps.lrs, steps.losses)
    };
    let (lrs, losses) = records("single", "", false);
    assert!(
        lrs.iter().filter(|lr| **lr < 0.5).count() > 10,
        "the rate is hardly reduced: {lrs:?}"
    );
    // The strategies compute the validation losses otherwise (other batches, ranks), so they
    // differ from one device's in the last float32 bits. The rates are nevertheless equal, not
    // merely close: each is the base rate halved some times, and each plateau decision compares a
    // validation loss with the best so far times 1 - 1e-4. Every one of one device's losses lies
    // farther from that boundary than twice the strategies' difference (asserted below), so
    // every decision, and every rate, is the same on any CPU (measured on an AVX2 machine: the
    // closest decision lies 5.9e-4 from its threshold, the strategies differ by 1.1e-7 at most).
    let validations = |name: &str| -> Vec<f64> {
        json_lines(&dir.join(name).join("metrics.jsonl"))
            .iter()
            .filter(|v| v.get("train_loss").is_none())
            .map(|v| v["loss"].as_f64().expect("a validation loss"))
            .collect()
    };
    let one_val = validations("single");
    let (mut best, mut margin) = (f64::INFINITY, f64::INFINITY);
    for &v in &one_val {
        let edge = best * (1.0 - 1e-4);
        if best.is_finite() {
            margin = margin.min((v - edge).abs() / edge);
        }
        if v < edge {
            best = v;
        }
    }
    for (name, parallel, stages) in [
        ("data", "parallel data(devices: [cpu, cpu])", false),
        (
            "pipeline",
            "parallel pipeline(stages: 2, micro_batches: 4)",
            true,
        ),
        ("ddp", "parallel ddp(backend: gloo, world_size: 2)", false),
    ] {
        let (got_lrs, got_losses) = records(name, parallel, stages);
        let got_val = validations(name);
        let (i, d) = worst(&got_val, &one_val);
        assert!(
            got_val.len() == one_val.len() && 2.0 * d < margin,
            "{name}: validation {i} differs by {d:e}, the closest decision is {margin:e} from its threshold"
        );
        assert_eq!(got_lrs, lrs, "{name}: the rates differ from one device's");
        let (step, diff) = worst(&got_losses, &losses);
        assert!(
            diff < 1e-5,
            "{name}: the loss of step {step} differs by {diff:e}"
        );
    }
}
