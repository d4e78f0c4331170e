//! Token ids from data files: a model whose first layer is an `embedding` takes a file's integer
//! ids as int64, exactly as synthetic `randint` inputs. The same ids stored in an `.npy` file
//! (int64) and in a safetensors file (int32) train step for step as the synthetic source that
//! drew them, and as PyTorch on those ids, over 50 steps within 1e-5 relative. An id outside the
//! vocabulary is a data diagnostic (K0503) naming the file, the id and the sample. Targets of a
//! class per token (`per_token: true`), the sorted ids, train step for step as the synthetic
//! `sort()` task over the same ids (which `tests/parity_tokens.rs` checks against PyTorch).
//!
//! `tests/token_files/write.py` (run through `tests/support/parity.rs`) runs `tests/parity/sequence.py`'s padded model (its initial
//! weights and PyTorch's losses) and writes the files.

mod support;

use std::path::{Path, PathBuf};

use serde_json::json;
use support::parity::{compare, floats, json_file, reference, train, SINGLE_THREADED};
use support::{kiln, s, scratch, text};

const STEPS: usize = 50;
const BATCH: usize = 16;
const VOCAB: usize = 6;
const LENGTH: usize = 8;
const LOSS_RTOL: f64 = 1e-5;

/// The padded model of `tests/parity/sequence.py`, as a model block.
const MODEL: &str = "    embed: embedding(6, 16, pad: 0)\n    pos: positional(max_len: 8)\n    block: transformer_block(2, hidden: 32, dropout: 0)\n    norm: layernorm\n    mean(0)\n    head: linear(8)\n";

/// Writes the experiment reading `source` as `dir/NAME.exp`.
fn exp(dir: &Path, name: &str, source: &str) -> PathBuf {
    let text = format!(
        "experiment \"tokens\" {{\n  seed 5\n  data {{\n    source {source}\n    shuffle false\n    batch {BATCH}\n  }}\n  model {{\n    input [{LENGTH}]\n{MODEL}  }}\n  device cpu\n  optimizer adamw(lr: 1e-2, weight_decay: 0.01)\n  train {{\n    steps {STEPS}\n    loss cross_entropy\n  }}\n}}\n"
    );
    let path = dir.join(format!("{name}.exp"));
    std::fs::write(&path, text).expect("write .exp");
    path
}

/// Runs `tests/token_files/write.py` into `dir`: PyTorch's reference and the data files.
fn write_files(dir: &Path) {
    let spec = json!({
        "dir": dir, "model": "padded", "seed": 5, "vocab": VOCAB, "length": LENGTH,
        "count": STEPS * BATCH, "batch": BATCH, "steps": STEPS, "lr": 1e-2,
        "weight_decay": 0.01,
    });
    reference("tests/token_files/write.py", &spec, dir);
}

/// `kiln run` of `exp` into `run`, which must fail with a data diagnostic (K0503) before
/// training; what it said.
fn refused_at_load(exp: &Path, run: &Path) -> String {
    let out = kiln(&[
        "run",
        s(exp),
        "--device",
        "cpu",
        "--quiet",
        "--run-dir",
        s(run),
    ])
    .envs(SINGLE_THREADED)
    .output()
    .expect("kiln starts");
    let said = text(&out);
    assert!(!out.status.success(), "the bad data trained:\n{said}");
    assert!(said.contains("K0503"), "{said}");
    said
}

#[test]
fn token_files_train_as_the_synthetic_ids_and_as_pytorch() {
    let dir = scratch("token-files");
    write_files(&dir);
    let pytorch = floats(&json_file(&dir.join("reference.json"))["losses"]);
    let (first, last) = (
        pytorch[..5].iter().sum::<f64>(),
        pytorch[STEPS - 5..].iter().sum::<f64>(),
    );
    assert!(
        last < 0.9 * first,
        "the loss barely moves ({first} -> {last})"
    );
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
    let init = dir.join("init.safetensors");
    let mut runs = Vec::new();
    for (name, source) in &sources {
        let steps = train(
            &exp(&dir, name, source),
            Some(&init),
            &dir.join(format!("run-{name}")),
        );
        runs.push((*name, steps.losses));
    }
    let synthetic = runs[0].1.clone();
    let mut failures = Vec::new();
    for (name, losses) in &runs {
        failures.extend(compare(
            &format!("{name} vs PyTorch"),
            "loss",
            losses,
            &pytorch,
            LOSS_RTOL,
        ));
        if *name != "synthetic" {
            failures.extend(compare(
                &format!("{name} vs synthetic"),
                "loss",
                losses,
                &synthetic,
                LOSS_RTOL,
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // An id outside [0, vocab) is refused before training, naming the file, the id and the sample.
    let bad = exp(
        &dir,
        "bad",
        &format!("npy(\"bad.npy\", targets: \"labels.npy\", classes: {LENGTH})"),
    );
    let said = refused_at_load(&bad, &dir.join("run-bad"));
    assert!(
        said.contains(&format!("`bad.npy` holds the token id {VOCAB} for sample 3, outside the embedding's vocabulary [0, {VOCAB})")),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The per-token model: a class per position, no pooling.
const PER_TOKEN_MODEL: &str = "    embed: embedding(6, 16)\n    pos: positional(max_len: 8)\n    block: transformer_block(2, hidden: 32, dropout: 0)\n    head: linear(6)\n";

#[test]
fn per_token_targets_from_files_train_as_the_synthetic_task() {
    let dir = scratch("token-files-per-token");
    write_files(&dir);
    let count = STEPS * BATCH;
    let per_token = |name: &str, source: &str| {
        let path = exp(&dir, name, source);
        let text = std::fs::read_to_string(&path).expect("read .exp");
        std::fs::write(&path, text.replace(MODEL, PER_TOKEN_MODEL)).expect("write .exp");
        path
    };
    let synthetic = per_token(
        "sort-synthetic",
        &format!("synthetic(inputs: randint({VOCAB}, shape: [{LENGTH}]), targets: sort(), count: {count})"),
    );
    let file = per_token(
        "sort-npy",
        &format!("npy(\"ids.npy\", targets: \"sorted.npy\", classes: {VOCAB}, per_token: true)"),
    );
    let ours = train(&file, None, &dir.join("run-sort-npy"));
    let theirs = train(&synthetic, None, &dir.join("run-sort-synthetic"));
    let (first, last) = (
        ours.losses[..5].iter().sum::<f64>(),
        ours.losses[STEPS - 5..].iter().sum::<f64>(),
    );
    assert!(
        last < 0.9 * first,
        "the loss barely moves ({first} -> {last})"
    );
    if let Some(failure) = compare("npy vs sort()", "loss", &ours.losses, &theirs.losses, 0.0) {
        panic!("{failure}");
    }

    // A class outside [0, classes) is refused before training, naming the sample and the token.
    let bad = per_token(
        "sort-bad",
        &format!(
            "npy(\"ids.npy\", targets: \"bad_sorted.npy\", classes: {VOCAB}, per_token: true)"
        ),
    );
    let said = refused_at_load(&bad, &dir.join("run-sort-bad"));
    assert!(
        said.contains(&format!("`bad_sorted.npy` holds the label {VOCAB} for sample 2, token 5, outside the {VOCAB} classes [0, {VOCAB})")),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
