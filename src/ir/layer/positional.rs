//! `positional` (a learned table of positions, as GPT-2's `wpe`) and `sinusoidal` (the fixed
//! encoding of Vaswani et al.), both added to a `[sequence, width]` input: one FLOP a value.

use super::memory::{fp32_copy, Keeps, Value};
use super::spec::{given, required, Spec};
use super::Weight;

/// `positional(max_len)`.
pub static POSITIONAL: Spec = Spec {
    params: &[required("max_len")],
    note: None,
    shapes: "`[S, E]`, unchanged; adds row `s` of a learned `[max_len, E]` table to position `s` (`N(0, 1)` init, as `nn.Embedding`)",
};

/// `sinusoidal(max_len)`.
pub static SINUSOIDAL: Spec = Spec {
    params: &[given("max_len", "S")],
    note: None,
    shapes: "`[S, E]`, unchanged, `E` even; adds `PE[s, 2i] = sin(s / 10000^(2i/E))`, `PE[s, 2i+1] = cos(s / 10000^(2i/E))`",
};

/// A learned position table `[max_len, width]` is an embedding (`embeddings` selects it, as
/// GPT-2's `wpe` is usually kept out of weight decay); the sinusoidal one has no parameters.
pub(super) fn weights(out: &mut Vec<Weight>, max_len: i64, width: i64, learned: bool) {
    if learned {
        out.push(Weight {
            embedding: true,
            ..Weight::plain("weight".into(), vec![max_len, width])
        });
    }
}

/// Adding positions keeps nothing (an addition's backward needs no values); the output is fp32,
/// and a bf16/fp16 input's fp32 copy is alive while it adds.
pub(super) fn keeps(values: u64, given: Value) -> Keeps {
    Keeps {
        transient: fp32_copy(values, given),
        ..Keeps::nothing(Value::F32)
    }
}
