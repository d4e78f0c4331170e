//! Compression end to end, with real runs: masks keep pruned weights at zero through training,
//! schedules prune when they say, a resumed pruning run equals an uninterrupted one, the report
//! measures the compressed model against the uncompressed one, and `kiln eval` and
//! `kiln export` remake exactly the model the run measured.

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use support::*;

/// A small classifier on synthetic data (50 steps an epoch) with `compress` and `train`
/// statements filled in.
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

/// Runs `text` to completion in `dir/run`; returns the run directory.
fn finished(dir: &Path, source: &str) -> std::path::PathBuf {
    let exp = write(dir, "small.exp", source);
    let d = dir.join("run");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&d)]);
    assert!(o.status.success(), "{}", text(&o));
    d
}

/// Zeros of `name`'s mask, with a check that the weight is exactly zero wherever the mask is.
fn pruned(t: &BTreeMap<String, Vec<f32>>, name: &str) -> usize {
    let w = &t[&format!("param/{name}")];
    let m = &t[&format!("buffer/{name}_mask")];
    assert_eq!(w.len(), m.len());
    for (i, (w, m)) in w.iter().zip(m).enumerate() {
        assert!(*m == 0.0 || *m == 1.0, "mask entry {i} is {m}");
        if *m == 0.0 {
            assert_eq!(*w, 0.0, "{name}[{i}] is pruned but {w}");
        }
    }
    m.iter().filter(|m| **m == 0.0).count()
}

#[test]
fn pruned_weights_stay_exactly_zero_through_training() {
    let dir = scratch("compress-zero");
    let d = finished(
        &dir,
        &experiment(
            "prune fc1.weight l1_unstructured(amount: 0.5, schedule: before)",
            "steps 60",
        ),
    );
    let (t, _) = checkpoint_tensors(&d);
    // 64 x 32 entries, half of them pruned before the first step and kept at zero by every
    // one of the 60 Adam updates that followed (Adam moves every weight with a gradient).
    assert_eq!(pruned(&t, "fc1.weight"), 1024);
    let r = report(&d);
    let layers = &r["compression"]["layers"];
    assert_eq!(layers[0]["name"].as_str(), Some("fc1"), "{r:?}");
    assert_eq!(layers[0]["sparsity"].as_f64(), Some(0.5));
}

#[test]
fn gradual_pruning_follows_the_cubic_ramp() {
    let dir = scratch("compress-gradual");
    let d = finished(
        &dir,
        &experiment(
            "prune fc1 l1_unstructured(amount: 0.8, schedule: gradual(start: 10 steps, end: 40 steps, every: 10 steps))",
            "steps 60\n    checkpoint(every: 5 steps, keep: 20)",
        ),
    );
    // Masks grow at the boundaries 10, 20, 30 and 40 (before steps 11, 21, ...): a checkpoint
    // written after step k holds the masks of the boundaries before k. Sparsity at boundary t
    // is s_f (1 - (1 - (t - 10) / 30)^3) (Zhu & Gupta, s_i = 0), rounded half to even over the
    // 2048 entries.
    let n = 2048.0_f64;
    let at = |t: f64| {
        let s = 0.8 * (1.0 - (1.0 - (t - 10.0) / 30.0).powi(3));
        (s * n).round_ties_even() as usize
    };
    for (step, expected) in [
        (10, 0),
        (15, at(10.0)),
        (25, at(20.0)),
        (35, at(30.0)),
        (45, at(40.0)),
        (60, at(40.0)),
    ] {
        let (t, _) = safetensors_f32(
            &d.join("checkpoints")
                .join(format!("step-{step:09}.safetensors")),
        );
        assert_eq!(pruned(&t, "fc1.weight"), expected, "after step {step}");
    }
    assert_eq!(at(40.0), 1638);
}

#[test]
fn finetuning_after_pruning_lengthens_the_run_and_reports_before_and_after() {
    let dir = scratch("compress-finetune");
    let d = finished(
        &dir,
        &experiment(
            "prune [fc1, fc2] l1_unstructured(amount: 0.5, schedule: after(finetune: 20 steps))",
            "steps 40",
        ),
    );
    let r = report(&d);
    assert_eq!(r["steps"].as_u64(), Some(60), "{r:?}");
    let (t, _) = checkpoint_tensors(&d);
    assert_eq!(pruned(&t, "fc1.weight"), 1024);
    assert_eq!(pruned(&t, "fc2.weight"), 128);
    let c = &r["compression"];
    let before = c["val"]["before"]["loss"].as_f64().expect("loss before");
    let after = c["val"]["after"]["loss"].as_f64().expect("loss after");
    assert!(
        before.is_finite() && after.is_finite() && before != after,
        "{c:?}"
    );
    // The outcome is the compressed model's.
    assert_eq!(r["val"]["loss"].as_f64(), Some(after));
    assert_eq!(c["latency"][0]["batch"].as_u64(), Some(1), "{c:?}");
    assert_eq!(c["latency"][1]["batch"].as_u64(), Some(256), "{c:?}");
}

#[test]
fn iterative_pruning_runs_its_rounds_and_reaches_the_amount() {
    let dir = scratch("compress-iterative");
    let d = finished(
        &dir,
        &experiment(
            "prune fc1 l1_unstructured(amount: 0.75, schedule: iterative(rounds: 2, rewind: 5 steps))",
            "steps 30",
        ),
    );
    // Two rounds of 25 steps (from step 5 again) after the first 30; each prunes
    // 1 - (1 - 0.75)^(1/2) = 50% of what is left.
    assert_eq!(report(&d)["steps"].as_u64(), Some(80));
    let (t, _) = checkpoint_tensors(&d);
    assert_eq!(pruned(&t, "fc1.weight"), 1536);
    assert!(t.contains_key("buffer/fc1.weight_rewind"));
}

#[test]
fn a_resumed_pruning_run_equals_an_uninterrupted_one() {
    let dir = scratch("compress-resume");
    let source = experiment(
        "prune fc1 l1_unstructured(amount: 0.6, schedule: gradual(start: 20 steps, end: 300 steps, every: 20 steps))\n    quantize fc2 int8(granularity: per_channel)",
        "steps 400\n    checkpoint(every: 20 steps, keep: 2)",
    );
    let exp = write(&dir, "small.exp", &source);
    let whole = dir.join("whole");
    let o = run(&["run", s(&exp), "--quiet", "--run-dir", s(&whole)]);
    assert!(o.status.success(), "{}", text(&o));
    let cut = dir.join("cut");
    killed_run(&exp, &cut, 120);
    let o = run(&["run", s(&exp), "--quiet", "--resume", s(&cut)]);
    assert!(o.status.success(), "{}", text(&o));
    let (a, _) = checkpoint_tensors(&whole);
    let (b, _) = checkpoint_tensors(&cut);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    // A resume restores every tensor, mask, observer and generator exactly: the same
    // computation, bit for bit.
    for (name, x) in &a {
        same_computation(x, &b[name], name);
    }
    let (ra, rb) = (report(&whole), report(&cut));
    same_computation(
        &ra["compression"]["val"],
        &rb["compression"]["val"],
        "compression",
    );
}

#[test]
fn eval_and_export_remake_the_model_the_run_measured() {
    let dir = scratch("compress-eval");
    let d = finished(
        &dir,
        &experiment(
            "prune fc1 l1_unstructured(amount: 0.3, schedule: before)\n    quantize [fc1, fc2] int8(granularity: per_channel)",
            "steps 50",
        ),
    );
    let r = report(&d);
    let after = &r["compression"]["val"]["after"];
    let before = &r["compression"]["val"]["before"];
    let o = run(&["eval", s(&d), "--split", "val", "--uncompressed"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let loss = |v: &serde_yaml::Value| format!("loss {:.6}", v["loss"].as_f64().expect("loss"));
    assert!(
        t.contains(&format!("val (compressed): {}", loss(after))),
        "{t}\n{after:?}"
    );
    assert!(
        t.contains(&format!("val (uncompressed): {}", loss(before))),
        "{t}\n{before:?}"
    );

    let o = run(&["export", s(&d)]);
    assert!(o.status.success(), "{}", text(&o));
    let model = d.join("export").join("model.safetensors");
    let (f32s, others) = safetensors_f32(&model);
    assert!(
        others.contains(&"fc1.weight_int8".to_string()),
        "{others:?}"
    );
    assert!(
        others.contains(&"fc2.weight_int8".to_string()),
        "{others:?}"
    );
    assert!(f32s.contains_key("fc1.bias") && !f32s.contains_key("fc1.weight"));
    let manifest =
        std::fs::read_to_string(d.join("export").join("manifest.yaml")).expect("manifest");
    assert!(manifest.contains("scheme: int8 per_channel"), "{manifest}");
    // An export is never overwritten.
    let before = snapshot(&d.join("export"));
    let o = run(&["export", s(&d)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("never overwrites"), "{}", text(&o));
    assert!(snapshot(&d.join("export")) == before);
}

#[test]
fn quantization_aware_training_keeps_its_observers_and_converts_to_int8() {
    let dir = scratch("compress-qat");
    let d = finished(
        &dir,
        &experiment("quantize fc1 qat(granularity: per_channel)", "steps 50"),
    );
    let (t, _) = checkpoint_tensors(&d);
    let min = &t["buffer/fc1.weight_fake_quant.min_val"];
    assert_eq!(min.len(), 64);
    assert!(min.iter().all(|v| v.is_finite() && *v < 0.0), "{min:?}");
    assert!(t["buffer/fc1.activation_post_process.max_val"][0] > 0.0);
    let c = &report(&d)["compression"];
    let before = c["val"]["before"]["loss"].as_f64().expect("before");
    let after = c["val"]["after"]["loss"].as_f64().expect("after");
    // The int8 model computes what training's fake quantization computed, up to summation
    // order.
    assert!(
        (before - after).abs() < 1e-3 * before,
        "{before} vs {after}"
    );
    assert!(c["layers"][0]["method"]
        .as_str()
        .expect("method")
        .contains("qat"));
}

#[test]
fn structured_pruning_of_a_residual_model_removes_the_same_units_on_both_sides_of_the_add() {
    let dir = scratch("compress-residual");
    let source = experiment(
        "prune res.fc2 ln_structured(amount: 0.5, schedule: before)",
        "steps 30",
    )
    .replace(
        "    fc1: linear(64)\n    relu\n    fc2: linear(4)",
        "    fc0: linear(32)\n    res: residual {\n      fc1: linear(64)\n      relu\n      fc2: linear(32)\n    }\n    relu\n    fc3: linear(4)",
    );
    let d = finished(&dir, &source);
    let (t, _) = checkpoint_tensors(&d);
    // fc0 and fc2 are joined by the residual's add: they lose the same 16 of their 32 units,
    // and their biases with them.
    let rows = |name: &str| -> Vec<bool> {
        let m = &t[&format!("buffer/{name}_mask")];
        let width = m.len() / 32;
        m.chunks(width)
            .map(|r| r.iter().all(|v| *v == 1.0))
            .collect()
    };
    let kept = rows("res.fc2.weight");
    assert_eq!(kept.iter().filter(|k| **k).count(), 16);
    assert_eq!(rows("fc0.weight"), kept);
    assert_eq!(rows("fc0.bias"), kept);
    assert_eq!(rows("res.fc2.bias"), kept);
    pruned(&t, "fc0.weight");
    pruned(&t, "res.fc2.weight");

    // The compressed model is the smaller one, shaped as `kiln plan` costs it.
    let r = report(&d);
    let layers = r["compression"]["layers"].as_sequence().expect("layers");
    let shape = |name: &str| -> Vec<u64> {
        let l = layers
            .iter()
            .find(|l| l["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {layers:?}"));
        l["shape_after"]
            .as_sequence()
            .expect("shape")
            .iter()
            .map(|v| v.as_u64().expect("size"))
            .collect()
    };
    assert_eq!(shape("fc0"), [16, 32]);
    assert_eq!(shape("res.fc2"), [16, 64]);
    assert_eq!(shape("res.fc1"), [64, 16]);
    assert_eq!(shape("fc3"), [4, 16]);
    let exp = dir.join("small.exp");
    let o = run(&["plan", s(&exp), "--format", "yaml"]);
    assert!(o.status.success(), "{}", text(&o));
    let plan: serde_yaml::Value = serde_yaml::from_slice(&o.stdout).expect("plan yaml");
    assert_eq!(
        plan["compression"]["model_bytes_after"].as_u64(),
        r["compression"]["bytes_after"].as_u64(),
        "{plan:?}"
    );
    // The smaller model runs: evaluated again from the checkpoint, it gives the report's metrics.
    let o = run(&["eval", s(&d), "--split", "val"]);
    assert!(o.status.success(), "{}", text(&o));
    let after = r["compression"]["val"]["after"]["loss"]
        .as_f64()
        .expect("loss");
    assert!(
        text(&o).contains(&format!("loss {after:.6}")),
        "{}",
        text(&o)
    );
}

#[test]
fn the_plan_and_the_report_count_the_same_bytes() {
    // `kiln plan` counted one 4-byte scale and zero point per tensor and no padding, where the
    // runtime stores a bf16 scale and an int32 zero point per output and pads the inputs to a
    // multiple of 16: the plan said 1.79 KiB and the report 2.91 KiB for this model. Both now
    // count the tensors the compressed layers are stored as.
    let dir = scratch("compress-bytes");
    let source = experiment(
        "quantize fc1 int8(granularity: per_tensor, symmetric: false)\n    quantize fc2 int8(activations: dynamic)",
        "steps 10",
    )
    .replace("normal([32])", "normal([20])")
    .replace("input [32]", "input [20]");
    let d = finished(&dir, &source);
    let r = report(&d);
    let o = run(&["plan", s(&dir.join("small.exp")), "--format", "yaml"]);
    assert!(o.status.success(), "{}", text(&o));
    let plan: serde_yaml::Value = serde_yaml::from_slice(&o.stdout).expect("plan yaml");
    let (p, c) = (&plan["compression"], &r["compression"]);
    assert_eq!(
        p["model_bytes_after"].as_u64(),
        c["bytes_after"].as_u64(),
        "{p:?}\n{c:?}"
    );
    assert_eq!(p["model_bytes_before"].as_u64(), c["bytes_before"].as_u64());
    for (i, name) in ["fc1", "fc2"].into_iter().enumerate() {
        assert_eq!(p["layers"][i]["layer"].as_str(), Some(name));
        assert_eq!(c["layers"][i]["name"].as_str(), Some(name));
        assert_eq!(
            p["layers"][i]["bytes_after"].as_u64(),
            c["layers"][i]["bytes_after"].as_u64(),
            "{name}"
        );
    }
    // fc1: 64 x 20 int8 padded to 64 x 32, 64 bf16 scales, 64 int32 zero points, 64 fp32
    // biases; fc2: 4 x 64 int8, 4 fp32 scales, 4 fp32 biases.
    assert_eq!(
        p["layers"][0]["bytes_after"].as_u64(),
        Some(64 * 32 + 2 * 64 + 4 * 64 + 4 * 64)
    );
    assert_eq!(p["layers"][1]["bytes_after"].as_u64(), Some(256 + 16 + 16));
}
