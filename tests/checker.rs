//! Checker behaviour, one property per test: each source is checked through the library and the
//! diagnostics are compared as `(code, text under the primary span)` pairs.

use std::path::Path;

use kiln::check::{check_path, Checked, MemoryLoader, Options};

/// Checks `main.exp` among `files` and returns the checked result.
fn check_files(files: &[(&str, &str)]) -> Checked {
    let mut loader = MemoryLoader::default();
    for (path, text) in files {
        loader.insert(*path, *text);
    }
    check_path(Path::new(files[0].0), &loader, &Options::default())
}

/// `(code, spanned text)` for every diagnostic.
fn found(c: &Checked) -> Vec<(&'static str, String)> {
    c.diagnostics
        .iter()
        .map(|d| (d.code.code(), c.sources.slice(d.primary.span).to_string()))
        .collect()
}

fn check(text: &str) -> Checked {
    check_files(&[("main.exp", text)])
}

/// A valid experiment with `{model}`, `{data}` and `{extra}` replaced.
fn experiment(data: &str, model: &str, extra: &str) -> String {
    format!(
        "experiment \"t\" {{\n  data {{\n    source synthetic(inputs: normal([784]), targets: randint(10), count: 1000)\n    {data}\n  }}\n  model {{\n    {model}\n  }}\n  optimizer adam(lr: 1e-3)\n  train {{\n    steps 10\n    loss cross_entropy\n  }}\n  {extra}\n}}\n"
    )
}

const MLP: &str = "input [784]\n    fc1: linear(256)\n    relu\n    fc2: linear(10)";

#[test]
fn a_valid_experiment_has_no_diagnostics() {
    let c = check(&experiment("batch 64", MLP, ""));
    assert_eq!(found(&c), vec![]);
    assert_eq!(c.trials.len(), 1);
}

#[test]
fn shape_mismatch_points_at_the_declared_size_and_the_producer() {
    let model = "input [1, 28, 29]\n    flatten\n    fc1: linear(784 -> 256)\n    fc2: linear(10)";
    let c =
        check(&experiment("batch 64", model, "").replace("normal([784])", "normal([1, 28, 29])"));
    assert_eq!(found(&c), vec![("K0301", "784".to_string())]);
    let d = &c.diagnostics[0];
    assert_eq!(
        d.message,
        "`linear` declares 784 input features but receives 812"
    );
    assert_eq!(c.sources.slice(d.secondary[0].span), "flatten");
    assert_eq!(d.secondary[0].text, "`flatten` produces [812]");
}

#[test]
fn an_unknown_layer_does_not_cascade() {
    let model = "input [784]\n    fc1: linaer(256)\n    relu\n    fc2: linear(784 -> 10)";
    let c = check(&experiment("batch 64", model, ""));
    assert_eq!(found(&c), vec![("K0102", "linaer".to_string())]);
}

#[test]
fn the_loss_needs_as_many_scores_as_classes() {
    let model = "input [784]\n    fc1: linear(5)";
    let c = check(&experiment("batch 64", model, ""));
    assert_eq!(found(&c), vec![("K0303", "loss cross_entropy".to_string())]);
    assert!(c.diagnostics[0]
        .message
        .contains("10 classes but the model outputs 5 scores"));
}

#[test]
fn accumulation_set_twice_is_an_error_not_an_override() {
    let c = check(
        &experiment("batch 64", MLP, "")
            .replace("steps 10", "steps 10\n    accumulate 2\n    accumulate 4"),
    );
    assert_eq!(found(&c), vec![("K0118", "accumulate".to_string())]);
    assert_eq!(
        c.sources.slice(c.diagnostics[0].secondary[0].span),
        "accumulate"
    );
    assert!(c.trials.is_empty());
}

#[test]
fn batch_arithmetic_includes_accumulation_and_replicas() {
    let extra = "parallel data(devices: [cuda:0, cuda:1, cuda:2])";
    let c = check(
        &experiment("batch 64", MLP, extra).replace("steps 10", "steps 10\n    accumulate 2"),
    );
    assert_eq!(found(&c), vec![("K0205", "64".to_string())]);
    assert!(c.diagnostics[0]
        .message
        .contains("2 accumulation steps x 3 replicas"));
    let ok = check(
        &experiment("batch 96", MLP, extra)
            .replace("steps 10", "steps 10\n    accumulate 2\n    micro_batch 16"),
    );
    assert_eq!(found(&ok), vec![]);
    assert_eq!(ok.trials[0].train.micro_batch, 16);
    let wrong = check(
        &experiment("batch 96", MLP, extra).replace("steps 10", "steps 10\n    micro_batch 16"),
    );
    assert_eq!(found(&wrong), vec![("K0205", "16".to_string())]);
}

#[test]
fn every_point_of_a_sweep_is_checked() {
    let c = check(
        &experiment("batch sweep [64, 60, 72]", MLP, "")
            .replace("steps 10", "steps 10\n    accumulate 8"),
    );
    assert_eq!(found(&c), vec![("K0205", "60".to_string())]);
    assert_eq!(c.diagnostics[0].note.as_deref(), Some("in trial 2 of 3"));
    assert_eq!(c.trial_count, 3);
    assert_eq!(c.trials.len(), 2);
    let labels: Vec<String> = c.trials.iter().map(|t| t.trial[0].1.clone()).collect();
    assert_eq!(labels, ["64", "72"]);
}

#[test]
fn sweeps_make_a_grid_over_ranges_and_lists() {
    let c = check(
        &experiment("batch sweep range(16, 64, 16)", MLP, "")
            .replace("adam(lr: 1e-3)", "adam(lr: sweep logspace(1e-4, 1e-2, 3))"),
    );
    assert_eq!(found(&c), vec![]);
    assert_eq!(c.trials.len(), 9);
    let lr: Vec<f64> = c.trials.iter().take(3).map(|t| t.optimizer.lr).collect();
    assert!(
        (lr[0] - 1e-4).abs() < 1e-12
            && (lr[1] - 1e-3).abs() < 1e-12
            && (lr[2] - 1e-2).abs() < 1e-12,
        "{lr:?}"
    );
    assert_eq!(c.trials[3].data.batch, 32);
}

#[test]
fn warnings_do_not_stop_the_experiment() {
    let model =
        "input [784]\n    fc1: linear(256)\n    dropout(0)\n    fc2: linear(10)\n    softmax";
    let c = check(&experiment("batch 64", model, ""));
    assert_eq!(
        found(&c),
        vec![
            ("K0404", "dropout".to_string()),
            ("K0405", "softmax".to_string())
        ]
    );
    assert!(!c.has_errors());
    assert_eq!(c.trials.len(), 1);
}

#[test]
fn extends_overrides_settings_and_merges_data_and_train() {
    let base = experiment("batch 64\n    shuffle false", MLP, "seed 5");
    let child = "extends \"base.exp\"\nexperiment \"child\" {\n  data { batch 32 }\n  train { epochs 2 }\n  optimizer sgd(lr: 0.1)\n}\n";
    let c = check_files(&[("dir/main.exp", child), ("dir/base.exp", &base)]);
    assert_eq!(found(&c), vec![]);
    let e = &c.trials[0];
    assert_eq!(e.name, "child");
    assert_eq!(e.data.batch, 32);
    assert!(!e.data.shuffle, "kept from the base's data block");
    assert_eq!(e.seed, 5);
    assert_eq!(e.optimizer.name(), "sgd");
    // The child's `epochs` replaces the base's `steps`: they set the same knob.
    assert_eq!(e.train.length, kiln::ir::Duration::Epochs(2));
    assert!(matches!(e.train.loss, kiln::ir::Loss::CrossEntropy { .. }));
}

#[test]
fn extends_reports_missing_files_and_cycles() {
    let c = check_files(&[(
        "main.exp",
        "extends \"nope.exp\"\nexperiment \"x\" { seed 1 }\n",
    )]);
    assert_eq!(found(&c)[0], ("K0122", "\"nope.exp\"".to_string()));
    let a = "extends \"b.exp\"\nexperiment \"a\" { seed 1 }\n";
    let b = "extends \"a.exp\"\nexperiment \"b\" { seed 2 }\n";
    let c = check_files(&[("a.exp", a), ("b.exp", b)]);
    let cycles: Vec<_> = found(&c)
        .into_iter()
        .filter(|(code, _)| *code == "K0123")
        .collect();
    assert_eq!(cycles, vec![("K0123", "\"a.exp\"".to_string())]);
    // The problem is reported in the base file, with the base's text.
    let cycle = c
        .diagnostics
        .iter()
        .find(|d| d.code.code() == "K0123")
        .expect("a cycle");
    assert_eq!(
        c.sources.get(cycle.primary.span.file).path,
        Path::new("b.exp")
    );
}

/// The checker touches no file system: the memory loader names each file one way, so a cycle
/// through `./` and `../` paths is found without asking the disk.
#[test]
fn extends_cycles_are_found_however_paths_are_written() {
    let a = "extends \"./sub/../b.exp\"\nexperiment \"a\" { seed 1 }\n";
    let b = "extends \"../dir/a.exp\"\nexperiment \"b\" { seed 2 }\n";
    let c = check_files(&[("dir/a.exp", a), ("dir/b.exp", b)]);
    assert_eq!(
        found(&c),
        vec![("K0123", "\"../dir/a.exp\"".to_string())],
        "{:?}",
        c.diagnostics
    );
}

#[test]
fn strategies_are_checked() {
    let pipeline = |stages: &str| {
        check(&experiment(
            "batch 64",
            MLP,
            &format!("parallel pipeline(stages: {stages}, micro_batches: 4)"),
        ))
    };
    assert_eq!(found(&pipeline("1")), vec![("K0201", "1".to_string())]);
    assert_eq!(found(&pipeline("4")), vec![("K0208", "4".to_string())]);
    assert_eq!(found(&pipeline("2")), vec![]);
    let micro = check(&experiment(
        "batch 64",
        MLP,
        "parallel pipeline(stages: 2, micro_batches: 6)",
    ));
    assert_eq!(found(&micro), vec![("K0206", "6".to_string())]);
    let ddp = check(&experiment("batch 64", MLP, "parallel ddp(backend: gloo)"));
    assert_eq!(found(&ddp), vec![("K0202", "(backend: gloo)".to_string())]);
    let nccl = check(&experiment(
        "batch 64",
        MLP,
        "device cpu\n  parallel ddp(backend: nccl, world_size: 2)",
    ));
    assert_eq!(found(&nccl), vec![("K0210", "nccl".to_string())]);
}

#[test]
fn compression_targets_are_checked() {
    let conv = "input [784]\n    reshape([1, 28, 28])\n    conv: conv2d(4, kernel_size: 3)\n    flatten\n    fc: linear(10)";
    let int4 = check(&experiment(
        "batch 64",
        conv,
        "compress { quantize conv int4 }",
    ));
    assert_eq!(found(&int4), vec![("K0204", "conv".to_string())]);
    let fp8 = check(&experiment(
        "batch 64",
        MLP,
        "device cpu\n  compress { quantize fc2 fp8 }",
    ));
    assert_eq!(found(&fp8), vec![("K0203", "fc2".to_string())]);
    let unknown = check(&experiment(
        "batch 64",
        MLP,
        "compress { prune fc3.weight l1_unstructured(amount: 1.5) }",
    ));
    assert_eq!(
        found(&unknown),
        vec![
            ("K0114", "fc3.weight".to_string()),
            ("K0121", "1.5".to_string())
        ]
    );
    assert_eq!(
        unknown.diagnostics[0].help.as_deref(),
        Some("did you mean `fc1.weight` or `fc2.weight`?")
    );
    // Each equally close name comes with its own fix.
    let fixes: Vec<&str> = unknown.diagnostics[0]
        .fixes
        .iter()
        .map(|f| f.replacement.as_str())
        .collect();
    assert_eq!(fixes, ["fc1.weight", "fc2.weight"]);
}

#[test]
fn attention_heads_must_divide_the_width() {
    let model = "input [16]\n    embedding(100, 30)\n    attention(heads: 4)\n    mean(dim: 0)\n    linear(10)";
    let c = check(
        &experiment("batch 64", model, "").replace("normal([784])", "randint(100, shape: [16])"),
    );
    assert_eq!(found(&c), vec![("K0207", "4".to_string())]);
    assert_eq!(
        c.diagnostics[0].help.as_deref(),
        Some("choose heads that divide 30, such as 3 or 5")
    );
}

#[test]
fn placement_conflicts_and_unknown_targets() {
    let model = "input [784]\n    fc1: linear(256) on cuda:0\n    relu\n    fc2: linear(10)";
    let c = check(&experiment(
        "batch 64",
        model,
        "parallel model\n  place fc1 on cuda:1\n  place fc9 on cuda:1",
    ));
    assert_eq!(
        found(&c),
        vec![
            ("K0209", "fc1 on cuda:1".to_string()),
            ("K0114", "fc9".to_string())
        ]
    );
}

#[test]
fn a_ddp_timeout_is_a_whole_number_of_seconds() {
    let timeout = |t: &str| {
        let c = check(&experiment(
            "batch 64",
            MLP,
            &format!("parallel ddp(world_size: 2, timeout: {t})"),
        ));
        let seconds = c.trials.first().map(|e| match &e.parallel {
            kiln::ir::Parallel::Distributed { timeout_s, .. } => *timeout_s,
            other => panic!("not ddp: {other:?}"),
        });
        (seconds, found(&c))
    };
    assert_eq!(timeout("20s"), (Some(20), vec![]));
    assert_eq!(timeout("2 min"), (Some(120), vec![]));
    assert_eq!(timeout("45"), (Some(45), vec![]));
    assert_eq!(timeout("0s"), (None, vec![("K0119", "0s".to_string())]));
    assert_eq!(
        timeout("5 steps"),
        (None, vec![("K0119", "5 steps".to_string())])
    );
    let default = check(&experiment("batch 64", MLP, "parallel ddp(world_size: 2)"));
    assert!(matches!(
        default.trials[0].parallel,
        kiln::ir::Parallel::Distributed { timeout_s: 60, .. }
    ));
}

/// The experiment's one trial's compression steps.
fn steps_of(extra: &str) -> Vec<kiln::ir::Compression> {
    let c = check(&experiment("batch 64", MLP, extra));
    assert_eq!(found(&c), vec![], "{extra}");
    c.trials[0].compression.clone()
}

#[test]
fn compression_words_become_typed_steps() {
    use kiln::ir::{
        Compression, Duration, Granularity, Precision, PruneMethod, PruneSchedule, QuantScheme,
    };
    let schedule = |s: &str| match &steps_of(&format!(
        "compress {{ prune fc1 l1_unstructured(amount: 0.5{s}) }}"
    ))[0]
    {
        Compression::Prune { schedule, .. } => *schedule,
        other => panic!("{other:?}"),
    };
    let after = |finetune| PruneSchedule::After { finetune };
    assert_eq!(schedule(""), after(Duration::Steps(0)));
    assert_eq!(schedule(", schedule: after()"), after(Duration::Steps(0)));
    assert_eq!(schedule(", schedule: after"), after(Duration::Steps(0)));
    assert_eq!(
        schedule(", schedule: after(finetune: 2 epochs)"),
        after(Duration::Epochs(2))
    );
    assert_eq!(
        schedule(", schedule: after(finetune: 30)"),
        after(Duration::Steps(30))
    );
    assert_eq!(schedule(", schedule: before"), PruneSchedule::Before);
    assert_eq!(
        schedule(", schedule: gradual(start: 0, end: 8 steps, every: 2, initial: 0.1)"),
        PruneSchedule::Gradual {
            start: 0,
            end: 8,
            every: 2,
            initial: 0.1
        }
    );
    assert_eq!(
        schedule(", schedule: iterative(rounds: 3, rewind: 2 steps)"),
        PruneSchedule::Iterative {
            rounds: 3,
            rewind: 2
        }
    );
    let scheme = |s: &str| match &steps_of(&format!("compress {{ quantize fc1 {s} }}"))[0] {
        Compression::Quantize { scheme, .. } => *scheme,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        scheme("int8"),
        QuantScheme::Int8 {
            granularity: Granularity::PerChannel,
            symmetric: true,
            dynamic: false
        }
    );
    assert_eq!(
        scheme("int8(granularity: per_tensor, symmetric: false, activations: dynamic)"),
        QuantScheme::Int8 {
            granularity: Granularity::PerTensor,
            symmetric: false,
            dynamic: true
        }
    );
    assert_eq!(
        scheme("fp8"),
        QuantScheme::Fp8 {
            granularity: Granularity::PerTensor
        }
    );
    assert_eq!(
        scheme("fp8(granularity: per_row)"),
        QuantScheme::Fp8 {
            granularity: Granularity::PerChannel
        }
    );
    assert_eq!(
        scheme("qat"),
        QuantScheme::Qat {
            granularity: Granularity::PerChannel
        }
    );
    assert_eq!(
        scheme("bf16"),
        QuantScheme::Cast {
            to: Precision::Bf16
        }
    );
    assert_eq!(
        scheme("fp16"),
        QuantScheme::Cast {
            to: Precision::Fp16
        }
    );
    let global = &steps_of("compress { prune [fc1, fc2.weight] global_unstructured(amount: 0.8) }");
    match &global[0] {
        Compression::Prune {
            method, targets, ..
        } => {
            assert_eq!(*method, PruneMethod::GlobalL1);
            let names: Vec<(&str, Option<&str>)> = targets
                .iter()
                .map(|t| (t.layer.as_str(), t.param.as_deref()))
                .collect();
            assert_eq!(names, vec![("fc1", None), ("fc2", Some("weight"))]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_block_target_stands_for_the_layers_the_step_applies_to() {
    use kiln::ir::Compression;
    let model = "input [784]\n    block enc {\n      a: linear(64)\n      relu\n      n: layernorm(64)\n      b: linear(32)\n    }\n    out: linear(10)";
    let c = check(&experiment(
        "batch 64",
        model,
        "compress {\n    prune enc l1_unstructured(amount: 0.5)\n    quantize enc int8\n  }",
    ));
    assert_eq!(found(&c), vec![]);
    for step in &c.trials[0].compression {
        let targets = match step {
            Compression::Prune { targets, .. } | Compression::Quantize { targets, .. } => targets,
        };
        let names: Vec<&str> = targets.iter().map(|t| t.layer.as_str()).collect();
        assert_eq!(names, vec!["enc.a", "enc.b"]);
    }
}

#[test]
fn compression_targets_need_the_right_kind() {
    let model = "input [784]\n    fc1: linear(256, bias: false)\n    act: relu\n    block tail {\n      relu\n    }\n    reshape([16, 16])\n    conv: conv1d(2, kernel_size: 1)\n    flatten\n    fc2: linear(10)";
    let c = check(&experiment(
        "batch 64",
        model,
        "compress {\n    prune act l1_unstructured(amount: 0.5)\n    prune fc1.bias l1_unstructured(amount: 0.5)\n    quantize tail int8\n    quantize conv fp8\n    quantize fc2.bias bf16\n    prune conv.weight ln_structured(amount: 0.5)\n  }",
    ));
    assert_eq!(
        found(&c),
        vec![
            ("K0215", "act".to_string()),
            ("K0215", "fc1.bias".to_string()),
            ("K0215", "tail".to_string()),
            ("K0215", "conv".to_string()),
            ("K0215", "fc2.bias".to_string()),
        ]
    );
    assert_eq!(
        c.diagnostics[0].message,
        "pruning of `act`, a `relu` layer, which has no weight"
    );
    assert_eq!(
        c.diagnostics[2].message,
        "int8 quantization of block `tail`, which holds no layer it applies to"
    );
}

#[test]
fn casts_apply_to_linear_layers_only() {
    // The runtime stores only linear layers cast; a cast of a convolution passed the checker
    // and was silently left in fp32, while `kiln plan` counted it halved.
    let model = "input [784]\n    reshape([16, 49])\n    conv: conv1d(2, kernel_size: 1)\n    flatten\n    fc2: linear(10)";
    let c = check(&experiment(
        "batch 64",
        model,
        "compress {\n    quantize [conv, fc2] bf16\n  }",
    ));
    assert_eq!(found(&c), vec![("K0215", "conv".to_string())]);
    assert_eq!(
        c.diagnostics[0].message,
        "casting to bf16 of `conv`, a `conv1d` layer, which is not linear"
    );
}

#[test]
fn int4_group_sizes_are_checked() {
    let bad = check(&experiment(
        "batch 64",
        MLP,
        "compress { quantize fc2 int4(group_size: 48) }",
    ));
    assert_eq!(found(&bad), vec![("K0212", "48".to_string())]);
    let fc1 = check(&experiment(
        "batch 64",
        MLP,
        "compress { quantize fc1 int4(group_size: 128) }",
    ));
    assert_eq!(found(&fc1), vec![("K0212", "fc1".to_string())]);
    assert_eq!(
        fc1.diagnostics[0].help.as_deref(),
        Some("no INT4 group size divides 784: the layer would need 112 zero input features (896 in all); quantize it with `int8` instead")
    );
    let model = "input [784]\n    fc1: linear(96)\n    fc2: linear(10)";
    let some = check(&experiment(
        "batch 64",
        model,
        "compress { quantize fc2 int4(group_size: 64) }",
    ));
    assert_eq!(
        some.diagnostics[0].help.as_deref(),
        Some("use `group_size: 32`, which divides 96")
    );
}

#[test]
fn qat_refuses_fp16_and_quantizations_do_not_conflict() {
    let qat = check(
        &experiment("batch 64", MLP, "compress { quantize fc1 qat }").replace(
            "loss cross_entropy",
            "loss cross_entropy\n    precision fp16",
        ),
    );
    assert_eq!(found(&qat), vec![("K0213", "qat".to_string())]);
    let twice = check(&experiment(
        "batch 64",
        MLP,
        "compress {\n    quantize fc1 int8\n    quantize [fc2, fc1] bf16\n    prune [fc2, fc2] l1_unstructured(amount: 0.5)\n    prune [fc2.weight, fc2.bias] l1_unstructured(amount: 0.5)\n  }",
    ));
    assert_eq!(
        found(&twice),
        vec![("K0217", "fc1".to_string()), ("K0217", "fc2".to_string())]
    );
    assert_eq!(
        twice.sources.slice(twice.diagnostics[0].secondary[0].span),
        "fc1"
    );
}

#[test]
fn schedules_stay_in_range() {
    let c = check(&experiment(
        "batch 64",
        MLP,
        "compress {\n    prune fc1 l1_unstructured(amount: 0.5, schedule: gradual(start: 0, end: 5, every: 1, initial: 0.5))\n    prune fc2 l1_unstructured(amount: 0.5, schedule: iterative(rounds: 2, rewind: 10 steps))\n    prune fc2 l1_unstructured(amount: 0.5, schedule: gradual(start: 0, end: 5, every: 1 epochs))\n    prune fc2 l1_unstructured(amount: 0.5, schedule: oneshot)\n  }",
    ));
    assert_eq!(
        found(&c),
        vec![
            ("K0121", "0.5".to_string()),
            ("K0121", "10 steps".to_string()),
            ("K0119", "1 epochs".to_string()),
            ("K0113", "oneshot".to_string()),
        ]
    );
    // Epochs of synthetic data bound the length: 2 epochs of 1000 samples in batches of 100.
    let epochs = check(
        &experiment(
            "batch 100",
            MLP,
            "compress { prune fc1 l1_unstructured(amount: 0.5, schedule: iterative(rounds: 1, rewind: 20)) }",
        )
        .replace("steps 10", "epochs 2"),
    );
    assert_eq!(found(&epochs), vec![("K0121", "20".to_string())]);
}

#[test]
fn weight_only_quantization_that_will_not_speed_up_a_cpu_layer_is_a_warning() {
    let warn = |batch: &str, extra: &str| {
        let c = check(&experiment(batch, MLP, extra));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        found(&c)
    };
    assert_eq!(
        warn("batch 64", "device cpu\n  compress { quantize fc1 int8 }"),
        vec![("K0411", "fc1".to_string())]
    );
    let c = check(&experiment(
        "batch 64",
        MLP,
        "device cpu\n  compress { quantize fc1 int8 }",
    ));
    assert_eq!(
        c.diagnostics[0].message,
        "weight-only int8 will not make `fc1` (256x784) faster on the CPU at batch 64"
    );
    // Below batch 64 the 200,704 weights of fc1 are too few; fc2 as well.
    assert_eq!(
        warn(
            "batch 8",
            "device cpu\n  compress { quantize [fc1, fc2] int8 }"
        )
        .len(),
        2
    );
    assert_eq!(
        warn(
            "batch 8",
            "device cpu\n  compress { quantize fc2 int4(group_size: 32) }"
        ),
        vec![("K0411", "fc2".to_string())]
    );
    assert_eq!(
        warn(
            "batch 64",
            "device cpu\n  compress { quantize fc1 int8(activations: dynamic) }"
        ),
        vec![]
    );
    assert_eq!(warn("batch 64", "compress { quantize fc1 int8 }"), vec![]);
}

/// Each layer's name and resolved device in the checked trial.
fn devices(c: &Checked) -> Vec<(String, String)> {
    kiln::ir::layers(&c.trials[0].model.nodes)
        .iter()
        .map(|l| (l.name.clone(), l.device.to_string()))
        .collect()
}

#[test]
fn a_layers_own_placement_wins_over_its_blocks() {
    let model = "input [784]\n    block encoder on cuda:0 {\n      linear(256) on cuda:1\n      relu\n    }\n    block decoder {\n      fc: linear(64)\n      relu\n    }\n    linear(10)";
    let extra = "device cpu\n  parallel model\n  place decoder on cuda:2\n  place [decoder.fc, encoder.1] on cuda:3";
    let c = check(&experiment("batch 64", model, extra));
    assert_eq!(found(&c), vec![]);
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        devices(&c),
        pairs(&[
            ("encoder.0", "cuda:1"),
            ("encoder.1", "cuda:3"),
            ("decoder.fc", "cuda:3"),
            ("decoder.1", "cuda:2"),
            ("2", "cpu"),
        ])
    );
}

#[test]
fn a_layer_or_block_with_two_placements_of_its_own_is_an_error() {
    let model = "input [784]\n    block encoder on cuda:0 {\n      linear(256) on cuda:1\n      relu\n    }\n    linear(10)";
    let extra =
        "device cuda\n  parallel model\n  place encoder.0 on cuda:1\n  place encoder on cuda:0";
    let c = check(&experiment("batch 64", model, extra));
    assert_eq!(
        found(&c),
        vec![
            ("K0209", "encoder.0 on cuda:1".to_string()),
            ("K0209", "encoder on cuda:0".to_string()),
        ]
    );
}

#[test]
fn positional_names_are_placed_pruned_and_quantized() {
    // Positions count every statement: `0`, `1`, the block `encoder` at 2, the residual `3`
    // (`3.0` to `3.2`), then `4`.
    let model = "input [784]\n    linear(64)\n    relu\n    block encoder {\n      linear(32)\n      relu\n    }\n    residual {\n      linear(32)\n      relu\n      linear(32)\n    }\n    linear(10)";
    let extra = "device cpu\n  place [encoder.1, 3] on cpu\n  compress {\n    prune [0, encoder.0.weight, 3.2.bias] l1_unstructured(amount: 0.5)\n    quantize [3.0, 4] int8(activations: dynamic)\n  }";
    let c = check(&experiment("batch 64", model, extra));
    assert_eq!(found(&c), vec![]);
    let targets: Vec<Vec<(String, Option<String>)>> = c.trials[0]
        .compression
        .iter()
        .map(|step| match step {
            kiln::ir::Compression::Prune { targets, .. }
            | kiln::ir::Compression::Quantize { targets, .. } => targets
                .iter()
                .map(|t| (t.layer.clone(), t.param.clone()))
                .collect(),
        })
        .collect();
    let weight = |l: &str| (l.to_string(), None);
    assert_eq!(
        targets,
        vec![
            vec![
                weight("0"),
                ("encoder.0".to_string(), Some("weight".to_string())),
                ("3.2".to_string(), Some("bias".to_string())),
            ],
            vec![weight("3.0"), weight("4")],
        ]
    );
}

#[test]
fn an_unknown_position_is_an_unknown_reference() {
    let model = "input [784]\n    linear(64)\n    relu\n    block encoder {\n      linear(32)\n      relu\n    }\n    linear(10)";
    let extra = "compress {\n    prune [5, encoder.3.weight] l1_unstructured(amount: 0.5)\n    quantize 1 int8\n    prune -1 l1_unstructured(amount: 0.5)\n  }";
    let c = check(&experiment("batch 64", model, extra));
    assert_eq!(
        found(&c),
        vec![
            ("K0114", "5".to_string()),
            ("K0114", "encoder.3.weight".to_string()),
            ("K0215", "1".to_string()),
            ("K0119", "-1".to_string()),
        ]
    );
    // `0`, `1` and `3` are one edit from `5`; `encoder.0` and `encoder.1` from `encoder.3`.
    assert!(c.diagnostics[0].fixes[0].replacement.len() == 1);
    let fix = &c.diagnostics[1].fixes[0].replacement;
    assert!(
        fix == "encoder.0.weight" || fix == "encoder.1.weight",
        "{fix}"
    );
}

#[test]
fn settings_that_agree_across_blocks_are_left_alone() {
    let fp16 = |extra: &str| {
        check(&experiment("batch 64", MLP, extra).replace(
            "loss cross_entropy",
            "loss cross_entropy\n    precision fp16",
        ))
    };
    // Under `device auto` the checker cannot tell whether the model runs on the CPU.
    assert_eq!(found(&fp16("device auto")), vec![]);
    assert_eq!(
        found(&fp16("device cpu")),
        vec![("K0210", "fp16".to_string())]
    );
    // A bare `cuda` agrees with any CUDA replicas; `cuda:0` only with a replica on it.
    let dp = |device: &str| {
        check(&experiment(
            "batch 64",
            MLP,
            &format!("device {device}\n  parallel data(devices: [cuda:1, cuda:2])"),
        ))
    };
    assert_eq!(found(&dp("cuda")), vec![]);
    assert_eq!(found(&dp("cuda:2")), vec![]);
    assert_eq!(found(&dp("cuda:0")), vec![("K0210", "cuda:0".to_string())]);
    // One logit for binary class indices.
    let bce = check(
        &experiment("batch 64", "input [784]\n    fc1: linear(1)", "")
            .replace("randint(10)", "randint(2)")
            .replace("loss cross_entropy", "loss bce_with_logits"),
    );
    assert_eq!(found(&bce), vec![]);
    // Per-channel statistics on as many channels, and one value on any input.
    let norm = |shape: &str, normalize: &str| {
        let model = format!("input {shape}\n    flatten\n    fc: linear(10)");
        check(
            &experiment(&format!("batch 64\n    {normalize}"), &model, "")
                .replace("normal([784])", &format!("normal({shape})")),
        )
    };
    let three = "normalize(mean: [0.5, 0.5, 0.5], std: [0.2, 0.2, 0.2])";
    assert_eq!(found(&norm("[3, 8, 8]", three)), vec![]);
    assert_eq!(
        found(&norm("[1, 28, 28]", "normalize(mean: 0.13, std: 0.31)")),
        vec![]
    );
    assert_eq!(
        found(&norm("[1, 28, 28]", three)),
        vec![("K0218", three.to_string())]
    );
}

#[test]
fn schedules_are_measured_against_the_steps_the_runtime_takes() {
    // 10 steps: a cosine warmup of 10 leaves no step to decay in; a linear warmup of 10 reaches
    // the full rate at the last step; a step decay at step 9 comes, one at step 10 does not.
    let with = |schedule: &str| check(&experiment("batch 64", MLP, schedule));
    assert_eq!(
        found(&with("schedule cosine(warmup: 10 steps)")),
        vec![("K0412", "10 steps".to_string())]
    );
    assert_eq!(found(&with("schedule warmup(length: 10 steps)")), vec![]);
    assert_eq!(found(&with("schedule step(every: 9 steps)")), vec![]);
    assert_eq!(
        found(&with("schedule step(every: 10 steps)")),
        vec![("K0412", "10 steps".to_string())]
    );
    // Epochs count batches of the training split: 1000 x 0.8 = 800 samples, 13 batches of 64.
    let epochs = check(
        &experiment(
            "split(train: 0.8, val: 0.2)\n    batch 64",
            MLP,
            "schedule step(every: 13 steps)",
        )
        .replace("steps 10", "epochs 1"),
    );
    assert_eq!(found(&epochs), vec![("K0412", "13 steps".to_string())]);
    // Without a sample count (a file source), durations in the training's unit still compare;
    // steps against epochs cannot.
    let file = |length: &str, schedule: &str| {
        check(
            &experiment("batch 64", MLP, schedule)
                .replace(
                    "synthetic(inputs: normal([784]), targets: randint(10), count: 1000)",
                    "npy(inputs: \"x.npy\", targets: \"y.npy\", classes: 10, shape: [784])",
                )
                .replace("steps 10", length),
        )
    };
    assert_eq!(
        found(&file("epochs 10", "schedule step(every: 30)")),
        vec![("K0412", "30".to_string())]
    );
    assert_eq!(
        found(&file("epochs 1", "schedule exponential(gamma: 0.9)")),
        vec![("K0412", "exponential(gamma: 0.9)".to_string())]
    );
    assert_eq!(
        found(&file("epochs 10", "schedule step(every: 30 steps)")),
        vec![]
    );
}

/// A regression of one value per sample with `loss` and `metrics`.
fn regression(loss: &str, metrics: &str) -> String {
    format!(
        "experiment \"r\" {{\n  data {{\n    source synthetic(inputs: normal([8]), targets: normal([1]), count: 100)\n    split(train: 0.8, val: 0.2)\n    batch 10\n  }}\n  model {{\n    input [8]\n    out: linear(1)\n  }}\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps 10\n    loss {loss}\n    metrics [{metrics}]\n  }}\n}}\n"
    )
}

#[test]
fn huber_and_smooth_l1_take_pytorchs_ranges_and_metrics_fit_the_loss() {
    for (loss, want) in [
        ("huber", vec![]),
        ("huber(delta: 0.25)", vec![]),
        ("huber(0)", vec![("K0121", "0".to_string())]),
        ("huber(delta: -1)", vec![("K0121", "-1".to_string())]),
        ("smooth_l1", vec![]),
        ("smooth_l1(beta: 0)", vec![]),
        ("smooth_l1(beta: -0.5)", vec![("K0121", "-0.5".to_string())]),
        ("smooth_l1(delta: 1)", vec![("K0106", "delta".to_string())]),
    ] {
        let c = check(&regression(loss, "loss, mae, rmse, r2"));
        assert_eq!(found(&c), want, "{loss}");
    }
    let c = check(&regression("huber(delta: 0.5)", "mae"));
    assert_eq!(c.trials[0].train.loss, kiln::ir::Loss::Huber { delta: 0.5 });
    assert_eq!(c.trials[0].train.metrics, vec![kiln::ir::Metric::Mae]);
    // Accuracy on real values, regression metrics on classes: warnings, ignored.
    let c = check(&regression("smooth_l1", "accuracy"));
    assert_eq!(found(&c), vec![("K0406", "metrics".to_string())]);
    let classifier = experiment("batch 64", MLP, "").replace(
        "loss cross_entropy",
        "loss cross_entropy\n    metrics [accuracy, rmse]",
    );
    let c = check(&classifier);
    assert_eq!(found(&c), vec![("K0406", "metrics".to_string())]);
    assert_eq!(
        c.diagnostics[0].message,
        "`rmse` is measured only with a regression loss, not with `cross_entropy`"
    );
    assert_eq!(c.trials.len(), 1, "a warning keeps the trial");
}
