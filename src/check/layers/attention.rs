//! `attention` (multi-head self-attention) and `transformer_block`.

use super::{count, given, required, Checked, Flow, LayerCheck, Spec};
use crate::check::cx::Range;
use crate::diagnostic::Problem;
use crate::ir::{Block, BlockActivation, LayerKind};

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

/// `transformer_block(heads, hidden, dropout, causal, norm, activation, eps, bias)`.
pub static TRANSFORMER_BLOCK: Spec = Spec {
    params: &[
        required("heads"),
        given("hidden", "4E"),
        given("dropout", "0.1"),
        given("causal", "false"),
        given("norm", "pre"),
        given("activation", "gelu"),
        given("eps", "1e-5"),
        given("bias", "true"),
    ],
    note: Some("`norm` is `pre` or `post`; `activation` is `gelu`, `relu`, `silu` or `tanh`"),
    shapes: "`[S, E]`, unchanged; `nn.TransformerEncoderLayer`: pre-norm `x + attention(layernorm(x))`, then `x + mlp(layernorm(x))`; post-norm `layernorm(x + attention(x))`, then `layernorm(x + mlp(x))`; the MLP has width `hidden`; `eps` is the layer norms', `bias: false` drops every bias",
};

/// Reads a transformer block's options: `norm`, `activation`, `eps`, `bias`.
fn block_options(lc: &mut LayerCheck) -> Option<Block> {
    let norm = lc
        .bound
        .get("norm")
        .map_or(Some("pre"), |v| lc.cx.choice(v, "norm", &["pre", "post"]));
    let names: Vec<&'static str> = BlockActivation::ALL.iter().map(|(n, _)| *n).collect();
    let activation = lc
        .bound
        .get("activation")
        .map_or(Some("gelu"), |v| lc.cx.choice(v, "activation", &names));
    let eps = lc.num_or("eps", 1e-5, Range::Positive);
    let bias = lc.bool_or("bias", true);
    let activation = activation?;
    let activation = BlockActivation::ALL
        .iter()
        .find(|(n, _)| *n == activation)
        .map(|(_, a)| *a)?;
    Some(Block {
        norm_first: norm? == "pre",
        activation,
        eps: eps?,
        bias: bias?,
    })
}

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
    let options = block.then(|| block_options(lc));
    let (heads, heads_span) = heads?;
    let (hidden, dropout, causal) = (hidden?, dropout?, causal?);
    if options == Some(None) {
        return None;
    }
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
    let Some(Some(options)) = options else {
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
    };
    let h = hidden.unwrap_or(4 * e);
    let hf = h as f64;
    // Without biases: the projections lose `4E`, the MLP `hidden + E`, the norms `2E`.
    let params = if options.bias {
        attn_params + 4.0 * ef + 2.0 * ef * hf + hf + ef
    } else {
        4.0 * ef * ef + 2.0 * ef + 2.0 * ef * hf
    };
    let flops = attn_flops + 4.0 * sf * ef * hf;
    let kind = LayerKind::TransformerBlock {
        width: e,
        heads,
        hidden: h,
        dropout,
        causal,
        block: options,
    };
    Some(Checked::new(kind, shape, count(params), count(flops)))
}
