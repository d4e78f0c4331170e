//! Data parallel in one process, end to end: after 20 steps, replicas on the CPU leave the same
//! parameters as a single-device run of the same experiment on the full batch (within 1e-5),
//! with plain SGD, momentum, Adam and gradient accumulation, and with batches that do not
//! divide evenly among the replicas.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::*;

/// A tiny classifier without dropout or batch norm; `STRATEGY`, `OPTIMIZER`, `COUNT` and
/// `ACCUMULATE` are filled in by each case.
const EXPERIMENT: &str = r#"
experiment "dp" {
  seed 7
  data {
    source synthetic(inputs: normal([12]), targets: randint(3), count: COUNT)
    batch 24
  }
  model {
    input [12]
    fc1: linear(16)
    tanh
    fc2: linear(3)
  }
  device cpu
  STRATEGY
  optimizer OPTIMIZER
  train {
    steps 20
    loss cross_entropy
    accumulate ACCUMULATE
    checkpoint(every: 20 steps, keep: 1)
  }
}
"#;

/// The `f32` tensors of the newest checkpoint of `run`, by name (the safetensors layout: an
/// 8-byte little-endian header length, a JSON header, then the data).
fn tensors(run: &Path) -> BTreeMap<String, Vec<f32>> {
    let step = newest_checkpoint(run).expect("a checkpoint");
    let path = run
        .join("checkpoints")
        .join(format!("step-{step:09}.safetensors"));
    let bytes = std::fs::read(&path).expect("checkpoint tensors");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let mut out = BTreeMap::new();
    for (name, t) in header.as_object().expect("a map") {
        if t["dtype"] != "F32" {
            continue;
        }
        let at = |i: usize| t["data_offsets"][i].as_u64().expect("offset") as usize;
        let values = data[at(0)..at(1)]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        out.insert(name.clone(), values);
    }
    out
}

/// Runs the experiment with `strategy` and returns its final checkpoint's tensors.
fn trained(
    dir: &Path,
    name: &str,
    strategy: &str,
    optimizer: &str,
    count: u32,
    accumulate: u32,
) -> BTreeMap<String, Vec<f32>> {
    let source = EXPERIMENT
        .replace("STRATEGY", strategy)
        .replace("OPTIMIZER", optimizer)
        .replace("COUNT", &count.to_string())
        .replace("ACCUMULATE", &accumulate.to_string());
    let exp = write(dir, &format!("{name}.exp"), &source);
    let run_dir = dir.join(name);
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(o.status.success(), "{name}: {}", text(&o));
    assert!(!text(&o).contains("not applied"), "{}", text(&o));
    assert_eq!(report(&run_dir)["steps"].as_u64(), Some(20), "{name}");
    tensors(&run_dir)
}

/// The largest difference between the parameters of two checkpoints (every parameter present
/// in both, with the same size).
fn max_difference(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>) -> f32 {
    let params: Vec<&String> = a.keys().filter(|k| k.starts_with("param/")).collect();
    assert_eq!(params.len(), 4, "{:?}", a.keys());
    let mut worst = 0f32;
    for k in params {
        let (x, y) = (&a[k], &b[k]);
        assert_eq!(x.len(), y.len(), "{k}");
        for (x, y) in x.iter().zip(y) {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

/// Each case against a single-device run of the same experiment.
fn equivalent(name: &str, optimizer: &str, count: u32, accumulate: u32) {
    let dir = scratch(&format!("dp-{name}"));
    let one = trained(&dir, "one", "parallel none", optimizer, count, accumulate);
    // The run changed the weights: the comparison is not between two initialisations.
    let init = trained(
        &dir,
        "init",
        "parallel none",
        "sgd(lr: 1e-12)",
        count,
        accumulate,
    );
    assert!(
        max_difference(&init, &one) > 1e-3,
        "{name}: nothing trained"
    );
    for (label, strategy) in [
        ("two", "parallel data(devices: [cpu, cpu])"),
        ("four", "parallel data(replicas: 4)"),
    ] {
        if 24 % (accumulate * if label == "two" { 2 } else { 4 }) != 0 {
            continue;
        }
        let dp = trained(&dir, label, strategy, optimizer, count, accumulate);
        let d = max_difference(&one, &dp);
        assert!(
            d < 1e-5,
            "{name}, {label} replicas: parameters differ by {d}"
        );
    }
}

#[test]
fn replicas_match_one_device_with_sgd() {
    equivalent("sgd", "sgd(lr: 0.1)", 480, 1);
}

#[test]
fn replicas_match_one_device_with_momentum_and_accumulation() {
    // 130 samples: every sixth batch has 10, split unevenly among the replicas.
    equivalent("momentum", "sgd(lr: 0.05, momentum: 0.9)", 130, 2);
}

#[test]
fn replicas_match_one_device_with_adam() {
    equivalent("adam", "adam(lr: 1e-2)", 480, 1);
}
