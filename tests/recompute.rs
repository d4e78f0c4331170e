//! Activation checkpointing (`recompute` on a block, a residual or a layer), end to end with real
//! runs: a run that recomputes equals the run that keeps every activation, step by step and in
//! its final weights (dropout included: the recomputation draws the same masks), with no
//! strategy, under DDP at world size 2, on two CPU replicas and in a pipeline; `kiln plan`
//! counts the activations it saves; the checker refuses the layers whose forward must not run
//! twice.
//!
//! Runs in two processes are compared within a relative 1e-6, never bit for bit.

mod support;

use std::path::Path;

use support::*;

/// A two-block transformer with dropout; `mark` follows the `block` (or a layer: see the
/// callers) and `parallel` is a `parallel` statement or nothing.
fn transformer(block: &str, layer: &str, parallel: &str) -> String {
    format!(
        r#"
experiment "recompute" {{
  seed 7
  data {{
    source synthetic(inputs: randint(16, shape: [32]), targets: argmax(), count: 2048)
    split(train: 0.9, val: 0.1)
    batch 64
  }}
  model {{
    input [32]
    embed: embedding(16, 32)
    pos: sinusoidal
    block encoder {block} {{
      layer1: transformer_block(heads: 4, hidden: 64, dropout: 0.1)
      layer2: transformer_block(heads: 4, hidden: 64, dropout: 0.1) {layer}
    }}
    residual {layer} {{
      linear(64)
      gelu
      dropout(0.2)
      linear(32)
    }}
    norm: layernorm
    mean(dim: 0)
    head: linear(32)
  }}
  device cpu
  {parallel}
  optimizer adamw(lr: 1e-3)
  train {{
    steps 25
    loss cross_entropy
    clip_norm 1.0
  }}
}}
"#
    )
}

/// Runs `text` into `dir` and returns its losses and final weights.
fn train(
    dir: &Path,
    name: &str,
    file: &str,
) -> (Vec<f64>, std::collections::BTreeMap<String, Vec<f32>>) {
    let exp = write(dir, &format!("{name}.exp"), file);
    let run_dir = dir.join(name);
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&run_dir)]);
    assert!(o.status.success(), "{name}: {}", text(&o));
    let (weights, _) = safetensors_f32(&run_dir.join("weights.safetensors"));
    (step_losses(&run_dir), weights)
}

/// Asserts that two runs computed the same steps and weights, within a relative 1e-6.
fn same_run(
    a: &(Vec<f64>, std::collections::BTreeMap<String, Vec<f32>>),
    b: &(Vec<f64>, std::collections::BTreeMap<String, Vec<f32>>),
    what: &str,
) {
    same_within(a, b, what, 1e-6);
}

/// Asserts that two runs computed the same steps and weights, within `tolerance` relative.
fn same_within(
    a: &(Vec<f64>, std::collections::BTreeMap<String, Vec<f32>>),
    b: &(Vec<f64>, std::collections::BTreeMap<String, Vec<f32>>),
    what: &str,
    tolerance: f64,
) {
    assert_eq!(a.0.len(), 25, "{what}");
    assert_eq!(a.0.len(), b.0.len(), "{what}");
    for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
        assert!(
            (x - y).abs() <= tolerance * x.abs().max(1e-12),
            "{what}: step {}: loss {x} against {y}",
            i + 1
        );
    }
    assert_eq!(
        a.1.keys().collect::<Vec<_>>(),
        b.1.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (name, x) in &a.1 {
        let y = &b.1[name];
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
        let worst = x.iter().zip(y).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            f64::from(worst) <= tolerance * f64::from(scale),
            "{what}: {name} off by {worst} of {scale}"
        );
    }
}

#[test]
fn recomputed_layers_train_as_the_layers_that_keep_their_activations() {
    let dir = scratch("recompute-equal");
    let kept = train(&dir, "kept", &transformer("", "", ""));
    let block = train(&dir, "block", &transformer("recompute", "", ""));
    same_run(&kept, &block, "a recomputed block");
    let layers = train(&dir, "layers", &transformer("", "recompute", ""));
    same_run(&kept, &layers, "a recomputed layer and residual");

    // Under DDP (2 ranks, Gloo), the Reducer's hooks fire on the recomputed gradients.
    let ddp = "parallel ddp(backend: gloo, world_size: 2)";
    let kept = train(&dir, "ddp-kept", &transformer("", "", ddp));
    let block = train(&dir, "ddp-block", &transformer("recompute", "", ddp));
    same_run(&kept, &block, "a recomputed block under DDP");

    // Two CPU replicas run at once, each drawing its dropout keys from a stream of its own: the
    // run is the same every time, and recomputation in one replica leaves the other's masks
    // (another mask would move the loss by far more than 1e-5). Two replicas computing at once
    // share the cores, and libtorch's kernels may split a sum between threads differently from
    // one run to the next: the last bits can differ (measured: 1.1e-6 relative in a bias).
    let replicas = "parallel data(devices: [cpu, cpu])";
    let kept = train(&dir, "replicas-kept", &transformer("", "", replicas));
    let again = train(&dir, "replicas-again", &transformer("", "", replicas));
    same_within(&kept, &again, "two CPU replicas, run twice", 1e-5);
    let block = train(
        &dir,
        "replicas-block",
        &transformer("recompute", "", replicas),
    );
    same_within(
        &kept,
        &block,
        "a recomputed block on two CPU replicas",
        1e-5,
    );

    // In a pipeline (GPipe: every micro-batch's forward before any backward), each group's
    // recomputation finds its own input and its stage's dropout keys, while the other stage
    // draws its own or recomputes too.
    let pipeline = "parallel pipeline(stages: 2, micro_batches: 4)";
    let kept = train(&dir, "pipeline-kept", &transformer("", "", pipeline));
    let layers = train(
        &dir,
        "pipeline-layers",
        &transformer("", "recompute", pipeline),
    );
    same_run(&kept, &layers, "recomputed layers in a pipeline");
}

#[test]
fn the_plan_counts_what_recomputation_keeps_and_the_checker_refuses_what_must_not_run_twice() {
    let dir = scratch("recompute-plan");
    let model = |mark: &str, extra: &str| {
        format!(
            r#"
experiment "plan" {{
  data {{
    source synthetic(inputs: normal([8]), targets: randint(4), count: 100)
    batch 10
  }}
  model {{
    input [8]
    block body {mark} {{
      linear(100)
      relu
      linear(50)
      {extra}
    }}
    linear(4)
  }}
  device cpu
  optimizer sgd(lr: 0.1)
  train {{ steps 2; loss cross_entropy }}
}}
"#
        )
    };
    // Per sample, in bytes: the batch (32); relu keeps its output (400), the head the block's
    // output (200). The widest moment is relu's backward: the batch, relu's output, the gradient
    // reaching it and the one it makes (400 each): 1,232, 12.03 KiB for 10 samples. Recomputed,
    // the block keeps its output and makes relu's again in backward, where the same moment
    // comes: two blocks tell the difference (below).
    let plan = |file: &str| {
        let exp = write(&dir, "plan.exp", file);
        let o = run(&["plan", s(&exp)]);
        assert!(o.status.success(), "{}", text(&o));
        let line = text(&o)
            .lines()
            .find(|l| l.starts_with("activations"))
            .expect("an activations line")
            .to_string();
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    assert_eq!(
        plan(&model("", "")),
        "activations 12.03 KiB per batch of 10"
    );
    let two = |mark: &str| {
        model(mark, "").replace(
            "    linear(4)\n",
            &format!("    block tail {mark} {{\n      linear(100)\n      relu\n      linear(4)\n    }}\n"),
        )
    };
    // Kept: the two relus' outputs (400 each) and the first block's output (200): 1,000 bytes a
    // sample; at the second relu's backward, with the batch and two gradients of 400: 1,832,
    // 17.89 KiB for 10 samples. Recomputed, the blocks keep the first one's output (200) and
    // each makes its own again when backward reaches it (the first block 600, the second 400):
    // at the first block's relu, the batch, 200, 600 and two gradients of 400: 1,432, 13.98 KiB.
    assert_eq!(plan(&two("")), "activations 17.89 KiB per batch of 10");
    assert_eq!(
        plan(&two("recompute")),
        "activations 13.98 KiB per batch of 10 (recompute; 17.89 KiB without)"
    );

    // A device that the plan overflows: the error says that recomputing the blocks fits. With
    // 200 samples a batch the activations outweigh the gradients: 482.26 KiB kept, 443.78 KiB
    // recomputed (the backward peaks, with the weights and the allocator's margin).
    let big = two("")
        .replace("batch 10", "batch 200")
        .replace("count: 100", "count: 1000");
    let exp = write(&dir, "tight.exp", &big);
    let o = run(&["check", s(&exp), "--device-memory", "cpu=460KiB"]);
    let t = flat(&text(&o));
    assert!(t.contains("K0228(does-not-fit)"), "{t}");
    assert!(
        t.contains("it fits with `recompute` after block `body`, `tail` ("),
        "{t}"
    );

    // `kiln check` of `file` fails with K0210, saying `says`.
    let refused = |name: &str, file: &str, says: &str| {
        let exp = write(&dir, name, file);
        let o = run(&["check", s(&exp)]);
        let t = flat(&text(&o));
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains("K0210") && t.contains(says), "{says}: {t}");
    };
    // A batch norm inside a recomputed group would update its statistics twice a step.
    refused(
        "norm.exp",
        &model("recompute", "bn: batchnorm1d"),
        "the batch norm `body.bn` is in a group whose forward runs twice a step",
    );
    // So would quantization-aware training's observers.
    let qat = model("recompute", "").replace(
        "  train {",
        "  compress {\n    quantize [body.0] qat(granularity: per_channel)\n  }\n  train {",
    );
    refused(
        "qat.exp",
        &qat,
        "quantization-aware training cannot run with recomputed layers",
    );
    // Replicas that share libtorch's generator for their masks (CPU replicas in bf16) would not
    // find it as the forward left it when backward draws the masks again.
    let shared = transformer("recompute", "", "parallel data(devices: [cpu, cpu])").replace(
        "    clip_norm 1.0\n",
        "    clip_norm 1.0\n    precision bf16\n",
    );
    refused(
        "shared.exp",
        &shared,
        "a recomputed group with dropout cannot run under this `parallel data`",
    );
    let fp32 = write(
        &dir,
        "fp32.exp",
        &transformer("recompute", "", "parallel data(devices: [cpu, cpu])"),
    );
    assert!(run(&["check", s(&fp32)]).status.success());

    // `recompute` once, with `on DEVICE` in either order; anything else after a layer is refused.
    for (trailing, ok) in [
        ("recompute on cpu", true),
        ("on cpu recompute", true),
        ("recompute recompute", false),
        ("recompute later", false),
    ] {
        let exp = write(&dir, "words.exp", &model(trailing, ""));
        let o = run(&["check", s(&exp)]);
        assert_eq!(o.status.success(), ok, "{trailing}: {}", text(&o));
    }
}
