//! The plan's memory per device against what a run's tensors hold at once
//! (`KILN_MEMORY_PROFILE`, whose count of live tensors is Kiln's host allocator's): within 10%
//! under fsdp (both resharding settings), ddp and no strategy, and activation checkpointing
//! saves what the plan says it saves, within 10%, both in live tensors and in the resident set
//! (large host blocks are mapped and kept within the peak of what lives in them,
//! `shim/host.cpp`). Transformers (causal and not, recomputed and not, fp32 and bf16, sequences
//! of 128 to 1024) hold what the plan says within 10%, in live tensors and in the resident set,
//! where activations far outweigh what the C allocator keeps around small blocks; for the MLPs
//! above, each run's resident set against its plan is left to BENCHMARKS.md (what the C allocator
//! keeps per thread differs from machine to machine; the saving, a difference of two runs, does
//! not carry it).

mod support;

use std::path::Path;
use std::time::Duration;

use support::ranks::{finish, runtime};
use support::{s, scratch, text, write};

/// Each rank's plan total, the plan's tensors (the total less the allocator's margin), peak of
/// live tensors and peak resident set over its baseline, in MiB, from a run of `exp` (3 steps).
fn measured(exp: &Path, run: &Path) -> Vec<(f64, f64, f64, f64)> {
    let child = runtime(&[
        "run",
        s(exp),
        "--quiet",
        "--max-steps",
        "3",
        "--run-dir",
        s(run),
    ])
    .env("KILN_MEMORY_PROFILE", "1")
    .spawn()
    .expect("start");
    let (out, _) = finish(child, Duration::from_secs(120));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let mib = |line: &str, after: &str| -> f64 {
        let at = line
            .find(after)
            .unwrap_or_else(|| panic!("`{after}` in {line}"));
        line[at + after.len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a number after `{after}` in {line}"))
    };
    all.lines()
        .filter(|l| l.contains("memory profile: rank"))
        .map(|l| {
            (
                mib(l, "plan "),
                mib(l, "the plan's tensors "),
                mib(l, "tensors alive at once: "),
                mib(l, ": peak "),
            )
        })
        .collect()
}

/// Asserts that `exp`'s ranks (`ranks` of them) hold at once what the plan says, within 10%;
/// returns rank 0's peaks of live tensors and of the resident set.
fn as_planned(dir: &Path, name: &str, exp: &str, ranks: usize) -> (f64, f64) {
    let exp = write(dir, &format!("{name}.exp"), exp);
    let rows = measured(&exp, &dir.join(name));
    assert_eq!(rows.len(), ranks, "{name}: {rows:?}");
    for (_, plan, live, _) in &rows {
        assert!(
            (live - plan).abs() <= 0.1 * plan,
            "{name}: tensors alive at once {live} MiB against the plan's {plan} MiB"
        );
    }
    (rows[0].2, rows[0].3)
}

#[test]
fn the_plan_is_what_a_steps_tensors_hold_at_once() {
    let dir = scratch("memory-strategies");
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/fsdp_blocks.exp"),
    )
    .expect("the example");
    let with = |parallel: &str| {
        example
            .lines()
            .map(|l| {
                if l.starts_with("  parallel ") {
                    parallel.to_string()
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (name, parallel, ranks) in [
        ("fsdp", "  parallel fsdp(backend: gloo, world_size: 2)", 2),
        (
            "fsdp-kept",
            "  parallel fsdp(backend: gloo, world_size: 2, reshard_after_forward: false)",
            2,
        ),
        ("ddp", "  parallel ddp(backend: gloo, world_size: 2)", 2),
        ("none", "", 1),
    ] {
        as_planned(&dir, name, &with(parallel), ranks);
    }
}

/// Eight residual MLP blocks, recomputed or not, on a batch whose activations outweigh the
/// gradients (what `bench/recompute_memory.sh` measures).
fn blocks(mark: &str) -> String {
    let mut model = String::from("    input [512]\n    embed: linear(512)\n");
    for i in 0..8 {
        model += &format!(
            "    block b{i} {mark} {{\n      residual {{\n        norm: layernorm\n        up: linear(2048)\n        gelu\n        down: linear(512)\n      }}\n    }}\n"
        );
    }
    format!(
        "experiment \"activations\" {{\n  seed 3\n  data {{\n    source synthetic(inputs: normal([512]), targets: randint(10), count: 2048)\n    batch 1024\n  }}\n  model {{\n{model}    head: linear(10)\n  }}\n  device cpu\n  optimizer adamw(lr: 1e-4)\n  train {{\n    steps 3\n    loss cross_entropy\n  }}\n}}\n"
    )
}

#[test]
fn recomputing_saves_what_the_plan_says() {
    let dir = scratch("memory-recompute");
    let plan_of = |name: &str, exp: &str| {
        let exp = write(&dir, &format!("{name}-plan.exp"), exp);
        let out = support::kiln(&["plan", s(&exp), "--format", "yaml"])
            .output()
            .expect("kiln plan");
        assert!(out.status.success(), "{}", text(&out));
        let plan: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).expect("yaml");
        plan["devices"][0]["total_bytes"].as_u64().expect("total") as f64 / (1u64 << 20) as f64
    };
    let (kept, recomputed) = (blocks(""), blocks("recompute"));
    let planned = plan_of("kept", &kept) - plan_of("recomputed", &recomputed);
    let (live, resident) = as_planned(&dir, "kept", &kept, 1);
    let (live_recomputed, resident_recomputed) = as_planned(&dir, "recomputed", &recomputed, 1);
    assert!(planned > 50.0, "the plan saves {planned} MiB");
    for (what, saved) in [
        ("live tensors", live - live_recomputed),
        ("the resident set", resident - resident_recomputed),
    ] {
        assert!(
            (saved - planned).abs() <= 0.1 * planned,
            "recomputing saved {saved} MiB of {what}, the plan {planned} MiB"
        );
    }
}

/// A stack of `transformer_block`s over `[seq, width]` inputs.
struct Stack {
    name: &'static str,
    seq: u64,
    width: u64,
    block: &'static str,
    blocks: usize,
    batch: u64,
    precision: &'static str,
    /// Whether the first block is recomputed in backward.
    recompute: bool,
}

impl Stack {
    fn experiment(&self) -> String {
        let mut model = format!("    input [{}, {}]\n", self.seq, self.width);
        for i in 0..self.blocks {
            let mark = if self.recompute && i == 0 {
                " recompute"
            } else {
                ""
            };
            model += &format!("    b{i}: {}{mark}\n", self.block);
        }
        format!(
            "experiment \"{name}\" {{\n  seed 2\n  data {{\n    source synthetic(inputs: normal([{seq}, {width}]), targets: randint(10), count: {count})\n    batch {batch}\n  }}\n  model {{\n{model}    mean(dim: 0)\n    head: linear(10)\n  }}\n  device cpu\n  optimizer adamw(lr: 1e-4)\n  train {{\n    steps 3\n    loss cross_entropy\n    precision {precision}\n  }}\n}}\n",
            name = self.name,
            seq = self.seq,
            width = self.width,
            count = 3 * self.batch,
            batch = self.batch,
            precision = self.precision,
        )
    }
}

/// Transformers, causal and not, with and without `recompute`, fp32 and bf16, on sequences of
/// 128 to 1024, with dropout (the CPU's math path for attention, which keeps the scores) and
/// without (flash attention): the plan's tensors within 10% of the tensors alive at once, and its
/// total (with the allocator's margin, the largest tensor) within 10% of the peak resident set
/// over the run's baseline.
#[test]
fn transformers_hold_what_the_plan_says() {
    let dir = scratch("memory-transformers");
    let stacks = [
        Stack {
            name: "causal-fp32-128",
            seq: 128,
            width: 256,
            block: "transformer_block(heads: 4, causal: true)",
            blocks: 2,
            batch: 16,
            precision: "fp32",
            recompute: false,
        },
        Stack {
            name: "bidirectional-bf16-256-recompute",
            seq: 256,
            width: 128,
            block: "transformer_block(heads: 4, dropout: 0)",
            blocks: 3,
            batch: 32,
            precision: "bf16",
            recompute: true,
        },
        Stack {
            name: "causal-fp32-1024-recompute",
            seq: 1024,
            width: 64,
            block: "transformer_block(heads: 2, causal: true)",
            blocks: 2,
            batch: 4,
            precision: "fp32",
            recompute: true,
        },
        Stack {
            name: "post-norm-bf16-512",
            seq: 512,
            width: 128,
            block: "transformer_block(heads: 4, norm: post, activation: relu)",
            blocks: 2,
            batch: 8,
            precision: "bf16",
            recompute: false,
        },
        Stack {
            name: "causal-fp32-512-flash",
            seq: 512,
            width: 128,
            block: "transformer_block(heads: 4, dropout: 0, causal: true)",
            blocks: 2,
            batch: 8,
            precision: "fp32",
            recompute: false,
        },
    ];
    let mut misses = Vec::new();
    for s in &stacks {
        let exp = write(&dir, &format!("{}.exp", s.name), &s.experiment());
        let rows = measured(&exp, &dir.join(s.name));
        let &[(total, tensors, live, resident)] = rows.as_slice() else {
            panic!("{}: {rows:?}", s.name);
        };
        eprintln!(
            "{}: plan {total} ({tensors} tensors), live {live}, resident {resident}",
            s.name
        );
        for (what, got, plan) in [
            ("tensors alive at once", live, tensors),
            ("resident set", resident, total),
        ] {
            if (got - plan).abs() > 0.1 * plan {
                misses.push(format!("{}: {what} {got} MiB, the plan {plan} MiB", s.name));
            }
        }
    }
    assert!(misses.is_empty(), "{}", misses.join("\n"));
}
