//! `positional` (a learned table of positions, as GPT-2's `wpe`) and `sinusoidal` (the fixed
//! encoding of Vaswani et al.), both added to a `[sequence, width]` input.

use super::{count, given, required, Checked, Flow, LayerCheck, Spec};
use crate::diagnostic::problem::OutOfRange;
use crate::diagnostic::Problem;
use crate::ir::LayerKind;

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

/// Checks a positional layer: learned when `learned`, sinusoidal otherwise.
pub(super) fn check(lc: &mut LayerCheck, flow: &Flow, learned: bool) -> Option<Checked> {
    let max_len = if learned {
        lc.required_uint("max_len", 1).map(|(n, at)| (Some(n), at))
    } else {
        let at = lc.at("max_len");
        lc.opt_uint("max_len", 1).map(|n| (n, at))
    };
    let (max_len, max_span) = max_len?;
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "[sequence, width]", shape.len() == 2)?;
    let (s, e) = (shape[0], shape[1]);
    let max_len = max_len.unwrap_or(s);
    if s > max_len {
        lc.cx.report(Problem::OutOfRange {
            span: max_span,
            situation: OutOfRange::Positions {
                max_len: max_len as u64,
                length: s as u64,
                producer: super::producer(flow, &shape),
            },
        });
        return None;
    }
    if !learned && e % 2 != 0 {
        lc.cx.report(Problem::OutOfRange {
            span: lc.span,
            situation: OutOfRange::OddWidth {
                width: e as u64,
                producer: super::producer(flow, &shape),
            },
        });
        return None;
    }
    let params = if learned {
        max_len as f64 * e as f64
    } else {
        0.0
    };
    let kind = LayerKind::Positional {
        max_len,
        width: e,
        learned,
    };
    let flops = count(s as f64 * e as f64);
    Some(Checked::new(kind, shape, count(params), flops))
}
