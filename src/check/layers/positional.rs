//! `positional` (a learned table of positions, as GPT-2's `wpe`) and `sinusoidal` (the fixed
//! encoding of Vaswani et al.), both added to a `[sequence, width]` input.

use super::{Check, Checked, Flow, LayerCheck};
use crate::diagnostic::problem::{Names, OutOfRange};
use crate::diagnostic::Problem;
use crate::ir::Kind;
use crate::ir::LayerKind;

/// The check of `kind` when it is a position encoding.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Positional => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, true)),
        Kind::Sinusoidal => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, false)),
        _ => return None,
    })
}

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
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: max_span,
            situation: OutOfRange::Positions {
                max_len: max_len as u64,
                length: s as u64,
                producer: super::producer(flow, &shape),
            },
        }));
        return None;
    }
    if !learned && e % 2 != 0 {
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: lc.span,
            situation: OutOfRange::OddWidth {
                width: e as u64,
                producer: super::producer(flow, &shape),
            },
        }));
        return None;
    }
    let kind = LayerKind::Positional {
        max_len,
        width: e,
        learned,
    };
    Some(Checked::new(kind, &shape, shape.clone()))
}
