//! The per-token example end to end: a transformer with learned positional embeddings sorts a
//! sequence of tokens (`sort()`, a class per token), far above the chance of 1 in 10 per token.

mod support;

use support::*;

#[test]
fn sequence_sort_learns_a_class_per_token() {
    let runs = scratch("sequence-sort");
    // One libtorch thread: no OpenMP spinning when the test machine is busy.
    let o = kiln(&[
        "run",
        "experiments/sequence_sort.exp",
        "--device",
        "cpu",
        "--quiet",
        "--runs-dir",
        s(&runs),
    ])
    .env("OMP_NUM_THREADS", "1")
    .output()
    .expect("kiln starts");
    assert!(o.status.success(), "{}", text(&o));
    let dir = std::fs::read_dir(runs.join("sequence-sort"))
        .expect("the experiment's runs")
        .next()
        .expect("a run directory")
        .expect("an entry")
        .path();
    let r = report(&dir);
    let acc = r["val"]["accuracy"].as_f64().expect("val accuracy");
    // The README states 99.81% of the tokens for this seed; chance is 10%.
    assert!(acc >= 0.9, "val token accuracy {acc} < 0.9");
}
