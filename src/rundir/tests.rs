//! Round trips of every record, the ranking, and failures that must be errors.

use std::path::PathBuf;

use super::*;

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-rundir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn epoch(e: u64, loss: f64) -> EpochRecord {
    EpochRecord {
        epoch: e,
        step: 125 * e,
        lr: 1e-3,
        train_loss: loss,
        train_accuracy: Some(0.9),
        seconds: 1.25,
        samples_per_s: 5300.0,
        phase: None,
    }
}

fn eval(e: u64, top_k: Option<(u64, f64)>) -> EvalRecord {
    let top_k = top_k.map(|(k, accuracy)| TopK { k, accuracy });
    EvalRecord {
        epoch: e,
        step: 125 * e,
        loss: 0.25,
        accuracy: Some(0.93),
        top_k,
        mae: None,
        rmse: None,
        r2: None,
        phase: None,
    }
}

fn outcome(val: Option<(f64, Option<f64>)>, train_loss: f64) -> Outcome {
    Outcome {
        steps: 375,
        epochs: 3,
        train_loss,
        val: val.map(|(loss, accuracy)| Eval {
            loss,
            accuracy,
            top_k: None,
            ..Eval::default()
        }),
        ..Outcome::default()
    }
}

fn report() -> Report {
    Report {
        experiment: "mnist_mlp".into(),
        trial: vec![("lr".into(), "0.01".into()), ("width".into(), "128".into())],
        kiln: "0.1.0".into(),
        torch: "2.5.1".into(),
        devices: vec!["cpu".into()],
        config_hash: "0123456789abcdef".into(),
        params: 101_770,
        outcome: Outcome {
            steps: 375,
            epochs: 3,
            train_loss: 0.125,
            val: Some(Eval {
                loss: 0.25,
                accuracy: Some(0.93),
                top_k: Some(TopK {
                    k: 5,
                    accuracy: 0.99,
                }),
                mae: Some(0.125),
                rmse: Some(0.25),
                r2: Some(-0.5),
            }),
            test: None,
            samples_per_s: 5312.4,
            data_wait: 0.012,
            stopped_early: true,
            phases: vec![
                PhaseRun {
                    name: PhaseKind::Train,
                    round: None,
                    from_step: 0,
                    to_step: 250,
                    stopped_early: true,
                },
                PhaseRun {
                    name: PhaseKind::Finetune,
                    round: None,
                    from_step: 250,
                    to_step: 375,
                    stopped_early: false,
                },
            ],
        },
        wall_seconds: 42.5,
        notes: vec!["`compress` is not applied yet".into()],
        resumed: vec![Segment {
            from_step: 120,
            experiment: "experiment-2.exp".into(),
            changes: vec!["learning rate: 0.1 → 0.05".into()],
            extended: false,
        }],
        compression: Some(Compressed {
            layers: vec![CompressedLayer {
                name: "fc1".into(),
                method: "int8 per_channel".into(),
                sparsity: 0.5,
                shape_before: vec![256, 784],
                shape_after: vec![256, 784],
                bytes_before: 803_840,
                bytes_after: 202_752,
            }],
            bytes_before: 814_120,
            bytes_after: 212_000,
            val: Some(BeforeAfter {
                before: Eval {
                    loss: 0.2,
                    accuracy: Some(0.95),
                    top_k: None,
                    ..Eval::default()
                },
                after: Eval {
                    loss: 0.21,
                    accuracy: Some(0.948),
                    top_k: None,
                    ..Eval::default()
                },
            }),
            test: None,
            steps: Some(BeforeAfter {
                before: 300,
                after: 375,
            }),
            latency: vec![Latency {
                batch: 1,
                before_ms: 0.05,
                after_ms: 0.03,
            }],
        }),
        metrics: vec![
            MetricLine::Train(epoch(1, 0.5)),
            MetricLine::Val(eval(0, Some((5, 0.99)))),
            MetricLine::Val(eval(1, None)),
        ],
        settings: vec![
            ("data.batch".into(), "64".into()),
            ("optimizer".into(), "adam(lr: 1e-3)".into()),
        ],
    }
}

#[test]
fn report_round_trips() {
    let dir = scratch("report");
    let run = RunDir::create(dir.clone()).expect("create");
    let written = report();
    run.write_report(&written).expect("write");
    assert_eq!(read_report(&dir).expect("read"), written);
    assert!(
        !dir.join(".report.yaml.tmp").exists(),
        "temporary file left"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_report_of_another_version_reads_with_defaults() {
    let dir = scratch("older");
    std::fs::write(
        dir.join(REPORT),
        "experiment: old\ntrain_loss: .nan\nsomething_new: 3\n",
    )
    .expect("write");
    let r = read_report(&dir).expect("read");
    assert_eq!(r.experiment, "old");
    assert!(r.outcome.train_loss.is_nan());
    assert_eq!(r.params, 0);
    assert!(r.metrics.is_empty());
    std::fs::write(dir.join(REPORT), "params: [not a number\n").expect("write");
    let e = read_report(&dir).expect_err("malformed");
    assert_eq!(e.op, Op::Parse);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reports_name_their_fields_and_read_the_pairs_of_older_versions() {
    let dir = scratch("named");
    let run = RunDir::create(dir.clone()).expect("create");
    run.write_report(&report()).expect("write");
    let text = std::fs::read_to_string(dir.join(REPORT)).expect("report");
    // A sweep's values are a mapping in sweep order, a top-k accuracy names its parts.
    assert!(
        text.contains("trial:\n  lr: '0.01'\n  width: '128'\n"),
        "{text}"
    );
    assert!(
        text.contains("  top_k:\n    k: 5\n    accuracy: 0.99\n"),
        "{text}"
    );
    // A run without a sweep writes no `trial`.
    let plain = Report {
        trial: Vec::new(),
        ..report()
    };
    run.write_report(&plain).expect("write");
    let text = std::fs::read_to_string(dir.join(REPORT)).expect("report");
    assert!(!text.contains("trial"), "{text}");
    // What older versions wrote: pairs as lists.
    std::fs::write(
        dir.join(REPORT),
        "experiment: old\ntrial:\n- - lr\n  - '0.1'\nval:\n  loss: 0.5\n  accuracy: 0.8\n  top_k:\n  - 3\n  - 0.9\n",
    )
    .expect("write");
    let r = read_report(&dir).expect("read");
    assert_eq!(r.trial, vec![("lr".to_string(), "0.1".to_string())]);
    assert_eq!(
        r.outcome.val.and_then(|v| v.top_k),
        Some(TopK {
            k: 3,
            accuracy: 0.9
        })
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metrics_and_steps_round_trip_and_truncate() {
    let dir = scratch("metrics");
    let mut run = RunDir::create(dir.clone()).expect("create");
    let lines = vec![
        MetricLine::Train(epoch(1, 0.5)),
        MetricLine::Val(eval(1, Some((5, 0.99)))),
        MetricLine::Train(epoch(2, 0.25)),
    ];
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(run.metric(l).expect("append"), i as u64 + 1);
    }
    assert_eq!(run.metrics().expect("read"), lines);
    let text = std::fs::read_to_string(dir.join(METRICS)).expect("metrics");
    assert!(
        text.lines()
            .nth(1)
            .expect("line 2")
            .contains("\"top_5_accuracy\":0.99"),
        "{text}"
    );
    for step in 1..=4 {
        let record = StepRecord {
            step,
            loss: 1.0 / step as f64,
            lr: 0.1,
        };
        run.step(&record).expect("step");
    }
    run.flush_steps().expect("flush");
    let steps: Vec<StepRecord> = std::fs::read_to_string(dir.join(STEPS))
        .expect("steps")
        .lines()
        .map(|l| serde_json::from_str(l).expect("step record"))
        .collect();
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[2].loss, 1.0 / 3.0);

    // A reopened run counts the lines; truncating keeps the head of both files.
    run.write_file(EXPERIMENT, b"experiment")
        .expect("experiment");
    drop(run);
    let mut again = RunDir::resume(dir.clone()).expect("reopen");
    again.truncate(2, 3).expect("truncate");
    assert_eq!(again.metrics().expect("read"), lines[..2]);
    let kept = std::fs::read_to_string(dir.join(STEPS)).expect("steps");
    assert_eq!(kept.lines().count(), 3);
    assert_eq!(again.metric(&lines[2]).expect("append"), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn regression_metrics_are_written_when_measured_and_a_nan_r2_reads_back() {
    let measured = EvalRecord {
        mae: Some(0.5),
        rmse: Some(0.75),
        r2: Some(f64::NAN),
        accuracy: None,
        ..eval(1, None)
    };
    let json = serde_json::to_string(&MetricLine::Val(measured)).expect("encode");
    assert!(
        json.contains("\"mae\":0.5,\"rmse\":0.75,\"r2\":null"),
        "{json}"
    );
    let MetricLine::Val(back) = serde_json::from_str(&json).expect("decode") else {
        panic!("not a validation line: {json}");
    };
    assert_eq!((back.mae, back.rmse), (Some(0.5), Some(0.75)));
    assert!(back.r2.is_some_and(f64::is_nan), "{back:?}");
    let plain = serde_json::to_string(&MetricLine::Val(eval(1, None))).expect("encode");
    assert!(!plain.contains("mae") && !plain.contains("r2"), "{plain}");
    let MetricLine::Val(back) = serde_json::from_str(&plain).expect("decode") else {
        panic!("not a validation line: {plain}");
    };
    assert_eq!((back.mae, back.rmse, back.r2), (None, None, None));
}

#[test]
fn non_finite_values_read_back_as_nan() {
    let line = MetricLine::Train(epoch(1, f64::NAN));
    let json = serde_json::to_string(&line).expect("encode");
    assert!(json.contains("\"train_loss\":null"), "{json}");
    let MetricLine::Train(back) = serde_json::from_str(&json).expect("decode") else {
        panic!("not a training line: {json}");
    };
    assert!(back.train_loss.is_nan());
    let step = StepRecord {
        step: 12,
        loss: f64::INFINITY,
        lr: 100.0,
    };
    let json = serde_json::to_string(&step).expect("encode");
    let back: StepRecord = serde_json::from_str(&json).expect("decode");
    assert!(back.loss.is_nan() && back.lr == 100.0, "{json}");
}

#[test]
fn phases_are_named_in_records_and_old_records_read_without_them() {
    let tag = PhaseTag {
        name: PhaseKind::Finetune,
        round: None,
        epoch: 1,
        epochs: Some(3),
    };
    let train = MetricLine::Train(EpochRecord {
        phase: Some(tag),
        ..epoch(11, 0.5)
    });
    let json = serde_json::to_string(&train).expect("encode");
    assert!(
        json.contains(r#""phase":{"name":"finetune","epoch":1,"epochs":3}"#),
        "{json}"
    );
    assert_eq!(
        serde_json::from_str::<MetricLine>(&json).expect("decode"),
        train
    );
    let round = PhaseTag {
        name: PhaseKind::Round,
        round: Some(2),
        epoch: 4,
        epochs: None,
    };
    let val = MetricLine::Val(EvalRecord {
        phase: Some(round),
        ..eval(11, Some((5, 0.99)))
    });
    let json = serde_json::to_string(&val).expect("encode");
    assert_eq!(
        serde_json::from_str::<MetricLine>(&json).expect("decode"),
        val
    );
    assert_eq!(tag.to_string(), "finetune 1/3");
    assert_eq!(round.to_string(), "round 2 epoch 4");
    // A line of the written training, or one written before phases were recorded, has none.
    let plain = serde_json::to_string(&MetricLine::Train(epoch(1, 0.5))).expect("encode");
    assert!(!plain.contains("phase"), "{plain}");
    let old = r#"{"split":"val","epoch":2,"step":250,"loss":0.5,"top_5_accuracy":0.9}"#;
    let MetricLine::Val(back) = serde_json::from_str(old).expect("decode") else {
        panic!("not a validation line");
    };
    assert_eq!(
        (back.phase, back.top_k),
        (
            None,
            Some(TopK {
                k: 5,
                accuracy: 0.9
            })
        )
    );
}

#[test]
fn unknown_and_cut_lines_are_skipped() {
    let dir = scratch("cut");
    let good = serde_json::to_string(&MetricLine::Train(epoch(1, 0.5))).expect("encode");
    std::fs::write(
        dir.join(METRICS),
        format!("{good}\n{{\"split\":\"test\",\"epoch\":1}}\n{{\"split\":\"tra"),
    )
    .expect("write");
    let lines = read_metrics(&dir).expect("read").expect("there");
    assert_eq!(lines, vec![MetricLine::Train(epoch(1, 0.5))]);
    assert_eq!(read_metrics(&dir.join("nope")).expect("read"), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn checkpoint_index_round_trips_and_prunes() {
    let dir = scratch("checkpoints");
    let side = |step| Sidecar {
        kiln: "0.1.0".into(),
        fingerprint: Fingerprint {
            layers: vec!["fc linear [10] 7850".into()],
            computes: vec![("seed".into(), "1".into())],
            settings: vec![("learning rate".into(), "0.1".into())],
        },
        position: Position {
            step,
            epoch: 1,
            batch_in_epoch: 3,
            epoch_loss_sum: 12.5,
            best: Some(0.25),
            metrics_lines: 2,
            ..Position::default()
        },
        tensors: String::new(),
        tensors_bytes: 1,
        tensors_crc32: format!("{:08x}", crc32fast::hash(b"t")),
        history: vec![Segment {
            from_step: 0,
            experiment: EXPERIMENT.into(),
            changes: vec![],
            extended: false,
        }],
    };
    assert_eq!(checkpoint::latest(&dir), None);
    for step in [10, 20, 30] {
        std::fs::write(dir.join(checkpoint::tensors_name(step)), b"t").expect("tensors");
        checkpoint::write_sidecar(&dir, &side(step)).expect("sidecar");
    }
    checkpoint::prune(&dir, 2);
    let names: Vec<String> = checkpoint::list(&dir)
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["step-000000020.yaml", "step-000000030.yaml"]);
    assert!(!dir.join("step-000000010.safetensors").exists());
    let (read, tensors) = checkpoint::latest(&dir).expect("there");
    let mut want = side(30);
    want.tensors = "step-000000030.safetensors".into();
    assert_eq!(read, want);
    assert_eq!(tensors, dir.join("step-000000030.safetensors"));
    // The fingerprint's entries are a mapping; the `[what, value]` lists of older versions read.
    let path = dir.join("step-000000030.yaml");
    let text = std::fs::read_to_string(&path).expect("sidecar");
    assert!(text.contains("  computes:\n    seed: '1'\n"), "{text}");
    std::fs::write(
        &path,
        text.replace(
            "  computes:\n    seed: '1'\n",
            "  computes:\n  - - seed\n    - '1'\n",
        ),
    )
    .expect("older sidecar");
    let read: Sidecar = read_yaml(&path).expect("an older sidecar reads");
    assert_eq!(read.fingerprint, want.fingerprint);

    // A damaged newest checkpoint (other bytes, or fewer) is passed over for an older intact one.
    std::fs::write(dir.join(checkpoint::tensors_name(30)), b"x").expect("flip");
    let found: Vec<_> = checkpoint::newest_first(&dir).collect();
    let damaged = found[0].as_ref().expect_err("damaged");
    assert!(damaged.reason.contains("CRC-32"), "{}", damaged.reason);
    assert_eq!(checkpoint::latest(&dir).expect("older").0.position.step, 20);
    std::fs::write(dir.join(checkpoint::tensors_name(20)), b"").expect("truncate");
    let found: Vec<_> = checkpoint::newest_first(&dir).collect();
    assert!(found[1]
        .as_ref()
        .expect_err("short")
        .reason
        .contains("0 bytes"));
    assert_eq!(checkpoint::latest(&dir), None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A value serde cannot encode.
struct Unencodable;

impl serde::Serialize for Unencodable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value cannot be encoded"))
    }
}

#[test]
fn a_serialisation_failure_is_an_error_and_writes_nothing() {
    let dir = scratch("encode");
    let e = write_yaml(&dir, REPORT, &Unencodable).expect_err("cannot encode");
    assert_eq!(e.op, Op::Encode);
    assert_eq!(e.path, dir.join(REPORT));
    assert!(e.to_string().contains("cannot be encoded"), "{e}");
    assert!(!dir.join(REPORT).exists(), "an empty report was written");
    assert!(!dir.join(".report.yaml.tmp").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn write_failures_name_the_file() {
    let dir = scratch("unwritable");
    // A directory in the way of the file makes the rename fail, even as root.
    let run = RunDir::create(dir.clone()).expect("create");
    std::fs::create_dir_all(dir.join(REPORT).join("x")).expect("dir");
    let e = run.write_report(&report()).expect_err("cannot write");
    assert_eq!(e.op, Op::Rename);
    assert!(e.to_string().starts_with("cannot rename"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranking_puts_the_best_first_and_nan_last() {
    // Validation accuracy, higher first.
    let mut trials = vec![
        ("a", Some(outcome(Some((0.3, Some(0.90))), 0.2))),
        ("nan", Some(outcome(Some((0.1, Some(f64::NAN))), 0.1))),
        ("b", Some(outcome(Some((0.4, Some(0.95))), 0.3))),
        ("none", None),
        ("c", Some(outcome(Some((0.2, Some(0.90))), 0.1))),
    ];
    rank(&mut trials, |t| t.1.as_ref());
    let order: Vec<&str> = trials.iter().map(|t| t.0).collect();
    // Ties keep their order; NaN and no report come last, in their order.
    assert_eq!(order, ["b", "a", "c", "nan", "none"]);

    // Validation loss, lower first, when there is no accuracy; a negative NaN (as x86 makes)
    // is still last.
    let mut trials = vec![
        ("nan", Some(outcome(Some((-f64::NAN, None)), 0.1))),
        ("high", Some(outcome(Some((0.5, None)), 0.1))),
        ("low", Some(outcome(Some((0.2, None)), 0.9))),
    ];
    rank(&mut trials, |t| t.1.as_ref());
    let order: Vec<&str> = trials.iter().map(|t| t.0).collect();
    assert_eq!(order, ["low", "high", "nan"]);

    // Training loss without a validation split.
    let mut trials = vec![
        ("nan", Some(outcome(None, f64::NAN))),
        ("high", Some(outcome(None, 0.5))),
        ("low", Some(outcome(None, 0.2))),
    ];
    rank(&mut trials, |t| t.1.as_ref());
    let order: Vec<&str> = trials.iter().map(|t| t.0).collect();
    assert_eq!(order, ["low", "high", "nan"]);
    assert_eq!(rank_key(None), None);
    assert_eq!(
        rank_key(Some(&outcome(Some((0.2, Some(0.9))), 0.1))),
        Some(-0.9)
    );
}

#[test]
fn a_run_directory_has_one_writer_and_is_never_reused() {
    let parent = scratch("exclusive");
    // Directories made in the same second get distinct names.
    let a = create_unique(&parent, "20261130-120000").expect("first");
    let b = create_unique(&parent, "20261130-120000").expect("second");
    assert_ne!(a, b);
    assert!(b.ends_with("20261130-120000-2"), "{}", b.display());

    let run = RunDir::create(a.clone()).expect("create");
    match RunDir::resume(a.clone()) {
        Err(OpenError::NotARun(_)) => {}
        other => panic!("expected not a run yet: {other:?}"),
    }
    // A second writer is refused while the first holds the lock, naming it.
    run.write_file(EXPERIMENT, b"experiment")
        .expect("experiment");
    match RunDir::resume(a.clone()) {
        Err(OpenError::InUse(_, Some(holder))) => assert_eq!(holder.pid, std::process::id()),
        other => panic!("expected in use: {other:?}"),
    }
    match RunDir::create(a.clone()) {
        Err(OpenError::Exists(_)) => {}
        other => panic!("expected exists: {other:?}"),
    }
    // Letting go in order leaves no stale lock.
    drop(run);
    let again = RunDir::resume(a.clone()).expect("resume");
    assert_eq!(again.stale(), None);
    drop(again);

    // A lock file that names a holder while nobody holds it was left by a dead process; the
    // temporary files of interrupted writes are removed.
    let dead = Holder {
        pid: 999_999,
        host: "elsewhere".into(),
        since: "20261130-120000".into(),
    };
    std::fs::write(a.join(LOCK), serde_yaml::to_string(&dead).expect("yaml")).expect("lock");
    std::fs::create_dir_all(a.join(CHECKPOINTS)).expect("checkpoints");
    let tmp = a.join(CHECKPOINTS).join(".step-000000004.safetensors.tmp");
    std::fs::write(&tmp, b"half").expect("tmp");
    std::fs::write(a.join(".metrics.jsonl.tmp"), b"half").expect("tmp");
    let resumed = RunDir::resume(a.clone()).expect("resume a stale lock");
    assert_eq!(resumed.stale(), Some(&dead));
    assert_eq!(resumed.removed().len(), 2, "{:?}", resumed.removed());
    assert!(!tmp.exists() && !a.join(".metrics.jsonl.tmp").exists());
    let _ = std::fs::remove_dir_all(&parent);
}

#[test]
fn every_version_of_the_experiment_is_kept() {
    let dir = scratch("versions");
    let run = RunDir::create(dir.clone()).expect("create");
    assert_eq!(run.record_version("a").expect("v1"), EXPERIMENT);
    assert_eq!(run.record_version("a").expect("same"), EXPERIMENT);
    assert_eq!(run.record_version("b").expect("v2"), "experiment-2.exp");
    assert_eq!(run.record_version("b").expect("same"), "experiment-2.exp");
    assert_eq!(run.record_version("a").expect("v3"), "experiment-3.exp");
    assert_eq!(
        versions(&dir),
        [EXPERIMENT, "experiment-2.exp", "experiment-3.exp"]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(EXPERIMENT)).expect("v1"),
        "a"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_extended_runs_earlier_reports_are_set_aside_and_kept() {
    let dir = scratch("reports");
    let run = RunDir::create(dir.clone()).expect("create");
    assert_eq!(run.set_aside_report().expect("none yet"), None);
    let first = report();
    run.write_report(&first).expect("first end");
    assert!(is_finished(&dir));
    assert_eq!(
        run.set_aside_report().expect("set aside").as_deref(),
        Some("report-1.yaml")
    );
    assert!(
        !is_finished(&dir),
        "an extension in progress is not finished"
    );
    let second = Report {
        experiment: "second".into(),
        ..report()
    };
    run.write_report(&second).expect("second end");
    assert_eq!(
        run.set_aside_report().expect("set aside").as_deref(),
        Some("report-2.yaml")
    );
    let read = |name: &str| read_yaml::<Report>(&dir.join(name)).expect(name);
    assert_eq!(read("report-1.yaml"), first);
    assert_eq!(read("report-2.yaml"), second);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `source.yaml` records any experiment path, one that is not UTF-8 included, and reads it back
/// byte for byte; a UTF-8 path stays a plain string.
#[test]
fn a_source_of_any_path_round_trips() {
    use std::os::unix::ffi::OsStrExt;
    for raw in [&b"/runs/a b/exp\xc3\xa9.exp"[..], b"/runs/t\xff\xfe.exp"] {
        let file = PathBuf::from(std::ffi::OsStr::from_bytes(raw));
        let source = Source {
            file: file.clone(),
            trial: Some(2),
        };
        let text = serde_yaml::to_string(&source).expect("YAML");
        assert_eq!(text.contains("bytes"), file.to_str().is_none(), "{text}");
        let back: Source = serde_yaml::from_str(&text).expect("read back");
        assert_eq!(back, source);
    }
}

/// Every f64 of `metrics.jsonl` reads back exactly, as the report copies them: the two values
/// the issue saw on an AVX512 machine are ones that JSON parsing without `float_roundtrip` reads
/// one unit in the last place off (`…673` as `…671`), besides ordinary and extreme ones.
#[test]
fn metric_values_read_back_bit_for_bit() {
    let dir = scratch("exact");
    let mut run = RunDir::create(dir.clone()).expect("create");
    let values = [
        1.109_724_065_992_567_3,
        1.194_962_908_426_920_7,
        0.1 + 0.2,
        1.0 / 3.0,
        f64::MIN_POSITIVE,
        5e-324,
        f64::MAX,
        123_456_789.012_345_67,
    ];
    let lines: Vec<MetricLine> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            MetricLine::Val(EvalRecord {
                loss: v,
                accuracy: Some(v),
                ..eval(i as u64 + 1, None)
            })
        })
        .collect();
    for l in &lines {
        run.metric(l).expect("append");
    }
    for (back, sent) in run.metrics().expect("read").iter().zip(&lines) {
        let (MetricLine::Val(b), MetricLine::Val(s)) = (back, sent) else {
            panic!("not validation lines");
        };
        assert_eq!(
            b.loss.to_bits(),
            s.loss.to_bits(),
            "{} read back as {}",
            s.loss,
            b.loss
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
