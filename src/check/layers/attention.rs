//! `attention` (multi-head self-attention) and `transformer_block`.

use super::{count, given, required, Checked, Flow, LayerCheck, Spec};
use crate::check::cx::Range;
use crate::diagnostic::Problem;
use crate::ir::LayerKind;

/// `attention(heads, dropout, causal)`.
pub static ATTENTION: Spec = Spec {
    params: &[
        required("heads"),
        given("dropout", "0"),
        given("causal", "false"),
    ],
    note: None,
    shapes: "`[S, E]`, unchanged; multi-head self-attention, `heads` divides `E`",
};

/// `transformer_block(heads, hidden, dropout, causal)`.
pub static TRANSFORMER_BLOCK: Spec = Spec {
    params: &[
        required("heads"),
        given("hidden", "4E"),
        given("dropout", "0.1"),
        given("causal", "false"),
    ],
    note: None,
    shapes: "`[S, E]`, unchanged; pre-norm: `x + attention(layernorm(x))`, then `x + mlp(layernorm(x))` with a GELU MLP of width `hidden`",
};

/// Checks an attention layer, or a whole transformer block when `block`.
pub(super) fn check(lc: &mut LayerCheck, flow: &Flow, block: bool) -> Option<Checked> {
    let heads = lc.required_uint("heads", 1);
    let hidden = if block {
        lc.opt_uint("hidden", 1)
    } else {
        Some(None)
    };
    let dropout = lc.num_or("dropout", if block { 0.1 } else { 0.0 }, Range::UnitOpen);
    let causal = lc.bool_or("causal", false);
    let (heads, heads_span) = heads?;
    let (hidden, dropout, causal) = (hidden?, dropout?, causal?);
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "[sequence, width]", shape.len() == 2)?;
    let (s, e) = (shape[0], shape[1]);
    if e % heads != 0 {
        lc.cx.report(Problem::HeadsIndivisible {
            span: heads_span,
            heads,
            producer: super::producer(flow, &shape),
        });
        return None;
    }
    let (sf, ef) = (s as f64, e as f64);
    let attn_params = 4.0 * ef * ef + 4.0 * ef;
    let attn_flops = 8.0 * sf * ef * ef + 4.0 * sf * sf * ef;
    if !block {
        let kind = LayerKind::Attention {
            width: e,
            heads,
            dropout,
            causal,
        };
        return Some(Checked::new(
            kind,
            shape,
            count(attn_params),
            count(attn_flops),
        ));
    }
    let h = hidden.unwrap_or(4 * e);
    let hf = h as f64;
    let params = attn_params + 4.0 * ef + 2.0 * ef * hf + hf + ef;
    let flops = attn_flops + 4.0 * sf * ef * hf;
    let kind = LayerKind::TransformerBlock {
        width: e,
        heads,
        hidden: h,
        dropout,
        causal,
    };
    Some(Checked::new(kind, shape, count(params), count(flops)))
}
