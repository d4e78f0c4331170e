//! What the PyTorch parity tests share: the project's Python, running a reference script on a
//! spec file, training with `kiln run --init` and reading its per-step records, and comparing two
//! series of losses. The reference scripts share `tests/support/torchref.py` in the same way.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::toolkit::python;
pub use super::toolkit::SINGLE_THREADED;
use super::{root, s, text};

/// Writes `spec` as `dir/spec.json` and runs `script` (relative to the repository's root) on it
/// with the project's Python, on one thread; a failing script fails the test with its output.
pub fn reference(script: &str, spec: &Value, dir: &Path) {
    let path = dir.join("spec.json");
    std::fs::write(&path, serde_json::to_string_pretty(spec).expect("json")).expect("write spec");
    let python = python("the parity tests");
    let out = Command::new(&python)
        .arg(root().join(script))
        .arg(&path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "the PyTorch reference `{script}` failed ({}) with {}:\n{}",
        out.status,
        python.display(),
        text(&out)
    );
}

/// The JSON file at `path`.
pub fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The records of a JSON-lines file.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}: {line}", path.display(), i + 1))
        })
        .collect()
}

/// The numbers of a JSON array.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")))
        .collect()
}

/// A JSON value written in the `.exp` language: numbers, booleans and lists of them.
pub fn exp_value(v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().expect("a number");
            if n.is_f64() && f != 0.0 && !(1e-3..1e3).contains(&f.abs()) {
                format!("{f:e}")
            } else {
                n.to_string()
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

/// What a run recorded at each step, in order.
pub struct Steps {
    /// The mean training loss of each step.
    pub losses: Vec<f64>,
    /// The learning rate each step used.
    pub lrs: Vec<f64>,
}

/// Trains `exp` on the CPU, on one thread, into `run_dir`, from the weights in `init` if given,
/// and returns its per-step records; a failing run fails the test with its output.
pub fn train(exp: &Path, init: Option<&Path>, run_dir: &Path) -> Steps {
    let mut command = super::kiln(&["run", s(exp), "--device", "cpu", "--quiet"]);
    command.args(["--run-dir", s(run_dir)]);
    if let Some(init) = init {
        command.args(["--init", s(init)]);
    }
    let out = command.envs(SINGLE_THREADED).output().expect("kiln starts");
    assert!(
        out.status.success(),
        "{}: `kiln run` failed ({}):\n{}",
        exp.display(),
        out.status,
        text(&out)
    );
    let path = run_dir.join("steps.jsonl");
    let records = json_lines(&path);
    let number = |v: &Value, field: &str| {
        v[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: no {field} in {v}", path.display()))
    };
    for (i, v) in records.iter().enumerate() {
        assert_eq!(
            v["step"].as_u64(),
            Some(i as u64 + 1),
            "{}: steps out of order at {v}",
            path.display()
        );
    }
    Steps {
        losses: records.iter().map(|v| number(v, "loss")).collect(),
        lrs: records.iter().map(|v| number(v, "lr")).collect(),
    }
}

/// The worst relative difference of two series: (step, difference), steps 1-based; a NaN is
/// the worst.
pub fn worst(ours: &[f64], theirs: &[f64]) -> (usize, f64) {
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

/// Compares `ours` with `theirs` (same length, worst relative difference at most `rtol`),
/// prints the worst difference under `name`, and returns a failure line when they differ.
pub fn compare(name: &str, what: &str, ours: &[f64], theirs: &[f64], rtol: f64) -> Option<String> {
    if ours.len() != theirs.len() {
        return Some(format!(
            "{name}: Kiln recorded {} {what}, PyTorch {}",
            ours.len(),
            theirs.len()
        ));
    }
    let (step, diff) = worst(ours, theirs);
    eprintln!("{name:<28} worst {what} rel diff {diff:.2e} (step {step})");
    (diff.is_nan() || diff > rtol).then(|| {
        format!(
            "{name}: {what} at step {step}: Kiln {}, PyTorch {} (relative difference {diff:.2e})",
            ours[step - 1],
            theirs[step - 1]
        )
    })
}
