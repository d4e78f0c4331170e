//! `linear`: `y = x W^T + b` over the last dimension.

use super::{Check, Checked, Flow, LayerCheck};
use crate::diagnostic::problem::Declared;
use crate::ir::Kind;
use crate::ir::LayerKind;

/// The check of `kind` when it is `linear`.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Linear => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow)),
        _ => return None,
    })
}

pub(super) fn check(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let (declared_in, out) = lc.arrow("out_features", "in_features")?;
    let bias = lc.bool_or("bias", true)?;
    let Some(out) = out else {
        lc.cx.missing(lc.kind.name(), "out_features", lc.bound.span);
        return None;
    };
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "at least 1-D", !shape.is_empty())?;
    let inputs = *shape.last()?;
    if let Some((d, at)) = declared_in {
        if d != inputs {
            let declared = Declared::Size {
                what: "input features",
                declared: d,
                received: inputs,
            };
            lc.mismatch(at, flow, &shape, declared);
            return None;
        }
    }
    let mut output = shape.clone();
    *output.last_mut()? = out;
    let kind = LayerKind::Linear {
        inputs,
        outputs: out,
        bias,
    };
    Some(Checked::new(kind, &shape, output))
}
