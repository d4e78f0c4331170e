//! The sequence example end to end: a transformer with learned positional embeddings finds the
//! position of the largest token (`argmax()`), an answer that depends on order, well above the
//! chance of 1 in 8.

mod support;

use support::*;

#[test]
fn sequence_argmax_learns_positions() {
    let runs = scratch("sequence-argmax");
    // One libtorch thread: no OpenMP spinning when the test machine is busy.
    let o = kiln(&[
        "run",
        "experiments/sequence_argmax.exp",
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
    let dir = std::fs::read_dir(runs.join("sequence-argmax"))
        .expect("the experiment's runs")
        .next()
        .expect("a run directory")
        .expect("an entry")
        .path();
    let r = report(&dir);
    let acc = r["val"]["accuracy"].as_f64().expect("val accuracy");
    // The README states 96.75% for this seed; chance is 12.5%.
    assert!(acc >= 0.9, "val accuracy {acc} < 0.9");
}
