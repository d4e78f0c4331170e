//! Exact batch means with class weights and `ignore_index`, accuracy without ignored targets,
//! and `one_cycle`'s momentum for optimizers written without one, against PyTorch.
//!
//! From the same initial weights and batches, `kiln run` reproduces for 50 steps, within 1e-5
//! relative, the losses of a PyTorch loop computing `F.cross_entropy(weight=..., ignore_index=...)`
//! over the WHOLE batch, with `accumulate 2` (an epoch's last batch of 4 samples), with
//! `accumulate 3` (an epoch's last batch of 10 samples, cut 4, 4, 2), under `parallel data` over two replicas and under two DDP
//! ranks; those strategies also match the single-device run of the same experiment. Training and
//! validation accuracy (and `kiln eval`'s) leave targets equal to `ignore_index` out, as the
//! reference does; `one_cycle` with `sgd` and `rmsprop` without momentum matches `torch.optim`
//! with `OneCycleLR`, which switches their momentum on. A batch whose targets all weigh nothing
//! fails with K0420. `tests/loss_exact/reference.py` writes the weights, data and references.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::parity::{self, floats, Steps};

/// Optimizer steps per case.
const STEPS: usize = 50;
/// Largest relative difference allowed between two losses, rates or metrics at any step (fp32).
const RTOL: f64 = 1e-5;
/// The loss every class-weight case uses: weights, an ignored class and smoothing.
const LOSS: &str =
    "cross_entropy(weight: [1.0, 2.0, 0.5, 3.0, 1.5], ignore_index: 2, label_smoothing: 0.1)";

/// One run compared with the reference: the experiment's differences from the base.
#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    batch: usize,
    accumulate: usize,
    optimizer: &'static str,
    schedule: &'static str,
    parallel: &'static str,
    loss: &'static str,
}

/// The weighted experiment with batches of 32, in one micro-batch on one device.
const BASE: Case = Case {
    name: "single",
    batch: 32,
    accumulate: 1,
    optimizer: "sgd(lr: 0.1)",
    schedule: "",
    parallel: "",
    loss: LOSS,
};

/// A reference run of `reference.py`: its data and training loop.
fn reference(dir: &Path, batch: usize, args: Value, optimizer: Value, cycle: Value) -> Value {
    std::fs::create_dir_all(dir).expect("a directory");
    json!({"dir": dir, "args": args, "outputs": 5, "seed": 3, "batch": batch,
           "steps": STEPS, "count": 100, "val_count": 40, "ignore_fraction": 0.2,
           "optimizer": optimizer, "one_cycle": cycle})
}

/// `F.cross_entropy`'s arguments for [`LOSS`].
fn weighted() -> Value {
    json!({"weight": [1.0, 2.0, 0.5, 3.0, 1.5], "ignore_index": 2, "label_smoothing": 0.1})
}

/// Runs `reference.py` on `specs`, writing its spec into `scratch`.
fn run_references(scratch: &Path, specs: Vec<Value>) {
    parity::reference(
        "tests/loss_exact/reference.py",
        &Value::Array(specs),
        scratch,
    );
}

fn exp(case: &Case) -> String {
    format!(
        r#"experiment "{name}" {{
  seed 7
  data {{
    split(train: safetensors("train.safetensors", classes: 5), val: safetensors("val.safetensors", classes: 5))
    shuffle false
    batch {batch}
  }}
  model {{
    input [8]
    fc1: linear(8 -> 16)
    relu
    fc2: linear(16 -> 5)
  }}
  device cpu
  optimizer {optimizer}
  {schedule}
  {parallel}
  train {{
    steps {STEPS}
    accumulate {accumulate}
    loss {loss}
    metrics [accuracy]
    eval_every 5 steps
    checkpoint(every: 25 steps, keep: 1)
  }}
}}
"#,
        name = case.name,
        batch = case.batch,
        optimizer = case.optimizer,
        schedule = case.schedule,
        parallel = case.parallel,
        accumulate = case.accumulate,
        loss = case.loss,
    )
}

/// Runs `exp` from the model's own initialisation into the run directory `run` (the ranks
/// of a DDP experiment too), on one thread, and returns its per-step records.
fn kiln_run(exp: &Path, run: &Path) -> Steps {
    let out = support::kiln(&[
        "run",
        support::s(exp),
        "--quiet",
        "--run-dir",
        support::s(run),
    ])
    .envs(parity::SINGLE_THREADED)
    .output()
    .expect("kiln starts");
    assert!(
        out.status.success(),
        "{}: `kiln run` failed:\n{}",
        exp.display(),
        support::text(&out)
    );
    let records = parity::json_lines(&run.join("steps.jsonl"));
    let field = |k: &str| -> Vec<f64> {
        records
            .iter()
            .map(|v| v[k].as_f64().expect("a number"))
            .collect()
    };
    Steps {
        losses: field("loss"),
        lrs: field("lr"),
    }
}

/// The training accuracy of each epoch and the validation `(loss, accuracy)` of each
/// evaluation, by the step they were written at.
type Metrics = (BTreeMap<u64, f64>, BTreeMap<u64, (f64, f64)>);

fn metrics(run: &Path) -> Metrics {
    let (mut train, mut val) = (BTreeMap::new(), BTreeMap::new());
    for line in support::metrics(run) {
        let step = line["step"].as_u64().expect("a step");
        if let Some(a) = line.get("train_accuracy").and_then(Value::as_f64) {
            train.insert(step, a);
        } else if let Some(a) = line.get("accuracy").and_then(Value::as_f64) {
            val.insert(step, (line["loss"].as_f64().expect("a loss"), a));
        }
    }
    (train, val)
}

/// The reference's metrics, in the same form.
fn reference_metrics(reference: &Value) -> Metrics {
    let by_step = |v: &Value| -> Vec<(u64, Value)> {
        v.as_object()
            .expect("an object")
            .iter()
            .map(|(k, v)| (k.parse().expect("a step"), v.clone()))
            .collect()
    };
    let train = by_step(&reference["train_accuracy"])
        .into_iter()
        .map(|(s, v)| (s, v.as_f64().expect("a number")))
        .collect();
    let val = by_step(&reference["val"])
        .into_iter()
        .map(|(s, v)| {
            let f = |i: usize| v[i].as_f64().expect("a number");
            (s, (f(0), f(1)))
        })
        .collect();
    (train, val)
}

/// The relative difference of `a` from `b`.
fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

fn close(what: &str, a: f64, b: f64) {
    let rel = relative(a, b);
    assert!(rel <= RTOL, "{what}: kiln {a} vs {b} (relative {rel:e})");
}

/// Runs `case` in `dir` from the reference's weights and compares every step's loss and rate,
/// the epochs' training accuracy and every validation with the reference's; returns the run.
fn against_reference(dir: &Path, case: &Case) -> PathBuf {
    let file = support::write(dir, &format!("{}.exp", case.name), &exp(case));
    let run = dir.join(format!("run-{}", case.name));
    let ours = parity::train(&file, Some(&dir.join("init.safetensors")), &run);
    let reference = parity::json_file(&dir.join("reference.json"));
    let failures: Vec<String> = [
        ("loss", &ours.losses, floats(&reference["losses"])),
        ("lr", &ours.lrs, floats(&reference["lrs"])),
    ]
    .into_iter()
    .filter_map(|(what, a, b)| parity::compare(case.name, what, a, &b, RTOL))
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(ours.losses.len(), STEPS, "{}: steps recorded", case.name);
    assert!(
        ours.losses[0] != ours.losses[STEPS - 1],
        "{}: the loss never changed",
        case.name
    );
    let ((train, val), (want_train, want_val)) = (metrics(&run), reference_metrics(&reference));
    let mut compared = 0;
    for (step, a) in &train {
        if let Some(b) = want_train.get(step) {
            close(&format!("{}: train accuracy at {step}", case.name), *a, *b);
            compared += 1;
        }
    }
    assert!(
        compared >= 10,
        "{}: the epochs' accuracies: {train:?}",
        case.name
    );
    assert_eq!(val.len(), STEPS / 5, "{}: evaluations", case.name);
    for (step, (loss, a)) in &val {
        let (l, b) = want_val[step];
        close(&format!("{}: val loss at {step}", case.name), *loss, l);
        close(&format!("{}: val accuracy at {step}", case.name), *a, b);
    }
    run
}

#[test]
fn weighted_accumulation_is_the_whole_batch_mean_and_accuracy_skips_ignored_targets() {
    let scratch = support::scratch("loss-exact-accumulate");
    let (even, uneven) = (scratch.join("batch-32"), scratch.join("batch-30"));
    let sgd = json!({"kind": "sgd", "lr": 0.1});
    run_references(
        &scratch,
        vec![
            reference(&even, 32, weighted(), sgd.clone(), Value::Null),
            reference(&uneven, 30, weighted(), sgd, Value::Null),
        ],
    );
    let single = against_reference(&even, &BASE);
    let twice = Case {
        name: "accumulate-2",
        accumulate: 2,
        ..BASE
    };
    against_reference(&even, &twice);
    // Batches of 30, 30, 30 and 10 samples, cut into micro-batches of 10 and of 4, 4 and 2.
    let thrice = Case {
        name: "accumulate-3",
        batch: 30,
        accumulate: 3,
        ..BASE
    };
    against_reference(&uneven, &thrice);
    // `kiln eval` counts accuracy as the run's evaluation does.
    let out = support::run(&["eval", support::s(&single), "--format", "json"]);
    assert!(
        out.status.success(),
        "kiln eval failed:\n{}",
        support::text(&out)
    );
    let eval: Value = serde_json::from_slice(&out.stdout).expect("kiln eval's json");
    let (_, val) = metrics(&single);
    let (_, (loss, accuracy)) = val.last_key_value().expect("a last evaluation");
    close(
        "kiln eval's loss",
        eval["loss"].as_f64().expect("a loss"),
        *loss,
    );
    close(
        "kiln eval's accuracy",
        eval["accuracy"].as_f64().expect("an accuracy"),
        *accuracy,
    );
}

#[test]
fn one_cycle_switches_momentum_on_for_sgd_and_rmsprop_as_torch_does() {
    let scratch = support::scratch("loss-exact-one-cycle");
    let (sgd, rmsprop) = (scratch.join("sgd"), scratch.join("rmsprop"));
    run_references(
        &scratch,
        vec![
            reference(
                &sgd,
                32,
                json!({}),
                json!({"kind": "sgd", "lr": 0.1}),
                json!({"max_lr": 0.1}),
            ),
            reference(
                &rmsprop,
                32,
                json!({}),
                json!({"kind": "rmsprop", "lr": 0.01}),
                json!({"max_lr": 0.01}),
            ),
        ],
    );
    let plain = Case {
        name: "one-cycle-sgd",
        schedule: "schedule one_cycle(max_lr: 0.1)",
        loss: "cross_entropy",
        ..BASE
    };
    against_reference(&sgd, &plain);
    let rms = Case {
        name: "one-cycle-rmsprop",
        optimizer: "rmsprop(lr: 0.01)",
        schedule: "schedule one_cycle(max_lr: 0.01)",
        ..plain
    };
    against_reference(&rmsprop, &rms);
}

/// The weighted experiment on synthetic data (class 2 ignored, about a fifth of the targets).
fn synthetic(parallel: &str) -> String {
    format!(
        r#"experiment "weighted" {{
  seed 11
  data {{
    source synthetic(inputs: normal([8]), targets: randint(5), count: 120)
    split(train: 0.8, val: 0.2)
    batch 32
  }}
  model {{
    input [8]
    fc1: linear(16)
    tanh
    fc2: linear(5)
  }}
  device cpu
  {parallel}
  optimizer sgd(lr: 0.1, momentum: 0.9)
  train {{
    steps 20
    accumulate 2
    loss {LOSS}
    metrics [accuracy]
    eval_every 5 steps
  }}
}}
"#
    )
}

#[test]
fn data_parallel_and_ddp_match_one_device_with_class_weights_and_ignored_targets() {
    let dir = support::scratch("loss-exact-parallel");
    let mut runs = Vec::new();
    for (name, parallel) in [
        ("single", ""),
        ("data", "parallel data(devices: [cpu, cpu])"),
        ("ddp", "parallel ddp(backend: gloo, world_size: 2)"),
    ] {
        let file = support::write(&dir, &format!("{name}.exp"), &synthetic(parallel));
        let run = dir.join(name);
        let steps = kiln_run(&file, &run);
        runs.push((name, steps, metrics(&run)));
    }
    let (_, one, (train, val)) = &runs[0];
    assert_eq!(one.losses.len(), 20);
    for (name, ours, (our_train, our_val)) in &runs[1..] {
        let failure = parity::compare(name, "loss", &ours.losses, &one.losses, RTOL);
        assert!(failure.is_none(), "{failure:?}");
        assert_eq!(our_train.len(), train.len(), "{name}: epochs");
        for ((_, a), (_, b)) in our_train.iter().zip(train) {
            close(&format!("{name}: train accuracy"), *a, *b);
        }
        assert_eq!(our_val.len(), val.len(), "{name}: evaluations");
        for ((_, a), (_, b)) in our_val.iter().zip(val) {
            close(&format!("{name}: val loss"), a.0, b.0);
            close(&format!("{name}: val accuracy"), a.1, b.1);
        }
    }
}

#[test]
fn a_batch_whose_targets_all_weigh_nothing_fails_with_k0420() {
    let dir = support::scratch("loss-exact-weightless");
    let text = synthetic("").replace(LOSS, "cross_entropy(weight: [0, 0, 0, 0, 0])");
    let file = support::write(&dir, "weightless.exp", &text);
    let run = dir.join("run");
    let out = support::run(&[
        "run",
        support::s(&file),
        "--quiet",
        "--run-dir",
        support::s(&run),
    ]);
    let text = support::text(&out);
    assert!(!out.status.success(), "the run must fail:\n{text}");
    assert!(text.contains("K0420"), "{text}");
    assert!(
        text.contains("weightless.exp:20"),
        "the loss statement: {text}"
    );
    // It stops before the first update: no step was recorded.
    let recorded = std::fs::read_to_string(run.join("steps.jsonl")).unwrap_or_default();
    assert!(recorded.is_empty(), "{recorded}");
}
