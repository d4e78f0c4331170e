//! Samples stored in another layout than the model's input. `kiln check` refuses samples that
//! hold the input's number of values in other dimensions (reshaping them would scramble them),
//! naming both shapes; `layout: channels_last` moves each sample's last dimension first as it
//! loads, which must train exactly as the same samples permuted by `torch.permute`.

mod support;

use std::path::Path;

use kiln::check::{check_path, FsLoader, Options};
use serde_json::json;
use support::parity::{self, compare};
use support::{s, scratch, write};

/// An experiment on the source `source`, a model of `model`'s layers on input `input`.
fn experiment(source: &str, input: &str, model: &str) -> String {
    format!(
        "experiment \"layout\" {{\n  seed 3\n  data {{\n    source {source}\n    split(train: 0.75, val: 0.25)\n    batch 12\n    shuffle true\n  }}\n  model {{\n    input {input}\n    {model}\n  }}\n  device cpu\n  optimizer adam(lr: 1e-2)\n  train {{\n    steps 12\n    loss cross_entropy\n  }}\n}}\n"
    )
}

const CNN: &str = "conv: conv2d(4, kernel_size: 3)\n    relu\n    flatten\n    out: linear(4)";
const CONV1D: &str = "conv: conv1d(3, kernel_size: 3)\n    relu\n    flatten\n    out: linear(4)";

/// Writes the data files (with PyTorch) into a fresh scratch directory.
fn data(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    parity::reference("tests/layouts/write.py", &json!({ "dir": s(&dir) }), &dir);
    dir
}

/// The diagnostics of `text` checked as `dir/name`: (code, message, help) each.
fn check(dir: &Path, name: &str, text: &str) -> Vec<(String, String, String)> {
    let path = write(dir, name, text);
    check_path(&path, &FsLoader, &Options::default())
        .diagnostics
        .iter()
        .map(|d| {
            (
                d.code.code().to_string(),
                d.message.clone(),
                d.help.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn samples_in_other_dimensions_are_refused_with_the_layout_that_fixes_them() {
    let dir = data("check");
    let images = r#"npy("images_hwc.npy", targets: "labels.npy", classes: 4)"#;
    let d = check(&dir, "hwc.exp", &experiment(images, "[3, 6, 6]", CNN));
    assert_eq!(d.len(), 1, "{d:?}");
    let (code, message, help) = &d[0];
    assert_eq!(code, "K0220");
    assert!(
        message.contains("[6, 6, 3]") && message.contains("[3, 6, 6]"),
        "{message}"
    );
    assert!(message.contains("scramble"), "{message}");
    assert!(help.contains("layout: channels_last"), "{help}");
    // Sequences [L, C] for a conv1d that takes [C, L].
    let seq = r#"npy("seq_lc.npy", targets: "labels.npy", classes: 4)"#;
    let d = check(&dir, "lc.exp", &experiment(seq, "[2, 10]", CONV1D));
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].2.contains("layout: channels_last"), "{d:?}");
    // A transpose that is not channels last: no layout to suggest, the shapes named.
    let d = check(&dir, "t.exp", &experiment(images, "[6, 3, 6]", CNN));
    assert_eq!(d[0].0, "K0220", "{d:?}");
    assert!(!d[0].2.contains("layout"), "{d:?}");
    // With the layout, and for flat CSV rows with their stored shape declared, all is clean.
    for (name, source, input, model) in [
        (
            "hwc-fixed.exp",
            r#"npy("images_hwc.npy", targets: "labels.npy", classes: 4, layout: channels_last)"#,
            "[3, 6, 6]",
            CNN,
        ),
        (
            "lc-fixed.exp",
            r#"npy("seq_lc.npy", targets: "labels.npy", classes: 4, layout: channels_last)"#,
            "[2, 10]",
            CONV1D,
        ),
        (
            "csv.exp",
            r#"csv("images_hwc.csv", classes: 4, shape: [6, 6, 3], layout: channels_last)"#,
            "[3, 6, 6]",
            CNN,
        ),
        (
            "flat.exp",
            r#"npy("images_hwc.npy", targets: "labels.npy", classes: 4)"#,
            "[108]",
            "out: linear(4)",
        ),
    ] {
        let d = check(&dir, name, &experiment(source, input, model));
        assert!(d.is_empty(), "{name}: {d:?}");
    }
}

#[test]
fn a_layout_or_shape_that_cannot_hold_the_samples_is_refused() {
    let dir = data("declared");
    // Flat CSV rows have no channels to move without their stored shape.
    let d = check(
        &dir,
        "flat.exp",
        &experiment(
            r#"csv("images_hwc.csv", classes: 4, layout: channels_last)"#,
            "[3, 6, 6]",
            CNN,
        ),
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].1.contains("no") || d[0].1.contains("moves"), "{d:?}");
    assert!(d[0].2.contains("shape: [32, 32, 3]"), "{d:?}");
    // A declared shape of another size than the file stores.
    let d = check(
        &dir,
        "size.exp",
        &experiment(
            r#"npy("images_hwc.npy", targets: "labels.npy", classes: 4, shape: [3, 6, 5])"#,
            "[3, 6, 5]",
            CNN,
        ),
    );
    assert_eq!(d[0].0, "K0220", "{d:?}");
    assert!(d[0].1.contains("declared `shape` [3, 6, 5]"), "{d:?}");
    // A declared shape that reads channels-last samples as channels first.
    let d = check(
        &dir,
        "reread.exp",
        &experiment(
            r#"npy("images_hwc.npy", targets: "labels.npy", classes: 4, shape: [3, 6, 6])"#,
            "[3, 6, 6]",
            CNN,
        ),
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].2.contains("shape: [6, 6, 3]"), "{d:?}");
    assert!(d[0].2.contains("layout: channels_last"), "{d:?}");
}

#[test]
fn channels_last_samples_train_as_the_samples_torch_permute_gives() {
    let dir = data("train");
    let mut failures = Vec::new();
    for (name, ours, theirs, input, model) in [
        (
            "images",
            r#"npy("images_hwc.npy", targets: "labels.npy", classes: 4, layout: channels_last)"#,
            r#"npy("images_chw.npy", targets: "labels.npy", classes: 4)"#,
            "[3, 6, 6]",
            CNN,
        ),
        (
            "csv rows",
            r#"csv("images_hwc.csv", classes: 4, shape: [6, 6, 3], layout: channels_last)"#,
            r#"npy("images_chw.npy", targets: "labels.npy", classes: 4)"#,
            "[3, 6, 6]",
            CNN,
        ),
        (
            "sequences",
            r#"npy("seq_lc.npy", targets: "labels.npy", classes: 4, layout: channels_last)"#,
            r#"npy("seq_cl.npy", targets: "labels.npy", classes: 4)"#,
            "[2, 10]",
            CONV1D,
        ),
    ] {
        let slug = name.replace(' ', "-");
        let a = write(
            &dir,
            &format!("{slug}-last.exp"),
            &experiment(ours, input, model),
        );
        let b = write(
            &dir,
            &format!("{slug}-first.exp"),
            &experiment(theirs, input, model),
        );
        let ours = parity::train(&a, None, &dir.join(format!("{slug}-last-run")));
        let theirs = parity::train(&b, None, &dir.join(format!("{slug}-first-run")));
        assert_eq!(ours.losses.len(), 12, "{name}");
        failures.extend(compare(name, "loss", &ours.losses, &theirs.losses, 1e-6));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
