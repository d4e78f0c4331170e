//! The data options end to end: the evaluation batch changes how many batches evaluate a split
//! and nothing else but rounding (with class weights too: the loss is a weighted mean over the
//! split, not a mean of batch means), `drop_last` trains on full batches only, and a split's own
//! synthetic source evaluates its own samples.

mod support;

use std::path::{Path, PathBuf};

use support::*;

/// A small classifier of `data` settings and `loss`.
fn experiment(name: &str, data: &str, loss: &str) -> String {
    format!(
        "experiment \"{name}\" {{\n  seed 5\n  data {{\n{data}\n  }}\n  model {{\n    input [6]\n    fc1: linear(16)\n    relu\n    fc2: linear(4)\n  }}\n  device cpu\n  optimizer sgd(lr: 0.05, momentum: 0.9)\n  train {{\n    epochs 2\n    loss {loss}\n    metrics [loss, accuracy]\n  }}\n}}\n"
    )
}

const SOURCE: &str = "    source synthetic(inputs: normal([6]), targets: randint(4), count: 150)";

/// Runs `text` and returns its report.
fn run_report(dir: &Path, name: &str, exp: &str) -> serde_yaml::Value {
    let file = write(dir, &format!("{name}.exp"), exp);
    let runs = dir.join(format!("runs-{name}"));
    let o = run(&[
        "run",
        s(&file),
        "--device",
        "cpu",
        "--quiet",
        "--runs-dir",
        s(&runs),
    ]);
    assert!(o.status.success(), "{name}: {}", text(&o));
    let run: PathBuf = std::fs::read_dir(runs.join(name))
        .expect("runs")
        .map(|e| e.expect("entry").path())
        .find(|p| p.is_dir())
        .expect("a run directory");
    report(&run)
}

fn f(v: &serde_yaml::Value) -> f64 {
    v.as_f64().expect("a number")
}

#[test]
fn the_evaluation_batch_changes_nothing_but_rounding() {
    let dir = scratch("eval-batch");
    for (tag, loss) in [
        ("plain", "cross_entropy"),
        (
            "weighted",
            "cross_entropy(weight: [0.5, 2, 1, 3], label_smoothing: 0.1)",
        ),
    ] {
        let reports: Vec<serde_yaml::Value> = ["", "    eval_batch 1", "    eval_batch 1000"]
            .iter()
            .enumerate()
            .map(|(i, eval)| {
                let data =
                    format!("{SOURCE}\n    split(train: 0.6, val: 0.4)\n    batch 8\n{eval}");
                let name = format!("{tag}{i}");
                run_report(&dir, &name, &experiment(&name, &data, loss))
            })
            .collect();
        let base = &reports[0];
        for r in &reports[1..] {
            // Training is untouched: the same computation.
            same_computation(f(&r["train_loss"]), f(&base["train_loss"]), tag);
            let (a, b) = (f(&r["val"]["loss"]), f(&base["val"]["loss"]));
            assert!(
                (a - b).abs() <= 1e-6 * b.abs(),
                "{tag}: val loss {a} vs {b}"
            );
            // 60 validation samples, evaluated in other batches.
            within_one_sample(
                f(&r["val"]["accuracy"]),
                f(&base["val"]["accuracy"]),
                60,
                tag,
            );
        }
    }
}

#[test]
fn drop_last_trains_on_full_batches_only() {
    let dir = scratch("drop-last");
    // 90 training samples in batches of 8: 12 batches an epoch, 11 full ones.
    for (drop, steps) in [("false", 24), ("true", 22)] {
        let data =
            format!("{SOURCE}\n    split(train: 0.6, val: 0.4)\n    batch 8\n    drop_last {drop}");
        let name = format!("drop-{drop}");
        let r = run_report(&dir, &name, &experiment(&name, &data, "cross_entropy"));
        assert_eq!(r["steps"].as_u64(), Some(steps), "drop_last {drop}");
    }
}

#[test]
fn a_split_of_its_own_source_is_evaluated() {
    let dir = scratch("own-split");
    let data = format!(
        "{SOURCE}\n    split(train: 1, val: synthetic(inputs: normal([6]), targets: randint(4), count: 40), test: synthetic(inputs: normal([6]), targets: randint(4), count: 25))\n    batch 10"
    );
    let r = run_report(&dir, "own", &experiment("own", &data, "cross_entropy"));
    // All 150 samples train: 15 batches an epoch.
    assert_eq!(r["steps"].as_u64(), Some(30));
    let (val, test) = (f(&r["val"]["accuracy"]), f(&r["test"]["accuracy"]));
    // Accuracies over 40 and 25 samples are multiples of 1/40 and 1/25.
    assert!(((val * 40.0).round() - val * 40.0).abs() < 1e-9, "{val}");
    assert!(((test * 25.0).round() - test * 25.0).abs() < 1e-9, "{test}");
}
