//! Every layer kind against PyTorch: from the same weights and the same batch, Kiln's forward and
//! backward passes give PyTorch's output, input gradient, weight gradients and running statistics.
//!
//! The table in `tests/layers/cases.rs` pairs each model (a few lines of a `.exp` model block)
//! with the PyTorch modules that compute the same thing. `tests/layers/reference.py` (one process for all cases,
//! with the project's `.venv/bin/python`) builds the modules, perturbs their weights, runs one
//! forward and backward pass and saves everything as safetensors; this test checks the `.exp`,
//! builds the `Net`, loads the same weights with `Net::load` and compares.
//!
//! Both sides link the same libtorch and seed its generator the same way right before the forward
//! pass, so dropout draws the same masks and training-mode dropout is compared value for value
//! (with its statistics checked on top).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::diagnostic::Code;
use kiln::ir::{Experiment, LayerKind, Node};
use kiln::span::Span;
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};

use super::model::{build, Net};
use crate::toolkit::{python, root, scratch};

#[path = "../../tests/layers/cases.rs"]
mod cases;
use cases::{cases, Case, Input, Mode};

/// The fp32 tolerance on `|ours - theirs|_2 / |theirs|_2` over a whole tensor. A norm rather than
/// an elementwise bound, because gradients hold elements near zero whose relative error means
/// nothing (a sum of terms that cancel); one wrong element still shows, since in these tensors of
/// at most a few thousand values one element carries far more than 1e-5 of the norm.
const FP32_RTOL: f64 = 1e-5;

/// The bf16 tolerance, on the same norm. bf16 keeps 8 significant bits, so one rounding step
/// (an ulp) is 2^-8 = 0.4% of a value. Both sides round the same fp32 values to bf16, but not
/// always after the same fp32 arithmetic: attention's kernels accumulate in another order, and
/// Kiln runs norms and softmax in fp32 where CPU autocast hands them bf16 and returns bf16, so
/// some elements land an ulp or two apart, and more after a few layers. The cases measure 1e-3
/// to 6e-3 (1.0e-2 at most, on an 8-value bias gradient); 2e-2, five ulps on every element at
/// once, sits above that noise and far below the error of a wrong operation, which is of the
/// order of the values themselves.
const BF16_RTOL: f64 = 2e-2;

/// Both sides run libtorch on one thread: the same kernels, reducing in the same order.
const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

/// One comparison: a case in one mode and one precision.
struct Run<'a> {
    case: &'a Case,
    mode: Mode,
    bf16: bool,
    seed: u64,
}

impl Run<'_> {
    fn name(&self) -> String {
        format!(
            "{}-{}-{}-{}",
            self.case.kind,
            self.case.label,
            if self.mode == Mode::Train {
                "train"
            } else {
                "eval"
            },
            if self.bf16 { "bf16" } else { "fp32" }
        )
    }

    /// The run as `reference.py` reads it.
    fn spec(&self, path: &Path) -> Value {
        let (shape, high) = match &self.case.input {
            Input::Float(shape) => (shape.to_vec(), None),
            Input::Int(shape, high) => (shape.to_vec(), Some(*high)),
        };
        json!({
            "name": self.name(),
            "path": path,
            "layers": self.case.torch,
            "input": {"shape": shape, "int_high": high},
            "batch": self.case.batch,
            "train": self.mode == Mode::Train,
            "bf16": self.bf16,
            "seed": self.seed,
        })
    }

    /// The experiment around the case's model; the targets take the output's shape, so that
    /// `mse` fits whatever the layers produce.
    fn exp(&self, output: &[i64]) -> String {
        let dims = |d: &[i64]| {
            let d: Vec<String> = d.iter().map(i64::to_string).collect();
            format!("[{}]", d.join(", "))
        };
        let inputs = match &self.case.input {
            Input::Float(shape) => format!("normal({})", dims(shape)),
            Input::Int(shape, high) => format!("randint({high}, shape: {})", dims(shape)),
        };
        let input_shape = match &self.case.input {
            Input::Float(s) | Input::Int(s, _) => dims(s),
        };
        format!(
            "experiment \"layer\" {{\n  seed {seed}\n  data {{\n    source synthetic(inputs: {inputs}, targets: normal({out}), count: 64)\n    batch {batch}\n  }}\n  model {{\n    input {input_shape}\n    {model}\n  }}\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps 1\n    loss mse\n    precision {precision}\n  }}\n}}\n",
            seed = self.seed,
            out = dims(output),
            batch = self.case.batch,
            model = self.case.exp.replace('\n', "\n    "),
            precision = if self.bf16 { "bf16" } else { "fp32" },
        )
    }
}

/// The one trial of an experiment text, or the checker's errors.
fn checked(text: &str) -> Result<Experiment, String> {
    let checked = kiln::check::check_text("layer.exp", text);
    if checked.has_errors() {
        let errors: Vec<String> = checked
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| format!("{} {}", d.code.code(), d.message))
            .collect();
        return Err(format!("`kiln check` rejects it: {}", errors.join("; ")));
    }
    checked
        .trials
        .into_iter()
        .next()
        .ok_or_else(|| "`kiln check` gives no trial".to_string())
}

/// The values of a tensor as f64, in row-major order.
fn values(t: &Tensor) -> Vec<f64> {
    let flat = t
        .to_kind(Kind::Double)
        .to_device(Device::Cpu)
        .contiguous()
        .flatten(0, -1);
    Vec::<f64>::try_from(&flat).expect("a double tensor converts")
}

/// `None` when `ours` matches `theirs` within `rtol` in the relative L2 norm, else what differs.
fn compare(what: &str, ours: &Tensor, theirs: &Tensor, rtol: f64) -> Option<String> {
    if ours.size() != theirs.size() {
        return Some(format!(
            "{what}: shape {:?}, PyTorch's is {:?}",
            ours.size(),
            theirs.size()
        ));
    }
    let (a, b) = (values(ours), values(theirs));
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    let diff = norm(&mut a.iter().zip(&b).map(|(x, y)| x - y));
    let scale = norm(&mut b.iter().copied());
    let rel = if scale > 0.0 { diff / scale } else { diff };
    if rel <= rtol {
        return None;
    }
    let (at, worst) = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .enumerate()
        .fold(
            (0, 0.0),
            |m, (i, d)| if d > m.1 || d.is_nan() { (i, d) } else { m },
        );
    Some(format!(
        "{what}: relative L2 error {rel:.2e} > {rtol:.0e} (|PyTorch| = {scale:.3e}; largest \
         difference {worst:.2e} at flat index {at}: Kiln {:.6e}, PyTorch {:.6e})",
        a[at], b[at]
    ))
}

/// Runs one case in Kiln and lists every way it differs from PyTorch's numbers in `file`.
fn check_run(run: &Run, file: &Path, output_dtype: &str) -> Vec<String> {
    let tensors: HashMap<String, Tensor> = Tensor::read_safetensors(file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()))
        .into_iter()
        .collect();
    let get = |name: &str| {
        tensors
            .get(name)
            .unwrap_or_else(|| panic!("{} has no `{name}`", file.display()))
    };
    let output = get("output");
    let exp = match checked(&run.exp(&output.size()[1..])) {
        Ok(exp) => exp,
        Err(e) => return vec![e],
    };
    let net = match build(&exp.model.nodes, exp.train.precision, Some(Device::Cpu)) {
        Ok(net) => net,
        Err(f) => return vec![format!("build fails: {}", f.message)],
    };
    if let Err(f) = net.load(file, Span::default()) {
        return vec![format!("Net::load fails: {}", f.message)];
    }
    let rtol = if run.bf16 { BF16_RTOL } else { FP32_RTOL };
    let mut problems = Vec::new();

    let float_input = matches!(run.case.input, Input::Float(_));
    let x = get("input").copy().set_requires_grad(float_input);
    tch::manual_seed(run.seed as i64);
    let y = match net.forward(&x, run.mode == Mode::Train) {
        Ok(y) => y,
        Err(f) => return vec![format!("forward fails: {}", f.message)],
    };
    let kind = format!("{:?}", y.kind());
    let want_kind = match output_dtype {
        "float32" => "Float",
        "bfloat16" => "BFloat16",
        other => other,
    };
    if kind != want_kind {
        problems.push(format!("output: dtype {kind}, PyTorch's is {output_dtype}"));
    }
    problems.extend(compare("output", &y, output, rtol));
    // A lone dropout layer's output is its input, masked and scaled.
    if let ([Node::Layer(l)], Mode::Train) = (exp.model.nodes.as_slice(), run.mode) {
        if let LayerKind::Dropout { p } = l.kind {
            problems.extend(dropout_statistics(&x, &y, p));
        }
    }

    (y.to_kind(Kind::Float) * get("upstream"))
        .sum(Kind::Float)
        .backward();
    if float_input {
        let grad = x.grad();
        if grad.defined() {
            problems.extend(compare("grad.input", &grad, get("grad.input"), rtol));
        } else {
            problems.push("grad.input: Kiln computes none".to_string());
        }
    }
    problems.extend(compare_params(&net, &tensors, rtol));
    for b in &net.buffers {
        let name = format!("after.{}", b.name);
        match tensors.get(&name) {
            Some(t) => problems.extend(compare(&name, &b.tensor, t, rtol)),
            None => problems.push(format!("{}: a buffer PyTorch's module lacks", b.name)),
        }
    }
    for name in tensors.keys().filter_map(|k| k.strip_prefix("after.")) {
        if !net.buffers.iter().any(|b| b.name == name) {
            problems.push(format!("{name}: a PyTorch buffer Kiln's layer lacks"));
        }
    }
    problems
}

/// Compares every weight gradient, and checks that both sides have the same parameters.
fn compare_params(net: &Net, tensors: &HashMap<String, Tensor>, rtol: f64) -> Vec<String> {
    let mut problems = Vec::new();
    for p in &net.params {
        let name = format!("grad.{}", p.name);
        let grad = p.tensor.grad();
        match tensors.get(&name) {
            Some(_) if !grad.defined() => problems.push(format!("{name}: Kiln computes none")),
            Some(t) => problems.extend(compare(&name, &grad, t, rtol)),
            None => problems.push(format!("{}: a parameter PyTorch's module lacks", p.name)),
        }
    }
    for name in tensors.keys().filter_map(|k| k.strip_prefix("grad.")) {
        if name != "input" && !net.params.iter().any(|p| p.name == name) {
            problems.push(format!("{name}: a PyTorch parameter Kiln's layer lacks"));
        }
    }
    problems
}

/// Training-mode dropout on its own terms: about `p` of the values are zeroed (within five
/// standard deviations of the binomial count) and the others are scaled by `1 / (1 - p)`.
fn dropout_statistics(x: &Tensor, y: &Tensor, p: f64) -> Vec<String> {
    let (xs, ys) = (values(x), values(y));
    let n = xs.len() as f64;
    let zeros = ys.iter().filter(|v| **v == 0.0).count() as f64;
    let sigma = (n * p * (1.0 - p)).sqrt();
    let mut problems = Vec::new();
    if (zeros - n * p).abs() > 5.0 * sigma {
        problems.push(format!(
            "dropout zeroes {zeros} of {n} values, expected {:.0} ± {:.0}",
            n * p,
            5.0 * sigma
        ));
    }
    let scale = 1.0 / (1.0 - p);
    let off = xs
        .iter()
        .zip(&ys)
        .filter(|(_, y)| **y != 0.0)
        .map(|(x, y)| (y - x * scale).abs() / (x * scale).abs())
        .fold(0.0, f64::max);
    if off > 1e-6 {
        problems.push(format!(
            "dropout keeps values scaled by other than 1/(1-p) = {scale}: relative error {off:.2e}"
        ));
    }
    problems
}

/// Every kind of the language has a case.
#[test]
fn every_layer_kind_has_a_case() {
    let cases = cases();
    for kind in kiln::ir::Kind::ALL.iter().map(|k| k.name()) {
        assert!(
            cases.iter().any(|c| c.kind == kind),
            "the layer kind `{kind}` has no case in the layer parity table"
        );
    }
}

#[test]
fn layer_parity_with_pytorch() {
    let python = python("the layer parity test");
    let scratch = scratch("layers");
    let cases = cases();
    let mut runs = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        for &mode in case.modes {
            for &bf16 in case.precisions {
                let seed = 1000 + i as u64;
                runs.push(Run {
                    case,
                    mode,
                    bf16,
                    seed,
                });
            }
        }
    }
    let files: Vec<PathBuf> = runs
        .iter()
        .map(|r| scratch.join(format!("{}.safetensors", r.name())))
        .collect();
    let spec: Vec<Value> = runs.iter().zip(&files).map(|(r, f)| r.spec(f)).collect();
    let (spec_path, results_path) = (scratch.join("spec.json"), scratch.join("results.json"));
    std::fs::write(&spec_path, serde_json::to_string(&spec).expect("json")).expect("write spec");
    let out = Command::new(&python)
        .arg(root().join("tests/layers/reference.py"))
        .arg(&spec_path)
        .arg(&results_path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "the PyTorch reference `tests/layers/reference.py` failed ({}) with {}:\n{}{}",
        out.status,
        python.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(&results_path).expect("results.json"))
            .expect("results json");

    tch::set_num_threads(1);
    let mut failures = Vec::new();
    for (run, file) in runs.iter().zip(&files) {
        let dtype = results[run.name()]["output_dtype"]
            .as_str()
            .unwrap_or_else(|| panic!("results.json has no dtype for {}", run.name()));
        for problem in check_run(run, file, dtype) {
            failures.push(format!("{}: {problem}", run.name()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} layer runs differ from PyTorch (its numbers are kept in {}):\n{}",
        failures.len(),
        runs.len(),
        scratch.display(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// A net of one linear layer and one batch norm, with its experiment checked.
fn small_net() -> Net {
    let exp = checked(concat!(
        "experiment \"load\" {\n  data {\n",
        "    source synthetic(inputs: normal([4]), targets: normal([3]), count: 8)\n",
        "    batch 4\n  }\n  model {\n    input [4]\n    l: linear(4 -> 3)\n",
        "    n: batchnorm1d\n  }\n  device cpu\n  optimizer sgd(lr: 0.1)\n",
        "  train {\n    steps 1\n    loss mse\n  }\n}\n"
    ))
    .expect("the model checks");
    build(&exp.model.nodes, exp.train.precision, Some(Device::Cpu)).expect("the model builds")
}

/// A missing or misshapen weight or buffer is a K0503 diagnostic naming the tensor.
#[test]
fn load_reports_missing_and_misshapen_weights() {
    let net = small_net();
    let dir = scratch("layers-load");
    let full: Vec<(String, Tensor)> = net
        .params
        .iter()
        .map(|p| (p.name.clone(), p.tensor.detach().copy()))
        .chain(
            net.buffers
                .iter()
                .map(|b| (b.name.clone(), b.tensor.copy())),
        )
        .collect();
    let write = |file: &str, tensors: &[(String, Tensor)]| {
        let path = dir.join(file);
        Tensor::write_safetensors(tensors, &path).expect("write safetensors");
        path
    };
    net.load(&write("full.safetensors", &full), Span::default())
        .expect("a complete file loads");

    for name in ["l.weight", "n.bias", "n.running_var"] {
        let lacking: Vec<(String, Tensor)> = full
            .iter()
            .filter(|(n, _)| n != name)
            .map(|(n, t)| (n.clone(), t.copy()))
            .collect();
        let err = net
            .load(&write("lacking.safetensors", &lacking), Span::default())
            .expect_err("a file without a weight is refused");
        assert_eq!(err.code, Code::DataInvalid, "{}", err.message);
        assert!(err.message.contains(name), "{}", err.message);

        let misshapen: Vec<(String, Tensor)> = full
            .iter()
            .map(|(n, t)| {
                let t = if n == name {
                    Tensor::zeros([2, 5], (Kind::Float, Device::Cpu))
                } else {
                    t.copy()
                };
                (n.clone(), t)
            })
            .collect();
        let err = net
            .load(&write("misshapen.safetensors", &misshapen), Span::default())
            .expect_err("a file with a misshapen weight is refused");
        assert_eq!(err.code, Code::DataInvalid, "{}", err.message);
        assert!(err.message.contains(name), "{}", err.message);
    }

    let err = net
        .load(&dir.join("absent.safetensors"), Span::default())
        .expect_err("a missing file is refused");
    assert_eq!(err.code, Code::DataInvalid, "{}", err.message);
    std::fs::write(dir.join("garbage.safetensors"), b"not a safetensors file").expect("write");
    let err = net
        .load(&dir.join("garbage.safetensors"), Span::default())
        .expect_err("a malformed file is refused");
    assert_eq!(err.code, Code::DataInvalid, "{}", err.message);
    let _ = std::fs::remove_dir_all(&dir);
}
