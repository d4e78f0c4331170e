//! `attention` (multi-head self-attention) and `transformer_block`.

use super::{count, fmt_shape, given, required, Checked, Flow, LayerCheck, Spec};
use crate::check::cx::Range;
use crate::diagnostic::{Code, Diagnostic};
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
        lc.cx.push(
            Diagnostic::new(
                Code::HeadsIndivisible,
                heads_span,
                format!("{heads} heads do not divide the width {e}"),
            )
            .label(format!("{e} is not a multiple of {heads}"))
            .with(
                flow.producer.0,
                format!("{} produces {}", flow.producer.1, fmt_shape(&shape)),
            )
            .help(format!(
                "choose heads that divide {e}, such as {}",
                divisors_near(e, heads)
            )),
        );
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

/// The nearest divisors of `e` around `heads`, looking a bounded distance either way (a huge
/// prime width would otherwise mean searching all of it).
fn divisors_near(e: i64, heads: i64) -> String {
    const REACH: i64 = 10_000;
    let below = (heads.saturating_sub(REACH).max(1)..heads.min(e + 1))
        .rev()
        .find(|h| e % h == 0)
        .unwrap_or(1);
    match ((heads + 1)..=e.min(heads.saturating_add(REACH))).find(|h| e % h == 0) {
        Some(above) => format!("{below} or {above}"),
        None => below.to_string(),
    }
}
