//! Extending a finished run, end to end with real runs: `kiln run FILE --resume RUN` where FILE
//! gives a longer length goes on from the run's end with its optimizer state, as the longer run
//! in one go would; the schedule is recomputed for the new length; the run directory records
//! the extension and keeps every earlier report and weights; every extension that cannot be
//! made exactly is refused with its reason, and a finished run resumed at its length is left
//! as it is.
//!
//! Runs in two processes are compared within a relative 1e-6, never bit for bit.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::*;

/// A classifier on synthetic data, 16 steps an epoch (512 training samples in batches of 32),
/// with dropout (so every step draws its masks) and a validation each epoch; `schedule` and
/// `extra` (more train settings) are filled in.
fn experiment(schedule: &str, epochs: u64, extra: &str) -> String {
    format!(
        r#"
experiment "grow" {{
  seed 7
  data {{
    source synthetic(inputs: normal([32]), targets: randint(4), count: 640)
    split(train: 0.8, val: 0.2)
    batch 32
  }}
  model {{
    input [32]
    fc1: linear(64)
    relu
    dropout(0.2)
    fc2: linear(4)
  }}
  device cpu
  optimizer adamw(lr: 3e-3)
  {schedule}
  train {{
    epochs {epochs}
    loss cross_entropy
    metrics [accuracy]
    eval_every 1 epochs
    {extra}
  }}
}}
"#
    )
}

/// A checkpoint every epoch, all of them kept.
const EVERY_EPOCH: &str = "checkpoint(every: 1 epochs, keep: 20)";

/// Runs `exp` to its end in the new run directory `dir`.
fn finish(exp: &Path, dir: &Path) {
    let o = run(&["run", s(exp), "--quiet", "--run-dir", s(dir)]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `kiln run exp --resume dir`, with more arguments.
fn extend(exp: &Path, dir: &Path, more: &[&str]) -> std::process::Output {
    let mut args = vec!["run", s(exp), "--quiet", "--resume", s(dir)];
    args.extend(more);
    run(&args)
}

/// The lines of `steps.jsonl` as `(step, loss, lr)`.
fn steps(dir: &Path) -> Vec<(u64, f64, f64)> {
    std::fs::read_to_string(dir.join("steps.jsonl"))
        .expect("steps.jsonl")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("JSON line");
            let f = |k: &str| v[k].as_f64().expect(k);
            (v["step"].as_u64().expect("step"), f("loss"), f("lr"))
        })
        .collect()
}

/// Whether `a` and `b` agree within `rel` of the larger.
fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

/// Asserts that the extended run `d` took the steps of the run in one go `whole`, `n` of them:
/// the same step numbers and learning rates, losses within a relative 1e-6.
fn same_steps(whole: &Path, d: &Path, n: usize) {
    let (a, b) = (steps(whole), steps(d));
    assert_eq!((a.len(), b.len()), (n, n), "every step once");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.0, x.2), (y.0, y.2), "step and learning rate");
        assert!(
            close(x.1, y.1, 1e-6),
            "step {}: loss {} against {}",
            x.0,
            x.1,
            y.1
        );
    }
}

/// Asserts that the reports of `whole` and `d` agree on `keys`.
fn same_report(whole: &Path, d: &Path, keys: &[&str]) {
    let (x, y) = (report(whole), report(d));
    for key in keys {
        assert!(
            same(
                &serde_json::to_value(&x[key]).expect("json"),
                &serde_json::to_value(&y[key]).expect("json")
            ),
            "{key}: {:?} against {:?}",
            x[key],
            y[key]
        );
    }
}

/// Whether two JSON values are equal, numbers within a relative 1e-6.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => close(
            x.as_f64().unwrap_or(f64::NAN),
            y.as_f64().unwrap_or(f64::NAN),
            1e-6,
        ),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The checkpoint of `step` in the run `dir`: its fp32 tensors by name.
fn checkpoint(dir: &Path, step: u64) -> std::collections::BTreeMap<String, Vec<f32>> {
    safetensors_f32(
        &dir.join("checkpoints")
            .join(format!("step-{step:09}.safetensors")),
    )
    .0
}

/// Copies the directory `from` to `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for e in std::fs::read_dir(from).expect("read dir") {
        let p = e.expect("entry").path();
        let target = to.join(p.file_name().expect("name"));
        if p.is_dir() {
            copy_dir(&p, &target);
        } else {
            std::fs::copy(&p, &target).expect("copy");
        }
    }
}

/// Removes the optimizer's state (`optim/...`) from the checkpoint of `step` in `dir`, leaving
/// its weights, and its sidecar without a checksum (so that the file, rewritten, still reads).
fn drop_optimizer_state(dir: &Path, step: u64) {
    let stem = dir.join("checkpoints").join(format!("step-{step:09}"));
    let path = stem.with_extension("safetensors");
    let bytes = std::fs::read(&path).expect("checkpoint");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let (mut kept, mut out) = (serde_json::Map::new(), Vec::new());
    for (name, info) in header.as_object().expect("a map") {
        if name.starts_with("optim/") || name == "__metadata__" {
            continue;
        }
        let at = |i: usize| info["data_offsets"][i].as_u64().expect("offset") as usize;
        let mut info = info.clone();
        info["data_offsets"] = serde_json::json!([out.len(), out.len() + at(1) - at(0)]);
        out.extend_from_slice(&data[at(0)..at(1)]);
        kept.insert(name.clone(), info);
    }
    let mut head = serde_json::to_vec(&kept).expect("header");
    while !head.len().is_multiple_of(8) {
        head.push(b' ');
    }
    let mut file = (head.len() as u64).to_le_bytes().to_vec();
    file.extend(head);
    file.extend(out);
    std::fs::write(&path, file).expect("rewrite");
    let meta = stem.with_extension("yaml");
    let mut side: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&meta).expect("sidecar")).expect("YAML");
    side["tensors_crc32"] = serde_yaml::Value::String(String::new());
    std::fs::write(&meta, serde_yaml::to_string(&side).expect("YAML")).expect("sidecar");
}

#[test]
fn an_extended_run_goes_on_as_the_longer_run_in_one_go_with_its_optimizer_state() {
    let dir = scratch("extend-constant");
    // A constant learning rate: the first 4 epochs of the 8-epoch run are the 4-epoch run.
    let short = write(&dir, "short.exp", &experiment("", 4, EVERY_EPOCH));
    let long = write(&dir, "long.exp", &experiment("", 8, EVERY_EPOCH));
    let whole = dir.join("whole");
    finish(&long, &whole);
    let d = dir.join("extended");
    finish(&short, &d);
    assert_eq!(report(&d)["steps"].as_u64(), Some(64));
    let fresh = dir.join("fresh");
    copy_dir(&d, &fresh);

    let o = extend(&long, &d, &[]);
    assert!(o.status.success(), "{}", text(&o));
    same_steps(&whole, &d, 128);
    let (ma, mb) = (metrics(&whole), metrics(&d));
    assert_eq!(ma.len(), mb.len(), "{mb:?}");
    for (x, y) in ma.iter().zip(&mb) {
        assert!(same(x, y), "{x} against {y}");
    }
    same_report(&whole, &d, &["steps", "epochs", "train_loss", "val"]);
    // The end: weights and Adam's moments as the run in one go has them.
    let (end_a, end_b) = (checkpoint(&whole, 128), checkpoint(&d, 128));
    assert!(end_a.contains_key("optim/fc1.weight/exp_avg_sq"));
    assert_eq!(
        end_a.keys().collect::<Vec<_>>(),
        end_b.keys().collect::<Vec<_>>()
    );
    for (name, x) in &end_a {
        let y = &end_b[name];
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
        let worst = x.iter().zip(y).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst <= 1e-6 * scale, "{name}: off by {worst} of {scale}");
    }

    // The comparison tells a fresh optimizer state apart: the same weights at step 64 without
    // Adam's moments give the same loss at step 65 (computed before its update), and other
    // losses after it.
    drop_optimizer_state(&fresh, 64);
    let o = extend(&long, &fresh, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (a, c) = (steps(&whole), steps(&fresh));
    assert!(close(a[64].1, c[64].1, 1e-6), "step 65");
    let worst = a[65..]
        .iter()
        .zip(&c[65..])
        .map(|(x, y)| (x.1 - y.1).abs() / x.1.abs())
        .fold(0.0, f64::max);
    assert!(
        worst > 1e-3,
        "a fresh optimizer state went unnoticed: {worst}"
    );
}

/// `cosine(warmup: 20 steps, min_lr: 1e-5)` from 3e-3 at the 0-based step `s` of `total`, as
/// `LinearLR` then `CosineAnnealingLR` compute it.
fn cosine(s: u64, total: u64) -> f64 {
    let (lr, min, w) = (3e-3, 1e-5, 20);
    if s < w {
        return lr * (s + 1) as f64 / w as f64;
    }
    let progress = ((s - w) as f64 / (total - w) as f64).min(1.0);
    min + (lr - min) * (1.0 + (std::f64::consts::PI * progress).cos()) / 2.0
}

#[test]
fn an_extension_recomputes_the_schedule_for_its_length_and_the_run_records_it() {
    let dir = scratch("extend-schedule");
    let schedule = "schedule cosine(warmup: 20 steps, min_lr: 1e-5)";
    let file =
        |name: &str, epochs: u64| write(&dir, name, &experiment(schedule, epochs, EVERY_EPOCH));
    let (short, long, longer) = (
        file("short.exp", 4),
        file("long.exp", 8),
        file("longer.exp", 10),
    );
    let d = dir.join("run");
    finish(&short, &d);
    for exp in [&long, &longer] {
        let o = extend(exp, &d, &[]);
        assert!(o.status.success(), "{}", text(&o));
    }
    // The steps taken keep their rates; each extension's steps follow the cosine over the
    // extended length.
    let lrs = steps(&d);
    assert_eq!(lrs.len(), 160);
    for (step, _, lr) in &lrs {
        let total = match step {
            1..=64 => 64,
            65..=128 => 128,
            _ => 160,
        };
        let expected = cosine(step - 1, total);
        assert!(
            close(*lr, expected, 1e-12),
            "step {step}: {lr} against {expected}"
        );
    }
    // The last part's rates are those of a run of that length in one go.
    let whole = dir.join("whole");
    finish(&longer, &whole);
    assert_eq!(
        steps(&whole)[128..].iter().map(|x| x.2).collect::<Vec<_>>(),
        lrs[128..].iter().map(|x| x.2).collect::<Vec<_>>()
    );

    // The run directory: the extensions in the history, every version of the experiment, and
    // each end's report and final weights.
    let r = report(&d);
    assert_eq!(r["steps"].as_u64(), Some(160));
    let resumed = r["resumed"].as_sequence().expect("resumed");
    assert_eq!(resumed.len(), 2, "{r:?}");
    for (part, (from, version, change)) in resumed.iter().zip([
        (64, "experiment-2.exp", "length: 4 epochs → 8 epochs"),
        (128, "experiment-3.exp", "length: 8 epochs → 10 epochs"),
    ]) {
        assert_eq!(part["from_step"].as_u64(), Some(from));
        assert_eq!(part["experiment"].as_str(), Some(version));
        assert_eq!(part["extended"].as_bool(), Some(true));
        let changes: Vec<&str> = part["changes"]
            .as_sequence()
            .expect("changes")
            .iter()
            .filter_map(|c| c.as_str())
            .collect();
        assert_eq!(changes, [change]);
    }
    let read = |name: &str| std::fs::read_to_string(d.join(name)).expect(name);
    assert_eq!(read("experiment-2.exp"), read_path(&long));
    for (name, step) in [("report-1.yaml", 64), ("report-2.yaml", 128)] {
        let earlier: serde_yaml::Value = serde_yaml::from_str(&read(name)).expect(name);
        assert_eq!(earlier["steps"].as_u64(), Some(step), "{name}");
    }
    for (name, step) in [
        ("weights.yaml", 64),
        ("weights-2.yaml", 128),
        ("weights-3.yaml", 160),
    ] {
        let side: serde_yaml::Value = serde_yaml::from_str(&read(name)).expect(name);
        assert_eq!(side["position"]["step"].as_u64(), Some(step), "{name}");
    }
    let o = run(&["report", s(&d)]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("extended     at step 64 with experiment-2.exp: length: 4 epochs → 8 epochs"),
        "{t}"
    );
    let o = run(&["compare", s(&whole), s(&d)]);
    let t = text(&o);
    assert!(
        t.contains(
            "B was extended at step 128 with experiment-3.exp: length: 8 epochs → 10 epochs"
        ),
        "{t}"
    );
    // `kiln eval` evaluates the newest end.
    let o = run(&["eval", s(&d), "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["step"], 160);
    assert_eq!(v["weights"], s(&d.join("weights-3.safetensors")));

    // Resumed at the length it has now, the run is complete and left as it is.
    let before = snapshot(&d);
    let o = extend(&longer, &d, &[]);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("K0525(run-complete)"), "{t}");
    assert!(t.contains("is complete after 160 steps"), "{t}");
    assert!(t.contains("lengthen it here"), "{t}");
    assert!(snapshot(&d) == before, "a complete run changed");
}

/// The text of the file at `path`.
fn read_path(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read")
}

#[test]
fn a_finished_run_is_extended_only_to_a_longer_length_of_the_same_computation() {
    let dir = scratch("extend-refused");
    let short = write(&dir, "short.exp", &experiment("", 4, EVERY_EPOCH));
    let d = dir.join("run");
    finish(&short, &d);
    let before = snapshot(&d);
    let file = |name: &str, epochs: u64, from: &str, to: &str| {
        let text = experiment("", epochs, EVERY_EPOCH).replace(from, to);
        write(&dir, name, &text)
    };
    let cases: [(PathBuf, &[&str], i32, &[&str]); 5] = [
        (
            file("model.exp", 8, "fc1: linear(64)", "fc1: linear(32)"),
            &[],
            1,
            &["K0507(resume-incompatible)", "layer 1: was"],
        ),
        (
            file("shorter.exp", 3, "", ""),
            &[],
            1,
            &[
                "K0523(shorter-than-trained)",
                "this length, `3 epochs` (48 steps), is fewer than the 64 steps",
                "give it more than 64 steps",
            ],
        ),
        (
            file("steps.exp", 4, "epochs 4", "steps 64"),
            &[],
            1,
            &[
                "K0523(shorter-than-trained)",
                "`64 steps`, is as many as the 64 steps",
            ],
        ),
        (
            file("limited.exp", 8, "", ""),
            &["--max-steps", "64"],
            1,
            &[
                "K0523(shorter-than-trained)",
                "`--max-steps 64` stops the run at step 64",
            ],
        ),
        (
            file("seed.exp", 4, "seed 7", "seed 8"),
            &[],
            0,
            &["K0525(run-complete)", "is complete after 64 steps"],
        ),
    ];
    for (exp, more, code, says) in cases {
        let o = extend(&exp, &d, more);
        let t = flat(&text(&o));
        assert_eq!(o.status.code(), Some(code), "{t}");
        for said in says {
            assert!(t.contains(said), "{said}: {t}");
        }
        assert!(snapshot(&d) == before, "the run changed: {t}");
    }
}

#[test]
fn a_run_that_cannot_go_on_from_its_end_is_refused_with_the_reason() {
    let dir = scratch("extend-cannot");
    // Runs `short` in `dir/name`, damages the checkpoint of step `damaged`, and extends it
    // with `long`: refused, saying `says`, and the run is left as it was.
    let refused = |name: &str, short: &str, long: &str, damaged: Option<u64>, says: &[&str]| {
        let (a, b) = (
            write(&dir, "short.exp", short),
            write(&dir, "long.exp", long),
        );
        let d = dir.join(name);
        finish(&a, &d);
        if let Some(step) = damaged {
            damage(&d, step);
        }
        let before = snapshot(&d);
        let o = extend(&b, &d, &[]);
        let t = flat(&text(&o));
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains("K0524(not-extendable)"), "{t}");
        for said in says {
            assert!(t.contains(said), "{said}: {t}");
        }
        assert!(snapshot(&d) == before, "the run changed: {t}");
        (d, b, t)
    };
    // No checkpoint: the final weights hold no optimizer state. The help's command works.
    let (d, long, t) = refused(
        "plain",
        &experiment("", 2, ""),
        &experiment("", 4, ""),
        None,
        &["kept no checkpoint, so the optimizer state of its end (step 32) is gone"],
    );
    let weights = d.join("weights.safetensors");
    // The help's path may be wrapped: compared without spaces.
    let init = format!("--init{}", weights.display()).replace(' ', "");
    assert!(t.replace(' ', "").contains(&init), "{t}");
    let o = run(&[
        "run",
        s(&long),
        "--quiet",
        "--init",
        s(&weights),
        "--run-dir",
        s(&dir.join("new")),
    ]);
    assert!(o.status.success(), "{}", text(&o));

    // Early stopping ended it: the second validation does not improve on the first by 10.
    let stop = "early_stop(metric: val_loss, patience: 1, min_delta: 10)";
    let (d, _, _) = refused(
        "stopped",
        &experiment("", 8, &format!("{EVERY_EPOCH}\n    {stop}")),
        &experiment("", 12, &format!("{EVERY_EPOCH}\n    {stop}")),
        None,
        &["early stopping ended the run", "at step 32, not its length"],
    );
    assert_eq!(report(&d)["stopped_early"].as_bool(), Some(true));

    // Pruning after training, with its fine-tuning.
    let prune = "compress {\n    prune fc1 l1_unstructured(amount: 0.5, schedule: after(finetune: 1 epochs))\n  }";
    refused(
        "pruned",
        &experiment(prune, 2, ""),
        &experiment(prune, 4, ""),
        None,
        &[
            "pruned after its training (`after(finetune: 1 epochs)`)",
            "long.exp:19:5]",
        ],
    );

    // The checkpoint of its end is damaged: the one before it is not its end.
    refused(
        "damaged",
        &experiment("", 3, EVERY_EPOCH),
        &experiment("", 6, EVERY_EPOCH),
        Some(48),
        &["has no intact checkpoint of its end (step 48), only of step 32"],
    );
}

/// Flips one byte in the middle of the tensors of the checkpoint of `step` in `dir`.
fn damage(dir: &Path, step: u64) {
    let path = dir
        .join("checkpoints")
        .join(format!("step-{step:09}.safetensors"));
    let mut bytes = std::fs::read(&path).expect("read");
    let i = bytes.len() - bytes.len() / 3;
    bytes[i] ^= 0x55;
    std::fs::write(&path, bytes).expect("write");
}

#[test]
fn a_run_pruned_before_training_is_extended_with_its_masks() {
    let dir = scratch("extend-pruned");
    // A compressing run keeps the checkpoint of its end without `checkpoint(...)`.
    let prune =
        "compress {\n    prune fc1.weight l1_unstructured(amount: 0.5, schedule: before)\n  }";
    let short = write(&dir, "short.exp", &experiment(prune, 2, ""));
    let long = write(&dir, "long.exp", &experiment(prune, 4, ""));
    let d = dir.join("run");
    finish(&short, &d);
    let o = extend(&long, &d, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let r = report(&d);
    assert_eq!(r["steps"].as_u64(), Some(64));
    assert_eq!(
        r["compression"]["layers"][0]["sparsity"].as_f64(),
        Some(0.5)
    );
    let t = checkpoint(&d, 64);
    let (w, m) = (&t["param/fc1.weight"], &t["buffer/fc1.weight_mask"]);
    assert_eq!(m.iter().filter(|m| **m == 0.0).count(), 1024);
    for (w, m) in w.iter().zip(m) {
        assert!(*m == 1.0 || *w == 0.0, "a pruned weight is {w}");
    }
}

#[test]
fn an_interrupted_extension_resumes_and_keeps_the_report_of_the_first_end() {
    let dir = scratch("extend-interrupted");
    let short = write(&dir, "short.exp", &experiment("", 4, EVERY_EPOCH));
    let endless = write(&dir, "endless.exp", &experiment("", 100_000, EVERY_EPOCH));
    let d = dir.join("run");
    finish(&short, &d);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kiln-runtime"))
        .args(["run", s(&endless), "--quiet", "--resume", s(&d)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start kiln-runtime");
    wait_for_checkpoint(&d, 96, &mut child);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    // The extension set the first end's report aside: the run is unfinished again.
    assert!(!d.join("report.yaml").exists());
    let first: serde_yaml::Value =
        serde_yaml::from_str(&read_path(&d.join("report-1.yaml"))).expect("YAML");
    assert_eq!(first["steps"].as_u64(), Some(64));
    let o = run(&["report", s(&d)]);
    assert!(!o.status.success());
    assert!(text(&o).contains("did not finish"), "{}", text(&o));

    // Resumed as any interrupted run, from its newest checkpoint.
    let at = newest_checkpoint(&d).expect("a checkpoint");
    let stop = (at + 16).to_string();
    let o = extend(&endless, &d, &["--max-steps", &stop]);
    assert!(o.status.success(), "{}", text(&o));
    let r = report(&d);
    assert_eq!(r["steps"].as_u64(), Some(at + 16));
    let parts: Vec<(u64, bool)> = r["resumed"]
        .as_sequence()
        .expect("resumed")
        .iter()
        .map(|p| {
            (
                p["from_step"].as_u64().expect("from"),
                p["extended"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(parts, [(64, true), (at, false)]);
    let numbers: Vec<u64> = steps(&d).iter().map(|x| x.0).collect();
    assert_eq!(numbers, (1..=at + 16).collect::<Vec<_>>());
}

#[test]
fn a_run_stopped_by_max_steps_goes_on_to_its_length_as_the_run_in_one_go() {
    let dir = scratch("extend-max-steps");
    // No checkpoint setting: the run `--max-steps` stops keeps the checkpoint of its stop.
    let exp = write(
        &dir,
        "run.exp",
        &experiment("schedule cosine(warmup: 20 steps, min_lr: 1e-5)", 8, ""),
    );
    let whole = dir.join("whole");
    finish(&exp, &whole);
    let d = dir.join("run");
    // Step 40 is within the third epoch (16 steps an epoch).
    let o = run(&[
        "run",
        s(&exp),
        "--quiet",
        "--run-dir",
        s(&d),
        "--max-steps",
        "40",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stopped = report(&d);
    assert_eq!(stopped["steps"].as_u64(), Some(40));
    assert_eq!(stopped["max_steps_reached"].as_bool(), Some(true));
    let o = run(&["report", s(&d)]);
    assert!(
        text(&o).contains("stopped by --max-steps before its length"),
        "{}",
        text(&o)
    );

    // Resumed with the same file, it goes on from step 40 to the end, as the run in one go.
    let o = extend(&exp, &d, &[]);
    assert!(o.status.success(), "{}", text(&o));
    same_steps(&whole, &d, 128);
    same_report(&whole, &d, &["val"]);
    assert_eq!(report(&d)["max_steps_reached"].as_bool(), None);
    let first: serde_yaml::Value =
        serde_yaml::from_str(&read_path(&d.join("report-1.yaml"))).expect("YAML");
    assert_eq!(first["steps"].as_u64(), Some(40));

    // At its length now, it is complete.
    let o = extend(&exp, &d, &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        flat(&text(&o)).contains("K0525(run-complete)"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_run_that_ended_within_an_epoch_is_extended_within_it_as_the_longer_run_in_one_go() {
    let dir = scratch("extend-within-epoch");
    // 16 steps an epoch: 40 steps end within the third. A constant learning rate, so the first
    // 40 steps of the longer run are the shorter run's.
    let file = |name: &str, steps: u64| {
        let text = experiment("", 8, EVERY_EPOCH).replace("epochs 8", &format!("steps {steps}"));
        write(&dir, name, &text)
    };
    let (short, long) = (file("short.exp", 40), file("long.exp", 100));
    let whole = dir.join("whole");
    finish(&long, &whole);
    let d = dir.join("run");
    finish(&short, &d);
    let r = report(&d);
    assert_eq!(
        (r["steps"].as_u64(), r["epochs"].as_u64()),
        (Some(40), Some(3))
    );
    let o = extend(&long, &d, &[]);
    assert!(o.status.success(), "{}", text(&o));
    same_steps(&whole, &d, 100);
    // The third epoch's line, written again where it ends, covers all of its steps.
    let third = |dir: &Path| -> Vec<Value> {
        metrics(dir)
            .into_iter()
            .filter(|m| m["split"] == "train" && m["epoch"].as_u64() == Some(3))
            .collect()
    };
    let (in_one_go, extended) = (third(&whole), third(&d));
    assert_eq!(in_one_go.len(), 1);
    assert_eq!(
        extended.len(),
        2,
        "the shorter run's line, then the epoch's"
    );
    assert!(same(
        &in_one_go[0]["train_loss"],
        &extended[1]["train_loss"]
    ));
    same_report(&whole, &d, &["steps", "epochs", "train_loss", "val"]);
}
