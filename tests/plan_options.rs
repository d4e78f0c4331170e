//! `kiln plan` shows the learning-rate schedule with every parameter resolved (nested
//! `sequence` schedules included), the evaluation batch's activations in the memory estimate,
//! each split's own source and whether the optimizer is fused, in its text and its YAML.

use kiln::plan::{plan, Plan};
use kiln::present::plan::to_text;

/// The plan of a small experiment with `data` lines and a `schedule` line.
fn plan_with(data: &str, schedule: &str, optimizer: &str) -> Plan {
    let text = format!(
        r#"experiment "opts" {{
  data {{
    source synthetic(inputs: normal([12]), targets: randint(3), count: 96)
{data}
  }}
  model {{
    input [12]
    fc1: linear(16)
    tanh
    fc2: linear(3)
  }}
  device cpu
  optimizer {optimizer}
  {schedule}
  train {{
    steps 100
    loss cross_entropy
  }}
}}
"#
    );
    let checked = kiln::check::check_text("opts.exp", text);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    plan(&checked.trials[0])
}

fn yaml(p: &Plan) -> serde_yaml::Value {
    serde_yaml::from_str(&serde_yaml::to_string(p).expect("plan as YAML")).expect("YAML")
}

#[test]
fn the_plan_says_whether_the_optimizer_is_fused() {
    for (optimizer, fused) in [
        ("adamw(lr: 1e-3)", true),
        ("sgd(lr: 0.1, fused: false)", false),
        ("rmsprop(lr: 1e-3)", false),
    ] {
        let p = plan_with("    batch 32", "", optimizer);
        let name = optimizer.split('(').next().unwrap_or_default();
        let line = format!("fp32  {name}{}\n", if fused { " (fused)" } else { "" });
        let text = to_text(&p);
        assert!(text.contains(&line), "{optimizer}: {text}");
        assert_eq!(
            yaml(&p)["optimizer_fused"],
            serde_yaml::Value::Bool(fused),
            "{optimizer}"
        );
    }
}

#[test]
fn nested_schedules_show_their_resolved_parameters() {
    let p = plan_with(
        "    batch 8",
        "schedule sequence([warmup(length: 10), cosine(min_lr: 1e-4)], milestones: [10])",
        "sgd(lr: 0.1)",
    );
    let text = to_text(&p);
    for line in [
        "schedule   sequence, milestones [10 steps]\n",
        // The default ramp is said in words, not as a formula.
        "           0. from the start: warmup(length: 10 steps, start_factor: none: lr / 10 at step 1, reaching lr at step 10)\n",
        "           1. from 10 steps: cosine(warmup: none, min_lr: 0.0001)\n",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    let y = yaml(&p);
    let s = &y["schedule"];
    assert_eq!(s["name"], "sequence");
    assert_eq!(s["milestones"][0], "10 steps");
    assert_eq!(s["schedules"][0]["name"], "warmup");
    assert_eq!(s["schedules"][0]["length"], "10 steps");
    assert_eq!(
        s["schedules"][0]["start_factor"],
        "none: lr / 10 at step 1, reaching lr at step 10"
    );
    assert!(!text.contains("(step + 1) / length"), "{text}");
    assert_eq!(s["schedules"][1]["name"], "cosine");
    assert_eq!(s["schedules"][1]["min_lr"].as_f64(), Some(1e-4));

    // one_cycle with its defaults written out; momentum cycles under Adam.
    let p = plan_with(
        "    batch 8",
        "schedule one_cycle(max_lr: 0.01)",
        "adam(lr: 1e-3)",
    );
    let text = to_text(&p);
    let want = "schedule   one_cycle(max_lr: 0.01, pct_start: 0.3, div_factor: 25, final_div_factor: 10000, three_phase: false, anneal: cos, cycle_momentum: true, base_momentum: 0.85, max_momentum: 0.95)\n";
    assert!(text.contains(want), "{text}");
    let y = yaml(&p);
    assert_eq!(y["schedule"]["pct_start"].as_f64(), Some(0.3));
    assert_eq!(y["schedule"]["cycle_momentum"].as_bool(), Some(true));

    // No schedule: constant.
    let p = plan_with("    batch 8", "", "sgd(lr: 0.1)");
    assert!(to_text(&p).contains("schedule   constant()\n"));
    assert_eq!(yaml(&p)["schedule"]["name"], "constant");

    // reduce_on_plateau, its mode following the metric.
    let p = plan_with(
        "    split(train: 0.8, val: 0.2)\n    batch 8",
        "schedule reduce_on_plateau(monitor: val_accuracy)",
        "sgd(lr: 0.1)",
    );
    assert!(
        to_text(&p).contains("schedule   reduce_on_plateau(monitor: val_accuracy, mode: max, factor: 0.1, patience: 10, threshold: 0.0001, threshold_mode: rel, cooldown: 0, min_lr: 0)\n"),
        "{}",
        to_text(&p)
    );
}

#[test]
fn a_large_evaluation_batch_dominates_the_memory() {
    // Without gradients an evaluation holds, per sample, the input (12) and the widest layer's
    // input and output (tanh: 16 + 16): 44 values, 176 bytes. Training, per sample: the batch
    // (48 bytes) and tanh's output (64), and at tanh's backward the gradient reaching it and the
    // one it makes (64 each): 240 bytes.
    let p = plan_with("    batch 8\n    eval_batch 64", "", "sgd(lr: 0.1)");
    assert_eq!(p.eval_batch, 64);
    assert_eq!(p.totals.activation_bytes, 240 * 8);
    assert_eq!(p.totals.eval_activation_bytes, 44 * 64 * 4);
    let d = &p.devices[0];
    assert_eq!(d.eval_activation_bytes, 44 * 64 * 4);
    // 259 parameters: weights and gradients, no optimizer state; the larger activations count,
    // and the allocator's margin, the largest tensor: tanh's output for 64 samples, 4,096.
    assert_eq!(d.allocator_margin_bytes, 64 * 64);
    assert_eq!(d.total_bytes, 2 * 259 * 4 + 44 * 64 * 4 + 64 * 64);
    let text = to_text(&p);
    assert!(
        text.contains("evaluation        11.00 KiB per evaluation batch of 64"),
        "{text}"
    );
    assert!(
        text.contains(
            "+ evaluation activations 11.00 KiB (training 1.88 KiB; with the gradients 2.07 KiB at most at once) + allocator margin 4.00 KiB"
        ),
        "{text}"
    );
    let y = yaml(&p);
    assert_eq!(y["eval_batch"].as_u64(), Some(64));
    assert_eq!(
        y["totals"]["eval_activation_bytes"].as_u64(),
        Some(44 * 64 * 4)
    );
    assert_eq!(
        y["devices"][0]["total_bytes"].as_u64(),
        Some(2 * 259 * 4 + 44 * 64 * 4 + 64 * 64)
    );

    // With the default `eval_batch` (the batch), training holds more activations (240 bytes a
    // sample against 176) but never with every gradient: backward holds at most 2,124 bytes of
    // both (at tanh's: its 240 bytes a sample x 8, and fc2's 51 gradients x 4), while an
    // evaluation runs beside the last step's 259 gradients: the larger.
    let p = plan_with("    batch 8", "", "sgd(lr: 0.1)");
    assert_eq!(p.eval_batch, 8);
    let d = &p.devices[0];
    assert_eq!(d.backward_peak_bytes, Some(240 * 8 + 51 * 4));
    assert_eq!(d.total_bytes, 2 * 259 * 4 + 44 * 8 * 4 + 64 * 8);
    assert!(to_text(&p).contains(
        "+ evaluation activations 1.38 KiB (training 1.88 KiB; with the gradients 2.07 KiB at most at once)"
    ));
    // With a wide hidden layer and evaluation one sample at a time, training's peak is the
    // larger.
    let wide = kiln::check::check_text(
        "wide.exp",
        "experiment \"wide\" {\n  data {\n    source synthetic(inputs: normal([12]), targets: randint(3), count: 96)\n    batch 8\n    eval_batch 1\n  }\n  model {\n    input [12]\n    fc1: linear(4096)\n    tanh\n    fc2: linear(3)\n  }\n  device cpu\n  optimizer sgd(lr: 0.1)\n  train {\n    steps 1\n    loss cross_entropy\n  }\n}\n",
    );
    assert!(!wide.has_errors(), "{:#?}", wide.diagnostics);
    let p = plan(&wide.trials[0]);
    let d = &p.devices[0];
    // Per sample: the batch (48 bytes) and tanh's output (16,384); at tanh's backward the
    // gradient reaching it and the one it makes (16,384 each), beside fc2's 4096 x 3 + 3
    // gradients: 49,200 x 8 + 49,164 = 442,764 bytes; evaluation, the input and tanh's input
    // and output of one sample, beside every gradient: 294,972. The allocator's margin: tanh's
    // output for 8 samples.
    let peak = 49_200 * 8 + (4096 * 3 + 3) * 4;
    assert_eq!(d.backward_peak_bytes, Some(peak));
    assert!(peak > d.gradient_bytes + d.eval_activation_bytes);
    assert_eq!(d.total_bytes, d.weight_bytes + peak + 16_384 * 8);
    assert!(to_text(&p).contains("gradients and activations"));
}

#[test]
fn splits_with_their_own_sources_are_shown() {
    let p = plan_with(
        "    split(train: 1.0, val: synthetic(inputs: normal([12]), targets: randint(3), count: 40), test: npy(\"test_x.npy\", \"test_y.npy\"))\n    batch 8",
        "",
        "sgd(lr: 0.1)",
    );
    let text = to_text(&p);
    assert!(
        text.contains("val split  own source synthetic(40 samples)\n"),
        "{text}"
    );
    assert!(
        text.contains("test split own source npy(\"test_x.npy\", \"test_y.npy\")\n"),
        "{text}"
    );
    let y = yaml(&p);
    assert_eq!(y["splits"][0]["split"], "val");
    assert_eq!(y["splits"][0]["source"], "synthetic");
    assert_eq!(y["splits"][0]["samples"].as_u64(), Some(40));
    assert_eq!(y["splits"][1]["split"], "test");
    assert_eq!(y["splits"][1]["files"][1], "test_y.npy");

    // Fractions only: no split rows, and none in the YAML.
    let p = plan_with(
        "    split(train: 0.8, val: 0.2)\n    batch 8",
        "",
        "sgd(lr: 0.1)",
    );
    assert!(!to_text(&p).contains("own source"));
    assert!(yaml(&p).get("splits").is_none());
}

/// The plan of the MLP above on `cuda:0` with `placement` (none for the default) and a declared
/// capacity of `memory`.
fn placed(placement: &str, memory: &str) -> Plan {
    let text = format!(
        r#"experiment "placed" {{
  data {{
    source synthetic(inputs: normal([12]), targets: randint(3), count: 96)
    batch 8
    {placement}
  }}
  model {{
    input [12]
    fc1: linear(16)
    tanh
    fc2: linear(3)
  }}
  device cuda:0
  {memory}
  optimizer sgd(lr: 0.1)
  train {{
    steps 100
    loss cross_entropy
  }}
}}
"#
    );
    let checked = kiln::check::check_text("placed.exp", text);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    plan(&checked.trials[0])
}

#[test]
fn the_data_s_placement_is_planned_with_its_bytes() {
    // 96 samples of 12 float32 inputs and an int64 class: 96 x (48 + 8) bytes.
    let bytes = 96 * (12 * 4 + 8);
    let roomy = placed("", "memory cuda:0 1GiB");
    assert_eq!(roomy.data.bytes, Some(bytes));
    assert!(roomy.data.on_device && roomy.data.fits == Some(true));
    assert_eq!(roomy.devices[0].data_bytes, bytes);
    let text = to_text(&roomy);
    assert!(
        text.contains(
            "loaded: 5.25 KiB on cuda:0, batches gathered there (placement auto: it fits"
        ),
        "{text}"
    );
    assert!(text.contains(" + data 5.25 KiB"), "{text}");

    // A capacity too small for the data beside the model: auto keeps it in host memory.
    let tight = placed("", "memory cuda:0 3KiB");
    assert!(!tight.data.on_device && tight.data.fits == Some(false));
    assert_eq!(tight.devices[0].data_bytes, 0);
    // No capacity: the run decides from the device's memory, and the plan says so.
    let unknown = placed("", "");
    assert!(!unknown.data.on_device && unknown.data.fits.is_none());
    assert!(to_text(&unknown).contains(
        "loaded: 5.25 KiB, kept on cuda:0 if it fits beside the model in the device's memory, read when the run starts"
    ));
    // An explicit choice wins either way.
    assert!(placed("placement device", "").data.on_device);
    assert!(
        !placed("placement host", "memory cuda:0 1GiB")
            .data
            .on_device
    );
    let y = yaml(&placed("placement device", ""));
    assert_eq!(y["data"]["placement"], "device");
    assert_eq!(y["data"]["on_device"], true);
    assert_eq!(y["devices"][0]["data_bytes"], bytes);

    // On the CPU, host memory is the device's: nothing moves, whatever the setting.
    let cpu = plan_with("    batch 8\n    placement device", "", "sgd(lr: 0.1)");
    assert!(!cpu.data.on_device);
    assert!(to_text(&cpu).contains("in memory, batches gathered there (the device is the CPU)"));
}

#[test]
fn an_unknown_placement_is_a_diagnostic_with_the_choices() {
    let text = r#"experiment "p" {
  data {
    source synthetic(inputs: normal([4]), targets: randint(2), count: 16)
    batch 4
    placement gpu
  }
  model {
    input [4]
    linear(2)
  }
  optimizer sgd(lr: 0.1)
  train {
    steps 1
    loss cross_entropy
  }
}
"#;
    let checked = kiln::check::check_text("p.exp", text.to_string());
    let codes: Vec<_> = checked.diagnostics.iter().map(|d| d.code.code()).collect();
    assert_eq!(codes, ["K0113"], "{:#?}", checked.diagnostics);
    let help = format!("{:?}", checked.diagnostics[0]);
    assert!(help.contains("device") && help.contains("host"), "{help}");
}
