//! The options PyTorch users reach for under every parallel strategy: one experiment with a
//! padding id (its mask crosses the pipeline's stage boundary), learned positions, a post-norm
//! transformer block, parameter groups, `one_cycle`, `drop_last` and `eval_batch` records the
//! same rates, losses and validation metrics under in-process data parallelism, the pipeline and
//! two-process DDP as on one device.

mod support;

use serde_json::Value;
use support::parity::{self, json_lines, worst};
use support::{scratch, within_one_sample, write};

/// The experiment under `parallel` (empty for one device).
fn experiment(name: &str, parallel: &str) -> String {
    format!(
        r#"experiment "{name}" {{
  seed 5
  data {{
    source synthetic(inputs: randint(6, shape: [8]), targets: argmax(), count: 600)
    split(train: 0.8, val: 0.2)
    batch 20
    drop_last true
    eval_batch 7
  }}
  model {{
    input [8]
    block stage1 {{
      embed: embedding(6, 16, pad: 0)
      pos: positional(max_len: 8)
      block1: transformer_block(2, hidden: 32, dropout: 0, norm: post)
    }}
    block stage2 {{
      norm: layernorm
      mean(0)
      head: linear(8)
    }}
  }}
  device cpu
  {parallel}
  optimizer adamw(lr: 1e-2, weight_decay: 0.1, groups: [group(biases, norms, embeddings, weight_decay: 0)])
  schedule one_cycle(max_lr: 2e-2)
  train {{
    steps 40
    loss cross_entropy
    metrics [accuracy]
    eval_every 10 steps
  }}
}}
"#
    )
}

/// One run's rates, losses and validation records.
struct Records {
    lrs: Vec<f64>,
    losses: Vec<f64>,
    validations: Vec<Value>,
}

fn records(dir: &std::path::Path, name: &str, parallel: &str) -> Records {
    let file = write(dir, &format!("{name}.exp"), &experiment(name, parallel));
    let run_dir = dir.join(name);
    let steps = parity::train(&file, None, &run_dir);
    let validations = json_lines(&run_dir.join("metrics.jsonl"))
        .into_iter()
        .filter(|v| v.get("train_loss").is_none())
        .map(|v| serde_json::json!([v["loss"], v["accuracy"]]))
        .collect();
    Records {
        lrs: steps.lrs,
        losses: steps.losses,
        validations,
    }
}

#[test]
fn every_strategy_records_what_one_device_records() {
    let dir = scratch("strategy-options");
    let one = records(&dir, "single", "");
    // 480 training samples in batches of 20: 24 full batches, so 40 steps cross an epoch.
    assert_eq!(one.losses.len(), 40);
    assert_eq!(one.validations.len(), 4, "{:?}", one.validations);
    for (name, parallel) in [
        ("data", "parallel data(devices: [cpu, cpu])"),
        ("pipeline", "parallel pipeline(stages: 2, micro_batches: 4)"),
        ("ddp", "parallel ddp(backend: gloo, world_size: 2)"),
    ] {
        let got = records(&dir, name, parallel);
        // `one_cycle`'s rate is a function of the step alone, computed in f64 by the same code:
        // equal bit for bit whatever the strategy.
        assert_eq!(got.lrs, one.lrs, "{name}: the rates differ");
        let (step, diff) = worst(&got.losses, &one.losses);
        assert!(
            got.losses.len() == one.losses.len() && diff < 1e-5,
            "{name}: the loss of step {step} differs by {diff:e}"
        );
        for (a, b) in got.validations.iter().zip(&one.validations) {
            let (la, lb) = (a[0].as_f64().expect("loss"), b[0].as_f64().expect("loss"));
            assert!(
                (la - lb).abs() <= 1e-5 * lb.abs(),
                "{name}: validation {a} against one device's {b}"
            );
            // 120 validation samples.
            let accuracy = |v: &Value| v[1].as_f64().expect("accuracy");
            within_one_sample(accuracy(a), accuracy(b), 120, name);
        }
    }
}
