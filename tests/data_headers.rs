//! `kiln check` reads the headers of data files: every format's clean file is read (its count and
//! sample shape recorded for the plan), a loader in memory reads nothing, a sweep's trials agree,
//! and a FIFO named as a data file is refused without being opened.

use std::path::Path;

use kiln::check::{check_path, check_text, FsLoader, Options};
use kiln::ir::ReadData;

mod support;
use support::scratch;

/// The small data files of the goldens (4 samples of 3x3 values, labels below 3).
fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/diagnostics/data")
        .join(name)
        .display()
        .to_string()
}

fn experiment(source: &str, extra: &str) -> String {
    format!(
        "experiment \"d\" {{\n  data {{\n    source {source}\n    {extra}\n    batch 2\n  }}\n  model {{\n    input [9]\n    fc: linear(3)\n  }}\n  optimizer adam(lr: 1e-3)\n  train {{\n    epochs 1\n    loss cross_entropy\n  }}\n}}\n"
    )
}

/// Checks `text` as a file on disk; the diagnostics' codes and each trial's `data.read`.
fn check(name: &str, text: &str) -> (Vec<&'static str>, Vec<Option<ReadData>>) {
    let path = scratch(name).join("e.exp");
    std::fs::write(&path, text).expect("write");
    let checked = check_path(&path, &FsLoader, &Options::default());
    let codes = checked.diagnostics.iter().map(|d| d.code.code()).collect();
    let read = checked.trials.iter().map(|t| t.data.read.clone()).collect();
    (codes, read)
}

#[test]
fn every_format_is_read_from_its_header() {
    let nine = |shape: &[u64]| {
        Some(ReadData {
            samples: Some(4),
            sample: shape.to_vec(),
        })
    };
    let cases = [
        (
            format!(
                "idx(\"{}\", labels: \"{}\", classes: 3)",
                data("images.idx.gz"),
                data("labels.idx")
            ),
            nine(&[3, 3]),
        ),
        (
            format!(
                "npy(\"{}\", \"{}\", classes: 3)",
                data("inputs.npy"),
                data("targets.npy")
            ),
            nine(&[9]),
        ),
        (
            format!("npz(\"{}\", classes: 3)", data("arrays.npz")),
            nine(&[9]),
        ),
        (
            format!(
                "safetensors(\"{}\", inputs: \"x\", targets: \"y\", classes: 3)",
                data("tensors.safetensors")
            ),
            nine(&[3, 3]),
        ),
        (
            format!("csv(\"{}\", classes: 3)", data("table.csv")),
            nine(&[9]),
        ),
    ];
    for (i, (source, want)) in cases.iter().enumerate() {
        let (codes, read) = check(&format!("format{i}"), &experiment(source, ""));
        assert_eq!(codes, Vec::<&str>::new(), "{source}");
        assert_eq!(read, std::slice::from_ref(want), "{source}");
    }
}

#[test]
fn a_loader_in_memory_reads_no_data_files() {
    let text = experiment(
        "idx(\"absent.idx\", labels: \"absent-labels.idx\", classes: 3)",
        "",
    );
    let checked = check_text("e.exp", text);
    assert!(checked.diagnostics.is_empty());
    assert_eq!(checked.trials[0].data.read, None);
    assert_eq!(checked.trials[0].data.samples(), None);
}

#[test]
fn a_sweeps_trials_each_see_the_count() {
    let source = format!(
        "npy(\"{}\", \"{}\", classes: 3)",
        data("inputs.npy"),
        data("targets.npy")
    );
    let text = experiment(&source, "split(train: sweep [0.5, 0.75])");
    let (codes, read) = check("sweep", &text);
    assert_eq!(codes, Vec::<&str>::new());
    assert_eq!(read.len(), 2);
    assert!(read
        .iter()
        .all(|r| r.as_ref().and_then(|r| r.samples) == Some(4)));
    // A validation fraction that leaves no sample is refused in that trial only.
    let text = experiment(&source, "split(train: 0.5, val: sweep [0.1, 0.25])");
    let (codes, read) = check("sweep-small", &text);
    assert_eq!(codes, ["K0220"]);
    assert_eq!(read.len(), 1);
}

#[test]
#[cfg(unix)]
fn a_fifo_named_as_a_data_file_is_refused_unopened() {
    let dir = scratch("fifo");
    let fifo = dir.join("images.idx");
    let c = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: a valid, NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let source = format!(
        "idx(\"{}\", labels: \"{}\", classes: 3)",
        fifo.display(),
        data("labels.idx")
    );
    let (codes, _) = check("fifo-check", &experiment(&source, ""));
    // A warning, as a missing file: `kiln run` refuses it (K0502).
    assert_eq!(codes, ["K0414"]);
}

#[test]
fn the_files_are_read_and_reported_beside_every_other_problem() {
    // Colour images stored channels last for a model that takes them channels first, and a
    // typo in an unrelated setting: both are reported in one pass.
    let source = format!(
        "npy(\"{}\", targets: \"{}\", classes: 3)",
        data("images-hwc.npy"),
        data("targets.npy")
    );
    let text = format!(
        "experiment \"d\" {{\n  data {{\n    source {source}\n    batch 2\n  }}\n  model {{\n    input [3, 2, 2]\n    flatten\n    fc: linear(3)\n  }}\n  optimzer adam(lr: 1e-3)\n  train {{\n    epochs 1\n    loss cross_entropy\n  }}\n}}\n"
    );
    let (mut codes, _) = check("at-once", &text);
    codes.sort_unstable();
    assert!(codes.contains(&"K0220"), "{codes:?}");
    assert!(codes.contains(&"K0101"), "{codes:?}");
    // A source missing its data file is named while the model has an error of its own.
    let text = experiment(
        &format!(
            "npy(\"{}\", targets: \"{}\", classes: 3)",
            data("input.npy"),
            data("targets.npy")
        ),
        "",
    )
    .replace("fc: linear(3)", "fc: linear(3, bias: maybe)");
    let (codes, _) = check("missing-and-wrong", &text);
    assert!(codes.contains(&"K0414"), "{codes:?}");
    assert!(codes.contains(&"K0119"), "{codes:?}");
}

#[test]
fn one_data_problem_is_blamed_on_its_cause_not_on_normalize() {
    // `input [1, 2, 2]` for three-channel images: the input disagrees with the data, and
    // `normalize` (three values, one per channel of the data) is not blamed for it.
    let source = format!(
        "npy(\"{}\", targets: \"{}\", classes: 3, layout: channels_last)",
        data("images-hwc.npy"),
        data("targets.npy")
    );
    let text = format!(
        "experiment \"d\" {{\n  data {{\n    source {source}\n    normalize(mean: [0.5, 0.5, 0.5], std: [0.2, 0.2, 0.2])\n    batch 2\n  }}\n  model {{\n    input [1, 2, 2]\n    flatten\n    fc: linear(3)\n  }}\n  optimizer adam(lr: 1e-3)\n  train {{\n    epochs 1\n    loss cross_entropy\n  }}\n}}\n"
    );
    let (codes, _) = check("normalize-blame", &text);
    assert_eq!(codes, ["K0220"]);
}
