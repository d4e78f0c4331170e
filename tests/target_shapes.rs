//! The loss against the model's output and the targets, for every loss and every kind of
//! source: one value per sample from a synthetic generator, a CSV column, an `.npy` array, an
//! `.npz` member, a safetensors tensor or IDX labels. A head of one unit meets one target per
//! sample (squeezed, `[B, 1]` to `[B]`, by the runtime), any other head is refused by `kiln
//! check` at the loss, naming the output and where the targets come from, as PyTorch would
//! otherwise broadcast `[B, K]` against `[B]` into a wrong loss. Targets read from a file's
//! header count as much as a synthetic source's.

mod support;

use std::path::Path;

use kiln::check::{check_path, FsLoader, Options};
use support::files::{csv, idx, npy, npz, safetensors, Array};
use support::{scratch, write};

/// Samples in every file: 8 samples of 4 values (IDX: 2x2 bytes).
const N: usize = 8;

/// Writes one source of each kind into `dir`, each with one target per sample whose values
/// (0 or 1) serve as regression values, binary labels and class indices alike; returns each
/// source's call.
fn sources(dir: &Path) -> Vec<(&'static str, String)> {
    let x: Vec<f32> = (0..N * 4).map(|i| i as f32 / 10.0).collect();
    let y: Vec<f32> = (0..N).map(|i| (i % 2) as f32).collect();
    let inputs = Array::f32(&[N, 4], &x);
    let targets = Array::f32(&[N], &y);
    let put = |name: &str, bytes: Vec<u8>| std::fs::write(dir.join(name), bytes).expect("write");
    put("x.npy", npy(&inputs));
    put("y.npy", npy(&targets));
    put("d.npz", npz(&[("inputs", &inputs), ("targets", &targets)]));
    put(
        "d.safetensors",
        safetensors(&[("inputs", &inputs), ("targets", &targets)]),
    );
    let bytes: Vec<u8> = (0..N * 4).map(|i| i as u8).collect();
    let labels: Vec<u8> = (0..N).map(|i| (i % 2) as u8).collect();
    put("images.idx", idx(&[N, 2, 2], &bytes, false));
    put("labels.idx", idx(&[N], &labels, false));
    let rows: Vec<Vec<f64>> = (0..N)
        .map(|i| {
            let mut r: Vec<f64> = (0..4).map(|j| f64::from(x[i * 4 + j])).collect();
            r.push(f64::from(y[i]));
            r
        })
        .collect();
    std::fs::write(dir.join("d.csv"), csv(&["a", "b", "c", "d", "y"], &rows)).expect("write");
    vec![
        (
            "synthetic",
            "synthetic(inputs: normal([4]), targets: normal([]), count: 8)".to_string(),
        ),
        ("csv", r#"csv("d.csv", target: "y")"#.to_string()),
        ("npy", r#"npy("x.npy", targets: "y.npy")"#.to_string()),
        ("npz", r#"npz("d.npz")"#.to_string()),
        ("safetensors", r#"safetensors("d.safetensors")"#.to_string()),
        (
            "idx",
            r#"idx("images.idx", labels: "labels.idx", shape: [4])"#.to_string(),
        ),
    ]
}

/// A name for a file of `loss`.
fn slug(loss: &str) -> String {
    loss.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The losses for real-valued targets (and binary ones).
const VALUE_LOSSES: &[&str] = &[
    "mse",
    "l1",
    "huber",
    "smooth_l1(beta: 0.5)",
    "bce_with_logits",
];

fn experiment(source: &str, head: usize, loss: &str) -> String {
    format!(
        "experiment \"targets\" {{\n  data {{\n    source {source}\n    batch 4\n  }}\n  model {{\n    input [4]\n    hidden: linear(8)\n    relu\n    out: linear({head})\n  }}\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps 2\n    loss {loss}\n  }}\n}}\n"
    )
}

/// The codes of the errors `kiln check` reports for `text`, and the line of each.
fn errors(dir: &Path, name: &str, text: &str) -> Vec<(&'static str, usize, String)> {
    let path = write(dir, name, text);
    let checked = check_path(&path, &FsLoader, &Options::default());
    checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| {
            let line = checked
                .sources
                .line_col(d.primary.span.file, d.primary.span.start)
                .line;
            (d.code.code(), line, d.message.clone())
        })
        .collect()
}

/// The line of the `loss` statement in [`experiment`].
const LOSS_LINE: usize = 16;

#[test]
fn a_head_of_several_units_against_one_target_per_sample_is_refused_at_the_loss() {
    let dir = scratch("targets-wide");
    let mut missed = Vec::new();
    for (kind, source) in sources(&dir) {
        for loss in VALUE_LOSSES {
            let e = errors(
                &dir,
                &format!("{kind}-{}.exp", slug(loss)),
                &experiment(&source, 2, loss),
            );
            let caught = e.iter().any(|(code, line, message)| {
                *code == "K0303" && *line == LOSS_LINE && message.contains("[2]")
            });
            if !caught {
                missed.push(format!("{kind} × {loss}: {e:?}"));
            }
        }
    }
    assert!(missed.is_empty(), "not refused:\n{}", missed.join("\n"));
}

#[test]
fn a_head_of_one_unit_against_one_target_per_sample_checks_clean() {
    let dir = scratch("targets-one");
    let mut refused = Vec::new();
    for (kind, source) in sources(&dir) {
        for loss in VALUE_LOSSES {
            let e = errors(
                &dir,
                &format!("{kind}-{}.exp", slug(loss)),
                &experiment(&source, 1, loss),
            );
            if !e.is_empty() {
                refused.push(format!("{kind} × {loss}: {e:?}"));
            }
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}

#[test]
fn class_scores_need_more_than_one_class_and_one_label_per_sample() {
    let dir = scratch("targets-classes");
    let mut wrong = Vec::new();
    for (kind, source) in sources(&dir) {
        if kind == "synthetic" {
            // Real-valued synthetic targets are no class indices (K0303 says so already).
            continue;
        }
        let one = errors(
            &dir,
            &format!("{kind}-one.exp"),
            &experiment(&source, 1, "cross_entropy"),
        );
        if !one.iter().any(|(c, l, _)| *c == "K0303" && *l == LOSS_LINE) {
            wrong.push(format!("{kind}: one class score passed: {one:?}"));
        }
        let two = errors(
            &dir,
            &format!("{kind}-two.exp"),
            &experiment(&source, 2, "cross_entropy"),
        );
        if !two.is_empty() {
            wrong.push(format!("{kind}: two class scores refused: {two:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn targets_shaped_as_the_token_ids_suggest_a_class_per_token() {
    let dir = scratch("targets-tokens");
    // Next-token targets [N, 6] for ids [N, 6], without `per_token: true`.
    let ids: Vec<i64> = (0..N as i64 * 6).map(|i| i % 5).collect();
    let next: Vec<i64> = (0..N as i64 * 6).map(|i| (i + 1) % 5).collect();
    std::fs::write(dir.join("ids.npy"), npy(&Array::i64(&[N, 6], &ids))).expect("write");
    std::fs::write(dir.join("next.npy"), npy(&Array::i64(&[N, 6], &next))).expect("write");
    let text = "experiment \"lm\" {\n  data {\n    source npy(\"ids.npy\", targets: \"next.npy\", classes: 5)\n    batch 4\n  }\n  model {\n    input [6]\n    embedding(5, 8)\n    out: linear(5)\n  }\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {\n    steps 2\n    loss cross_entropy\n  }\n}\n";
    let path = write(&dir, "lm.exp", text);
    let checked = check_path(&path, &FsLoader, &Options::default());
    let errors: Vec<_> = checked
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let help = errors[0].help.clone().unwrap_or_default();
    assert!(help.contains("per_token: true"), "{help}");
    assert!(!help.contains("flatten"), "{help}");
}
