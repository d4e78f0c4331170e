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
        Some("did you mean `fc1.weight`?")
    );
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
