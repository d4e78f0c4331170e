//! Tensor parallel over processes (`parallel mesh(tensor: T, data: D)`, Gloo on loopback),
//! against one process on the same global batch: a transformer with an embedding (split by
//! vocabulary), positions, a transformer block (attention split by heads, its MLP by columns then
//! rows), a residual MLP whose two linears are split as a pair (dropout between them), layer norms
//! and a vocabulary head (split by outputs, gathered), trained 20 steps by AdamW with
//! `accumulate 2` and clipping. Every step's loss and the final parameters agree within 1e-5
//! relative at tensor 2, at tensor 2 × data 2, at tensor 2 × fsdp 2 and at fsdp 4 written as a
//! mesh, with dropout at
//! tensor 2 (the ranks keep their part of the masks one process draws), and in bf16 within
//! bf16's tolerance; two torchrun agents on the loopback address, as two machines of two ranks
//! each (a tensor group inside each), compute what one process does; a run stopped under one
//! mesh resumes under another, or none, as the uninterrupted run, dropout included (masks placed
//! by each element's row in the step's batch: fsdp 2 to none, ddp 3, fsdp 4, tensor 2 × fsdp 2;
//! ddp 2 to ddp 3); `kiln plan` says which layers are split and what a rank keeps.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::ranks::{finish, none_left, run_to_end, runtime};
use support::toolkit::root;
use support::{final_weights, kiln, s, scratch, step_losses, text, write};

/// The experiment under `parallel` (a whole line, or nothing), with `dropout` in the block and
/// between the residual MLP's linears, and `precision` lines.
fn experiment(parallel: &str, dropout: f64, precision: &str) -> String {
    format!(
        r#"
experiment "tensor" {{
  seed 3
  data {{
    source synthetic(inputs: randint(32, shape: [16]), targets: sort(), count: 340)
    split(train: 0.8, val: 0.2)
    batch 16
  }}
  model {{
    input [16]
    tokens: embedding(32, 24, pad: 5)  # id 5 pads: rank 0's rows hold it
    pos: positional(16)
    h0: transformer_block(heads: 4, hidden: 64, dropout: {dropout}, causal: true)
    block mlp {{
      residual {{
        norm: layernorm
        up: linear(64)
        gelu
        dropout({dropout})
        down: linear(24)
      }}
    }}
    norm: layernorm
    head: linear(32)
  }}
  device cpu
  {parallel}
  optimizer adamw(lr: 1e-3, weight_decay: 0.01)
  train {{
    steps 20
    loss cross_entropy
    metrics [accuracy]
    accumulate 2
    clip_norm 0.5
    {precision}
    eval_every 10 steps
    checkpoint(every: 10 steps, keep: 1)
  }}
}}
"#
    )
}

/// The largest difference of two runs' losses at a step, relative to the loss, and of their
/// final parameters: elementwise relative to each tensor's largest magnitude (`l2: false`), or
/// as the relative L2 norm of each tensor's difference (`l2: true`, bf16's measure).
///
/// Left out: the keys' bias (`in_proj_bias[24..48]`), whose gradient is zero in exact
/// arithmetic (adding a constant to every key shifts every score of a query alike, which softmax
/// ignores): what both runs compute for it is rounding noise, which Adam scales to steps of the
/// learning rate.
fn differences(a: &Path, b: &Path, l2: bool) -> (f64, f64) {
    let (la, lb) = (step_losses(a), step_losses(b));
    assert_eq!(la.len(), lb.len(), "steps of {a:?} and {b:?}");
    let loss = la
        .iter()
        .zip(&lb)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1e-6))
        .fold(0.0, f64::max);
    let (wa, wb) = (final_weights(a), final_weights(b));
    assert_eq!(wa.keys().collect::<Vec<_>>(), wb.keys().collect::<Vec<_>>());
    let params = wa
        .iter()
        .map(|(k, va)| {
            let vb = &wb[k];
            assert_eq!(va.len(), vb.len(), "{k}");
            let keep = |i: &usize| !(k == "h0.self_attn.in_proj_bias" && (24..48).contains(i));
            let pairs: Vec<(f64, f64)> = (0..va.len())
                .filter(keep)
                .map(|i| (f64::from(va[i]), f64::from(vb[i])))
                .collect();
            if l2 {
                let diff: f64 = pairs.iter().map(|(x, y)| (x - y).powi(2)).sum();
                let norm: f64 = pairs.iter().map(|(x, _)| x * x).sum();
                (diff / norm.max(1e-12)).sqrt()
            } else {
                let scale = pairs.iter().fold(1e-6f64, |m, (x, _)| m.max(x.abs()));
                pairs
                    .iter()
                    .map(|(x, y)| (x - y).abs() / scale)
                    .fold(0.0, f64::max)
            }
        })
        .fold(0.0, f64::max);
    (loss, params)
}

/// Asserts that `run` computed what `reference` did: losses within `loss_tol`, parameters within
/// `param_tol` (see [`differences`]).
fn agrees(reference: &Path, run: &Path, loss_tol: f64, param_tol: f64, l2: bool) {
    let (loss, params) = differences(reference, run, l2);
    assert!(
        loss < loss_tol && params < param_tol,
        "{run:?} against {reference:?}: losses differ by {loss:e}, parameters by {params:e}"
    );
}

/// Writes the experiment `name.exp` in `dir` and runs it to the end in `dir/name`.
fn trained(dir: &Path, name: &str, text: &str) -> PathBuf {
    let exp = write(dir, &format!("{name}.exp"), text);
    let run = dir.join(name);
    run_to_end(&exp, &run);
    run
}

const TENSOR2: &str = "parallel mesh(tensor: 2)";
const TENSOR2_DATA2: &str = "parallel mesh(tensor: 2, data: 2)";

#[test]
fn tensor_parallel_computes_what_one_process_does() {
    let dir = scratch("tensor-equivalence");
    let single = trained(&dir, "single", &experiment("", 0.0, ""));
    for (name, parallel) in [
        ("tensor2", TENSOR2),
        ("tensor2-data2", TENSOR2_DATA2),
        // Each tensor rank's pieces sharded over the 2 ranks that hold the same.
        ("tensor2-fsdp2", "parallel mesh(tensor: 2, fsdp: 2)"),
        // The old fsdp as a mesh whose other degrees are 1.
        ("fsdp4", "parallel mesh(fsdp: 4, tensor: 1, data: 1)"),
    ] {
        let run = trained(&dir, name, &experiment(parallel, 0.0, ""));
        agrees(&single, &run, 1e-5, 1e-5, false);
        // The tensor ranks' evaluation counts once: the validation loss is one process's.
        let val = |run: &Path| {
            support::report(run)["val"]["loss"]
                .as_f64()
                .expect("val loss")
        };
        let (one, split) = (val(&single), val(&run));
        assert!(
            (one - split).abs() < 1e-5 * one,
            "{name}: {one} against {split}"
        );
    }
    none_left(&dir);
}

#[test]
fn dropout_under_tensor_parallel_drops_what_one_process_drops() {
    let dir = scratch("tensor-dropout");
    let single = trained(&dir, "single", &experiment("", 0.2, ""));
    let run = trained(&dir, "tensor2", &experiment(TENSOR2, 0.2, ""));
    agrees(&single, &run, 1e-5, 1e-5, false);
    none_left(&dir);
}

/// In bf16 each rank's partial product of a row split is rounded to bf16 before the ranks sum
/// it, where one process rounds the whole product once: the runs agree within bf16's tolerance
/// (`src/runtime/layer_parity.rs`: 2e-2 on each tensor's relative L2 norm; measured 4.7e-5 on
/// the losses).
#[test]
fn tensor_parallel_in_bf16_agrees_within_bf16() {
    let dir = scratch("tensor-bf16");
    let bf16 = "precision bf16";
    let single = trained(&dir, "single", &experiment("", 0.0, bf16));
    let run = trained(&dir, "tensor2", &experiment(TENSOR2, 0.0, bf16));
    agrees(&single, &run, 1e-3, 2e-2, true);
    none_left(&dir);
}

/// Two torchrun agents on 127.0.0.1, as two machines (`--nnodes 2`) of two ranks each: torchrun
/// numbers a machine's ranks consecutively, so each machine holds one tensor group and the data
/// dimension crosses between them. The command each machine runs:
/// `torchrun --nnodes 2 --node-rank K --nproc-per-node 2 --master-addr HOST --master-port PORT
/// --no-python kiln-runtime run FILE`.
#[test]
fn two_machines_with_tensor_inside_each_compute_what_one_process_does() {
    let dir = scratch("tensor-nodes");
    let single = trained(&dir, "single", &experiment("", 0.0, ""));
    let exp = write(&dir, "mesh.exp", &experiment(TENSOR2_DATA2, 0.0, ""));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let run = dir.join("nodes");
    let agents: Vec<_> = ["0", "1"]
        .iter()
        .map(|node| {
            Command::new(root().join(".venv/bin/torchrun"))
                .args([
                    "--nnodes",
                    "2",
                    "--node-rank",
                    node,
                    "--nproc-per-node",
                    "2",
                ])
                .args(["--master-addr", "127.0.0.1", "--master-port", &port])
                .arg("--no-python")
                .arg(env!("CARGO_BIN_EXE_kiln-runtime"))
                .args(["run", s(&exp), "--quiet", "--run-dir", s(&run)])
                .current_dir(root())
                .env("NO_COLOR", "1")
                .env("OMP_NUM_THREADS", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("torchrun starts")
        })
        .collect();
    for (node, agent) in agents.into_iter().enumerate() {
        let (out, _) = finish(agent, Duration::from_secs(180));
        assert!(out.status.success(), "node {node}:\n{}", text(&out));
    }
    agrees(&single, &run, 1e-5, 1e-5, false);
    none_left(&dir);
}

/// Stops the run of `source` at step 10 of 20 (`--max-steps`) in `dir/name`.
fn stopped(dir: &Path, name: &str, source: &str) -> PathBuf {
    let exp = write(dir, &format!("{name}-first.exp"), source);
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
    run
}

/// Resumes `run` under the experiment `source`, to its end.
fn resumed(dir: &Path, name: &str, run: &Path, source: &str) {
    let exp = write(dir, &format!("{name}-then.exp"), source);
    let child = runtime(&["run", s(&exp), "--quiet", "--resume", s(run)])
        .spawn()
        .expect("start");
    let (out, _) = finish(child, Duration::from_secs(120));
    assert!(out.status.success(), "{name}: {}", text(&out));
}

#[test]
fn a_run_resumes_under_another_tensor_degree_as_the_uninterrupted_run() {
    let dir = scratch("tensor-resume");
    let whole = trained(&dir, "whole", &experiment("", 0.2, ""));
    for (name, first, then) in [("to-none", TENSOR2, ""), ("from-none", "", TENSOR2)] {
        let run = stopped(&dir, name, &experiment(first, 0.2, ""));
        resumed(&dir, name, &run, &experiment(then, 0.2, ""));
        agrees(&whole, &run, 1e-5, 1e-5, false);
        let report = std::fs::read_to_string(run.join("report.yaml")).expect("report");
        assert!(report.contains("tensor parallel: "), "{name}: {report}");
    }
    // Without dropout, fsdp at 2 ranks resumes as tensor 2 × fsdp 2, which resumes without a
    // strategy.
    let plain = trained(&dir, "plain", &experiment("", 0.0, ""));
    let run = stopped(
        &dir,
        "fsdp-to-mesh",
        &experiment("parallel fsdp(backend: gloo, world_size: 2)", 0.0, ""),
    );
    resumed(
        &dir,
        "fsdp-to-mesh",
        &run,
        &experiment("parallel mesh(tensor: 2, fsdp: 2)", 0.0, ""),
    );
    agrees(&plain, &run, 1e-5, 1e-5, false);
    let run = stopped(
        &dir,
        "mesh-to-none",
        &experiment("parallel mesh(tensor: 2, fsdp: 2)", 0.0, ""),
    );
    resumed(&dir, "mesh-to-none", &run, &experiment("", 0.0, ""));
    agrees(&plain, &run, 1e-5, 1e-5, false);
    // With data replication the run computes what `ddp` over its data ranks does.
    let ddp = trained(
        &dir,
        "ddp",
        &experiment("parallel ddp(backend: gloo, world_size: 2)", 0.0, ""),
    );
    let run = stopped(&dir, "to-ddp", &experiment(TENSOR2_DATA2, 0.0, ""));
    resumed(
        &dir,
        "to-ddp",
        &run,
        &experiment("parallel ddp(backend: gloo, world_size: 2)", 0.0, ""),
    );
    agrees(&ddp, &run, 1e-5, 1e-5, false);
    none_left(&dir);
}

/// Resume anywhere: dropout masks follow each element's place in the step's batch, so a run
/// with dropout stopped under one mesh resumes under any other (or none) with the losses of the
/// uninterrupted run: fsdp 2 to no strategy, ddp 3, fsdp 4 and tensor 2 × fsdp 2; ddp 2 to ddp 3.
#[test]
fn a_run_with_dropout_resumes_at_any_world_size_as_the_uninterrupted_run() {
    let dir = scratch("mesh-resume-anywhere");
    // Batches of 24: 2 micro-batches over 2, 3 or 4 ranks.
    let experiment = |parallel: &str| experiment(parallel, 0.2, "").replace("batch 16", "batch 24");
    let whole = trained(&dir, "whole", &experiment(""));
    let fsdp2 = "parallel fsdp(backend: gloo, world_size: 2)";
    let ddp2 = "parallel ddp(backend: gloo, world_size: 2)";
    let ddp3 = "parallel ddp(backend: gloo, world_size: 3)";
    for (name, first, then) in [
        ("fsdp2-none", fsdp2, ""),
        ("fsdp2-ddp3", fsdp2, ddp3),
        (
            "fsdp2-fsdp4",
            fsdp2,
            "parallel fsdp(backend: gloo, world_size: 4)",
        ),
        (
            "fsdp2-tensor2-fsdp2",
            fsdp2,
            "parallel mesh(tensor: 2, fsdp: 2)",
        ),
        ("ddp2-ddp3", ddp2, ddp3),
    ] {
        let run = stopped(&dir, name, &experiment(first));
        resumed(&dir, name, &run, &experiment(then));
        agrees(&whole, &run, 1e-5, 1e-5, false);
    }
    none_left(&dir);
}

#[test]
fn the_plan_says_which_layers_are_split_and_what_a_rank_keeps() {
    let dir = scratch("tensor-plan");
    let exp = write(&dir, "t.exp", &experiment(TENSOR2_DATA2, 0.0, ""));
    let out = kiln(&["plan", s(&exp)]).output().expect("kiln plan");
    let plan = text(&out);
    assert!(out.status.success(), "{plan}");
    for line in [
        "parallel   tensor parallel over 2 ranks × 2 data replicas, 4 processes, gloo",
        "h0          heads, MLP by columns then rows; 2 sums",
        "mlp.0.up    columns (outputs)",
        "mlp.0.3     on the split outputs",
        "mlp.0.down  rows (inputs), summed",
        "tokens      vocabulary rows, lookups summed",
        "pos         replicated",
        "head        columns (outputs), gathered",
        // By hand: h0 keeps half of in_proj (1,800), out_proj's weight (576), linear1 (1,600)
        // and linear2's weight (1,536), with out_proj's and linear2's biases and the norms whole
        // (24 + 24 + 96): 2,900; mlp.0.up 800, mlp.0.down 768 + 24; tokens 384 of 768, head 400
        // of 800; pos and the norms whole (384 + 48 + 48).
        "a tensor rank's pieces: 5,756 parameters",
        // Per step, batch 16 over 2 data ranks in 2 micro-batches of 4 rows: the block sums twice
        // forward and twice backward, the pair once each way, the embedding's lookups forward
        // and the head's input gradient backward, each of 4 rows of [16, 24] fp32 (6 KiB): 8
        // sums a micro-batch, 96 KiB a step; the head's outputs, 4 rows of [16, 32] (8 KiB), are
        // gathered each micro-batch. Ring: 2 (2 - 1)/2 of 96 KiB and (2 - 1)/2 of 16 KiB.
        "16 all-reduces of activations and their gradients (96.00 KiB summed) and 2 all-gathers of the head's outputs (16.00 KiB gathered) over 2 tensor ranks: each rank sends and receives 104.00 KiB (ring)",
        "all-reduce of 22.48 KiB of gradients over 2 replicas",
    ] {
        assert!(plan.contains(line), "missing `{line}` in:\n{plan}");
    }
    // Under fsdp each rank shards its pieces over the 2 ranks that hold the same: the block `mlp`
    // (1,640 of its pieces) and the root (4,116), half each.
    let exp = write(
        &dir,
        "f.exp",
        &experiment("parallel mesh(tensor: 2, fsdp: 2)", 0.0, ""),
    );
    let out = kiln(&["plan", s(&exp)]).output().expect("kiln plan");
    let plan = text(&out);
    for line in [
        "sharding over 2 ranks",
        "mlp    1,640             820",
        "root   4,116           2,058",
        "a rank holds shards of 2,878 parameters",
        "which fsdp shards over the data ranks",
    ] {
        assert!(plan.contains(line), "missing `{line}` in:\n{plan}");
    }
}
