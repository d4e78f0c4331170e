//! The pruning masks against `torch.nn.utils.prune`, run by the project's `.venv/bin/python` on
//! the same tensors: one Python process computes every case, step by step.

use std::collections::HashMap;

use serde_json::{json, Value};
use tch::Tensor;

use crate::toolkit::{python_command, scratch};

use super::tests::{equal, few_distinct, uniform, zeros, GENERATOR};
use super::*;
use Amount::{Count, Fraction};

/// The reference: builds one module per tensor, applies the steps with `torch.nn.utils.prune`
/// (so repeated pruning goes through `PruningContainer`), and saves every mask after every step,
/// plus `torch.norm` over all dimensions but one for the norm checks. Safetensors goes through
/// the shared `tests/support/torchref.py`.
const REFERENCE: &str = r#"
import json, sys
import torch
from torch import nn
from torch.nn.utils import prune
from torchref import load_safetensors, save_safetensors

torch.set_num_threads(1)

spec = json.load(open(sys.argv[1]))
inputs = load_safetensors(sys.argv[2])
out = {}
for case in spec["cases"]:
    modules = []
    for j in range(case["tensors"]):
        m = nn.Module()
        m.weight = nn.Parameter(inputs[f"{case['name']}/{j}"].clone())
        modules.append(m)
    for i, step in enumerate(case["steps"]):
        method, amount = step["method"], step["amount"]
        if method == "l1":
            prune.l1_unstructured(modules[0], "weight", amount)
        elif method == "random":
            torch.manual_seed(step["seed"])
            prune.random_unstructured(modules[0], "weight", amount)
        elif method == "ln":
            prune.ln_structured(modules[0], "weight", amount, n=step["n"], dim=step["dim"])
        elif method == "global":
            prune.global_unstructured(
                [(m, "weight") for m in modules], pruning_method=prune.L1Unstructured, amount=amount
            )
        else:
            raise ValueError(method)
        for j, m in enumerate(modules):
            if hasattr(m, "weight_mask"):
                out[f"{case['name']}/{i}/{j}"] = m.weight_mask
for k, norm in enumerate(spec["norms"]):
    t = inputs[f"norm{k}"]
    dim = norm["dim"] % t.dim()
    out[f"norm{k}"] = torch.norm(t, p=norm["n"], dim=[d for d in range(t.dim()) if d != dim])
save_safetensors(sys.argv[3], out)
"#;

/// One pruning call.
#[derive(Clone, Copy)]
enum Method {
    L1,
    Random { seed: i64 },
    Ln { n: u64, dim: i64 },
    Global,
}

/// A sequence of pruning calls on some tensors: every method but `Global` prunes the first one.
struct Case {
    name: String,
    tensors: Vec<Tensor>,
    steps: Vec<(Method, Amount)>,
}

fn case(name: &str, tensors: Vec<Tensor>, steps: &[(Method, Amount)]) -> Case {
    Case {
        name: name.to_string(),
        tensors,
        steps: steps.to_vec(),
    }
}

use Method::{Global, Random, L1};

fn ln(n: u64, dim: i64) -> Method {
    Method::Ln { n, dim }
}

fn global_tensors(seed: u64) -> Vec<Tensor> {
    vec![
        uniform(seed, &[20, 30]),
        uniform(seed + 1, &[16, 8, 3, 3]) * 0.6,
        uniform(seed + 2, &[50]) * 1.5,
    ]
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        case(
            "l1_random",
            vec![uniform(1, &[20, 30])],
            &[(L1, Fraction(0.5))],
        ),
        case(
            "l1_conv",
            vec![uniform(2, &[8, 4, 3, 3])],
            &[(L1, Fraction(0.35))],
        ),
        case(
            "l1_half_even",
            vec![uniform(3, &[5])],
            &[(L1, Fraction(0.5))],
        ),
        case("tie_10_3", vec![equal(&[10])], &[(L1, Count(3))]),
        case("tie_10_5", vec![equal(&[10])], &[(L1, Count(5))]),
        case("tie_1000_100", vec![equal(&[1000])], &[(L1, Count(100))]),
        case("tie_4096_41", vec![equal(&[64, 64])], &[(L1, Count(41))]),
        case(
            "few_distinct",
            vec![few_distinct(4, &[50, 40])],
            &[(L1, Fraction(0.3))],
        ),
        case(
            "two_values",
            vec![few_distinct(5, &[4096]).sign()],
            &[(L1, Fraction(0.45))],
        ),
        case(
            "l1_twice",
            vec![uniform(6, &[10, 10])],
            &[(L1, Fraction(0.5)), (L1, Fraction(0.5))],
        ),
        case(
            "l1_thrice",
            vec![uniform(7, &[30, 20])],
            &[
                (L1, Fraction(0.3)),
                (L1, Fraction(0.4)),
                (L1, Fraction(0.2)),
            ],
        ),
        case(
            "tie_thrice",
            vec![equal(&[100])],
            &[
                (L1, Fraction(0.3)),
                (L1, Fraction(0.4)),
                (L1, Fraction(0.2)),
            ],
        ),
        case(
            "few_distinct_twice",
            vec![few_distinct(8, &[40, 25])],
            &[(L1, Fraction(0.5)), (L1, Fraction(0.5))],
        ),
        case(
            "l1_amounts",
            vec![uniform(9, &[6, 7])],
            &[
                (L1, Fraction(0.0)),
                (L1, Count(0)),
                (L1, Count(5)),
                (L1, Fraction(1.0)),
                (L1, Fraction(0.5)),
            ],
        ),
        case(
            "l1_count_all",
            vec![uniform(10, &[6, 7])],
            &[(L1, Count(42))],
        ),
        case(
            "random_seed",
            vec![uniform(11, &[20, 30])],
            &[(Random { seed: 7 }, Fraction(0.4))],
        ),
        case(
            "random_thrice",
            vec![uniform(12, &[20, 30])],
            &[
                (Random { seed: 1 }, Fraction(0.5)),
                (Random { seed: 2 }, Fraction(0.5)),
                (Random { seed: 3 }, Count(17)),
            ],
        ),
        case(
            "random_after_l1",
            vec![uniform(13, &[10, 10])],
            &[(L1, Fraction(0.3)), (Random { seed: 4 }, Fraction(0.3))],
        ),
        case(
            "ln_conv_last",
            vec![uniform(14, &[16, 8, 3, 3])],
            &[(ln(2, -1), Fraction(0.34))],
        ),
        case(
            "ln_equal_rows",
            vec![equal(&[10, 6])],
            &[(ln(2, 0), Fraction(0.3))],
        ),
        case(
            "ln_equal_conv",
            vec![equal(&[12, 4, 3, 3])],
            &[(ln(1, 0), Fraction(0.25)), (ln(1, 1), Fraction(0.5))],
        ),
        case(
            "ln_thrice",
            vec![uniform(15, &[20, 30])],
            &[
                (ln(2, 0), Fraction(0.3)),
                (ln(2, 0), Fraction(0.4)),
                (ln(2, 0), Count(3)),
            ],
        ),
        case(
            "l1_then_ln",
            vec![uniform(16, &[20, 30])],
            &[(L1, Fraction(0.5)), (ln(2, 0), Fraction(0.3))],
        ),
        case(
            "ln_then_l1",
            vec![uniform(17, &[16, 8, 3, 3])],
            &[(ln(1, 1), Fraction(0.25)), (L1, Fraction(0.5))],
        ),
        case(
            "ln_all_then_again",
            vec![uniform(18, &[6, 4])],
            &[(ln(2, 0), Fraction(1.0)), (ln(2, 0), Fraction(0.5))],
        ),
        case(
            "ln_few_distinct",
            vec![few_distinct(19, &[24, 5])],
            &[(ln(1, 0), Fraction(0.5)), (ln(1, 0), Fraction(0.5))],
        ),
        case(
            "ln_zero_norm",
            vec![few_distinct(20, &[20, 6])],
            &[(ln(0, 0), Fraction(0.3))],
        ),
        case("global", global_tensors(21), &[(Global, Fraction(0.4))]),
        case(
            "global_thrice",
            global_tensors(24),
            &[
                (Global, Fraction(0.4)),
                (Global, Fraction(0.3)),
                (Global, Count(100)),
            ],
        ),
        case(
            "global_after_l1",
            global_tensors(27),
            &[(L1, Fraction(0.5)), (Global, Fraction(0.3))],
        ),
        case(
            "global_ties",
            vec![equal(&[10, 10]), equal(&[5, 4]), equal(&[30])],
            &[(Global, Fraction(0.37)), (Global, Fraction(0.5))],
        ),
        case(
            "global_few_distinct",
            vec![
                few_distinct(30, &[20, 30]),
                few_distinct(31, &[16, 8, 3, 3]),
            ],
            &[(Global, Fraction(0.6))],
        ),
    ];
    for n in 1..=3 {
        for dim in 0..=1 {
            cases.push(case(
                &format!("ln_linear_{n}_{dim}"),
                vec![uniform(40 + n * 2 + dim as u64, &[20, 30])],
                &[(ln(n, dim), Fraction(0.3))],
            ));
            cases.push(case(
                &format!("ln_conv_{n}_{dim}"),
                vec![uniform(50 + n * 2 + dim as u64, &[16, 8, 3, 3])],
                &[(ln(n, dim), Fraction(0.5))],
            ));
        }
    }
    cases
}

/// Tensors, orders and dimensions whose `ln_units` must equal `torch.norm` bit for bit.
fn norm_cases() -> Vec<(Tensor, u64, i64)> {
    let mut norms = Vec::new();
    for n in 0..=3 {
        for dim in [0, 1] {
            norms.push((uniform(60 + n, &[20, 30]), n, dim));
        }
        for dim in [0, 1, -1] {
            norms.push((uniform(70 + n, &[16, 8, 3, 3]), n, dim));
        }
    }
    norms
}

/// How many entries differ, or why the two cannot be compared.
fn mismatches(ours: &Tensor, theirs: &Tensor) -> std::result::Result<i64, String> {
    if ours.size() != theirs.size() {
        return Err(format!(
            "shape {:?} against {:?}",
            ours.size(),
            theirs.size()
        ));
    }
    Ok(ours.ne_tensor(theirs).sum(Kind::Int64).int64_value(&[]))
}

/// Runs a case's steps with this module and compares every mask PyTorch saved. Odd cases pass the
/// masked weight and even ones the original, which must make no difference. Returns the problems
/// and the number of masks compared.
fn check_case(index: usize, case: &Case, theirs: &HashMap<String, Tensor>) -> (Vec<String>, usize) {
    let mut masks: Vec<Tensor> = case.tensors.iter().map(Tensor::ones_like).collect();
    let mut pruned = vec![false; masks.len()];
    let (mut problems, mut compared) = (Vec::new(), 0);
    for (i, &(method, amount)) in case.steps.iter().enumerate() {
        let weights: Vec<Tensor> = case
            .tensors
            .iter()
            .zip(&masks)
            .map(|(w, m)| {
                if index % 2 == 1 {
                    w * m
                } else {
                    w.shallow_clone()
                }
            })
            .collect();
        let what = format!("{} step {i}", case.name);
        match method {
            L1 => masks[0] = l1_unstructured(&weights[0], &masks[0], amount).expect(&what),
            Random { seed } => {
                tch::manual_seed(seed);
                masks[0] = random_unstructured(&weights[0], &masks[0], amount).expect(&what);
            }
            Method::Ln { n, dim } => {
                masks[0] = ln_structured(&weights[0], &masks[0], amount, n, dim).expect(&what)
            }
            Global => {
                let ws: Vec<&Tensor> = weights.iter().collect();
                let ms: Vec<&Tensor> = masks.iter().collect();
                masks = global_l1(&ws, &ms, amount).expect(&what);
                pruned.iter_mut().for_each(|p| *p = true);
            }
        }
        pruned[0] = true;
        for (j, mask) in masks.iter().enumerate().filter(|&(j, _)| pruned[j]) {
            let key = format!("{}/{i}/{j}", case.name);
            let Some(reference) = theirs.get(&key) else {
                problems.push(format!("{key}: PyTorch saved no mask"));
                continue;
            };
            compared += 1;
            match mismatches(mask, reference) {
                Ok(0) => {}
                Ok(n) => problems.push(format!(
                    "{key}: {n} of {} entries differ (Kiln prunes {}, PyTorch {})",
                    mask.numel(),
                    zeros(mask),
                    zeros(reference)
                )),
                Err(e) => problems.push(format!("{key}: {e}")),
            }
        }
    }
    if masks.iter().map(zeros).sum::<i64>() == 0 {
        problems.push(format!("{}: nothing was pruned", case.name));
    }
    (problems, compared)
}

#[test]
fn masks_equal_pytorchs() {
    let _generator = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = scratch("prune");
    let (cases, norms) = (cases(), norm_cases());
    let mut inputs: Vec<(String, Tensor)> = Vec::new();
    for case in &cases {
        for (j, t) in case.tensors.iter().enumerate() {
            inputs.push((format!("{}/{j}", case.name), t.shallow_clone()));
        }
    }
    for (k, (t, _, _)) in norms.iter().enumerate() {
        inputs.push((format!("norm{k}"), t.shallow_clone()));
    }
    let amount = |a: Amount| match a {
        Fraction(f) => json!(f),
        Count(c) => json!(c),
    };
    let spec_cases: Vec<Value> = cases
        .iter()
        .map(|c| {
            let steps: Vec<Value> = c
                .steps
                .iter()
                .map(|&(method, a)| match method {
                    L1 => json!({"method": "l1", "amount": amount(a)}),
                    Random { seed } => {
                        json!({"method": "random", "amount": amount(a), "seed": seed})
                    }
                    Method::Ln { n, dim } => {
                        json!({"method": "ln", "amount": amount(a), "n": n, "dim": dim})
                    }
                    Global => json!({"method": "global", "amount": amount(a)}),
                })
                .collect();
            json!({"name": c.name, "tensors": c.tensors.len(), "steps": steps})
        })
        .collect();
    let spec_norms: Vec<Value> = norms
        .iter()
        .map(|(_, n, dim)| json!({"n": n, "dim": dim}))
        .collect();
    let spec = json!({"cases": spec_cases, "norms": spec_norms});
    let (spec_path, input_path, output_path) = (
        scratch.join("spec.json"),
        scratch.join("inputs.safetensors"),
        scratch.join("masks.safetensors"),
    );
    std::fs::write(&spec_path, spec.to_string()).expect("write spec");
    Tensor::write_safetensors(&inputs, &input_path).expect("write inputs");
    let out = python_command("the pruning parity test")
        .arg("-c")
        .arg(REFERENCE)
        .args([&spec_path, &input_path, &output_path])
        .output()
        .expect("python starts");
    assert!(
        out.status.success(),
        "the torch.nn.utils.prune reference failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: HashMap<String, Tensor> = Tensor::read_safetensors(&output_path)
        .expect("read PyTorch's masks")
        .into_iter()
        .collect();

    // Both sides are the same libtorch on this machine and reduce on one thread, so the norms
    // are the same kernels summing in the same order: equal bit for bit on any CPU, and the
    // masks chosen from them too.
    tch::set_num_threads(1);
    let (mut failures, mut compared) = (Vec::new(), 0);
    for (index, case) in cases.iter().enumerate() {
        let (mut problems, mut count) = check_case(index, case, &theirs);
        // Tests elsewhere in this binary may draw from libtorch's global generator between a
        // random step's seeding and its draw; such a case is run once more before it fails.
        let draws = case.steps.iter().any(|(m, _)| matches!(m, Random { .. }));
        if !problems.is_empty() && draws {
            (problems, count) = check_case(index, case, &theirs);
        }
        failures.extend(problems);
        compared += count;
    }
    for (k, (t, n, dim)) in norms.iter().enumerate() {
        let ours = ln_units(&[(t, *dim)], *n).expect("norm");
        match theirs
            .get(&format!("norm{k}"))
            .map(|r| mismatches(&ours, r))
        {
            Some(Ok(0)) => compared += 1,
            Some(Ok(d)) => failures.push(format!("norm{k} (n={n}, dim={dim}): {d} values differ")),
            Some(Err(e)) => failures.push(format!("norm{k}: {e}")),
            None => failures.push(format!("norm{k}: PyTorch saved no norm")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences from torch.nn.utils.prune (its masks are kept in {}):\n{}",
        failures.len(),
        scratch.display(),
        failures.join("\n")
    );
    assert_eq!(
        compared,
        theirs.len(),
        "every mask PyTorch saved is compared"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
