//! Token ids from data files: a model whose first layer is an `embedding` takes a file's integer
//! ids as int64, exactly as synthetic `randint` inputs. The same ids stored in an `.npy` file
//! (int64) and in a safetensors file (int32) train step for step as the synthetic source that
//! drew them, and as PyTorch on those ids, over 50 steps within 1e-5 relative. An id outside the
//! vocabulary is a data diagnostic (K0503) naming the file, the id and the sample.
//!
//! `tests/token_files/write.py` runs `tests/parity/sequence.py`'s padded model (its initial
//! weights and PyTorch's losses) and writes the files.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::{kiln, root, s, scratch, text};

const STEPS: usize = 50;
const BATCH: usize = 16;
const VOCAB: usize = 6;
const LENGTH: usize = 8;
const LOSS_RTOL: f64 = 1e-5;
/// One CPU thread on both sides: the same kernels in the same order.
const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

/// The padded model of `tests/parity/sequence.py`, as a model block.
const MODEL: &str = "    embed: embedding(6, 16, pad: 0)\n    pos: positional(max_len: 8)\n    block: transformer_block(2, hidden: 32, dropout: 0)\n    norm: layernorm\n    mean(0)\n    head: linear(8)\n";

fn exp(source: &str) -> String {
    format!(
        "experiment \"tokens\" {{\n  seed 5\n  data {{\n    source {source}\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input [{LENGTH}]\n{MODEL}  }}\n  device cpu\n  optimizer adamw(lr: 1e-2, weight_decay: 0.01)\n  train {{\n    steps {STEPS}\n    loss cross_entropy\n  }}\n}}\n"
    )
}

/// Runs `source` from `dir`'s initial weights; the output and the run's directory.
fn run(dir: &Path, name: &str, source: &str) -> (std::process::Output, PathBuf) {
    let file = dir.join(format!("{name}.exp"));
    std::fs::write(&file, exp(source)).expect("write .exp");
    let runs = dir.join(format!("runs-{name}"));
    let out = kiln(&[
        "run",
        s(&file),
        "--device",
        "cpu",
        "--quiet",
        "--runs-dir",
        s(&runs),
    ])
    .arg("--init")
    .arg(dir.join("init.safetensors"))
    .envs(SINGLE_THREADED)
    .output()
    .expect("kiln starts");
    (out, runs.join("tokens"))
}

/// The loss of each step of the only run under `runs`.
fn losses(runs: &Path) -> Vec<f64> {
    let run = std::fs::read_dir(runs)
        .expect("the runs")
        .next()
        .expect("a run")
        .expect("an entry")
        .path();
    let steps = std::fs::read_to_string(run.join("steps.jsonl")).expect("steps.jsonl");
    steps
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v["loss"].as_f64().expect("a loss")
        })
        .collect()
}

/// The worst relative difference of `got` from `want`, step by step.
fn worst(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!((got.len(), want.len()), (STEPS, STEPS));
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / b.abs())
        .fold(
            0.0,
            |w, d| if d.is_nan() { f64::INFINITY } else { w.max(d) },
        )
}

#[test]
fn token_files_train_as_the_synthetic_ids_and_as_pytorch() {
    let python = root().join(".venv/bin/python");
    assert!(python.is_file(), "this test needs {}", python.display());
    let dir = scratch("token-files");
    let spec = json!({
        "dir": dir, "model": "padded", "seed": 5, "vocab": VOCAB, "length": LENGTH,
        "count": STEPS * BATCH, "batch": BATCH, "steps": STEPS, "lr": 1e-2,
        "weight_decay": 0.01,
    });
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).expect("write spec");
    let out = Command::new(&python)
        .arg(root().join("tests/token_files/write.py"))
        .arg(&spec_path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(out.status.success(), "write.py failed:\n{}", text(&out));
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
    )
    .expect("reference json");
    let pytorch: Vec<f64> = reference["losses"]
        .as_array()
        .expect("losses")
        .iter()
        .map(|x| x.as_f64().expect("a loss"))
        .collect();
    let count = STEPS * BATCH;
    let sources = [
        (
            "synthetic",
            format!("synthetic(inputs: randint({VOCAB}, shape: [{LENGTH}]), targets: argmax(), count: {count})"),
        ),
        (
            "npy",
            format!("npy(\"ids.npy\", targets: \"labels.npy\", classes: {LENGTH})"),
        ),
        (
            "safetensors",
            format!("safetensors(\"ids.safetensors\", classes: {LENGTH})"),
        ),
    ];
    let mut runs = Vec::new();
    for (name, source) in &sources {
        let (out, at) = run(&dir, name, source);
        assert!(
            out.status.success(),
            "{name}: `kiln run` failed:\n{}",
            text(&out)
        );
        runs.push((*name, losses(&at)));
    }
    let synthetic = &runs[0].1;
    let (first, last) = (
        pytorch[..5].iter().sum::<f64>(),
        pytorch[STEPS - 5..].iter().sum::<f64>(),
    );
    assert!(
        last < 0.9 * first,
        "the loss barely moves ({first} -> {last})"
    );
    for (name, got) in &runs {
        let against_torch = worst(got, &pytorch);
        let against_synthetic = worst(got, synthetic);
        eprintln!("{name}: worst relative difference {against_torch:.2e} from PyTorch, {against_synthetic:.2e} from the synthetic ids");
        assert!(
            against_torch <= LOSS_RTOL,
            "{name}: {against_torch:e} from PyTorch"
        );
        assert!(
            against_synthetic <= LOSS_RTOL,
            "{name}: {against_synthetic:e} from the synthetic run"
        );
    }

    // An id outside [0, vocab) is refused before training, naming the file, the id and the sample.
    let (out, _) = run(
        &dir,
        "bad",
        &format!("npy(\"bad.npy\", targets: \"labels.npy\", classes: {LENGTH})"),
    );
    let said = text(&out);
    assert!(
        !out.status.success(),
        "the out-of-range id trained:\n{said}"
    );
    assert!(said.contains("K0503"), "{said}");
    assert!(
        said.contains(&format!("`bad.npy` holds the token id {VOCAB} for sample 3, outside the embedding's vocabulary [0, {VOCAB})")),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
