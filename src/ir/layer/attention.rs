//! `attention` (multi-head self-attention, as `nn.MultiheadAttention`) and `transformer_block`
//! (as `nn.TransformerEncoderLayer`), both over `[sequence, width]`.

use super::memory::{cast_weights, dropout_mask, Chain, Keeps, Pass, Runs, Scores, Value};
use super::spec::{given, required, Spec};
use super::{activation, count, linear, norm, Weight};
use crate::ir::{Block, BlockActivation, Elementwise, LayerNorm};

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

/// Attention's settings that decide what it keeps.
pub(super) struct Heads {
    pub heads: i64,
    pub dropout: f64,
    pub causal: bool,
    pub window: Option<i64>,
}

/// The scaled-dot-product kernel a forward runs, as `runtime/model/attention.rs` calls it and
/// libtorch 2.11 picks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// libtorch's fused kernels (flash attention on the CPU, and on CUDA flash or
    /// memory-efficient attention): they keep the queries, keys and values, the output and a
    /// log-sum-exp per query and head, never the `[S, S]` scores.
    Fused,
    /// Dropout on the attention weights, fp32 on the CPU: Kiln's own math path (dropout's mask
    /// drawn by Kiln), which keeps the scaled queries and keys and a copy of the values (the
    /// batched matrix products' operands), the softmax, the mask and the dropped weights, three
    /// `[heads, S, S]` tensors per sample.
    KilnMath,
    /// Dropout on the attention weights, bf16/fp16 on the CPU: libtorch's math path, which runs
    /// in fp32 (fp32 copies of the queries, keys and values) and keeps the same three
    /// `[heads, S, S]` tensors, in fp32; its dropout draws through an int32 buffer of the
    /// scores' size.
    TorchMath,
}

/// The kernel for a pass: with dropout on the CPU (or, under `device auto`, possibly on the
/// CPU), a math path; otherwise a fused kernel.
fn kernel(h: &Heads, pass: Pass) -> Kernel {
    if !pass.drops(h.dropout) || pass.runs == Runs::Cuda {
        Kernel::Fused
    } else if pass.compute() == Value::F32 {
        Kernel::KilnMath
    } else {
        Kernel::TorchMath
    }
}

/// The attention mask a kernel receives, in bytes of `bytes`-sized values: per sample and per
/// pass. Causal attention alone is SDPA's flag (no tensor); padding gives `[B, 1, 1, S]`, a
/// window `[S, S]`, both `[B, 1, S, S]`.
fn mask(s: u64, h: &Heads, pass: Pass, bytes: u64) -> (u64, u64) {
    let local = h.window.is_some() || (h.causal && kernel(h, pass) != Kernel::Fused);
    match (pass.padded, local) {
        (true, true) => (s * s * bytes, 0),
        (true, false) => (s * bytes, 0),
        (false, true) => (0, s * s * bytes),
        (false, false) => (0, 0),
    }
}

/// What the kernel keeps, reading `[S, 3E]` queries, keys and values of the compute type and
/// giving `[S, E]` (as the output projection reads it: the fused kernels' output is laid out
/// `[S, heads, E / heads]` already; a math path's is copied into that layout).
fn kernel_keeps(s: u64, e: u64, h: &Heads, pass: Pass) -> Keeps {
    let c = pass.compute();
    let token = s * e;
    let scores = (h.heads.max(0) as u64) * s * s;
    match kernel(h, pass) {
        Kernel::Fused => {
            let (per_sample, per_pass) = mask(s, h, pass, c.bytes());
            Keeps {
                input: true,
                output: Some(c),
                output_saved: true,
                inner: 4 * (h.heads.max(0) as u64) * s + per_sample,
                fixed: per_pass,
                transient: 0,
                backward: 0,
                largest: 0,
                input_gradient: false,
            }
        }
        Kernel::KilnMath => {
            let (per_sample, per_pass) = mask(s, h, pass, 1);
            Keeps {
                input: false,
                output: Some(Value::F32),
                output_saved: false,
                inner: 4 * (3 * token + 2 * scores)
                    + dropout_mask(scores, Value::F32, pass.runs)
                    + per_sample,
                fixed: per_pass,
                transient: 4 * token,
                backward: 4 * (scores + 2 * token),
                largest: 4 * scores,
                input_gradient: false,
            }
        }
        Kernel::TorchMath => {
            let (per_sample, per_pass) = mask(s, h, pass, 4);
            Keeps {
                input: false,
                output: Some(c),
                output_saved: false,
                inner: 4 * (3 * token + 3 * scores) + per_sample,
                fixed: per_pass,
                transient: 4 * token + 2 * 4 * token + token * c.bytes() + 4 * scores,
                backward: 4 * (scores + 2 * token),
                largest: 4 * scores,
                input_gradient: false,
            }
        }
    }
}

/// The sequence and width of a `[S, E]` input.
fn sizes(input: &[i64]) -> (u64, u64) {
    match input {
        [s, e] => ((*s).max(0) as u64, (*e).max(0) as u64),
        _ => (0, 0),
    }
}

/// Attention's parts on `chain`: the input projection to queries, keys and values, the kernel,
/// the output projection.
fn attend(chain: &mut Chain, s: u64, e: u64, h: &Heads, pass: Pass) {
    let token = s * e;
    chain.part(linear::keeps(token, 0, chain.value(), pass), 3 * token);
    chain.part(kernel_keeps(s, e, h, pass), token);
    chain.part(linear::keeps(token, 0, chain.value(), pass), token);
}

/// What an `attention` layer keeps: see [`Kernel`] for the kernels; its weights' cast copies
/// under bf16/fp16.
pub(super) fn keeps(input: &[i64], h: Heads, params: u64, given: Value, pass: Pass) -> Keeps {
    let (s, e) = sizes(input);
    let mut chain = Chain::new(s * e, given);
    chain.fixed(cast_weights(params, pass));
    attend(&mut chain, s, e, &h, pass);
    chain.keeps()
}

/// What a `transformer_block` keeps, part by part as `runtime/model/attention.rs::block` runs
/// them: its norms (fp32), attention, dropout after attention, the residual sums (fp32), the
/// MLP's two linears with the activation and dropout between them and after; the projections'
/// and MLP's weights as cast under bf16/fp16 (the norms' stay fp32).
#[allow(clippy::too_many_arguments)]
pub(super) fn keeps_block(
    input: &[i64],
    h: Heads,
    hidden: i64,
    block: &Block,
    params: u64,
    given: Value,
    pass: Pass,
) -> Keeps {
    let (s, e) = sizes(input);
    let (token, wide) = (s * e, s * hidden.max(0) as u64);
    let ln = LayerNorm {
        shape: vec![e as i64],
        eps: block.eps,
        rms: false,
    };
    let norm_params = if block.bias { 4 * e } else { 2 * e };
    let mut chain = Chain::new(token, given);
    chain.fixed(cast_weights(params.saturating_sub(norm_params), pass));
    let norm = |chain: &mut Chain| {
        let k = norm::keeps_layer(token, &ln, chain.value());
        chain.part(k, token);
    };
    let dropout = |chain: &mut Chain, values: u64| {
        let k = activation::keeps_dropout(values, h.dropout, chain.value(), pass);
        chain.part(k, values);
    };
    let attention = |chain: &mut Chain| {
        attend(chain, s, e, &h, pass);
        dropout(chain, token);
    };
    let mlp = |chain: &mut Chain| {
        chain.part(linear::keeps(token, 0, chain.value(), pass), wide);
        let act = match block.activation {
            BlockActivation::Relu => Elementwise::Relu,
            BlockActivation::Gelu => Elementwise::Gelu,
            BlockActivation::Silu => Elementwise::Silu,
            BlockActivation::Tanh => Elementwise::Tanh,
        };
        chain.part(activation::keeps_elementwise(act, chain.value()), wide);
        dropout(chain, wide);
        chain.part(linear::keeps(wide, 0, chain.value(), pass), token);
        dropout(chain, token);
    };
    if block.norm_first {
        let skip = chain.hold();
        norm(&mut chain);
        attention(&mut chain);
        chain.add(skip);
        let skip = chain.hold();
        norm(&mut chain);
        mlp(&mut chain);
        chain.add(skip);
    } else {
        let skip = chain.hold();
        attention(&mut chain);
        chain.add(skip);
        norm(&mut chain);
        let skip = chain.hold();
        mlp(&mut chain);
        chain.add(skip);
        norm(&mut chain);
    }
    chain.keeps()
}

/// The kernel an attention's memory assumes for a pass, and the bytes per sample of the three
/// fp32 `[heads, S, S]` tensors a math path keeps.
pub(super) fn assumed(input: &[i64], h: &Heads, pass: Pass) -> Scores {
    let (s, _) = sizes(input);
    Scores {
        fused: kernel(h, pass) == Kernel::Fused,
        shape: [h.heads, s as i64, s as i64],
        bytes: 3 * 4 * (h.heads.max(0) as u64) * s * s,
    }
}
