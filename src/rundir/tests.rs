//! Round trips of every record and its values; the helpers the run directory's tests share.

use super::*;
use crate::toolkit::scratch;

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

pub(super) fn outcome(val: Option<(f64, Option<f64>)>, train_loss: f64) -> Outcome {
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

pub(super) fn report() -> Report {
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
            max_steps_reached: false,
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
            compute: Some(Compute {
                device: "cuda:0".into(),
                step_flops: 9_896_007_303_168,
                tflop_per_s: 493.5,
                gpu_busy: Some(0.97),
                gpu_busy_samples: Some(41),
                peak_memory_bytes: Some(4_497_342_464),
                plan_memory_bytes: Some(6_174_015_488),
                note: None,
            }),
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
    let dir = scratch("rundir-report");
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
    let dir = scratch("rundir-older");
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
    let dir = scratch("rundir-named");
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
    let dir = scratch("rundir-metrics");
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
    let dir = scratch("rundir-cut");
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

/// Every f64 of `metrics.jsonl` reads back exactly, as the report copies them: the two values
/// the issue saw on an AVX512 machine are ones that JSON parsing without `float_roundtrip` reads
/// one unit in the last place off (`…673` as `…671`), besides ordinary and extreme ones.
#[test]
fn metric_values_read_back_bit_for_bit() {
    let dir = scratch("rundir-exact");
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
