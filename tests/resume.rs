//! Run directories and resuming, end to end with real processes and files: a run directory is
//! never overwritten nor written by two processes, a resume that changes what the run computes is
//! refused, damaged checkpoints are passed over, and a resumed run's records are those of an
//! uninterrupted run.

mod support;

use std::path::Path;
use std::process::Stdio;

use support::*;

/// A run of `exp` in one go, into `dir`.
fn whole(exp: &Path, dir: &Path) {
    let o = run(&["run", s(exp), "--quiet", "--run-dir", s(dir)]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `kiln run exp --resume dir`.
fn resume(exp: &Path, dir: &Path) -> std::process::Output {
    run(&["run", s(exp), "--quiet", "--resume", s(dir)])
}

#[test]
fn a_finished_run_is_complete_and_never_overwritten() {
    let dir = scratch("finished");
    // 40 steps, run to the end (a run `--max-steps` stops early goes on when resumed).
    let short = SMALL.replace("steps 400", "steps 40");
    let exp = write(&dir, "small.exp", &short);
    let d = dir.join("run");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&d)]);
    assert!(o.status.success(), "{}", text(&o));
    let before = snapshot(&d);

    // Resuming a finished run at its length says so and changes nothing, even with another
    // experiment (a longer length would extend it: `tests/extend.rs`).
    let o = resume(&exp, &d);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("K0525(run-complete)"), "{t}");
    assert!(t.contains("is complete after 40 steps"), "{t}");
    let other = write(&dir, "other.exp", &short.replace("seed 3", "seed 4"));
    assert_eq!(resume(&other, &d).status.code(), Some(0));
    assert!(snapshot(&d) == before, "a finished run changed on resume");

    // A new run is never written into an existing one.
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&d)]);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0510(run-dir-taken)"), "{t}");
    assert!(t.contains("already holds files"), "{t}");
    assert!(t.contains(&format!("--resume {}", d.display())), "{t}");
    assert!(snapshot(&d) == before, "a finished run changed");
}

#[test]
fn runs_started_at_the_same_moment_get_their_own_directories() {
    let dir = scratch("same-second");
    let exp = write(&dir, "small.exp", SMALL);
    let runs = dir.join("runs");
    let children: Vec<_> = (0..3)
        .map(|_| {
            kiln(&[
                "run",
                s(&exp),
                "--quiet",
                "--max-steps",
                "5",
                "--runs-dir",
                s(&runs),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", text(&o));
    }
    let dirs: Vec<_> = std::fs::read_dir(runs.join("small"))
        .expect("runs")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    for d in &dirs {
        assert_eq!(report(d)["steps"].as_u64(), Some(5), "{}", d.display());
        // Three runs of one experiment on this machine, side by side: the same computation.
        same_computation(metrics(d), metrics(&dirs[0]), &d.display().to_string());
    }
}

#[test]
fn a_run_in_progress_is_refused_and_a_dead_writers_lock_is_reported() {
    let dir = scratch("locked");
    let exp = write(
        &dir,
        "long.exp",
        &SMALL.replace("steps 400", "steps 100000"),
    );
    let d = dir.join("run");
    let mut child = start_runtime(&exp, &d);
    wait_for_checkpoint(&d, 40, &mut child);
    let o = resume(&exp, &d);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0510(run-dir-taken)"), "{t}");
    assert!(
        t.contains(&format!("is being written by process {}", child.id())),
        "{t}"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    // Its lock is stale now: reported, and the run resumes (for 20 more steps).
    let stop = newest_checkpoint(&d).expect("a checkpoint") + 20;
    let o = run(&[
        "run",
        s(&exp),
        "--quiet",
        "--max-steps",
        &stop.to_string(),
        "--resume",
        s(&d),
    ]);
    let t = flat(&text(&o));
    assert!(o.status.success(), "{t}");
    assert!(t.contains("K0513(stale-lock)"), "{t}");
    assert!(t.contains(&format!("process {}", child.id())), "{t}");
    assert_eq!(report(&d)["steps"].as_u64(), Some(stop));
}

#[test]
fn a_resume_that_changes_what_the_run_computes_is_refused() {
    let dir = scratch("changes");
    let long = SMALL.replace("steps 400", "steps 100000");
    let exp = write(&dir, "long.exp", &long);
    let d = dir.join("run");
    killed_run(&exp, &d, 40);
    let at = newest_checkpoint(&d).expect("a checkpoint");
    let cases = [
        ("fc1: linear(64)", "fc1: linear(128)", "layer 1"),
        ("adamw(lr: 3e-3)", "sgd(lr: 3e-3)", "optimizer"),
        ("count: 2000", "count: 2400", "data source"),
        ("seed 3", "seed 4", "seed"),
        ("batch 32", "batch 16", "batch"),
        (
            "loss cross_entropy",
            "loss cross_entropy\n    precision bf16",
            "precision",
        ),
    ];
    for (from, to, what) in cases {
        let changed = write(&dir, "changed.exp", &long.replace(from, to));
        let o = resume(&changed, &d);
        let t = flat(&text(&o));
        assert_eq!(o.status.code(), Some(1), "{what}: {t}");
        assert!(t.contains("K0507(resume-incompatible)"), "{what}: {t}");
        assert!(
            t.contains(&format!("{what}: was")) || t.contains(&format!("{what} differs")),
            "{what}: {t}"
        );
        assert_eq!(newest_checkpoint(&d), Some(at), "{what}: the run moved on");
        if what == "layer 1" {
            assert!(t.contains("changed.exp:11:5]"), "points at the layer: {t}");
            assert!(t.contains("is now `fc1 linear [128] 4224`"), "{t}");
        }
    }

    // A length that ends before the step the run stands at is refused, at the length.
    let shorter = write(
        &dir,
        "shorter.exp",
        &long.replace("steps 100000", "steps 20"),
    );
    let o = resume(&shorter, &d);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0523(shorter-than-trained)"), "{t}");
    assert!(
        t.contains("shorter.exp:20:11]"),
        "points at the length: {t}"
    );
    assert!(
        t.contains(&format!("`20 steps`, is fewer than the {at} steps")),
        "{t}"
    );
    assert!(
        t.contains(&format!("a length of at least {at} steps")),
        "{t}"
    );
    assert_eq!(newest_checkpoint(&d), Some(at), "the run moved on");

    // A new learning rate (and length) is a safe change: accepted and recorded.
    let lr = write(
        &dir,
        "lr.exp",
        &SMALL
            .replace("adamw(lr: 3e-3)", "adamw(lr: 1e-3)")
            .replace("steps 400", "steps 200"),
    );
    let o = resume(&lr, &d);
    assert!(o.status.success(), "{}", text(&o));
    let r = report(&d);
    let resumed = &r["resumed"][0];
    assert_eq!(resumed["from_step"].as_u64(), Some(at));
    assert_eq!(resumed["experiment"].as_str(), Some("experiment-2.exp"));
    let changes = format!("{:?}", resumed["changes"]);
    assert!(
        changes.contains("learning rate: 0.003 → 0.001"),
        "{changes}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("experiment.exp")).expect("v1"),
        long
    );
    assert!(std::fs::read_to_string(d.join("experiment-2.exp"))
        .expect("v2")
        .contains("adamw(lr: 1e-3)"));

    // `kiln compare` shows it against a run that kept the first learning rate.
    let plain = dir.join("plain");
    let same_length = write(&dir, "same.exp", &SMALL.replace("steps 400", "steps 200"));
    whole(&same_length, &plain);
    let o = run(&["compare", s(&plain), s(&d)]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains(&format!(
            "B was resumed at step {at} with experiment-2.exp: learning rate: 0.003 → 0.001"
        )),
        "{t}"
    );
    // The settings as each run ended with them: B's from its second version.
    assert!(
        t.lines().any(|l| l.trim_start().starts_with("optimizer")
            && l.contains("adamw(lr: 3e-3)")
            && l.trim_end().ends_with("adamw(lr: 1e-3)")),
        "{t}"
    );
}

/// Flips one byte in the middle of `path` (inside the tensors' data).
fn flip(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let i = bytes.len() - bytes.len() / 3;
    bytes[i] ^= 0x55;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn damaged_checkpoints_are_passed_over_for_the_newest_intact_one() {
    let dir = scratch("damaged");
    let text_of = SMALL.replace("keep: 2", "keep: 3");
    let exp = write(&dir, "small.exp", &text_of);
    let full = dir.join("whole");
    whole(&exp, &full);
    let d = dir.join("cut");
    killed_run(&exp, &d, 100);
    let newest = newest_checkpoint(&d).expect("checkpoint");
    let ck = |step: u64| d.join("checkpoints").join(format!("step-{step:09}"));
    // The newest checkpoint has a flipped byte, the one before it lost its end.
    flip(&ck(newest).with_extension("safetensors"));
    let second = ck(newest - 20).with_extension("safetensors");
    let bytes = std::fs::read(&second).expect("read");
    std::fs::write(&second, &bytes[..bytes.len() / 2]).expect("truncate");
    let o = resume(&exp, &d);
    let t = flat(&text(&o));
    assert!(o.status.success(), "{t}");
    assert!(t.contains("K0512(checkpoint-damaged)"), "{t}");
    for damaged in [newest, newest - 20] {
        assert!(t.contains(&format!("step-{damaged:09}.yaml")), "{t}");
    }
    assert!(t.contains("CRC-32"), "{t}");
    assert!(
        t.contains(&format!(
            "resuming from the checkpoint of step {} instead",
            newest - 40
        )),
        "{t}"
    );
    // Resumed from an older checkpoint: still the same computation.
    same_computation(metrics(&full), metrics(&d), "metrics");
}

#[test]
fn a_resumed_run_records_what_an_uninterrupted_run_records() {
    let dir = scratch("records");
    // Evaluations within epochs (an epoch is 50 steps) and a kill within an epoch.
    let exp = write(
        &dir,
        "small.exp",
        &SMALL.replace("eval_every 100 steps", "eval_every 30 steps"),
    );
    let full = dir.join("whole");
    whole(&exp, &full);
    let d = dir.join("cut");
    killed_run(&exp, &d, 140);
    let o = resume(&exp, &d);
    assert!(o.status.success(), "{}", text(&o));
    let lines = metrics(&full);
    // A resume restores every tensor, generator and position exactly: the same computation.
    same_computation(&lines, &metrics(&d), "metrics");
    // One epoch numbering, from 1: an evaluation belongs to the epoch it falls in.
    for l in &lines {
        let (epoch, step) = (
            l["epoch"].as_u64().expect("epoch"),
            l["step"].as_u64().expect("step"),
        );
        assert_eq!(epoch, step.div_ceil(50), "{l}");
    }
    let steps = |d: &Path| std::fs::read_to_string(d.join("steps.jsonl")).expect("steps");
    same_computation(steps(&full), steps(&d), "steps.jsonl");
    let (a, b) = (report(&full), report(&d));
    for key in ["steps", "epochs", "train_loss", "val"] {
        same_computation(&a[key], &b[key], key);
    }
    let o = run(&["compare", s(&full), s(&d)]);
    let t = text(&o);
    for row in ["steps", "epochs", "train loss", "val loss", "val accuracy"] {
        let line = t
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no {row} row: {t}"));
        assert!(line.trim_end().ends_with("same"), "{line}\n{t}");
    }
    assert!(t.contains("settings: identical"), "{t}");
    // TensorBoard's own reader sees one value per step and evaluation in both, the same ones:
    // the resumed run's session start drops what the killed process wrote after its checkpoint.
    let (tb_full, tb_cut) = (tensorboard_scalars(&full), tensorboard_scalars(&d));
    let tags: Vec<&String> = tb_full.keys().collect();
    for tag in [
        "train/loss",
        "train/lr",
        "train/epoch_loss",
        "train/accuracy",
        "val/loss",
        "val/accuracy",
    ] {
        assert!(tb_full.contains_key(tag), "{tag} missing: {tags:?}");
    }
    assert_eq!(tb_full["train/loss"].len(), 400);
    for (tag, values) in &tb_full {
        if tag.ends_with("samples_per_s") {
            continue;
        }
        same_computation(values, &tb_cut[tag], tag);
    }
    let losses: Vec<serde_json::Value> = steps(&full)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a step record"))
        .collect();
    for ((step, value), record) in tb_full["train/loss"].iter().zip(&losses) {
        assert_eq!(Some(*step), record["step"].as_u64());
        let loss = record["loss"].as_f64().expect("loss");
        assert_eq!(*value, f64::from(loss as f32), "step {step}");
    }
}

#[test]
fn tensorboard_drops_the_steps_a_dead_process_wrote_after_the_checkpoint_resumed_from() {
    use kiln::rundir::{RunDir, StepRecord};
    let dir = scratch("tb-resume").join("run");
    let mut first = RunDir::create(dir.clone()).expect("created");
    first
        .record_version("experiment \"x\" {}\n")
        .expect("experiment");
    for step in 1..=10 {
        let lr = 0.1;
        first
            .step(&StepRecord {
                step,
                loss: 1.0,
                lr,
            })
            .expect("step");
    }
    first.flush_steps().expect("flushed");
    // The process dies with steps 1-10 written; its newest checkpoint is at step 6.
    drop(first);
    let mut second = RunDir::resume(dir.clone()).expect("reopened");
    second.truncate(0, 6).expect("truncated");
    for step in 7..=12 {
        second
            .step(&StepRecord {
                step,
                loss: 2.0,
                lr: 0.1,
            })
            .expect("step");
    }
    second.flush_steps().expect("flushed");
    let loss = &tensorboard_scalars(&dir)["train/loss"];
    let expected: Vec<(u64, f64)> = (1..=12)
        .map(|s| (s, if s <= 6 { 1.0 } else { 2.0 }))
        .collect();
    assert_eq!(loss, &expected);
}

#[test]
fn a_resumed_epoch_reports_the_time_and_speed_of_all_its_steps() {
    // An epoch resumed near its end showed its samples over the time of its last few steps
    // only (2,578 samples/s against 33 before the interruption). Without evaluations, the
    // epochs' seconds add up to the run's training time, those before the interruption
    // included, and each epoch's speed is its samples over its seconds.
    let dir = scratch("speed");
    let long = SMALL
        .replace("count: 2000", "count: 8000")
        .replace("    split(train: 0.8, val: 0.2)\n", "")
        .replace("    eval_every 100 steps\n", "")
        .replace("steps 400", "steps 330")
        .replace("every: 20 steps, keep: 2", "every: 30 steps, keep: 2");
    let exp = write(&dir, "long.exp", &long);
    let d = dir.join("run");
    killed_run(&exp, &d, 180);
    // 8,000 samples: 250 steps an epoch; the checkpoint is one within the first.
    let at = newest_checkpoint(&d).expect("a checkpoint");
    assert!(at < 250, "killed at step {at}, after the first epoch");
    let o = resume(&exp, &d);
    assert!(o.status.success(), "{}", text(&o));
    let epochs: Vec<serde_json::Value> = std::fs::read_to_string(d.join("metrics.jsonl"))
        .expect("metrics")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON"))
        .filter(|l| l["split"] == "train")
        .collect();
    assert_eq!(epochs.len(), 2);
    let seconds: Vec<f64> = epochs
        .iter()
        .map(|l| l["seconds"].as_f64().expect("seconds"))
        .collect();
    for (l, samples) in epochs.iter().zip([8000.0, 80.0 * 32.0]) {
        let speed = l["samples_per_s"].as_f64().expect("samples/s");
        let s = l["seconds"].as_f64().expect("seconds");
        assert!(
            (speed * s - samples).abs() < 1e-6 * samples,
            "{speed} samples/s over {s}s"
        );
    }
    // The run's training seconds, from its samples and speed over every part of it.
    let total = 330.0 * 32.0 / report(&d)["samples_per_s"].as_f64().expect("samples/s");
    let sum: f64 = seconds.iter().sum();
    assert!(
        sum <= total * (1.0 + 1e-9) && sum >= 0.97 * total,
        "epochs of {seconds:?}s in a training of {total}s (interrupted at step {at})"
    );
}
