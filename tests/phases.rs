//! The phases of a pruning run, end to end with real runs: every pruning schedule crossed with
//! early stopping, gradient accumulation and a resume within a phase. Whatever ends a phase,
//! pruning happens once per declared step, the masks and the report hold exactly the declared
//! sparsity, and early stopping in a phase counts only that phase's own evaluations.
//!
//! The data are random labels, so the validation loss rises after the first epoch or two and
//! early stopping has something to stop.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use support::*;

/// A classifier on random labels (50 steps an epoch, evaluated every epoch) with `compress` and
/// `train` statements filled in.
fn experiment(compress: &str, train: &str) -> String {
    format!(
        r#"
experiment "small" {{
  seed 5
  data {{
    source synthetic(inputs: normal([32]), targets: randint(4), count: 2000)
    split(train: 0.8, val: 0.2)
    batch 32
  }}
  model {{
    input [32]
    fc1: linear(64)
    relu
    fc2: linear(4)
  }}
  device cpu
  optimizer adam(lr: 3e-3)
  compress {{
    {compress}
  }}
  train {{
    loss cross_entropy
    metrics [accuracy]
    {train}
  }}
}}
"#
    )
}

/// Runs `source` to completion in `dir/name`; returns the run directory and what it printed.
fn finished(dir: &Path, name: &str, source: &str, quiet: bool) -> (PathBuf, String) {
    let exp = write(dir, &format!("{name}.exp"), source);
    let d = dir.join(name);
    let mut args = vec!["run", s(&exp), "--run-dir", s(&d)];
    if quiet {
        args.push("--quiet");
    }
    let o = run(&args);
    assert!(o.status.success(), "{}", text(&o));
    (d, text(&o))
}

/// One phase as the report says it ran: name, round, first and last step, stopped early.
#[derive(Debug, Clone, PartialEq)]
struct Phase {
    name: String,
    round: Option<u64>,
    from: u64,
    to: u64,
    stopped: bool,
}

/// The phases of a run; a run of one phase has no list, and is its training.
fn phases(r: &serde_yaml::Value) -> Vec<Phase> {
    let listed: Vec<Phase> = r["phases"]
        .as_sequence()
        .map(|ps| {
            ps.iter()
                .map(|p| Phase {
                    name: p["name"].as_str().expect("name").to_string(),
                    round: p["round"].as_u64(),
                    from: p["from_step"].as_u64().expect("from_step"),
                    to: p["to_step"].as_u64().expect("to_step"),
                    stopped: p["stopped_early"].as_bool().expect("stopped_early"),
                })
                .collect()
        })
        .unwrap_or_default();
    if !listed.is_empty() {
        return listed;
    }
    vec![Phase {
        name: "train".into(),
        round: None,
        from: 0,
        to: r["steps"].as_u64().expect("steps"),
        stopped: r["stopped_early"].as_bool().expect("stopped_early"),
    }]
}

/// The validation losses of `metrics.jsonl` by step (the first at each step: the evaluation
/// during training, not the final one of weights pruned after it).
fn val_losses(d: &Path) -> BTreeMap<u64, f64> {
    let mut out = BTreeMap::new();
    for line in metrics(d) {
        if line["split"] == "val" {
            let step = line["step"].as_u64().expect("step");
            out.entry(step)
                .or_insert(line["loss"].as_f64().expect("loss"));
        }
    }
    out
}

/// Where early stopping with `patience` (minimizing, no `min_delta`) ends a sequence of
/// evaluations: the step of the one that makes `patience` without improvement since the best,
/// the first setting the best; `None` when patience never runs out.
fn stop_of(evals: &[(u64, f64)], patience: u64) -> Option<u64> {
    let (mut best, mut bad) = (f64::INFINITY, 0);
    for (step, loss) in evals {
        if *loss < best {
            best = *loss;
            bad = 0;
        } else {
            bad += 1;
            if bad >= patience {
                return Some(*step);
            }
        }
    }
    None
}

/// Zeros of `name`'s mask in the run's final checkpoint, with a check that the weight is
/// exactly zero wherever the mask is.
fn zeros(t: &BTreeMap<String, Vec<f32>>, name: &str) -> usize {
    let w = &t[&format!("param/{name}")];
    let m = &t[&format!("buffer/{name}_mask")];
    for (w, m) in w.iter().zip(m) {
        assert!(*m == 0.0 || *m == 1.0, "{name}'s mask holds {m}");
        if *m == 0.0 {
            assert_eq!(*w, 0.0, "{name} is pruned where it is {w}");
        }
    }
    m.iter().filter(|m| **m == 0.0).count()
}

/// What a pruning run declares.
struct Declared<'a> {
    /// Each pruned weight with its entries and the zeros its amount makes (rounded as
    /// `torch.nn.utils.prune` rounds).
    masks: &'a [(&'a str, usize, usize)],
    /// Each phase's name, round and length in steps when early stopping does not end it.
    phases: &'a [(&'a str, Option<u64>, u64)],
    /// Early stopping's patience.
    patience: u64,
    /// Early stopping counts the training's evaluations only after this step (a gradual
    /// schedule's end).
    settle: u64,
}

/// Checks what every pruning run with early stopping must hold, and returns its phases: each
/// mask holds exactly the declared zeros and the report's sparsity says so (pruning happened
/// once per declared step); the phases follow one another as declared, each of its declared
/// length unless early stopping ended it; and early stopping ended a phase exactly where that
/// phase's own evaluations ran out of patience, and no other.
fn holds(d: &Path, declared: &Declared) -> Vec<Phase> {
    let (t, _) = checkpoint_tensors(d);
    let r = report(d);
    for (name, entries, expected) in declared.masks {
        let z = zeros(&t, name);
        assert_eq!(z, *expected, "{name}: {z} zeros, {expected} declared");
        let layer = name.trim_end_matches(".weight");
        let listed = r["compression"]["layers"]
            .as_sequence()
            .expect("compressed layers")
            .iter()
            .find(|l| l["name"] == layer)
            .expect("the layer in the report");
        assert_eq!(
            listed["sparsity"].as_f64(),
            Some(*expected as f64 / *entries as f64),
            "{layer}"
        );
    }
    let ran = phases(&r);
    assert!(ran.len() <= declared.phases.len(), "{ran:?}");
    let vals = val_losses(d);
    let mut from = 0;
    for (i, p) in ran.iter().enumerate() {
        let (name, round, length) = declared.phases[i];
        assert_eq!(
            (p.name.as_str(), p.round, p.from),
            (name, round, from),
            "{ran:?}"
        );
        let taken = p.to - p.from;
        if p.stopped {
            assert!(taken <= length, "{ran:?}");
        } else {
            assert_eq!(
                taken, length,
                "phase {i} ended early without early stopping: {ran:?}"
            );
        }
        let after = if i == 0 { declared.settle } else { p.from };
        let own: Vec<(u64, f64)> = vals
            .range(after + 1..=p.to)
            .map(|(s, l)| (*s, *l))
            .collect();
        assert_eq!(
            stop_of(&own, declared.patience),
            p.stopped.then_some(p.to),
            "phase {i} {ran:?} against its own evaluations {own:?}"
        );
        from = p.to;
    }
    // Every phase but the last ran: the run ended with its last phase, or with early stopping
    // there.
    assert_eq!(ran.len(), declared.phases.len(), "{ran:?}");
    assert_eq!(r["steps"].as_u64(), Some(from));
    ran
}

#[test]
fn early_stopping_that_ends_the_training_starts_the_finetuning() {
    let dir = scratch("phases-after");
    let (d, _) = finished(
        &dir,
        "after",
        &experiment(
            "prune [fc1, fc2] l1_unstructured(amount: 0.5, schedule: after(finetune: 2 epochs))",
            "epochs 8\n    early_stop(patience: 2)",
        ),
        true,
    );
    let ran = holds(
        &d,
        &Declared {
            masks: &[("fc1.weight", 2048, 1024), ("fc2.weight", 256, 128)],
            phases: &[("train", None, 400), ("finetune", None, 100)],
            patience: 2,
            settle: 0,
        },
    );
    assert!(ran[0].stopped, "the training was to stop early: {ran:?}");
    // The uncompressed model is the one the training ended with: its last evaluation.
    let r = report(&d);
    let before = r["compression"]["val"]["before"]["loss"].as_f64();
    assert_eq!(before, val_losses(&d).get(&ran[0].to).copied());
}

#[test]
fn early_stopping_in_finetuning_counts_only_finetunings_own_losses() {
    let dir = scratch("phases-finetune");
    let (d, printed) = finished(
        &dir,
        "finetune",
        &experiment(
            "prune [fc1, fc2] l1_unstructured(amount: 0.5, schedule: after(finetune: 6 epochs))",
            "epochs 2\n    early_stop(patience: 2)",
        ),
        false,
    );
    let ran = holds(
        &d,
        &Declared {
            masks: &[("fc1.weight", 2048, 1024), ("fc2.weight", 256, 128)],
            phases: &[("train", None, 100), ("finetune", None, 300)],
            patience: 2,
            settle: 0,
        },
    );
    // Pruning made every fine-tuning loss worse than the training's best: counted against
    // it, the first fine-tuning epoch would have ended the run.
    let vals = val_losses(&d);
    let best = vals
        .range(..=100)
        .map(|(_, l)| *l)
        .fold(f64::INFINITY, f64::min);
    assert!(vals.range(101..).all(|(_, l)| *l > best), "{vals:?}");
    assert!(ran[1].stopped && ran[1].to > 150, "{ran:?}");

    // Fine-tuning is named as its own phase in the progress, the records and `kiln report`.
    assert!(printed.contains("finetune 1/6  step 150"), "{printed}");
    assert!(!printed.contains("epoch 3/2"), "{printed}");
    let tagged: Vec<(u64, serde_json::Value)> = metrics(&d)
        .into_iter()
        .filter(|l| l["split"] == "train")
        .map(|l| (l["epoch"].as_u64().expect("epoch"), l["phase"].clone()))
        .collect();
    assert_eq!(tagged[1].1, serde_json::Value::Null, "{tagged:?}");
    assert_eq!(
        tagged[2],
        (
            3,
            serde_json::json!({"name": "finetune", "epoch": 1, "epochs": 6})
        )
    );
    let o = run(&["report", s(&d)]);
    let shown = text(&o);
    assert!(o.status.success(), "{shown}");
    assert!(shown.contains("finetune 1/6"), "{shown}");
    assert!(
        shown.contains(&format!(
            "train steps 0-100, finetune steps 100-{} (stopped early)",
            ran[1].to
        )),
        "{shown}"
    );
}

#[test]
fn gradual_pruning_reaches_its_amount_before_early_stopping_counts() {
    let dir = scratch("phases-gradual");
    let (d, _) = finished(
        &dir,
        "gradual",
        &experiment(
            "prune fc1 l1_unstructured(amount: 0.8, schedule: gradual(start: 50 steps, end: 200 steps, every: 25 steps))",
            "epochs 8\n    early_stop(patience: 1)",
        ),
        true,
    );
    // 0.8 of 2048 entries, rounded half to even: 1638.
    let ran = holds(
        &d,
        &Declared {
            masks: &[("fc1.weight", 2048, 1638)],
            phases: &[("train", None, 400)],
            patience: 1,
            settle: 200,
        },
    );
    assert!(ran[0].stopped && ran[0].to > 200, "{ran:?}");
}

#[test]
fn iterative_rounds_follow_a_training_that_early_stopping_ended() {
    let dir = scratch("phases-iterative");
    let (d, _) = finished(
        &dir,
        "iterative",
        &experiment(
            "prune fc1 l1_unstructured(amount: 0.75, schedule: iterative(rounds: 2, rewind: 50 steps))",
            "epochs 4\n    early_stop(patience: 1)",
        ),
        true,
    );
    // Two prunings of 50% each: 75% of the 2048 entries.
    let ran = holds(
        &d,
        &Declared {
            masks: &[("fc1.weight", 2048, 1536)],
            phases: &[
                ("train", None, 200),
                ("round", Some(1), 150),
                ("round", Some(2), 150),
            ],
            patience: 1,
            settle: 0,
        },
    );
    assert!(ran[0].stopped, "{ran:?}");
}

#[test]
fn one_shot_pruning_with_early_stopping_prunes_once() {
    let dir = scratch("phases-one-shot");
    for (name, schedule) in [("before", "before"), ("after", "after")] {
        let (d, _) = finished(
            &dir,
            name,
            &experiment(
                &format!("prune [fc1, fc2] l1_unstructured(amount: 0.5, schedule: {schedule})"),
                "epochs 6\n    early_stop(patience: 1)",
            ),
            true,
        );
        let ran = holds(
            &d,
            &Declared {
                masks: &[("fc1.weight", 2048, 1024), ("fc2.weight", 256, 128)],
                phases: &[("train", None, 300)],
                patience: 1,
                settle: 0,
            },
        );
        assert!(ran[0].stopped, "{name}: {ran:?}");
    }
}

#[test]
fn every_schedule_with_gradient_accumulation_keeps_its_amount_and_phases() {
    let dir = scratch("phases-accumulate");
    // Two epochs of training (100 steps) in micro-batches of 8, then each schedule's phases.
    let half = &[("fc1.weight", 2048, 1024)];
    let declared = |phases, settle| Declared {
        masks: half,
        phases,
        patience: 1,
        settle,
    };
    let cases = [
        (
            "finetune",
            "after(finetune: 6 epochs)",
            declared(&[("train", None, 100), ("finetune", None, 300)], 0),
        ),
        (
            "gradual",
            "gradual(start: 25 steps, end: 75 steps, every: 25 steps)",
            declared(&[("train", None, 100)], 75),
        ),
        (
            "iterative",
            "iterative(rounds: 2, rewind: 25 steps)",
            declared(
                &[
                    ("train", None, 100),
                    ("round", Some(1), 75),
                    ("round", Some(2), 75),
                ],
                0,
            ),
        ),
    ];
    for (name, schedule, declared) in cases {
        let (d, _) = finished(
            &dir,
            name,
            &experiment(
                &format!("prune fc1 l1_unstructured(amount: 0.5, schedule: {schedule})"),
                "epochs 2\n    accumulate 4\n    early_stop(patience: 1)",
            ),
            true,
        );
        holds(&d, &declared);
    }
}

#[test]
fn a_run_resumed_within_a_phase_equals_an_uninterrupted_one() {
    let dir = scratch("phases-resume");
    // Each schedule (with early stopping but the first), killed within the phase named (at
    // the first checkpoint at least `after` steps after it started), then resumed. Without
    // early stopping the fine-tuning starts at step 150 and the first round at step 200: the
    // first two cases are killed 20 steps into them.
    let cases = [
        (
            "finetune-plain",
            "prune [fc1, fc2] l1_unstructured(amount: 0.5, schedule: after(finetune: 4 epochs))",
            "epochs 3",
            0,
            170,
        ),
        (
            "iterative-plain",
            "prune fc1 l1_unstructured(amount: 0.75, schedule: iterative(rounds: 2, rewind: 50 steps))",
            "epochs 4",
            0,
            220,
        ),
        (
            "finetune",
            "prune [fc1, fc2] l1_unstructured(amount: 0.5, schedule: after(finetune: 4 epochs))",
            "epochs 8\n    early_stop(patience: 2)",
            1,
            20,
        ),
        (
            "gradual",
            "prune fc1 l1_unstructured(amount: 0.8, schedule: gradual(start: 50 steps, end: 200 steps, every: 25 steps))",
            "epochs 8\n    early_stop(patience: 1)",
            0,
            120,
        ),
        (
            "iterative",
            "prune fc1 l1_unstructured(amount: 0.75, schedule: iterative(rounds: 2, rewind: 50 steps))",
            "epochs 4\n    early_stop(patience: 1)",
            1,
            20,
        ),
    ];
    for (name, compress, train, phase, after) in cases {
        let source = experiment(
            compress,
            &format!("{train}\n    checkpoint(every: 10 steps, keep: 2)"),
        );
        let (whole, _) = finished(&dir, &format!("{name}-whole"), &source, true);
        let ran = phases(&report(&whole));
        let exp = write(&dir, &format!("{name}.exp"), &source);
        let cut = dir.join(format!("{name}-cut"));
        killed_run(&exp, &cut, ran[phase].from + after);
        let o = run(&["run", s(&exp), "--quiet", "--resume", s(&cut)]);
        assert!(o.status.success(), "{}", text(&o));
        // Same machine, same seed: the same numbers (ARCHITECTURE.md, "Same seed, same
        // machine, same metrics").
        let (a, _) = checkpoint_tensors(&whole);
        let (b, _) = checkpoint_tensors(&cut);
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (tensor, x) in &a {
            let differ = x.iter().zip(&b[tensor]).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ, 0,
                "{name}: {differ} entries of {tensor} differ after the resume"
            );
        }
        assert_eq!(metrics(&whole), metrics(&cut), "{name}");
        let (ra, rb) = (report(&whole), report(&cut));
        assert_eq!(phases(&ra), phases(&rb), "{name}");
        assert_eq!(ra["compression"]["val"], rb["compression"]["val"], "{name}");
        assert_eq!(
            ra["compression"]["layers"], rb["compression"]["layers"],
            "{name}"
        );
    }
}
