//! Regression against PyTorch: a one-unit head (`linear(1)`, output `[B, 1]`) against one
//! numeric target per sample (`[B]`) from every file source (CSV, with real and whole-number
//! targets, `.npy`, `.npz`, safetensors) trains, for 50 SGD steps within 1e-5 relative, as
//! `F.<loss>(out.squeeze(-1), y)` does with `mse`, `l1`, `huber` and `smooth_l1`: the output is
//! squeezed to the targets' shape, never broadcast to `[B, B]`. The regression metrics `mae`,
//! `rmse` and `r2` are those of the whole split, as scikit-learn defines them for several
//! outputs (`multioutput="uniform_average"`), in the run's validations, its test evaluation,
//! `metrics.jsonl`, `report.yaml`, `kiln eval` and `kiln report`, on one device, with
//! `accumulate`, over data-parallel replicas and over two DDP ranks.
//! `tests/regression/reference.py` writes the data, the weights and the references.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::parity::{self, floats};

/// Optimizer steps per run.
const STEPS: usize = 50;
/// Largest relative difference allowed between Kiln's and PyTorch's values at any step (fp32).
const RTOL: f64 = 1e-5;

/// A loss as Kiln writes it, and its `torch.nn.functional` arguments.
struct Loss {
    name: &'static str,
    exp: &'static str,
    args: Value,
}

fn losses() -> Vec<Loss> {
    vec![
        Loss {
            name: "mse",
            exp: "mse",
            args: json!({}),
        },
        Loss {
            name: "l1",
            exp: "l1",
            args: json!({}),
        },
        Loss {
            name: "huber",
            exp: "huber",
            args: json!({}),
        },
        Loss {
            name: "huber-delta",
            exp: "huber(delta: 0.5)",
            args: json!({"delta": 0.5}),
        },
        Loss {
            name: "smooth_l1",
            exp: "smooth_l1(beta: 0.3)",
            args: json!({"beta": 0.3}),
        },
    ]
}

/// The file sources: a name, the `source` statement, and the reference's targets (`real` or
/// `whole`).
const SOURCES: &[(&str, &str, &str)] = &[
    ("csv", r#"csv("data.csv", target: "y")"#, "real"),
    ("csv-whole", r#"csv("whole.csv", target: "y")"#, "whole"),
    ("npy", r#"npy(inputs: "x.npy", targets: "y.npy")"#, "real"),
    ("npz", r#"npz("data.npz")"#, "real"),
    ("safetensors", r#"safetensors("data.safetensors")"#, "real"),
];

/// Samples per batch in the sources' runs.
const BATCH: usize = 16;

fn scalar_exp(name: &str, source: &str, loss: &str) -> String {
    format!(
        r#"experiment "{name}" {{
  seed 7
  data {{
    source {source}
    shuffle false
    batch {BATCH}
  }}
  model {{
    input [4]
    fc1: linear(4 -> 16)
    relu
    out: linear(16 -> 1)
  }}
  device cpu
  optimizer sgd(lr: 0.05)
  train {{
    steps {STEPS}
    loss {loss}
  }}
}}
"#
    )
}

#[test]
fn a_one_unit_head_trains_on_scalar_targets_from_every_file_source_as_torch_does() {
    let dir = support::scratch("regression-sources");
    let losses = losses();
    let spec: Vec<Value> = losses
        .iter()
        .map(|l| json!({"name": l.name, "loss": l.exp.split('(').next(), "args": l.args}))
        .collect();
    parity::reference(
        "tests/regression/reference.py",
        &json!([{"kind": "sources", "dir": dir, "seed": 3, "batch": BATCH, "steps": STEPS,
                 "lr": 0.05, "losses": spec}]),
        &dir,
    );
    let reference = parity::json_file(&dir.join("reference.json"));
    let mut failures = Vec::new();
    for (source, statement, targets) in SOURCES {
        for loss in &losses {
            let name = format!("{source}-{}", loss.name);
            let file = support::write(
                &dir,
                &format!("{name}.exp"),
                &scalar_exp(&name, statement, loss.exp),
            );
            let ours = parity::train(
                &file,
                Some(&dir.join("init.safetensors")),
                &dir.join("runs").join(&name),
            )
            .losses;
            let theirs = floats(&reference[targets][loss.name]);
            failures.extend(parity::compare(&name, "loss", &ours, &theirs, RTOL));
            // The model learns: the loss falls well below where it started (by 38% at least in the reference).
            if ours.len() == STEPS && ours[STEPS - 1] > 0.7 * ours[0] {
                failures.push(format!(
                    "{name}: the loss went from {} to {}",
                    ours[0],
                    ours[STEPS - 1]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Samples per batch in the metrics' runs: an epoch of 100 is batches of 30, 30, 30 and 10.
const METRICS_BATCH: usize = 30;

/// A regression of three values per sample with validation and test splits of their own,
/// evaluated in batches of 7 every 5 steps (r2 goes from about -0.7 to 0.8).
fn metrics_exp(name: &str, accumulate: usize, parallel: &str) -> String {
    format!(
        r#"experiment "{name}" {{
  seed 7
  data {{
    split(train: safetensors("train.safetensors"), val: safetensors("val.safetensors"), test: safetensors("test.safetensors"))
    shuffle false
    batch {METRICS_BATCH}
    eval_batch 7
  }}
  model {{
    input [4]
    fc1: linear(4 -> 16)
    relu
    out: linear(16 -> 3)
  }}
  device cpu
  {parallel}
  optimizer sgd(lr: 0.1)
  train {{
    steps {STEPS}
    accumulate {accumulate}
    loss huber
    metrics [loss, mae, rmse, r2]
    eval_every 5 steps
  }}
}}
"#
    )
}

/// The names of an evaluation's figures, as `metrics.jsonl`, `report.yaml` and `kiln eval`
/// write them.
const FIGURES: [&str; 4] = ["loss", "mae", "rmse", "r2"];

/// Whether `a` is `b` within [`RTOL`], relative to `b` or, near 0 (r2 crosses it), absolute.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= RTOL * b.abs().max(1.0)
}

/// The differences of `ours` (an evaluation's fields) from `theirs`, as failure lines.
fn differences(what: &str, ours: &Value, theirs: &Value) -> Vec<String> {
    FIGURES
        .iter()
        .filter_map(|f| {
            let (a, b) = (ours[f].as_f64(), theirs[f].as_f64());
            match (a, b) {
                (Some(a), Some(b)) if close(a, b) => None,
                _ => Some(format!("{what} {f}: Kiln {:?}, reference {:?}", a, b)),
            }
        })
        .collect()
}

/// The validation lines of a run's `metrics.jsonl`, by step.
fn validations(run: &Path) -> Vec<(u64, Value)> {
    support::metrics(run)
        .into_iter()
        .filter(|l| l["split"] == "val")
        .map(|l| (l["step"].as_u64().expect("a step"), l))
        .collect()
}

#[test]
fn regression_metrics_are_those_of_the_whole_split_on_every_strategy() {
    let dir = support::scratch("regression-metrics");
    parity::reference(
        "tests/regression/reference.py",
        &json!([{"kind": "metrics", "dir": dir, "seed": 5, "batch": METRICS_BATCH,
                 "steps": STEPS, "lr": 0.1, "count": 100, "val_count": 40, "test_count": 30,
                 "outputs": 3, "loss": "huber", "args": {}, "eval_every": 5}]),
        &dir,
    );
    let reference = parity::json_file(&dir.join("reference.json"));
    let mut failures = Vec::new();
    let init = dir.join("init.safetensors");
    for (name, accumulate, parallel) in [
        ("single", 1, ""),
        ("accumulate-3", 3, ""),
        ("data-parallel", 1, "parallel data(devices: [cpu, cpu])"),
        ("ddp", 1, "parallel ddp(backend: gloo, world_size: 2)"),
    ] {
        let file = support::write(
            &dir,
            &format!("{name}.exp"),
            &metrics_exp(name, accumulate, parallel),
        );
        let run = dir.join(name);
        let ours = parity::train(&file, Some(&init), &run).losses;
        failures.extend(parity::compare(
            name,
            "loss",
            &ours,
            &floats(&reference["losses"]),
            RTOL,
        ));
        let val = validations(&run);
        assert_eq!(val.len(), STEPS / 5, "{name}: evaluations");
        for (step, line) in &val {
            let theirs = &reference["val"][step.to_string()];
            failures.extend(differences(&format!("{name}: val at {step}"), line, theirs));
        }
        let test = &support::report(&run)["test"];
        let test: Value = serde_json::to_value(test).expect("the report's test evaluation");
        failures.extend(differences(
            &format!("{name}: test"),
            &test,
            &reference["test"],
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    shown_everywhere(&dir, &dir.join("single"));
    // A mean of the 7-sample batches' r2 is far from the split's: the comparison above tells
    // them apart.
    let last = STEPS.to_string();
    let (whole, batched) = (
        reference["val"][&last]["r2"].as_f64().expect("r2"),
        reference["val_batched_r2"][&last]
            .as_f64()
            .expect("batched r2"),
    );
    assert!(!close(batched, whole), "r2 {whole} against {batched}");
}

/// `kiln eval` (JSON and lines), `kiln report` and the progress of a run show the regression
/// metrics of `run`, a run of `dir/single.exp`.
fn shown_everywhere(dir: &Path, run: &Path) {
    let report = support::report(run);
    let test: Value = serde_json::to_value(&report["test"]).expect("the test evaluation");
    let out = support::run(&[
        "eval",
        support::s(run),
        "--split",
        "test",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "kiln eval:\n{}", support::text(&out));
    let eval: Value = serde_json::from_slice(&out.stdout).expect("kiln eval's JSON");
    let failures = differences("kiln eval", &eval, &test);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let out = support::run(&["eval", support::s(run), "--split", "val"]);
    let text = support::text(&out);
    assert!(out.status.success(), "kiln eval:\n{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("val (model)"))
        .expect("a line");
    for f in ["loss", "mae", "rmse", "r2"] {
        assert!(line.contains(&format!("{f} ")), "{line}");
    }
    let out = support::run(&["report", support::s(run)]);
    let text = support::text(&out);
    assert!(out.status.success(), "kiln report:\n{text}");
    let header = text
        .lines()
        .find(|l| l.starts_with("epoch "))
        .expect("a table");
    assert!(
        ["val loss", "val mae", "val rmse", "val r2"]
            .iter()
            .all(|c| header.contains(c)),
        "{text}"
    );
    let test_line = text
        .lines()
        .find(|l| l.starts_with("test "))
        .expect("a test line");
    assert!(
        test_line.contains("rmse") && test_line.contains("r2"),
        "{test_line}"
    );
    // The progress shows them at every validation.
    let out = support::kiln(&[
        "run",
        support::s(&dir.join("single.exp")),
        "--device",
        "cpu",
        "--run-dir",
        support::s(&dir.join("loud")),
    ])
    .envs(parity::SINGLE_THREADED)
    .output()
    .expect("kiln starts");
    let text = support::text(&out);
    assert!(out.status.success(), "kiln run:\n{text}");
    let shown = text
        .lines()
        .filter(|l| l.contains("val loss") && l.contains(" mae ") && l.contains(" r2 "))
        .count();
    assert_eq!(shown, STEPS / 5, "{text}");
}
