//! Parity with PyTorch for local (sliding-window) attention: from the same initial weights and
//! the same synthetic token sequences, `kiln run` reproduces the losses of a PyTorch training
//! loop over 50 steps, within 1e-5 relative. The models cover `window` alone in a pre-norm
//! `transformer_block`, `window` with `causal` and a padding id in a post-norm one, and `window`
//! with a padding id in a lone `attention`; with ids in `[0, 4)` and pad 0, some queries have only
//! padding within their window in most batches.
//!
//! `tests/parity/masks.py` draws the data as Kiln's `synthetic` source does, saves the initial
//! `state_dict` and trains `nn.TransformerEncoderLayer` (or `nn.MultiheadAttention`) with the
//! window as its boolean `src_mask` / `attn_mask` and AdamW.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

const STEPS: usize = 50;
const BATCH: usize = 16;
const VOCAB: usize = 4;
const LENGTH: usize = 8;
const LOSS_RTOL: f64 = 1e-5;
/// One CPU thread on both sides: the same kernels in the same order.
const SINGLE_THREADED: [(&str, &str); 2] = [("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")];

/// The models, as `.exp` model blocks named as `masks.py`'s modules.
const CASES: &[(&str, &str)] = &[
    (
        "window",
        "    embed: embedding(4, 16)\n    pos: positional(max_len: 8)\n    block: transformer_block(2, hidden: 32, dropout: 0, window: 3)\n    mean(0)\n    head: linear(8)\n",
    ),
    (
        "causal_padded",
        "    embed: embedding(4, 16, pad: 0)\n    sinusoidal\n    block: transformer_block(2, hidden: 32, dropout: 0, causal: true, norm: post, window: 2)\n    mean(0)\n    head: linear(8)\n",
    ),
    (
        "attention_padded",
        "    embed: embedding(4, 16, pad: 0)\n    pos: positional(max_len: 8)\n    attn: attention(2, window: 2)\n    norm: layernorm\n    mean(0)\n    head: linear(8)\n",
    ),
];

fn exp(name: &str, model: &str) -> String {
    format!(
        "experiment \"parity-{name}\" {{\n  seed 5\n  data {{\n    source synthetic(inputs: randint({VOCAB}, shape: [{LENGTH}]), targets: argmax(), count: {})\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input [{LENGTH}]\n{model}  }}\n  device cpu\n  optimizer adamw(lr: 1e-2, weight_decay: 0.01)\n  train {{\n    steps {STEPS}\n    loss cross_entropy\n  }}\n}}\n",
        STEPS * BATCH
    )
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Kiln's loss per step, from the run's `steps.jsonl`.
fn kiln_losses(name: &str, dir: &Path) -> Vec<f64> {
    let runs = dir.join("runs");
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("run")
        .arg(dir.join("parity.exp"))
        .args(["--device", "cpu", "--quiet", "--runs-dir"])
        .arg(&runs)
        .arg("--init")
        .arg(dir.join("init.safetensors"))
        .env("NO_COLOR", "1")
        .envs(SINGLE_THREADED)
        .output()
        .expect("kiln starts");
    assert!(
        out.status.success(),
        "{name}: `kiln run` failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run: PathBuf = std::fs::read_dir(runs.join(format!("parity-{name}")))
        .expect("the runs")
        .next()
        .expect("a run")
        .expect("an entry")
        .path();
    let text = std::fs::read_to_string(run.join("steps.jsonl")).expect("steps.jsonl");
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v["loss"].as_f64().expect("a loss")
        })
        .collect()
}

#[test]
fn windowed_attention_losses_match_pytorch_step_for_step() {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the parity tests need {}",
        python.display()
    );
    let scratch = std::env::temp_dir().join(format!("kiln-mask-parity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut spec = Vec::new();
    for (name, model) in CASES {
        let dir = scratch.join(name);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        std::fs::write(dir.join("parity.exp"), exp(name, model)).expect("write .exp");
        spec.push(json!({
            "dir": dir, "model": name, "seed": 5, "vocab": VOCAB, "length": LENGTH,
            "count": STEPS * BATCH, "batch": BATCH, "steps": STEPS, "lr": 1e-2,
            "weight_decay": 0.01,
        }));
    }
    let spec_path = scratch.join("spec.json");
    std::fs::write(&spec_path, Value::Array(spec).to_string()).expect("write spec");
    let out = Command::new(&python)
        .arg(root().join("tests/parity/masks.py"))
        .arg(&spec_path)
        .envs(SINGLE_THREADED)
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "tests/parity/masks.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut failures = Vec::new();
    for (name, _) in CASES {
        let dir = scratch.join(name);
        let reference: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"),
        )
        .expect("reference json");
        let want: Vec<f64> = reference["losses"]
            .as_array()
            .expect("losses")
            .iter()
            .map(|x| x.as_f64().expect("a loss"))
            .collect();
        let got = kiln_losses(name, &dir);
        assert_eq!((got.len(), want.len()), (STEPS, STEPS), "{name}: steps");
        let first: f64 = want[..5].iter().sum::<f64>() / 5.0;
        let last: f64 = want[STEPS - 5..].iter().sum::<f64>() / 5.0;
        assert!(
            last < 0.9 * first,
            "{name}: the loss barely moves ({first} -> {last})"
        );
        for (step, (a, b)) in got.iter().zip(&want).enumerate() {
            let diff = (a - b).abs() / b.abs();
            if diff.is_nan() || diff > LOSS_RTOL {
                failures.push(format!(
                    "{name}: step {}: Kiln {a:e}, PyTorch {b:e}, relative difference {diff:.3e}",
                    step + 1
                ));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&scratch);
}
