//! `attention` (multi-head self-attention, as `nn.MultiheadAttention`) and `transformer_block`
//! (as `nn.TransformerEncoderLayer`), both over `[sequence, width]`.

use super::spec::{given, required, Spec};
use super::{count, linear, norm, Weight};
use crate::ir::Block;

/// `attention(heads, dropout, causal, window)`.
pub static ATTENTION: Spec = Spec {
    params: &[
        required("heads"),
        given("dropout", "0"),
        given("causal", "false"),
        given("window", "none"),
    ],
    note: Some("`window: K` lets query `i` attend to keys `j` with `i - K < j < i + K` (with `causal`, `i - K < j <= i`)"),
    shapes: "`[S, E]`, unchanged; multi-head self-attention, `heads` divides `E`",
};

/// `transformer_block(heads, hidden, dropout, causal, norm, activation, eps, bias, window)`.
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
        given("window", "none"),
    ],
    note: Some("`norm` is `pre` or `post`; `activation` is `gelu`, `relu`, `silu` or `tanh`; `window` as for `attention`"),
    shapes: "`[S, E]`, unchanged; `nn.TransformerEncoderLayer`: pre-norm `x + attention(layernorm(x))`, then `x + mlp(layernorm(x))`; post-norm `layernorm(x + attention(x))`, then `layernorm(x + mlp(x))`; the MLP has width `hidden`; `eps` is the layer norms', `bias: false` drops every bias",
};

/// `nn.MultiheadAttention`'s parameters under `prefix`, with or without its biases.
pub(super) fn attention(out: &mut Vec<Weight>, prefix: &str, width: i64, bias: bool) {
    let w = width;
    out.push(Weight::plain(
        format!("{prefix}in_proj_weight"),
        vec![3 * w, w],
    ));
    if bias {
        out.push(Weight::plain(format!("{prefix}in_proj_bias"), vec![3 * w]));
    }
    out.push(Weight::plain(
        format!("{prefix}out_proj.weight"),
        vec![w, w],
    ));
    if bias {
        out.push(Weight::plain(format!("{prefix}out_proj.bias"), vec![w]));
    }
}

/// `nn.TransformerEncoderLayer`'s parameters: attention, the MLP's two linears, two norms.
pub(super) fn block(out: &mut Vec<Weight>, width: i64, hidden: i64, block: &Block) {
    attention(out, "self_attn.", width, block.bias);
    let mut mlp = Vec::new();
    linear::weights(&mut mlp, "linear1.", width, hidden, block.bias);
    linear::weights(&mut mlp, "linear2.", hidden, width, block.bias);
    // Pruning targets layers, not the linears inside a block.
    out.extend(mlp.into_iter().map(|w| Weight::plain(w.local, w.shape)));
    for prefix in ["norm1.", "norm2."] {
        norm::affine(out, prefix, &[width], block.bias);
    }
}

/// The projections (`8 S E^2`: Q, K, V and out) and the scores and their sum over values
/// (`4 S^2 E`); a block adds its MLP (`4 S E hidden`).
pub(super) fn flops(input: &[i64], hidden: Option<i64>) -> u64 {
    let (s, e) = match input {
        [s, e] => (*s as f64, *e as f64),
        _ => return 0,
    };
    let mlp = hidden.map_or(0.0, |h| 4.0 * s * e * h as f64);
    count(8.0 * s * e * e + 4.0 * s * s * e + mlp)
}
