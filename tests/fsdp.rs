//! Fully sharded data parallel over processes (Gloo on loopback), against one process on the
//! same global batch: with 2 and 3 ranks, with and without resharding after forward, with Adam,
//! gradient accumulation and clipping, every step's loss and the final parameters agree within
//! 1e-5 relative after 20 steps, an epoch's short last batch included, in bf16 too against one
//! process whose micro-batches are the ranks' (and against `ddp`); recomputing a block changes
//! nothing; a run stopped at 2 ranks resumes at 3, at 1 and without a strategy as the
//! uninterrupted run; quantization after training evaluates the quantized model as one process
//! does; a killed rank stops every rank and leaves no process behind; `kiln plan` counts the
//! shards, the gathered units and the collectives as the arithmetic by hand does.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::ranks::{finish, kill_a_rank, none_left, run_to_end, runtime};
use support::{final_weights, newest_checkpoint, s, scratch, step_losses, text, write};

/// A small experiment with the strategy `parallel`: 364 training samples in batches of 24, each
/// in two micro-batches (16 steps an epoch, the last a batch of 4: at 3 ranks, 6 micro-batches
/// of one row, two of them stand-ins); two blocks (two units) between layers of the root unit,
/// one of them `recompute` when `recompute` says so; Adam with a layer-norm and clipping by norm.
fn experiment(parallel: &str, recompute: &str, precision: &str, steps: u64) -> String {
    format!(
        r#"
experiment "fsdp" {{
  seed 5
  data {{
    source synthetic(inputs: normal([8]), targets: randint(3), count: 455)
    split(train: 0.8, val: 0.2)
    batch 24
  }}
  model {{
    input [8]
    fc0: linear(16)
    block body {recompute} {{
      fc1: linear(17)
      tanh
      norm: layernorm
      fc2: linear(16)
    }}
    tanh
    block head {{
      fc3: linear(13)
      relu
      fc4: linear(3)
    }}
  }}
  device cpu
  {parallel}
  optimizer adam(lr: 0.01)
  train {{
    steps {steps}
    accumulate 2
    clip_norm 0.5
    {precision}
    loss cross_entropy
    metrics [accuracy]
    eval_every 10 steps
    checkpoint(every: 10 steps, keep: 1)
  }}
}}
"#
    )
}

/// The largest difference between two runs' final parameters, relative to the largest
/// magnitude of each tensor, and between their losses at each step, relative to the loss.
fn differences(a: &Path, b: &Path) -> (f64, f64) {
    let (wa, wb) = (final_weights(a), final_weights(b));
    assert_eq!(wa.keys().collect::<Vec<_>>(), wb.keys().collect::<Vec<_>>());
    let params = wa
        .iter()
        .map(|(k, va)| {
            let scale = va.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-6);
            va.iter()
                .zip(&wb[k])
                .map(|(x, y)| f64::from((x - y).abs() / scale))
                .fold(0.0, f64::max)
        })
        .fold(0.0, f64::max);
    let (la, lb) = (step_losses(a), step_losses(b));
    assert_eq!(la.len(), lb.len(), "steps of {a:?} and {b:?}");
    let loss = la
        .iter()
        .zip(&lb)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1e-6))
        .fold(0.0, f64::max);
    (params, loss)
}

/// Asserts that `run` computed what `reference` did, within `tolerance` relative.
fn agrees(reference: &Path, run: &Path, tolerance: f64) {
    let (params, loss) = differences(reference, run);
    assert!(
        params < tolerance && loss < tolerance,
        "{run:?} against {reference:?}: parameters differ by {params:e}, losses by {loss:e}"
    );
}

/// Writes the experiment `name.exp` in `dir` and runs it to the end in `dir/name`.
fn trained(dir: &Path, name: &str, text: &str) -> PathBuf {
    let exp = write(dir, &format!("{name}.exp"), text);
    let run = dir.join(name);
    run_to_end(&exp, &run);
    run
}

const FSDP2: &str = "parallel fsdp(backend: gloo, world_size: 2)";
const FSDP3_KEEP: &str =
    "parallel fsdp(backend: gloo, world_size: 3, reshard_after_forward: false)";

#[test]
fn fsdp_matches_one_process_on_the_full_batch() {
    let dir = scratch("fsdp-equivalence");
    let single = trained(&dir, "single", &experiment("", "", "", 20));
    for (name, parallel) in [
        ("two", FSDP2),
        ("three-kept", FSDP3_KEEP),
        (
            "two-kept",
            "parallel fsdp(backend: gloo, world_size: 2, reshard_after_forward: false)",
        ),
        ("three", "parallel fsdp(backend: gloo, world_size: 3)"),
    ] {
        let run = trained(&dir, name, &experiment(parallel, "", "", 20));
        assert_eq!(newest_checkpoint(&run), Some(20), "{name}");
        agrees(&single, &run, 1e-5);
    }
    // Each rank evaluates its share of the validation split; the sums add up to one process's.
    let val = |run: &Path| {
        support::report(run)["val"]["loss"]
            .as_f64()
            .expect("val loss")
    };
    let (one, three) = (val(&single), val(&dir.join("three")));
    assert!((one - three).abs() < 1e-5, "{one} against {three}");
    none_left(&dir);
}

/// In bf16 a weight's gradient is a bf16 product summed over a micro-batch's rows and rounded
/// once, so what a process computes depends on which rows share a micro-batch. A rank's
/// micro-batches are those of one process that accumulates over W times as many micro-batches
/// of the same global batch, the short last batch of an epoch included: fsdp with 2 ranks and
/// `accumulate 2` computes what one process with `accumulate 4` computes, with 3 ranks what one
/// with `accumulate 6` computes, both resharding settings, within 1e-5 after 20 steps
/// (measured: identical losses), and what ddp computes (ddp at 3 ranks too: its Reducer sums,
/// so no factor of the world size enters its bf16 backward; with one, 1.5e-2 apart).
#[test]
fn fsdp_and_ddp_in_bf16_compute_what_one_process_does_on_the_ranks_micro_batches() {
    let dir = scratch("fsdp-bf16");
    let bf16 = "precision bf16";
    let accumulating = |parallel: &str, n: u32| {
        experiment(parallel, "", bf16, 20).replace("accumulate 2", &format!("accumulate {n}"))
    };
    let four = trained(&dir, "single-4", &accumulating("", 4));
    let six = trained(&dir, "single-6", &accumulating("", 6));
    let mut two = None;
    for (name, parallel, single) in [
        ("two", FSDP2, &four),
        (
            "two-kept",
            "parallel fsdp(backend: gloo, world_size: 2, reshard_after_forward: false)",
            &four,
        ),
        ("three", "parallel fsdp(backend: gloo, world_size: 3)", &six),
        ("three-kept", FSDP3_KEEP, &six),
        (
            "ddp-three",
            "parallel ddp(backend: gloo, world_size: 3)",
            &six,
        ),
    ] {
        let run = trained(&dir, name, &experiment(parallel, "", bf16, 20));
        agrees(single, &run, 1e-5);
        two.get_or_insert(run);
    }
    let ddp = trained(
        &dir,
        "ddp",
        &experiment("parallel ddp(backend: gloo, world_size: 2)", "", bf16, 20),
    );
    agrees(&ddp, &two.expect("the 2-rank run"), 1e-5);
    none_left(&dir);
}

#[test]
fn recomputing_a_block_under_fsdp_changes_nothing() {
    let dir = scratch("fsdp-recompute");
    for parallel in [FSDP2, FSDP3_KEEP] {
        let kept = trained(&dir, "kept", &experiment(parallel, "", "", 20));
        let again = trained(&dir, "again", &experiment(parallel, "recompute", "", 20));
        agrees(&kept, &again, 1e-6);
        std::fs::remove_dir_all(&kept).expect("remove");
        std::fs::remove_dir_all(&again).expect("remove");
    }
    none_left(&dir);
}

/// A run stopped at step 10 of 20 (`--max-steps`), at 2 ranks.
fn stopped(dir: &Path, name: &str) -> PathBuf {
    let exp = write(dir, "two.exp", &experiment(FSDP2, "", "", 20));
    let run = dir.join(name);
    let child = runtime(&[
        "run",
        s(&exp),
        "--quiet",
        "--max-steps",
        "10",
        "--run-dir",
        s(&run),
    ])
    .spawn()
    .expect("start");
    let (out, _) = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(newest_checkpoint(&run), Some(10));
    run
}

#[test]
fn a_run_stopped_at_2_ranks_resumes_at_3_at_1_and_without_a_strategy() {
    let dir = scratch("fsdp-resume");
    let whole = trained(&dir, "whole", &experiment("", "", "", 20));
    for (name, parallel) in [
        ("three", "parallel fsdp(backend: gloo, world_size: 3)"),
        ("one", "parallel fsdp(backend: gloo, world_size: 1)"),
        ("none", ""),
    ] {
        let run = stopped(&dir, name);
        let exp = write(
            &dir,
            &format!("{name}.exp"),
            &experiment(parallel, "", "", 20),
        );
        let child = runtime(&["run", s(&exp), "--quiet", "--resume", s(&run)])
            .spawn()
            .expect("start");
        let (out, _) = finish(child, Duration::from_secs(120));
        assert!(out.status.success(), "{name}: {}", text(&out));
        let (params, loss) = differences(&whole, &run);
        assert!(
            params < 1e-5 && loss < 1e-6,
            "{name}: parameters differ by {params:e}, losses by {loss:e}"
        );
        // The report records the change of sharding.
        let report = std::fs::read_to_string(run.join("report.yaml")).expect("report");
        assert!(
            report.contains(
                "sharding: fsdp(backend: gloo, world_size: 2, reshard_after_forward: true) → "
            ),
            "{name}: {report}"
        );
    }
    none_left(&dir);
}

/// Quantization after training: the run ends with its model whole on every rank (its
/// evaluations gather nothing more), and what it evaluates after is the quantized model, as one
/// process does.
#[test]
fn quantizing_after_training_under_fsdp_evaluates_the_quantized_model() {
    let dir = scratch("fsdp-quantize");
    let quantized = |parallel: &str| {
        let text = experiment(parallel, "", "", 20);
        let end = text.rfind('}').expect("the experiment's end");
        format!(
            "{}  compress {{\n    quantize body int8(granularity: per_channel, activations: dynamic)\n  }}\n}}\n",
            &text[..end]
        )
    };
    let val = |run: &Path, when: &str| {
        support::report(run)["compression"]["val"][when]["loss"]
            .as_f64()
            .expect("val loss")
    };
    let single = trained(&dir, "single", &quantized(""));
    for (name, parallel) in [("two", FSDP2), ("three-kept", FSDP3_KEEP)] {
        let run = trained(&dir, name, &quantized(parallel));
        let (before, after) = (val(&run, "before"), val(&run, "after"));
        assert!(
            before != after,
            "{name}: quantization changed nothing ({before})"
        );
        for when in ["before", "after"] {
            let (one, many) = (val(&single, when), val(&run, when));
            assert!(
                (one - many).abs() < 1e-4 * one.abs(),
                "{name}, {when}: {many} against one process's {one}"
            );
        }
    }
    none_left(&dir);
}

#[test]
fn a_killed_rank_stops_every_rank() {
    let dir = scratch("fsdp-killed");
    let exp = write(
        &dir,
        "long.exp",
        &experiment(
            "parallel fsdp(backend: gloo, world_size: 3, timeout: 10s)",
            "",
            "",
            1_000_000,
        ),
    );
    let (out, took) = kill_a_rank(&exp, &dir.join("run"), 1);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(
        all.contains("K0514") && all.contains("rank 1 stopped (killed by SIGKILL"),
        "{all}"
    );
    none_left(&dir);
}

/// `kiln plan` of the experiment at 2 ranks, against the arithmetic by hand. The tensors: the
/// root's `fc0` (128 + 16); the block `body`'s `fc1` (272 + 17), `norm` (17 + 17) and `fc2`
/// (272 + 16): 611; the block `head`'s `fc3` (208 + 13) and `fc4` (39 + 3): 263. A rank's
/// shard of each tensor is half of it, rounded up: root 72, body 307, head 133, 512 in all.
#[test]
fn the_plan_counts_shards_gathered_units_and_collectives() {
    let dir = scratch("fsdp-plan");
    let exp = write(&dir, "two.exp", &experiment(FSDP2, "", "", 20));
    let out = support::kiln(&["plan", s(&exp), "--format", "yaml"])
        .output()
        .expect("kiln plan");
    assert!(out.status.success(), "{}", text(&out));
    let plan: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).expect("yaml");
    let sharding = &plan["sharding"];
    let number = |v: &serde_yaml::Value| v.as_u64().expect("a number");
    let units: Vec<(String, u64, u64)> = sharding["units"]
        .as_sequence()
        .expect("units")
        .iter()
        .map(|u| {
            (
                u["name"].as_str().expect("name").to_string(),
                number(&u["params"]),
                number(&u["shard_params"]),
            )
        })
        .collect();
    assert_eq!(
        units,
        [
            ("body".to_string(), 611, 307),
            ("head".to_string(), 263, 133),
            ("root".to_string(), 144, 72)
        ]
    );
    assert_eq!(number(&sharding["shard_params"]), 512);
    // Resharding: the root and the largest block at once; the whole gradients of both.
    assert_eq!(number(&sharding["gathered_params"]), 144 + 611);
    assert_eq!(number(&sharding["unreduced_gradients"]), 144 + 611);
    // On the CPU, a gather's input and output and two reductions' (each an all-to-all's input
    // and output), in the largest block's padded size (2 x 307), and the root's gather (2 x 144).
    assert_eq!(number(&sharding["gather_buffers"]), 2 * (2 * 307) + 2 * 144);
    assert_eq!(number(&sharding["reduce_buffers"]), 4 * (2 * 307));
    // Each of 2 micro-batches gathers every unit (2 x 512 values) and each block again
    // (2 x 440), and reduce-scatters every unit; a ring moves half of it in and out of a rank.
    assert_eq!(number(&sharding["all_gather_bytes"]), 2 * 4 * (1024 + 880));
    assert_eq!(number(&sharding["reduce_scatter_bytes"]), 2 * 4 * 1024);
    assert_eq!(
        number(&sharding["ring_bytes_per_rank"]),
        (2 * 4 * (1024 + 880) + 2 * 4 * 1024) / 2
    );
    let rank = &plan["devices"][0];
    assert_eq!(number(&rank["replicas"]), 2);
    assert_eq!(number(&rank["weight_bytes"]), 4 * (512 + 755 + 1516));
    assert_eq!(number(&rank["gradient_bytes"]), 4 * (512 + 755 + 2456));
    // Adam keeps two values a parameter, on the shards.
    assert_eq!(number(&rank["optimizer_bytes"]), 8 * 512);
    assert!(plan["communication"]["allreduce"].is_null());
}
