//! `kiln eval`: a run's final validation and test metrics reproduced bit for bit from its run
//! directory and from a checkpoint (the same computation on this machine: see
//! `support::same_computation`); weights saved from PyTorch evaluated as PyTorch evaluates
//! them (`tests/eval/reference.py`); and every user error as a diagnostic (K0519 to K0521).

mod support;

use std::path::Path;

use serde_json::Value;
use support::files::{self, Array};
use support::parity;
use support::{report, run, s, same_computation, scratch, text, write, TINY};

/// `support::TINY` with a checkpoint at its last step.
fn tiny() -> String {
    TINY.replace(
        "    eval_every 20 steps\n",
        "    eval_every 20 steps\n    checkpoint(every: 40 steps)\n",
    )
}

/// `kiln eval ARGS --format json`, which must succeed: the report as JSON.
fn eval_json(args: &[&str]) -> Value {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let o = run(&all);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

/// The metrics of an evaluation: `report.yaml`'s `loss`, `accuracy`, `top_k`, as JSON.
fn metrics(v: &Value) -> Value {
    serde_json::json!({ "loss": v["loss"], "accuracy": v["accuracy"], "top_k": v["top_k"] })
}

/// `report.yaml`'s evaluation of `split` as the same JSON.
fn reported(run_dir: &Path, split: &str) -> Value {
    let r = report(run_dir);
    let e = &r[split];
    assert!(e["loss"].is_f64(), "{r:?}");
    serde_json::to_value(e).expect("JSON")
}

/// A finished run of `exp` in `dir/run`.
fn finished(dir: &Path, exp: &str) -> std::path::PathBuf {
    let file = write(dir, "tiny.exp", exp);
    let run_dir = dir.join("run");
    let o = run(&["run", s(&file), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(o.status.success(), "{}", text(&o));
    run_dir
}

#[test]
fn eval_reproduces_the_runs_final_metrics_exactly() {
    let dir = scratch("eval-exact");
    let d = finished(&dir, &tiny());
    // The run directory's newest checkpoint, through the run's copy of its experiment.
    let val = eval_json(&[s(&d), "--split", "val"]);
    same_computation(metrics(&val), reported(&d, "val"), "val");
    // Fields are named objects, in the JSON and in the report: `top_k` was `[2, 0.6]`.
    assert_eq!(val["top_k"]["k"], 2, "{val}");
    assert!(val["top_k"]["accuracy"].is_f64(), "{val}");
    assert_eq!(support::tuples(&val), Vec::<String>::new(), "{val}");
    let r = serde_json::to_value(report(&d)).expect("JSON");
    assert_eq!(support::tuples(&r), Vec::<String>::new(), "{r}");
    assert_eq!(val["step"], 40);
    assert_eq!(val["samples"], 75);
    // Without `--split`: the test split, which the experiment has.
    let test = eval_json(&[s(&d)]);
    assert_eq!(test["split"], "test");
    same_computation(metrics(&test), reported(&d, "test"), "test");
    // The same checkpoint named with the experiment file, by its tensors or its sidecar.
    let file = dir.join("tiny.exp");
    for name in ["step-000000040.safetensors", "step-000000040.yaml"] {
        let c = d.join("checkpoints").join(name);
        let v = eval_json(&[s(&file), "--checkpoint", s(&c), "--split", "val"]);
        same_computation(metrics(&v), reported(&d, "val"), name);
    }
    // The human report rounds the same numbers.
    let o = run(&["eval", s(&d), "--split", "val"]);
    let loss = val["loss"].as_f64().expect("loss");
    assert!(
        text(&o).contains(&format!("val (model): loss {loss:.6}")),
        "{}",
        text(&o)
    );
    // The run's copy is what is evaluated: the original file may change or go.
    std::fs::remove_file(&file).expect("remove");
    same_computation(
        metrics(&eval_json(&[s(&d), "--split", "val"])),
        reported(&d, "val"),
        "the run's copy",
    );
}

#[test]
fn eval_of_pytorch_weights_equals_pytorch() {
    let dir = scratch("eval-pytorch");
    let spec = serde_json::json!({
        "dir": dir, "seed": 11, "count": 203, "batch": 16, "split": [0.5, 0.3, 0.2],
    });
    parity::reference("tests/eval/reference.py", &spec, &dir);
    let exp = write(
        &dir,
        "torch.exp",
        r#"
experiment "from-torch" {
  seed 11
  data {
    source safetensors("data.safetensors", inputs: "inputs", targets: "targets", classes: 5)
    split(train: 0.5, val: 0.3, test: 0.2)
    batch 16
  }
  model {
    input [12]
    fc1: linear(24)
    bn: batchnorm1d
    relu
    dropout(0.3)
    fc2: linear(5)
  }
  device cpu
  optimizer sgd(lr: 0.1)
  train { epochs 1; loss cross_entropy; metrics [accuracy, top_k(2)] }
}
"#,
    );
    let reference = parity::json_file(&dir.join("reference.json"));
    let weights = dir.join("weights.safetensors");
    for split in ["val", "test"] {
        let v = eval_json(&[s(&exp), "--weights", s(&weights), "--split", split]);
        let r = &reference[split];
        let close = |a: &Value, b: &Value| {
            let (a, b) = (a.as_f64().expect("kiln"), b.as_f64().expect("torch"));
            (a - b).abs() <= 1e-6 * b.abs().max(1.0)
        };
        assert!(close(&v["loss"], &r["loss"]), "{split}: {v} against {r}");
        assert!(
            close(&v["accuracy"], &r["accuracy"]),
            "{split}: {v} against {r}"
        );
        assert!(
            close(&v["top_k"]["accuracy"], &r["top_2"]),
            "{split}: {v} against {r}"
        );
        assert_eq!(v["model"], "model");
    }
}

/// Writes a safetensors file of float tensors: `(name, dtype, shape)`, filled with zeros.
fn safetensors(path: &Path, tensors: &[(&str, &str, &[usize])]) {
    let arrays: Vec<(&str, Array)> = tensors
        .iter()
        .map(|(name, dtype, shape)| {
            let (descr, size) = if *dtype == "F64" {
                ("<f8", 8)
            } else {
                ("<f4", 4)
            };
            let bytes = vec![0u8; shape.iter().product::<usize>() * size];
            let shape = shape.to_vec();
            (
                *name,
                Array {
                    descr,
                    shape,
                    bytes,
                },
            )
        })
        .collect();
    let named: Vec<(&str, &Array)> = arrays.iter().map(|(name, a)| (*name, a)).collect();
    std::fs::write(path, files::safetensors(&named)).expect("write");
}

/// `kiln eval ARGS`, which must fail with `status` and the diagnostic `code`; its text.
fn refused(args: &[&str], status: i32, code: &str) -> String {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    let o = run(&all);
    let t = support::flat(&text(&o));
    assert_eq!(o.status.code(), Some(status), "{t}");
    assert!(t.contains(code), "{t}");
    assert!(t.contains("help:"), "{t}");
    t
}

#[test]
fn weights_that_do_not_fit_are_named() {
    let dir = scratch("eval-mismatch");
    let file = write(&dir, "tiny.exp", &tiny());
    let f = s(&file);
    // No weights named with an experiment file.
    let t = refused(&[f], 2, "K0519");
    assert!(t.contains("no weights to evaluate"), "{t}");
    // A weights file that is not there, or not safetensors.
    let t = refused(
        &[f, "--weights", s(&dir.join("none.safetensors"))],
        2,
        "K0519",
    );
    assert!(t.contains("it does not exist"), "{t}");
    let junk = write(&dir, "junk.safetensors", "not tensors");
    let t = refused(&[f, "--weights", s(&junk)], 2, "K0519");
    assert!(t.contains("not a safetensors file"), "{t}");
    // A checkpoint without its sidecar.
    let t = refused(&[f, "--checkpoint", s(&junk)], 2, "K0519");
    assert!(t.contains("sidecar"), "{t}");
    // A checkpoint named as plain weights.
    let d = finished(&dir, &tiny());
    let c = d.join("checkpoints").join("step-000000040.safetensors");
    let t = refused(&[f, "--weights", s(&c)], 1, "K0520");
    assert!(t.contains("name it with `--checkpoint`"), "{t}");
    // A tensor missing, one of another shape, one of another dtype: all named, at `fc1`.
    let w = dir.join("w.safetensors");
    safetensors(
        &w,
        &[
            ("fc1.weight", "F32", &[32, 16]),
            ("fc1.bias", "F64", &[32]),
            ("bn.weight", "F32", &[32]),
            ("bn.bias", "F32", &[32]),
            ("bn.running_mean", "F32", &[32]),
            ("bn.running_var", "F32", &[32]),
            ("fc2.weight", "F32", &[4, 32]),
        ],
    );
    let t = refused(&[f, "--weights", s(&w)], 1, "K0520");
    assert!(
        t.contains("`fc1.bias` is [32] float64, the model needs [32] float32"),
        "{t}"
    );
    assert!(
        t.contains("`fc2.weight` is [4, 32] float32, the model needs [3, 32] float32"),
        "{t}"
    );
    assert!(
        t.contains("`fc2.bias` is missing (the model needs [3] float32)"),
        "{t}"
    );
    assert!(t.contains("fc1: linear(32)"), "{t}");
    // JSON diagnostics for tools.
    let o = run(&["eval", f, "--weights", s(&w), "--format", "json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON diagnostics");
    assert_eq!(v[0]["code"], "K0520", "{v}");
    assert_eq!(v[0]["start"]["line"], 11, "{v}");
}

#[test]
fn empty_splits_and_runs_without_weights_are_refused() {
    let dir = scratch("eval-empty");
    let exp = TINY.replace(
        "split(train: 0.6, val: 0.25, test: 0.15)",
        "split(train: 0.76, val: 0.24)",
    );
    let d = finished(&dir, &exp);
    // A run that kept no checkpoint and whose final weights are gone (a run that did not end).
    for f in ["weights.safetensors", "weights.yaml"] {
        std::fs::remove_file(d.join(f)).expect("the run's final weights");
    }
    let t = refused(&[s(&d)], 2, "K0519");
    assert!(t.contains("holds no weights to evaluate"), "{t}");
    assert!(t.contains("checkpoint(every: ...)"), "{t}");
    // No test fraction: the test split is empty; the others are offered.
    let t = refused(&[s(&d), "--split", "test"], 1, "K0521");
    assert!(t.contains("`test` split has no samples"), "{t}");
    assert!(t.contains("`--split train` or `--split val`"), "{t}");
}

#[test]
fn compressed_runs_are_evaluated_compressed_and_plain_weights_only_plainly() {
    let dir = scratch("eval-compressed");
    let exp = tiny().replace(
        "  train {",
        "  compress {\n    prune fc1 l1_unstructured(amount: 0.5, schedule: before)\n    quantize [fc1, fc2] int8\n  }\n  train {",
    );
    let d = finished(&dir, &exp);
    let v = eval_json(&[s(&d), "--split", "val", "--uncompressed"]);
    let r = report(&d);
    let after = serde_json::to_value(&r["compression"]["val"]["after"]).expect("JSON");
    let before = serde_json::to_value(&r["compression"]["val"]["before"]).expect("JSON");
    assert_eq!(v["model"], "compressed");
    // The same computation: the compressed model is made by the same code from the same final
    // weights; the uncompressed one holds the values the run's masked weights held (a mask
    // multiplies by exactly 0 or 1).
    same_computation(&v["loss"], &after["loss"], "compressed loss");
    same_computation(&v["accuracy"], &after["accuracy"], "compressed accuracy");
    same_computation(
        &v["uncompressed"]["loss"],
        &before["loss"],
        "uncompressed loss",
    );
    // Plain weights hold no masks or observers: named, with the way out.
    let file = dir.join("tiny.exp");
    let w = dir.join("plain.safetensors");
    safetensors(
        &w,
        &[
            ("fc1.weight", "F32", &[32, 16]),
            ("fc1.bias", "F32", &[32]),
            ("bn.weight", "F32", &[32]),
            ("bn.bias", "F32", &[32]),
            ("bn.running_mean", "F32", &[32]),
            ("bn.running_var", "F32", &[32]),
            ("fc2.weight", "F32", &[3, 32]),
            ("fc2.bias", "F32", &[3]),
        ],
    );
    let t = refused(&[s(&file), "--weights", s(&w)], 1, "K0520");
    assert!(t.contains("--uncompressed"), "{t}");
    // Evaluated as they are: zero weights predict every class alike, a loss of ln 3.
    let v = eval_json(&[
        s(&file),
        "--weights",
        s(&w),
        "--uncompressed",
        "--split",
        "val",
    ]);
    assert_eq!(v["model"], "uncompressed");
    assert!(
        (v["loss"].as_f64().expect("loss") - 3f64.ln()).abs() < 1e-6,
        "{v}"
    );
}
