//! Pipeline and model parallel end to end, on the CPU: after 20 steps the parameters of a
//! pipelined run (GPipe and 1F1B, 2 and 3 stages, 4 micro-batches, with and without gradient
//! accumulation) and of a model split over two placements match, within 1e-5, those of the same
//! experiment run on one device with the whole batch.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::*;

/// A small model without dropout or batch norm; `STRATEGY` and `ACCUMULATE` are filled in.
const EXP: &str = r#"
experiment "pipe" {
  seed 7
  data {
    source synthetic(inputs: normal([16]), targets: randint(4), count: 640)
    batch 32
  }
  model {
    input [16]
    fc1: linear(32)
    tanh
    block mid {
      fc2: linear(24)
      relu
    }
    fc3: linear(4)
  }
  device cpu
  STRATEGY
  optimizer adam(lr: 1e-2)
  train {
    steps 20
    loss cross_entropy
    ACCUMULATE
    checkpoint(every: 20 steps, keep: 1)
  }
}
"#;

/// The tensors of the checkpoint a run of `exp` ends with (parameters and optimizer state).
fn trained(dir: &Path, name: &str, exp: &str, args: &[&str]) -> BTreeMap<String, Vec<f32>> {
    let exp = write(dir, &format!("{name}.exp"), exp);
    let run_dir = dir.join(name);
    let mut all = vec!["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)];
    all.extend(args);
    let o = run(&all);
    assert!(o.status.success(), "{name}: {}", text(&o));
    let (tensors, others) = safetensors_f32(
        &run_dir
            .join("checkpoints")
            .join("step-000000020.safetensors"),
    );
    assert!(others.is_empty(), "every tensor is F32, not {others:?}");
    tensors
}

/// The experiment with a strategy and an accumulation setting (empty for none).
fn experiment(strategy: &str, accumulate: &str) -> String {
    EXP.replace("STRATEGY", strategy)
        .replace("ACCUMULATE", accumulate)
}

/// Asserts that two runs end with the same tensors within 1e-5, and that gradients reached them.
fn same(name: &str, a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{name}"
    );
    // Gradients reached every stage: Adam's first moments are not zero.
    for k in ["fc1", "mid.fc2", "fc3"] {
        let m = &a[&format!("optim/{k}.weight/exp_avg")];
        assert!(m.iter().any(|v| v.abs() > 1e-6), "{name}: {k}");
    }
    for (k, x) in a {
        let y = &b[k];
        assert_eq!(x.len(), y.len(), "{name}: {k}");
        let worst = x
            .iter()
            .zip(y)
            .map(|(u, v)| (u - v).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-5, "{name}: {k} differs by {worst}");
    }
}

#[test]
fn pipelines_train_the_parameters_one_device_trains() {
    let dir = scratch("pipeline");
    let cases = [(2, "gpipe"), (2, "1f1b"), (3, "gpipe"), (3, "1f1b")];
    // The runs are separate processes: they run side by side.
    let (one, runs) = std::thread::scope(|s| {
        let dir = &dir;
        let runs: Vec<_> = cases
            .iter()
            .map(|(stages, schedule)| {
                s.spawn(move || {
                    let name = format!("{stages}-{schedule}");
                    let strategy = format!(
                        "parallel pipeline(stages: {stages}, micro_batches: 4, schedule: {schedule})"
                    );
                    let got = trained(dir, &name, &experiment(&strategy, ""), &[]);
                    (name, got)
                })
            })
            .collect();
        let one = trained(dir, "one", &experiment("", ""), &[]);
        let runs: Vec<_> = runs.into_iter().map(|h| h.join().expect("a run")).collect();
        (one, runs)
    });
    for (name, got) in &runs {
        same(name, &one, got);
    }
}

#[test]
fn a_pipeline_with_gradient_accumulation_trains_as_one_device_does() {
    let dir = scratch("pipeline-accumulate");
    let one = trained(&dir, "one", &experiment("", "accumulate 2"), &[]);
    // The experiment names CUDA; `--device cpu` puts every stage on the CPU.
    let strategy = "parallel pipeline(stages: 3, micro_batches: 4, schedule: 1f1b)";
    let text = experiment(strategy, "accumulate 2").replace("device cpu", "device cuda");
    let got = trained(&dir, "pipe", &text, &["--device", "cpu"]);
    same("accumulate 2", &one, &got);
}

#[test]
fn model_parallel_over_two_placements_trains_as_one_device_does() {
    let dir = scratch("model-parallel");
    let one = trained(&dir, "one", &experiment("", ""), &[]);
    let text = experiment("parallel model\n  place fc3 on cpu", "")
        .replace("block mid {", "block mid on cpu {");
    let got = trained(&dir, "placed", &text, &[]);
    same("model parallel", &one, &got);
}
