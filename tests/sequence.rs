//! The sequence example end to end: a transformer with learned positional embeddings finds the
//! position of the largest token (`argmax()`), an answer that depends on order, well above the
//! chance of 1 in 8.

mod support;

use support::*;

#[test]
fn sequence_argmax_learns_positions() {
    let acc = example_val_accuracy("experiments/sequence_argmax.exp", "sequence-argmax");
    // The README states 96.75% for this seed; chance is 12.5%.
    assert!(acc >= 0.9, "val accuracy {acc} < 0.9");
}
