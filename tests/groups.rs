//! Parameter groups against `torch.optim`'s: from the same initial weights and batches, `kiln run`
//! with an optimizer's `groups` reproduces the losses of a PyTorch loop whose optimizer has the
//! same param groups, built the way PyTorch users build them (`tests/groups/reference.py`).
//!
//! Two cases: AdamW without weight decay on biases, norms and embeddings (a model with an
//! embedding and a layernorm), and SGD with momentum where one layer and one bias have their own
//! learning rate, momentum and weight decay, under a step schedule. The reference also trains
//! without groups, and the test checks that the groups change the losses by far more than the
//! tolerance, so a run that ignored them would fail.
//!
//! A run with groups (one of them with AMSGrad, so parameters keep different state) resumes from
//! its checkpoint to the records of an uninterrupted run, and a resume that changes the groups is
//! refused. `kiln plan` shows the groups, in text and YAML.

mod support;

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;
use support::parity::{self, floats, worst};
use support::{flat, killed_run, metrics, run, s, same_computation, scratch, text, write, SMALL};

/// Optimizer steps per case, one batch each (one epoch of the synthetic data).
const STEPS: usize = 50;
/// Samples per batch.
const BATCH: usize = 16;
/// Largest relative difference allowed between Kiln's and PyTorch's loss at any step.
const LOSS_RTOL: f64 = 1e-5;

/// The AdamW case: the transformer recipe in one line.
const ADAMW: &str = r#"experiment "groups-adamw" {
  seed 5
  data {
    source synthetic(inputs: randint(16, shape: [8]), targets: randint(4), count: 800)
    shuffle false
    batch 16
  }
  model {
    input [8]
    embed: embedding(16, 12)
    norm: layernorm
    mean(dim: 0)
    fc: linear(24)
    relu
    head: linear(4)
  }
  device cpu
  optimizer adamw(lr: 1e-2, weight_decay: 0.5, groups: [group(biases, norms, embeddings, weight_decay: 0)])
  train {
    steps 50
    loss cross_entropy
  }
}
"#;

/// The SGD case: a layer and a parameter with their own settings, under a step schedule.
const SGD: &str = r#"experiment "groups-sgd" {
  seed 9
  data {
    source synthetic(inputs: normal([16]), targets: randint(4), count: 800)
    shuffle false
    batch 16
  }
  model {
    input [16]
    fc1: linear(32)
    relu
    fc2: linear(4)
  }
  device cpu
  optimizer sgd(lr: 0.1, momentum: 0.9, weight_decay: 1e-2, groups: [
    group(fc1, lr: 0.02, momentum: 0.5),
    group(fc2.bias, lr: 0.3, weight_decay: 0),
  ])
  schedule step(every: 20 steps, gamma: 0.5)
  train {
    steps 50
    loss cross_entropy
  }
}
"#;

#[test]
fn grouped_losses_match_torch_optim_param_groups_step_for_step() {
    let scratch = scratch("groups-parity");
    let cases = [
        ("groups-adamw", "adamw", ADAMW, 5),
        ("groups-sgd", "sgd", SGD, 9),
    ];
    let mut spec = Vec::new();
    for (name, case, exp, seed) in cases {
        let dir = scratch.join(name);
        std::fs::create_dir_all(&dir).expect("case directory");
        std::fs::write(dir.join("groups.exp"), exp).expect("write .exp");
        spec.push(json!({"dir": dir, "case": case, "seed": seed, "batch": BATCH, "steps": STEPS}));
    }
    parity::reference("tests/groups/reference.py", &json!(spec), &scratch);

    let mut report = String::new();
    let mut failures = Vec::new();
    for (name, ..) in cases {
        let dir = scratch.join(name);
        let reference = parity::json_file(&dir.join("reference.json"));
        let want = floats(&reference["losses"]);
        let ungrouped = floats(&reference["ungrouped"]);
        assert_eq!(
            want.len(),
            STEPS,
            "{name}: the reference has {} losses",
            want.len()
        );
        // The groups must matter far beyond the tolerance, or the comparison proves nothing.
        let (_, effect) = worst(&ungrouped, &want);
        assert!(
            effect > 100.0 * LOSS_RTOL,
            "{name}: the groups change PyTorch's losses by only {effect:e}"
        );
        let got = parity::train(
            &dir.join("groups.exp"),
            Some(&dir.join("init.safetensors")),
            &dir.join("run"),
        )
        .losses;
        assert_eq!(
            got.len(),
            STEPS,
            "{name}: Kiln recorded {} steps",
            got.len()
        );
        let (step, diff) = worst(&got, &want);
        let _ = writeln!(
            report,
            "{name:<14} worst loss rel diff {diff:.3e} (step {step}), groups change the loss by up to {effect:.3e}, loss {:.4} -> {:.4}",
            want[0],
            want[STEPS - 1]
        );
        if diff.is_nan() || diff > LOSS_RTOL {
            failures.push(format!(
                "{name}: worst at step {step}: Kiln {:e}, PyTorch {:e}, relative difference {diff:.3e} > {LOSS_RTOL:e}; files in {}",
                got[step - 1],
                want[step - 1],
                dir.display()
            ));
        }
    }
    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "Kiln's parameter groups do not match torch.optim's:\n{}\n\n{report}",
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// `SMALL` with groups: `fc1` keeps AMSGrad's extra state, the biases no weight decay.
fn grouped_small() -> String {
    SMALL.replace("steps 400", "steps 160").replace(
        "adamw(lr: 3e-3)",
        "adamw(lr: 3e-3, groups: [group(fc1, lr: 1e-3, betas: [0.8, 0.99], amsgrad: true), group(fc2.bias, weight_decay: 0)])",
    )
}

#[test]
fn a_grouped_run_resumes_to_the_records_of_an_uninterrupted_one() {
    let dir = scratch("groups-resume");
    let exp = write(&dir, "grouped.exp", &grouped_small());
    let full = dir.join("whole");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&full)]);
    assert!(o.status.success(), "{}", text(&o));
    let cut = dir.join("cut");
    killed_run(&exp, &cut, 100);
    let o = run(&["run", s(&exp), "--quiet", "--resume", s(&cut)]);
    assert!(o.status.success(), "{}", text(&o));
    let steps = |d: &Path| std::fs::read_to_string(d.join("steps.jsonl")).expect("steps");
    // A resume restores every tensor, generator and position exactly: the same computation.
    same_computation(steps(&full), steps(&cut), "steps.jsonl");
    same_computation(metrics(&full), metrics(&cut), "metrics");

    // Changing a group changes what the run computes.
    let changed = write(
        &dir,
        "changed.exp",
        &grouped_small().replace(
            "group(fc2.bias, weight_decay: 0)",
            "group(fc2.bias, weight_decay: 0.1)",
        ),
    );
    let again = dir.join("again");
    killed_run(&exp, &again, 40);
    let o = run(&["run", s(&changed), "--quiet", "--resume", s(&again)]);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0507(resume-incompatible)"), "{t}");
}

#[test]
fn the_plan_shows_each_group_with_its_settings_and_tensors() {
    let dir = scratch("groups-plan");
    let exp = write(&dir, "groups.exp", ADAMW);
    let o = run(&["plan", s(&exp), "--format", "yaml"]);
    assert!(o.status.success(), "{}", text(&o));
    let plan: serde_yaml::Value = serde_yaml::from_slice(&o.stdout).expect("YAML");
    let groups = plan["groups"].as_sequence().expect("groups");
    let names = |g: &serde_yaml::Value| -> Vec<String> {
        let tensors = g["tensors"].as_sequence().expect("tensors");
        tensors
            .iter()
            .map(|t| t.as_str().expect("a name").to_string())
            .collect()
    };
    assert_eq!(groups.len(), 2, "{plan:?}");
    assert_eq!(
        names(&groups[0]),
        [
            "embed.weight",
            "norm.weight",
            "norm.bias",
            "fc.bias",
            "head.bias"
        ]
    );
    // 16 x 12 + 2 x 12 + 24 + 4 scalars without decay; the weights of `fc` and `head` keep it.
    assert_eq!(groups[0]["params"].as_u64(), Some(244));
    assert_eq!(groups[0]["weight_decay"].as_f64(), Some(0.0));
    assert_eq!(names(&groups[1]), ["fc.weight", "head.weight"]);
    assert_eq!(groups[1]["params"].as_u64(), Some(12 * 24 + 24 * 4));
    assert_eq!(groups[1]["weight_decay"].as_f64(), Some(0.5));

    let o = run(&["plan", s(&exp)]);
    let t = text(&o);
    assert!(
        t.contains(
            "biases, norms, embeddings: 244 parameters in 5 tensors; lr 0.01, weight_decay 0,"
        ),
        "{t}"
    );
    assert!(
        t.contains("in no group: 384 parameters in 2 tensors; lr 0.01, weight_decay 0.5,"),
        "{t}"
    );
}
