//! `linear`: `y = x W^T + b` over the last dimension.

use super::{count, given, inferred, required, Checked, Flow, LayerCheck, Spec};
use crate::diagnostic::problem::Declared;
use crate::ir::LayerKind;

/// `linear(out_features, bias, in_features)`.
pub static LINEAR: Spec = Spec {
    params: &[
        required("out_features"),
        given("bias", "true"),
        inferred("in_features"),
    ],
    note: Some("or `linear(in -> out)`"),
    shapes: "`[..., in]` -> `[..., out]`",
};

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
    let n = super::numel(&shape).max(0) as f64;
    let positions = (n / inputs as f64).max(1.0);
    let mut output = shape.clone();
    *output.last_mut()? = out;
    let (i, o) = (inputs as f64, out as f64);
    let params = count(i * o + if bias { o } else { 0.0 });
    let flops = count(2.0 * positions * i * o);
    let kind = LayerKind::Linear {
        inputs,
        outputs: out,
        bias,
    };
    Some(Checked::new(kind, output, params, flops))
}
