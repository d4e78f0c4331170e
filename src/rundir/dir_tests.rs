//! The run directory's files: the checkpoint index, failures that must be errors, the ranking,
//! one writer per directory, the versions of the experiment and the reports an extension sets
//! aside.

use std::path::PathBuf;

use super::tests::{outcome, report};
use super::*;
use crate::toolkit::scratch;

#[test]
fn checkpoint_index_round_trips_and_prunes() {
    let dir = scratch("rundir-checkpoints");
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
    let dir = scratch("rundir-encode");
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
    let dir = scratch("rundir-unwritable");
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
    let parent = scratch("rundir-exclusive");
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
    let dir = scratch("rundir-versions");
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
    let dir = scratch("rundir-reports");
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
