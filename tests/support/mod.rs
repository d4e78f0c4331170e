//! What the end-to-end tests of `kiln run` share: scratch directories, running `kiln`, reading a
//! run directory back, and a small experiment that trains in about a second.

#![allow(dead_code)]

pub mod files;
pub mod formatting;
pub mod parity;
pub mod ranks;
pub mod toolkit;

pub use toolkit::{python_command, root, scratch};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `kiln` with `args`, in the repository's root, without colour, on one CPU thread (the tests
/// compare runs bit for bit: README, "Reproducibility").
pub fn kiln(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .envs(parity::SINGLE_THREADED);
    c
}

/// Runs `kiln` to the end.
pub fn run(args: &[&str]) -> Output {
    kiln(args).output().expect("kiln starts")
}

/// Standard output and error together.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Writes `text` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// A path as `&str`.
pub fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `report.yaml` of a run.
pub fn report(dir: &Path) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(dir.join("report.yaml")).expect("report.yaml"))
        .expect("valid YAML")
}

/// Asserts that two processes on this machine computed the same numbers, bit for bit: what Kiln
/// promises when both ran the same computation (README, "Reproducibility"), on any CPU. The same
/// experiment, seed, weights, libtorch and thread count make libtorch pick the same kernels (it
/// chooses them by the CPU and the thread count) for the same bytes (weights are stored as
/// float32 exactly, every tensor is 64-byte aligned), the same batches pass through them in the
/// same order, Kiln adds their float32 results in f64 in that order, and every f64 is written in
/// its shortest exact decimal form and read back exactly (serde_json's `float_roundtrip`). Two
/// machines (AVX2 and AVX512) differ in the last float32 bits: no test compares across machines.
#[track_caller]
pub fn same_computation<T: PartialEq + std::fmt::Debug>(a: T, b: T, what: &str) {
    assert_eq!(a, b, "{what}: the same computation gave other numbers");
}

/// Asserts that two accuracies over `samples` samples, computed differently (other batch sizes,
/// ranks, devices), differ by one sample at most: their logits differ in the last float32 bits,
/// which can turn a prediction only where two classes' scores tie to those bits.
#[track_caller]
pub fn within_one_sample(a: f64, b: f64, samples: usize, what: &str) {
    assert!(
        (a - b).abs() <= 1.0 / samples as f64 + 1e-12,
        "{what}: accuracy {a} against {b} over {samples} samples"
    );
}

/// A tiny classifier (`kiln eval`'s tests) on synthetic data with validation and test splits and no checkpoints.
pub const TINY: &str = r#"
experiment "tiny" {
  seed 5
  data {
    source synthetic(inputs: normal([16]), targets: randint(3), count: 300)
    split(train: 0.6, val: 0.25, test: 0.15)
    batch 16
  }
  model {
    input [16]
    fc1: linear(32)
    bn: batchnorm1d
    relu
    dropout(0.2)
    fc2: linear(3)
  }
  device cpu
  optimizer adam(lr: 1e-2)
  train {
    steps 40
    loss cross_entropy
    metrics [accuracy, top_k(2)]
    eval_every 20 steps
  }
}
"#;

/// Trains the example `file` (experiment `name`) on the CPU with one libtorch thread, so that
/// OpenMP does not spin when the test machine is busy; returns its validation accuracy.
pub fn example_val_accuracy(file: &str, name: &str) -> f64 {
    let runs = scratch(name);
    let o = kiln(&[
        "run",
        file,
        "--device",
        "cpu",
        "--quiet",
        "--runs-dir",
        s(&runs),
    ])
    .env("OMP_NUM_THREADS", "1")
    .output()
    .expect("kiln starts");
    assert!(o.status.success(), "{}", text(&o));
    let dir = std::fs::read_dir(runs.join(name))
        .expect("the experiment's runs")
        .next()
        .expect("a run directory")
        .expect("an entry")
        .path();
    report(&dir)["val"]["accuracy"]
        .as_f64()
        .expect("val accuracy")
}

/// The paths of arrays in `v` that hold a tuple rather than a list: an array of arrays, or of
/// values of different kinds (a string and a number, an integer and a fraction, as `[3, 0.9]`).
/// Output for programs names its fields instead.
pub fn tuples(v: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(n) if n.is_f64() => "fraction",
            Value::Number(_) => "integer",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }
    fn walk(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::Array(items) => {
                let first = items.first().map(kind);
                let mixed = items.iter().any(|i| Some(kind(i)) != first);
                if mixed || first == Some("array") {
                    out.push(path.to_string());
                }
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            Value::Object(fields) => {
                for (k, item) in fields {
                    walk(item, &format!("{path}.{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// Metrics without the timing fields, which differ between runs.
pub fn metrics(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            if let Some(o) = v.as_object_mut() {
                o.remove("seconds");
                o.remove("samples_per_s");
            }
            v
        })
        .collect()
}

/// A small experiment on synthetic data: 50 steps an epoch, a checkpoint every 20 steps.
pub const SMALL: &str = r#"
experiment "small" {
  seed 3
  data {
    source synthetic(inputs: normal([32]), targets: randint(4), count: 2000)
    split(train: 0.8, val: 0.2)
    batch 32
  }
  model {
    input [32]
    fc1: linear(64)
    relu
    dropout(0.2)
    fc2: linear(4)
  }
  device cpu
  optimizer adamw(lr: 3e-3)
  schedule cosine(warmup: 20 steps)
  train {
    steps 400
    loss cross_entropy
    metrics [accuracy]
    eval_every 100 steps
    checkpoint(every: 20 steps, keep: 2)
  }
}
"#;

/// A run directory's scalars as TensorBoard's own reader (`tensorboard`'s `EventAccumulator`)
/// loads them from its event files: tag to `(step, value)` in order.
pub fn tensorboard_scalars(run: &Path) -> std::collections::BTreeMap<String, Vec<(u64, f64)>> {
    let o = python_command("tensorboard_scalars")
        .arg(root().join("tests/support/tb_scalars.py"))
        .arg(run)
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "TensorBoard's reader failed on {}: {}",
        run.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("tag -> [[step, value]]")
}

/// Every step's training loss in `run` (its `steps.jsonl`).
pub fn step_losses(run: &Path) -> Vec<f64> {
    std::fs::read_to_string(run.join("steps.jsonl"))
        .expect("steps.jsonl")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a step");
            v["loss"].as_f64().expect("loss")
        })
        .collect()
}

/// The final parameters of `run` (its newest final weights, after up to two extensions), by
/// name; every tensor must be fp32.
pub fn final_weights(run: &Path) -> BTreeMap<String, Vec<f32>> {
    let newest = ["weights-3", "weights-2", "weights"]
        .iter()
        .map(|stem| run.join(format!("{stem}.safetensors")))
        .find(|p| p.exists())
        .expect("final weights");
    let (tensors, others) = safetensors_f32(&newest);
    assert!(others.is_empty(), "{others:?} are not fp32");
    tensors
}

/// The step of the newest checkpoint in `run`, when there is one.
pub fn newest_checkpoint(run: &Path) -> Option<u64> {
    std::fs::read_dir(run.join("checkpoints"))
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().to_string();
            let step = name.strip_prefix("step-")?.strip_suffix(".yaml")?;
            step.parse().ok()
        })
        .max()
}

/// Waits until `run` has a checkpoint at or after `step`; fails after a minute.
pub fn wait_for_checkpoint(run: &Path, step: u64, child: &mut Child) {
    let start = Instant::now();
    while newest_checkpoint(run).is_none_or(|s| s < step) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended ({status}) before step {step}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no checkpoint at step {step} appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts `kiln-runtime run exp --run-dir run` directly (so it can be killed alone), on one
/// CPU thread as [`kiln`].
pub fn start_runtime(exp: &Path, run: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kiln-runtime"))
        .args(["run", s(exp), "--quiet", "--run-dir", s(run)])
        .envs(parity::SINGLE_THREADED)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kiln-runtime")
}

/// A run of `exp` in `run` killed with SIGKILL (no chance to clean up) once it has written the
/// checkpoint of `step` or a later one.
pub fn killed_run(exp: &Path, run: &Path, step: u64) {
    let mut child = start_runtime(exp, run);
    wait_for_checkpoint(run, step, &mut child);
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("reaped");
    assert!(!status.success(), "the run finished before it was killed");
}

/// Every file under `dir` with its bytes, in order.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

/// Rendered diagnostics with their wrapped lines joined again: the gutter (`│`) dropped, a line
/// broken after a hyphen joined without a space, others with one.
pub fn flat(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix('│').unwrap_or(line).trim();
        if !out.is_empty() && !out.ends_with('-') {
            out.push(' ');
        }
        out += line;
    }
    out
}

/// Checks that the newest checkpoint's sidecar and tensors are complete; returns its step and
/// the size of its tensors file.
pub fn checkpoint_intact(dir: &Path) -> (u64, u64) {
    let mut sidecars: Vec<PathBuf> = std::fs::read_dir(dir.join("checkpoints"))
        .expect("checkpoints")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    sidecars.sort();
    let side: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(sidecars.last().expect("a checkpoint")).expect("sidecar"),
    )
    .expect("YAML");
    let data = std::fs::read(
        dir.join("checkpoints")
            .join(side["tensors"].as_str().expect("tensors file")),
    )
    .expect("tensors");
    let len = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value =
        serde_json::from_slice(&data[8..8 + len]).expect("safetensors header");
    let end = header
        .as_object()
        .expect("object")
        .values()
        .filter_map(|t| t["data_offsets"][1].as_u64())
        .max()
        .expect("tensors");
    assert_eq!(
        8 + len + end as usize,
        data.len(),
        "the tensors file is complete"
    );
    let step = side["position"]["step"].as_u64().expect("step");
    (step, data.len() as u64)
}

/// The tensors of a safetensors file (an 8-byte little-endian header length, a JSON header,
/// then the data): the fp32 ones by name, as values, and the names of any others.
pub fn safetensors_f32(path: &Path) -> (BTreeMap<String, Vec<f32>>, Vec<String>) {
    let bytes = std::fs::read(path).expect("safetensors file");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let (mut f32s, mut others) = (BTreeMap::new(), Vec::new());
    for (name, t) in header.as_object().expect("a map") {
        if name == "__metadata__" {
            continue;
        }
        if t["dtype"] != "F32" {
            others.push(name.clone());
            continue;
        }
        let at = |i: usize| t["data_offsets"][i].as_u64().expect("offset") as usize;
        let values = data[at(0)..at(1)]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        f32s.insert(name.clone(), values);
    }
    (f32s, others)
}

/// The tensors of the newest checkpoint of `run`, as [`safetensors_f32`] reads them.
pub fn checkpoint_tensors(run: &Path) -> (BTreeMap<String, Vec<f32>>, Vec<String>) {
    let step = newest_checkpoint(run).expect("a checkpoint");
    safetensors_f32(
        &run.join("checkpoints")
            .join(format!("step-{step:09}.safetensors")),
    )
}
