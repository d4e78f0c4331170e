//! A run's final weights (`weights.safetensors`), which every run writes when it ends, and the
//! already-compressed weights `kiln eval` reads: `kiln export`'s int8 model, evaluated as the run
//! evaluated its compressed model, and PyTorch state_dicts saved after `torch.nn.utils.prune`
//! (`tests/eval_weights/pruned.py`), evaluated as PyTorch evaluates them. Files that do not fit
//! are named (K0520); exports that cannot be evaluated as asked are refused (K0522).

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{report, run, s, same_computation, scratch, text, write, TINY};

/// `TINY` pruned before training and quantized to int8 with `scheme`.
fn compressed(scheme: &str) -> String {
    TINY.replace(
        "  train {",
        &format!(
            "  compress {{\n    prune fc1 l1_unstructured(amount: 0.5, schedule: before)\n    quantize [fc1, fc2] {scheme}\n  }}\n  train {{"
        ),
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

/// The metrics of an evaluation as `report.yaml` writes them.
fn metrics(v: &Value) -> Value {
    serde_json::json!({ "loss": v["loss"], "accuracy": v["accuracy"], "top_k": v["top_k"] })
}

/// `report.yaml`'s value at `path` (`["val"]`, `["compression", "val", "after"]`) as JSON.
fn reported(run_dir: &Path, path: &[&str]) -> Value {
    let r = report(run_dir);
    let e = path.iter().fold(&r, |v, k| &v[*k]);
    assert!(e["loss"].is_f64(), "{r:?}");
    serde_json::to_value(e).expect("JSON")
}

/// A finished run of `exp`, written as `dir/NAME.exp`, in `dir/NAME`.
fn finished(dir: &Path, name: &str, exp: &str) -> PathBuf {
    let file = write(dir, &format!("{name}.exp"), exp);
    let run_dir = dir.join(name);
    let o = run(&["run", s(&file), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(o.status.success(), "{}", text(&o));
    run_dir
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

/// Copies the safetensors file `from` to `to`, renaming each tensor as `rename` says (`None`
/// leaves it out).
fn rewrite(from: &Path, to: &Path, rename: impl Fn(&str) -> Option<String>) {
    let bytes = std::fs::read(from).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let mut out_header = serde_json::Map::new();
    let mut out_data = Vec::new();
    for (name, info) in header {
        let Some(new) = (name != "__metadata__").then(|| rename(&name)).flatten() else {
            continue;
        };
        let at = |i: usize| info["data_offsets"][i].as_u64().expect("offset") as usize;
        let (lo, hi) = (at(0), at(1));
        let mut info = info.clone();
        info["data_offsets"] = serde_json::json!([out_data.len(), out_data.len() + hi - lo]);
        out_data.extend_from_slice(&data[lo..hi]);
        out_header.insert(new, info);
    }
    let mut head = serde_json::to_vec(&out_header).expect("header");
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend(head);
    out.extend(out_data);
    std::fs::write(to, out).expect("write");
}

#[test]
fn a_run_without_checkpoints_keeps_final_weights_that_reproduce_it_exactly() {
    let dir = scratch("final-weights");
    let d = finished(&dir, "tiny", TINY);
    assert!(!d.join("checkpoints").exists());
    assert!(d.join("weights.yaml").is_file());
    // The run directory's final weights, through the run's copy of its experiment.
    for split in ["val", "test"] {
        let v = eval_json(&[s(&d), "--split", split]);
        same_computation(metrics(&v), reported(&d, &[split]), split);
        assert_eq!(v["step"], 40);
        assert_eq!(v["weights"], s(&d.join("weights.safetensors")));
    }
    // They hold the model's state_dict by its PyTorch names, as `--weights` reads it.
    let (tensors, _) = support::safetensors_f32(&d.join("weights.safetensors"));
    let names: Vec<&str> = tensors.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "bn.bias",
            "bn.running_mean",
            "bn.running_var",
            "bn.weight",
            "fc1.bias",
            "fc1.weight",
            "fc2.bias",
            "fc2.weight"
        ]
    );
    let file = dir.join("tiny.exp");
    let weights = d.join("weights.safetensors");
    let v = eval_json(&[s(&file), "--weights", s(&weights), "--split", "val"]);
    same_computation(metrics(&v), reported(&d, &["val"]), "--weights");
}

#[test]
fn final_weights_are_preferred_to_checkpoints_and_damaged_ones_passed_over() {
    let dir = scratch("final-first");
    let exp = TINY.replace(
        "eval_every 20 steps",
        "eval_every 20 steps\n    checkpoint(every: 30 steps)",
    );
    let d = finished(&dir, "tiny", &exp);
    let ck = d.join("checkpoints").join("step-000000040.safetensors");
    assert!(ck.is_file());
    let v = eval_json(&[s(&d), "--split", "val"]);
    assert_eq!(v["weights"], s(&d.join("weights.safetensors")));
    same_computation(metrics(&v), reported(&d, &["val"]), "final weights");
    // Damaged final weights (their checksum no longer holds): the newest checkpoint, the same
    // final state.
    let w = d.join("weights.safetensors");
    let mut bytes = std::fs::read(&w).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&w, bytes).expect("damage");
    let v = eval_json(&[s(&d), "--split", "val"]);
    assert_eq!(v["weights"], s(&ck));
    same_computation(metrics(&v), reported(&d, &["val"]), "the newest checkpoint");
    // Neither: refused, counting what is damaged.
    std::fs::remove_dir_all(d.join("checkpoints")).expect("remove");
    let t = refused(&[s(&d)], 2, "K0519");
    assert!(t.contains("the weights it saved are damaged"), "{t}");
}

#[test]
fn every_trial_of_a_sweep_keeps_its_final_weights() {
    let dir = scratch("final-sweep");
    let exp = TINY.replace("adam(lr: 1e-2)", "adam(lr: sweep [1e-2, 1e-3])");
    let file = write(&dir, "sweep.exp", &exp);
    let runs = dir.join("runs");
    let o = run(&["run", s(&file), "--quiet", "--runs-dir", s(&runs)]);
    assert!(o.status.success(), "{}", text(&o));
    let parent = runs.join("tiny");
    let stamp = std::fs::read_dir(&parent)
        .expect("runs")
        .next()
        .expect("one sweep")
        .expect("entry")
        .path();
    // The trials ran side by side, splitting the cores (`cores / trials` threads each, as
    // `kiln run` splits them): evaluated with a trial's thread count, the numbers are its own
    // bit for bit, the same computation.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / cores.min(2)).max(1).to_string();
    let mut losses = Vec::new();
    for k in 1..=2 {
        let trial = stamp.join(format!("trial-{k:03}"));
        let v = eval_json(&[s(&trial), "--split", "val", "--threads", &threads]);
        same_computation(
            metrics(&v),
            reported(&trial, &["val"]),
            &format!("trial {k}"),
        );
        losses.push(v["loss"].clone());
    }
    assert_ne!(losses[0], losses[1]);
}

#[test]
fn an_exported_int8_model_evaluates_as_the_run_evaluated_it() {
    let dir = scratch("eval-export");
    for (name, scheme) in [
        ("weight_only", "int8"),
        (
            "dynamic",
            "int8(granularity: per_tensor, symmetric: false, activations: dynamic)",
        ),
        ("qat", "qat"),
    ] {
        let d = finished(&dir, name, &compressed(scheme));
        let o = run(&["export", s(&d)]);
        assert!(o.status.success(), "{}", text(&o));
        let file = dir.join(format!("{name}.exp"));
        let model = d.join("export").join("model.safetensors");
        // Both splits for one scheme; the validation split for the others, to stay quick.
        let splits: &[&str] = if name == "weight_only" {
            &["val", "test"]
        } else {
            &["val"]
        };
        for split in splits {
            let v = eval_json(&[s(&file), "--weights", s(&model), "--split", split]);
            assert_eq!(v["model"], "compressed", "{name}");
            // The same computation: the stored integers and scales are the run's, laid out as
            // the run built them (`qstored::on`), so the same kernels run on the same bytes.
            same_computation(
                metrics(&v),
                reported(&d, &["compression", split, "after"]),
                &format!("{name} {split}"),
            );
        }
    }
}

#[test]
fn exports_that_do_not_fit_or_cannot_be_evaluated_are_named() {
    let dir = scratch("eval-export-wrong");
    let d = finished(&dir, "tiny", &compressed("int8"));
    assert!(run(&["export", s(&d)]).status.success());
    let file = dir.join("tiny.exp");
    let f = s(&file);
    let model = d.join("export").join("model.safetensors");
    // A piece left out: named, at its layer.
    let partial = dir.join("partial.safetensors");
    rewrite(&model, &partial, |n| {
        (n != "fc2.weight_scale").then(|| n.to_string())
    });
    let t = refused(&[f, "--weights", s(&partial)], 1, "K0520");
    assert!(t.contains("`fc2.weight_scale` is missing"), "{t}");
    assert!(t.contains("fc2: linear(3)"), "{t}");
    // A piece of another shape: int8 weights of fc2 under fc1's name.
    let swapped = dir.join("swapped.safetensors");
    rewrite(&model, &swapped, |n| match n {
        "fc1.weight_int8" => None,
        "fc2.weight_int8" => Some("fc1.weight_int8".into()),
        other => Some(other.to_string()),
    });
    let t = refused(&[f, "--weights", s(&swapped)], 1, "K0520");
    assert!(t.contains("`fc1.weight_int8` is [3, 32] int8"), "{t}");
    // Stored in a form that cannot be read back, or asked for uncompressed: K0522.
    let int4 = dir.join("int4.safetensors");
    rewrite(&model, &int4, |n| {
        Some(n.replace("fc1.weight_int8", "fc1.weight_int4_packed"))
    });
    let t = refused(&[f, "--weights", s(&int4)], 1, "K0522");
    assert!(
        t.contains("`fc1.weight_int4_packed` is stored in a form"),
        "{t}"
    );
    let t = refused(&[f, "--weights", s(&model), "--uncompressed"], 1, "K0522");
    assert!(t.contains("holds the compressed model only"), "{t}");
}

/// The experiment of `tests/eval_weights/pruned.py`'s model and data.
const FROM_TORCH: &str = r#"
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
"#;

#[test]
fn weights_pruned_by_pytorch_evaluate_as_pytorch_evaluates_them() {
    let dir = scratch("eval-pruned");
    let spec = serde_json::json!({
        "dir": dir, "seed": 11, "count": 203, "batch": 16, "split": [0.5, 0.3, 0.2],
    });
    support::parity::reference("tests/eval_weights/pruned.py", &spec, &dir);
    let exp = write(&dir, "torch.exp", FROM_TORCH);
    let reference = support::parity::json_file(&dir.join("pruned.json"));
    let weights = dir.join("pruned.safetensors");
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
    }
    // Without its mask the pruned weight is named, with what the file holds.
    let partial = dir.join("partial.safetensors");
    rewrite(&weights, &partial, |n| {
        (n != "fc1.weight_mask").then(|| n.to_string())
    });
    let t = refused(&[s(&exp), "--weights", s(&partial)], 1, "K0520");
    assert!(
        t.contains("`fc1.weight` is pruned by PyTorch with `fc1.weight_orig` [24, 12] float32 and `fc1.weight_mask` missing"),
        "{t}"
    );
}
