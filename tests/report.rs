//! `kiln report` and `kiln compare` on run directories written by hand.

use std::path::Path;
use std::process::{Command, Output};

mod support;
use support::scratch;

fn kiln(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("kiln starts")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What a fake run looks like.
struct Fake<'a> {
    experiment: &'a str,
    trial: &'a [(&'a str, &'a str)],
    epochs: u64,
    /// Scales the losses, so runs differ.
    quality: f64,
    accuracy: bool,
    exp_text: Option<&'a str>,
}

impl Default for Fake<'_> {
    fn default() -> Self {
        Fake {
            experiment: "mnist_mlp",
            trial: &[],
            epochs: 3,
            quality: 1.0,
            accuracy: true,
            exp_text: Some(EXP),
        }
    }
}

const EXP: &str = "experiment mnist_mlp {\n  data: mnist(batch: 128)\n  optimizer: adam(lr: 0.001)\n  train: train(epochs: 3)\n}\n";

fn train_loss(f: &Fake, epoch: u64) -> f64 {
    f.quality * 0.8 / epoch as f64
}

fn val_loss(f: &Fake, epoch: u64) -> f64 {
    f.quality * 0.9 / epoch as f64
}

fn val_accuracy(f: &Fake, epoch: u64) -> f64 {
    1.0 - val_loss(f, epoch) / 4.0
}

/// Writes `report.yaml`, `metrics.jsonl` and (maybe) `experiment.exp` as `kiln-runtime` would.
fn write_run(dir: &Path, f: &Fake) {
    std::fs::create_dir_all(dir).expect("run dir");
    let mut metrics = String::new();
    for e in 1..=f.epochs {
        let acc = if f.accuracy {
            format!("{}", 1.0 - train_loss(f, e) / 4.0)
        } else {
            "null".into()
        };
        metrics += &format!(
            "{{\"split\":\"train\",\"epoch\":{e},\"step\":{},\"lr\":0.001,\"train_loss\":{},\"train_accuracy\":{acc},\"seconds\":1.25,\"samples_per_s\":5300.0}}\n",
            125 * e,
            train_loss(f, e)
        );
        let val_acc = if f.accuracy {
            format!(",\"accuracy\":{}", val_accuracy(f, e))
        } else {
            String::new()
        };
        metrics += &format!(
            "{{\"split\":\"val\",\"epoch\":{e},\"step\":{},\"loss\":{}{val_acc}}}\n",
            125 * e,
            val_loss(f, e)
        );
    }
    std::fs::write(dir.join("metrics.jsonl"), &metrics).expect("metrics");
    let trial: String = if f.trial.is_empty() {
        "trial: []\n".into()
    } else {
        let mut t = String::from("trial:\n");
        for (k, v) in f.trial {
            t += &format!("- - {k}\n  - '{v}'\n");
        }
        t
    };
    let last = f.epochs;
    let eval = |loss: f64, acc: f64| {
        if f.accuracy {
            format!("  loss: {loss}\n  accuracy: {acc}\n  top_k: null\n")
        } else {
            format!("  loss: {loss}\n  accuracy: null\n  top_k: null\n")
        }
    };
    let report = format!(
        "experiment: {}\n{trial}kiln: 0.1.0\ntorch: 2.5.1\ndevices:\n- cpu\nconfig_hash: 0123456789abcdef\nparams: 101770\nsteps: {}\nepochs: {last}\ntrain_loss: {}\nval:\n{}test:\n{}samples_per_s: 5312.4\nwall_seconds: {}\ndata_wait_fraction: 0.012\nstopped_early: false\nmetrics: []\n",
        f.experiment,
        125 * last,
        train_loss(f, last),
        eval(val_loss(f, last), val_accuracy(f, last)),
        eval(val_loss(f, last) * 1.05, val_accuracy(f, last) - 0.01),
        42.0 * f.quality,
    );
    std::fs::write(dir.join("report.yaml"), report).expect("report");
    if let Some(text) = f.exp_text {
        std::fs::write(dir.join("experiment.exp"), text).expect("experiment");
    }
}

#[test]
fn report_prints_the_key_figures() {
    let root = scratch("single");
    let dir = root.join("runs/mnist_mlp/20261129-120000");
    write_run(&dir, &Fake::default());
    let out = kiln(&[Path::new("report"), &dir]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for needle in [
        "mnist_mlp",
        "cpu",
        "kiln 0.1.0, libtorch 2.5.1",
        "101,770",
        "375 steps, 3 epochs",
        "train loss",
        "0.2667",          // final train loss 0.8 / 3
        "loss 0.3000",     // val loss 0.9 / 3
        "accuracy 92.50%", // val accuracy
        "loss 0.3150",     // test loss
        "accuracy 91.50%", // test accuracy
        "5,312 samples/s",
        "42.0s",
        "1.2% of step time",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
    }
    // The per-epoch table: a header and one row per epoch.
    assert!(
        text.contains("epoch") && text.contains("val loss") && text.contains("samples/s"),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].contains("0.8000") && rows[0].contains("80.00%"),
        "{}",
        rows[0]
    );
    assert!(rows[2].contains("375"), "{}", rows[2]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn every_value_is_shown_at_the_step_it_was_computed() {
    // 40 steps an epoch, a validation every 50 steps: the one at step 50 was shown in the row of
    // epoch 2, beside the training figures of step 80.
    let root = scratch("steps");
    let dir = root.clone();
    write_run(&dir, &Fake::default());
    let train = |e: u64, loss: f64| {
        format!(
            "{{\"split\":\"train\",\"epoch\":{e},\"step\":{},\"lr\":0.001,\"train_loss\":{loss},\"train_accuracy\":0.5,\"seconds\":1.0,\"samples_per_s\":100.0}}\n",
            40 * e
        )
    };
    let val = |e: u64, step: u64, loss: f64| {
        format!("{{\"split\":\"val\",\"epoch\":{e},\"step\":{step},\"loss\":{loss},\"accuracy\":0.5}}\n")
    };
    let metrics = [
        train(1, 0.91),
        val(2, 50, 0.777),
        train(2, 0.62),
        val(2, 80, 0.555),
    ]
    .concat();
    std::fs::write(dir.join("metrics.jsonl"), metrics).expect("metrics");
    let text = stdout(&kiln(&[Path::new("report"), &dir]));
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().collect())
        .collect();
    // epoch, step, lr, train loss, train acc, val loss, val acc, seconds, samples/s.
    assert_eq!(rows.len(), 3, "{text}");
    assert_eq!(
        rows[0][..6],
        ["1", "40", "0.001", "0.9100", "50.00%", "-"],
        "{text}"
    );
    assert_eq!(rows[1][..6], ["2", "50", "-", "-", "-", "0.7770"], "{text}");
    assert_eq!(
        rows[2][..6],
        ["2", "80", "0.001", "0.6200", "50.00%", "0.5550"],
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn report_of_a_regression_run_has_no_accuracy() {
    let root = scratch("regression");
    let dir = root.clone();
    write_run(
        &dir,
        &Fake {
            accuracy: false,
            ..Fake::default()
        },
    );
    let out = kiln(&[Path::new("report"), &dir]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("loss 0.3000"), "{text}");
    assert!(
        !text.contains("accuracy") && !text.contains("acc "),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn long_runs_elide_the_middle_epochs_unless_all() {
    let root = scratch("long");
    let dir = root.clone();
    write_run(
        &dir,
        &Fake {
            epochs: 40,
            ..Fake::default()
        },
    );
    let short = stdout(&kiln(&[Path::new("report"), &dir]));
    assert!(
        short.contains("… 16 more rows (--all shows them)"),
        "{short}"
    );
    let all = stdout(&kiln(&[Path::new("report"), &dir, Path::new("--all")]));
    assert!(!all.contains("more rows"), "{all}");
    let rows = all
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert_eq!(rows, 40, "{all}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_directory_without_a_report_is_a_clear_error() {
    let root = scratch("missing");
    let out = kiln(&[Path::new("report"), &root]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("has no report.yaml"), "{err}");
    assert!(stdout(&out).is_empty());

    // An unfinished run says so.
    let unfinished = root.join("unfinished");
    std::fs::create_dir_all(&unfinished).expect("dir");
    std::fs::write(unfinished.join("metrics.jsonl"), "").expect("metrics");
    let out = kiln(&[Path::new("report"), &unfinished]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("did not finish"), "{}", stderr(&out));

    // The experiment's directory points at its latest run.
    let exp = root.join("runs/mnist_mlp");
    write_run(&exp.join("20260101-000000"), &Fake::default());
    write_run(&exp.join("20260102-000000"), &Fake::default());
    let out = kiln(&[Path::new("report"), &exp]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("2 runs") && err.contains("20260102-000000"),
        "{err}"
    );

    // Nothing there at all.
    let out = kiln(&[Path::new("report"), &root.join("nope")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));

    // A malformed report.
    let bad = root.join("bad");
    std::fs::create_dir_all(&bad).expect("dir");
    std::fs::write(bad.join("report.yaml"), "params: [not a number\n").expect("report");
    let out = kiln(&[Path::new("report"), &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is not a Kiln report"),
        "{}",
        stderr(&out)
    );

    // compare too.
    let good = root.join("runs/mnist_mlp/20260101-000000");
    let out = kiln(&[Path::new("compare"), &good, &root]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("has no report.yaml"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_sweep_is_a_ranked_table_of_its_trials() {
    let root = scratch("sweep");
    let sweep = root.join("runs/mnist_mlp_lr_sweep/20261129-120000");
    let trials = [
        ("0.1", 1.6),
        ("0.01", 0.8), // the best
        ("0.001", 1.2),
    ];
    for (i, (lr, quality)) in trials.iter().enumerate() {
        write_run(
            &sweep.join(format!("trial-{:03}", i + 1)),
            &Fake {
                experiment: "mnist_mlp_lr_sweep",
                trial: &[("lr", lr)],
                quality: *quality,
                ..Fake::default()
            },
        );
    }
    // A trial that failed has no report.
    std::fs::create_dir_all(sweep.join("trial-004")).expect("dir");
    let out = kiln(&[Path::new("report"), &sweep]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("mnist_mlp_lr_sweep"), "{text}");
    assert!(
        text.contains("3 finished, 1 without a report, ranked by validation accuracy"),
        "{text}"
    );
    let ranked: Vec<&str> = text.lines().filter(|l| l.contains("lr=")).collect();
    assert_eq!(ranked.len(), 3, "{text}");
    assert!(
        ranked[0].starts_with('1')
            && ranked[0].contains("lr=0.01 ")
            && ranked[0].contains("trial-002"),
        "{text}"
    );
    assert!(
        ranked[1].contains("lr=0.001") && ranked[1].contains("trial-003"),
        "{text}"
    );
    assert!(
        ranked[2].contains("lr=0.1") && ranked[2].contains("trial-001"),
        "{text}"
    );
    assert!(
        ranked[0].contains("0.2400") && ranked[0].contains("94.00%"),
        "{}",
        ranked[0]
    );
    assert!(text.contains("trial-004: no report.yaml"), "{text}");
    assert!(text.contains("best: `kiln report"), "{text}");

    // A sweep cannot be one side of a comparison.
    let out = kiln(&[Path::new("compare"), &sweep, &sweep.join("trial-001")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is a sweep of 4 trials"),
        "{}",
        stderr(&out)
    );

    // Every trial failed.
    let failed = scratch("sweep-failed");
    std::fs::create_dir_all(failed.join("trial-001")).expect("dir");
    let out = kiln(&[Path::new("report"), &failed]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no trial finished"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&failed);
}

#[test]
fn compare_shows_both_runs_and_their_differences() {
    let root = scratch("compare");
    let a = root.join("a");
    let b = root.join("b");
    write_run(&a, &Fake::default());
    let exp_b = EXP.replace("lr: 0.001", "lr: 0.01");
    write_run(
        &b,
        &Fake {
            quality: 0.5,
            epochs: 4,
            exp_text: Some(&exp_b),
            ..Fake::default()
        },
    );
    let out = kiln(&[Path::new("compare"), &a, &b]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{text}"))
            .to_string()
    };
    // val loss: A 0.9/3 = 0.3, B 0.45/4 = 0.1125.
    let val = line("val loss");
    assert!(
        val.contains("0.3000") && val.contains("0.1125") && val.contains("-0.1875 (-62.5%)"),
        "{val}"
    );
    // val accuracy: A 92.50%, B 97.19%.
    let acc = line("val accuracy");
    assert!(
        acc.contains("92.50%") && acc.contains("97.19%") && acc.contains("+4.69 pts"),
        "{acc}"
    );
    let steps = line("steps");
    assert!(
        steps.contains("375") && steps.contains("500") && steps.contains("+125"),
        "{steps}"
    );
    assert!(line("experiment").contains("same"), "{text}");
    assert!(line("wall time").contains("-21.0s (-50.0%)"), "{text}");
    // The lines of the experiment that differ, with their line numbers.
    assert!(
        text.contains("experiment.exp differs (2 changed lines"),
        "{text}"
    );
    assert!(text.contains("3 -   optimizer: adam(lr: 0.001)"), "{text}");
    assert!(text.contains("3 +   optimizer: adam(lr: 0.01)"), "{text}");
    assert!(!text.contains("- data:"), "{text}");
    // Step by step, side by side; step 500 (epoch 4) only in B.
    assert!(
        text.contains("A train loss") && text.contains("B val loss"),
        "{text}"
    );
    let epoch4 = text
        .lines()
        .find(|l| l.starts_with("500 "))
        .unwrap_or_else(|| panic!("no step 500 in:\n{text}"));
    assert!(
        epoch4.contains(" 4 ") && epoch4.contains('-') && epoch4.contains("0.1000"),
        "{epoch4}"
    );

    // Identical experiments, and runs without experiment.exp.
    let c = root.join("c");
    write_run(&c, &Fake::default());
    let text = stdout(&kiln(&[Path::new("compare"), &a, &c]));
    assert!(text.contains("experiment.exp: identical"), "{text}");
    let d = root.join("d");
    write_run(
        &d,
        &Fake {
            exp_text: None,
            ..Fake::default()
        },
    );
    let text = stdout(&kiln(&[Path::new("compare"), &a, &d]));
    assert!(text.contains("experiment.exp: only in A"), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn compare_accepts_report_files_and_trials() {
    let root = scratch("compare-trials");
    for (i, lr) in ["0.1", "0.01"].iter().enumerate() {
        write_run(
            &root.join(format!("trial-{:03}", i + 1)),
            &Fake {
                trial: &[("lr", lr)],
                quality: 1.0 + i as f64,
                ..Fake::default()
            },
        );
    }
    let out = kiln(&[
        Path::new("compare"),
        &root.join("trial-001/report.yaml"),
        &root.join("trial-002"),
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let trial = text
        .lines()
        .find(|l| l.starts_with("trial"))
        .unwrap_or_else(|| panic!("no trial line in:\n{text}"));
    assert!(
        trial.contains("lr=0.1") && trial.contains("lr=0.01") && trial.contains("differs"),
        "{trial}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Writes a trial through `kiln::rundir`, the writer `kiln-runtime` uses.
fn write_typed(dir: &Path, lr: &str, val_loss: f64, accuracy: f64) {
    use kiln::rundir::{EpochRecord, Eval, EvalRecord, MetricLine, Outcome, Report, RunDir};
    let mut run = RunDir::create(dir.to_path_buf()).expect("run dir");
    let train = EpochRecord {
        epoch: 1,
        step: 100,
        lr: 0.01,
        train_loss: 0.5,
        train_accuracy: Some(0.8),
        seconds: 2.0,
        samples_per_s: 1000.0,
        phase: None,
    };
    run.metric(&MetricLine::Train(train)).expect("metric");
    let val = EvalRecord {
        epoch: 1,
        step: 100,
        loss: val_loss,
        accuracy: Some(accuracy),
        top_k: None,
        mae: None,
        rmse: None,
        r2: None,
        phase: None,
    };
    run.metric(&MetricLine::Val(val)).expect("metric");
    let report = Report {
        experiment: "typed".into(),
        trial: vec![("lr".into(), lr.into())],
        params: 10,
        outcome: Outcome {
            steps: 100,
            epochs: 1,
            train_loss: 0.5,
            val: Some(Eval {
                loss: val_loss,
                accuracy: Some(accuracy),
                top_k: None,
                ..Eval::default()
            }),
            ..Outcome::default()
        },
        metrics: run.metrics().expect("metrics"),
        ..Report::default()
    };
    run.write_report(&report).expect("report");
}

#[test]
fn runs_written_by_the_typed_writer_read_back_and_nan_ranks_last() {
    let root = scratch("typed");
    write_typed(&root.join("trial-001"), "1", f64::NAN, f64::NAN);
    write_typed(&root.join("trial-002"), "0.1", 0.3, 0.9);
    write_typed(&root.join("trial-003"), "0.01", 0.2, 0.95);
    let out = kiln(&[Path::new("report"), &root]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let ranked: Vec<&str> = text.lines().filter(|l| l.contains("lr=")).collect();
    assert_eq!(ranked.len(), 3, "{text}");
    assert!(
        ranked[0].contains("lr=0.01 ") && ranked[0].contains("95.00%"),
        "{text}"
    );
    assert!(ranked[1].contains("lr=0.1 "), "{text}");
    assert!(
        ranked[2].contains("lr=1 ") && ranked[2].contains("NaN"),
        "{text}"
    );

    let out = kiln(&[Path::new("report"), &root.join("trial-003")]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for needle in [
        "typed",
        "lr=0.01",
        "100 steps, 1 epoch",
        "accuracy 95.00%",
        "80.00%",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_compression_table_lines_up_whatever_its_widths() {
    // Layer names over 20 characters, methods over 28 and sizes over 12 pushed the fixed
    // columns out of line.
    use kiln::rundir::{Compressed, CompressedLayer, Outcome, Report, RunDir};
    let root = scratch("compression-table");
    let run = RunDir::create(root.join("run")).expect("run dir");
    let layer = |name: &str, method: &str, before: u64, after: u64| CompressedLayer {
        name: name.into(),
        method: method.into(),
        sparsity: 0.5,
        shape_before: vec![10, 10],
        shape_after: vec![10, 10],
        bytes_before: before,
        bytes_after: after,
    };
    let report = Report {
        experiment: "wide".into(),
        outcome: Outcome {
            steps: 10,
            epochs: 1,
            ..Outcome::default()
        },
        compression: Some(Compressed {
            layers: vec![
                layer(
                    "encoder.attention_block_with_a_long_name.query",
                    "l1_unstructured 50%, after training, then 3 epochs of fine-tuning + int8 per_channel",
                    5_000_000_000_000_000,
                    1,
                ),
                layer("fc", "int8", 400, 100),
            ],
            bytes_before: 5_000_000_000_000_400,
            bytes_after: 101,
            ..Compressed::default()
        }),
        ..Report::default()
    };
    run.write_report(&report).expect("report");
    let text = stdout(&kiln(&[Path::new("report"), &root.join("run")]));
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "compression")
        .skip(1)
        .take(3)
        .collect();
    assert!(lines[0].contains("bytes after"), "{text}");
    // Right-aligned last column: every line ends in the same column; the method column starts
    // in one place.
    let width = lines[0].chars().count();
    assert!(lines.iter().all(|l| l.chars().count() == width), "{text}");
    let method = lines[0].find("method").expect("method column");
    assert_eq!(lines[1].find("l1_unstructured"), Some(method), "{text}");
    assert_eq!(lines[2].find("int8"), Some(method), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}
