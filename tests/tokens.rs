//! The per-token example end to end: a transformer with learned positional embeddings sorts a
//! sequence of tokens (`sort()`, a class per token), far above the chance of 1 in 10 per token.

mod support;

use support::*;

#[test]
fn sequence_sort_learns_a_class_per_token() {
    let acc = example_val_accuracy("experiments/sequence_sort.exp", "sequence-sort");
    // The README states 99.81% of the tokens for this seed; chance is 10%.
    assert!(acc >= 0.9, "val token accuracy {acc} < 0.9");
}

/// A per-token run with class weights and an ignored id, validated in batches of 5: `kiln eval`
/// of its last checkpoint prints the validation loss and token accuracy that the run reported.
/// (`tests/parity_tokens.rs` checks both against PyTorch.)
#[test]
fn kiln_eval_of_a_per_token_run_gives_its_validation_metrics() {
    let dir = scratch("tokens-eval");
    let exp = write(
        &dir,
        "copy.exp",
        r#"experiment "copy" {
  seed 3
  data {
    source synthetic(inputs: randint(5, shape: [6]), targets: copy(), count: 203)
    split(train: 0.8, val: 0.2)
    batch 16
    eval_batch 5
  }
  model {
    input [6]
    embed: embedding(5, 8)
    pos: positional(max_len: 6)
    head: linear(5)
  }
  device cpu
  optimizer adam(lr: 1e-2)
  train {
    steps 20
    loss cross_entropy(weight: [1, 2, 0.5, 1, 3], ignore_index: 2)
    metrics [accuracy]
    checkpoint(every: 20 steps)
  }
}
"#,
    );
    let run = dir.join("run");
    let o = kiln(&[
        "run",
        s(&exp),
        "--device",
        "cpu",
        "--quiet",
        "--run-dir",
        s(&run),
    ])
    .env("OMP_NUM_THREADS", "1")
    .output()
    .expect("kiln starts");
    assert!(o.status.success(), "{}", text(&o));
    let r = report(&run);
    let o = kiln(&["eval", s(&run), "--split", "val", "--format", "json"])
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("kiln starts");
    assert!(o.status.success(), "{}", text(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON from kiln eval");
    for what in ["loss", "accuracy"] {
        let reported = r["val"][what].as_f64().expect("a reported metric");
        // One thread each, the same weights and batches: the same computation.
        same_computation(e[what].as_f64(), Some(reported), what);
    }
}
