//! Data parallel in one process, end to end: after 20 steps, replicas on the CPU leave the same
//! parameters as a single-device run of the same experiment on the full batch (within 1e-5),
//! with plain SGD, momentum, Adam and gradient accumulation, and with batches that do not
//! divide evenly among the replicas.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use kiln::ir::{Device, Parallel};
use support::*;

/// A tiny classifier without dropout or batch norm; `STRATEGY`, `OPTIMIZER`, `COUNT` and
/// `ACCUMULATE` are filled in by each case.
const EXPERIMENT: &str = r#"
experiment "dp" {
  seed 7
  data {
    source synthetic(inputs: normal([12]), targets: randint(3), count: COUNT)
    batch 24
  }
  model {
    input [12]
    fc1: linear(16)
    tanh
    fc2: linear(3)
  }
  device cpu
  STRATEGY
  optimizer OPTIMIZER
  train {
    steps 20
    loss cross_entropy
    accumulate ACCUMULATE
    checkpoint(every: 20 steps, keep: 1)
  }
}
"#;

/// The `f32` tensors of the newest checkpoint of `run`, by name.
fn tensors(run: &Path) -> BTreeMap<String, Vec<f32>> {
    checkpoint_tensors(run).0
}

/// Runs the experiment with `strategy` and returns its final checkpoint's tensors.
fn trained(
    dir: &Path,
    name: &str,
    strategy: &str,
    optimizer: &str,
    count: u32,
    accumulate: u32,
) -> BTreeMap<String, Vec<f32>> {
    let source = EXPERIMENT
        .replace("STRATEGY", strategy)
        .replace("OPTIMIZER", optimizer)
        .replace("COUNT", &count.to_string())
        .replace("ACCUMULATE", &accumulate.to_string());
    let exp = write(dir, &format!("{name}.exp"), &source);
    let run_dir = dir.join(name);
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(o.status.success(), "{name}: {}", text(&o));
    assert!(!text(&o).contains("not applied"), "{}", text(&o));
    assert_eq!(report(&run_dir)["steps"].as_u64(), Some(20), "{name}");
    tensors(&run_dir)
}

/// The largest difference between the parameters of two checkpoints (every parameter present
/// in both, with the same size).
fn max_difference(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>) -> f32 {
    let params: Vec<&String> = a.keys().filter(|k| k.starts_with("param/")).collect();
    assert_eq!(params.len(), 4, "{:?}", a.keys());
    let mut worst = 0f32;
    for k in params {
        let (x, y) = (&a[k], &b[k]);
        assert_eq!(x.len(), y.len(), "{k}");
        for (x, y) in x.iter().zip(y) {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

/// Each case against a single-device run of the same experiment.
fn equivalent(name: &str, optimizer: &str, count: u32, accumulate: u32) {
    let dir = scratch(&format!("dp-{name}"));
    let one = trained(&dir, "one", "parallel none", optimizer, count, accumulate);
    // The run changed the weights: the comparison is not between two initialisations.
    let init = trained(
        &dir,
        "init",
        "parallel none",
        "sgd(lr: 1e-12)",
        count,
        accumulate,
    );
    assert!(
        max_difference(&init, &one) > 1e-3,
        "{name}: nothing trained"
    );
    // Batch 24 divides into 2 and 4 replicas, with or without 2 accumulation steps.
    for (label, strategy) in [
        ("two", "parallel data(devices: [cpu, cpu])"),
        ("four", "parallel data(replicas: 4)"),
    ] {
        let dp = trained(&dir, label, strategy, optimizer, count, accumulate);
        let d = max_difference(&one, &dp);
        assert!(
            d < 1e-5,
            "{name}, {label} replicas: parameters differ by {d}"
        );
    }
}

#[test]
fn replicas_match_one_device_with_sgd() {
    equivalent("sgd", "sgd(lr: 0.1)", 480, 1);
}

#[test]
fn replicas_match_one_device_with_momentum_and_accumulation() {
    // 130 samples: every sixth batch has 10, split unevenly among the replicas.
    equivalent("momentum", "sgd(lr: 0.05, momentum: 0.9)", 130, 2);
}

#[test]
fn replicas_match_one_device_with_adam() {
    equivalent("adam", "adam(lr: 1e-2)", 480, 1);
}

/// The checked strategy of the experiment with `strategy`, `device` and `accumulate`, or the
/// codes of its diagnostics.
fn checked(strategy: &str, device: &str, accumulate: u32) -> Result<Parallel, Vec<String>> {
    let text = EXPERIMENT
        .replace("STRATEGY", strategy)
        .replace("device cpu", &format!("device {device}"))
        .replace("OPTIMIZER", "sgd(lr: 0.1)")
        .replace("COUNT", "480")
        .replace("ACCUMULATE", &accumulate.to_string());
    let c = kiln::check::check_text("dp.exp", text);
    if c.has_errors() || !c.diagnostics.is_empty() {
        return Err(c
            .diagnostics
            .iter()
            .map(|d| format!("{}: {}", d.code.code(), d.message))
            .collect());
    }
    Ok(c.trials[0].parallel.clone())
}

fn devices(p: &Parallel) -> Vec<Device> {
    match p {
        Parallel::Data { devices, .. } => devices.clone(),
        other => panic!("not data parallel: {other:?}"),
    }
}

#[test]
fn devices_may_repeat_and_replicas_go_on_the_experiments_device() {
    let p = checked("parallel data(devices: [cpu, cpu])", "cpu", 1).expect("clean");
    assert_eq!(devices(&p), vec![Device::Cpu; 2]);
    assert_eq!(p.data_parallel_size(), 2);
    let p = checked(
        "parallel data(devices: [cuda:0, cuda:2, cuda:0])",
        "cuda",
        1,
    )
    .expect("clean");
    assert_eq!(
        devices(&p),
        vec![Device::Cuda(0), Device::Cuda(2), Device::Cuda(0)]
    );
    let p = checked("parallel data(replicas: 4)", "cpu", 1).expect("clean");
    assert_eq!(devices(&p), vec![Device::Cpu; 4]);
    let p = checked("parallel data(replicas: 2)", "cuda:1", 1).expect("clean");
    assert_eq!(devices(&p), vec![Device::Cuda(1); 2]);
}

#[test]
fn replicas_count_in_the_batch_arithmetic() {
    // Batch 24 = micro-batch x 2 accumulation steps x replicas: 4 replicas leave 3 samples
    // each, 8 replicas (listed or counted) do not divide it.
    assert!(checked("parallel data(replicas: 4)", "cpu", 2).is_ok());
    for strategy in [
        "parallel data(replicas: 8)",
        "parallel data(devices: [cpu, cpu, cpu, cpu, cpu, cpu, cpu, cpu])",
    ] {
        let e = checked(strategy, "cpu", 2).expect_err("indivisible");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("K0205"), "{e:?}");
        assert!(e[0].contains("2 accumulation steps x 8 replicas"), "{e:?}");
    }
    // Devices and a count together are refused, even when they agree.
    let e = checked("parallel data(devices: [cpu, cpu], replicas: 2)", "cpu", 1)
        .expect_err("both given");
    assert!(e[0].starts_with("K0210"), "{e:?}");
}

#[test]
fn kiln_plan_adds_up_replicas_on_one_device() {
    // Four CPU replicas of 12*16 + 16 + 16*3 + 3 = 259 parameters: 4 x 1,036 bytes of weights
    // and as many of gradients; plain SGD keeps no state; batch 24 in slices of 6. Per sample:
    // the batch (48 bytes), tanh's output (64), and at tanh's backward the gradient reaching it
    // and the one it makes (64 each): 240, 1,440 bytes per replica, 5,760 in all; the allocator's
    // margin, a [16] activation of the evaluation batch of 24: 1,536; 15,584 bytes in all.
    let dir = scratch("dp-plan");
    let source = EXPERIMENT
        .replace("STRATEGY", "parallel data(replicas: 4)")
        .replace("OPTIMIZER", "sgd(lr: 0.1)")
        .replace("COUNT", "480")
        .replace("ACCUMULATE", "1");
    let exp = write(&dir, "dp.exp", &source);
    let o = run(&["plan", s(&exp)]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("data over 4 replicas [cpu, cpu, cpu, cpu]"),
        "{t}"
    );
    assert!(
        t.contains("cpu      15.22 KiB  = weights 4.05 KiB + gradients 4.05 KiB + optimizer 0 B + activations 5.62 KiB + allocator margin 1.50 KiB"),
        "{t}"
    );
}

#[test]
fn device_flag_puts_every_replica_on_one_device() {
    // The source article's four GPUs become four CPU replicas with `--device cpu`.
    let dir = scratch("dp-device-flag");
    let run_dir = dir.join("run");
    let o = run(&[
        "run",
        "experiments/article_data_parallel.exp",
        "--device",
        "cpu",
        "--max-steps",
        "3",
        "--run-dir",
        s(&run_dir),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("not applied"), "{t}");
    let r = report(&run_dir);
    assert_eq!(r["steps"].as_u64(), Some(3), "{t}");
    assert_eq!(
        r["devices"],
        serde_yaml::from_str::<serde_yaml::Value>("[cpu]").expect("YAML")
    );
}

#[test]
fn a_non_finite_loss_on_the_replicas_stops_at_the_same_step_as_one_device() {
    // Plain SGD on a regression with a learning rate far too large diverges geometrically; one
    // device reaches an infinite loss at step 12 (tests/run.rs), and so do two replicas.
    let dir = scratch("dp-nan");
    let exp = write(
        &dir,
        "nan.exp",
        r#"experiment "nan" {
  data {
    source synthetic(inputs: normal([16]), targets: normal([4]), count: 512)
    batch 32
    shuffle false
  }
  model {
    input [16]
    fc: linear(4)
  }
  device cpu
  parallel data(replicas: 2)
  optimizer sgd(lr: 100)
  train {
    steps 20
    loss mse
    checkpoint(every: 1 steps)
  }
}
"#,
    );
    let run_dir = dir.join("run");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
    let t = flat(&text(&o));
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("K0504(non-finite-loss)"), "{t}");
    assert!(t.contains("the loss became infinite at step 12"), "{t}");
    assert_eq!(checkpoint_intact(&run_dir).0, 11);
}

#[test]
fn batch_norm_keeps_replica_zeros_running_statistics() {
    // One step over two replicas, batch 8: replica 0 normalises the first 4 samples, and the
    // running statistics kept are those. A one-device run with batch 4 sees the same 4 samples
    // (the epoch's order does not depend on the batch) with the same initial weights.
    let dir = scratch("dp-batchnorm");
    let source = |batch: u32, strategy: &str| {
        format!(
            r#"experiment "bn" {{
  seed 11
  data {{
    source synthetic(inputs: normal([6]), targets: randint(3), count: 64)
    batch {batch}
  }}
  model {{
    input [6]
    fc1: linear(5)
    bn: batchnorm1d
    fc2: linear(3)
  }}
  device cpu
  {strategy}
  optimizer sgd(lr: 0.1)
  train {{
    steps 1
    loss cross_entropy
    checkpoint(every: 1 steps, keep: 1)
  }}
}}
"#
        )
    };
    let mut stats = Vec::new();
    for (name, batch, strategy) in [
        ("two", 8, "parallel data(replicas: 2)"),
        ("half", 4, "parallel none"),
        ("whole", 8, "parallel none"),
    ] {
        let exp = write(&dir, &format!("{name}.exp"), &source(batch, strategy));
        let run_dir = dir.join(name);
        let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let t = tensors(&run_dir);
        let mean = t
            .iter()
            .find(|(k, _)| k.ends_with("bn.running_mean"))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name}: no running mean in {:?}", t.keys()));
        stats.push(mean);
    }
    let differ = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(differ(&stats[0], &stats[1]) < 1e-6, "{stats:?}");
    assert!(differ(&stats[0], &stats[2]) > 1e-4, "{stats:?}");
}
