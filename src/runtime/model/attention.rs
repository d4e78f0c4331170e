//! `attention` (multi-head self-attention, as `nn.MultiheadAttention`) and
//! `transformer_block` (as `nn.TransformerEncoderLayer(norm_first, activation, layer_norm_eps,
//! bias)`, by default `norm_first=True, activation="gelu"`).

use tch::Tensor;

use super::{dropout, linear, mask, norm, split, Init, LayerRun, Net};
use crate::runtime::failure::At;
use kiln::diagnostic::problem::{Running, Torch};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Block, BlockActivation};

/// `nn.MultiheadAttention`'s parameters under `prefix`: `in_proj_weight` xavier-uniform,
/// `in_proj_bias` 0, `out_proj.weight` as a linear layer, `out_proj.bias` 0.
pub(super) fn init(i: &mut Init, prefix: &str, width: i64) -> Result<(), Diagnostic> {
    init_projections(i, prefix, width, true)
}

/// `nn.MultiheadAttention(bias=bias)`'s parameters under `prefix`: the biases only when `bias`.
fn init_projections(i: &mut Init, prefix: &str, width: i64, bias: bool) -> Result<(), Diagnostic> {
    let xavier = (6.0 / (width + 3 * width) as f64).sqrt();
    let t = i.uniform(&[3 * width, width], xavier)?;
    i.param(&format!("{prefix}in_proj_weight"), t);
    if bias {
        let t = i.filled(&[3 * width], 0.0)?;
        i.param(&format!("{prefix}in_proj_bias"), t);
    }
    let t = i.uniform(&[width, width], 1.0 / (width as f64).sqrt())?;
    i.param(&format!("{prefix}out_proj.weight"), t);
    if bias {
        let t = i.filled(&[width], 0.0)?;
        i.param(&format!("{prefix}out_proj.bias"), t);
    }
    Ok(())
}

/// The parameters of `nn.TransformerEncoderLayer(bias=block.bias)`, in its order.
pub(super) fn init_block(
    i: &mut Init,
    width: i64,
    hidden: i64,
    block: &Block,
) -> Result<(), Diagnostic> {
    init_projections(i, "self_attn.", width, block.bias)?;
    linear::init(i, "linear1.", width, hidden, block.bias)?;
    linear::init(i, "linear2.", hidden, width, block.bias)?;
    norm::init_scale(i, "norm1.", &[width], block.bias)?;
    norm::init_scale(i, "norm2.", &[width], block.bias)
}

/// Multi-head self-attention with the parameters under `prefix`; `dropout` applies to the
/// attention weights. `keep` (`[batch, sequence]`, false at padding) masks keys as
/// `key_padding_mask` does with its negation; `causal` and `window` mask them as the boolean
/// `attn_mask` of [`mask::attention`] does.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward(
    net: &Net,
    l: &LayerRun,
    prefix: &str,
    x: &Tensor,
    heads: i64,
    dropout: f64,
    causal: bool,
    window: Option<i64>,
    keep: Option<&Tensor>,
) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    let &[b, n, e] = x.size().as_slice() else {
        return Err(Problem::Running(Running::TorchError {
            span: s,
            situation: Torch::Layer {
                detail: format!(
                    "attention expects [batch, sequence, width], got {:?}",
                    x.size()
                ),
            },
        })
        .diagnostic());
    };
    // Under tensor parallel this rank computes its heads: its rows of q, k and v, its columns
    // of the output projection.
    let (width, dim) = (e, e / heads);
    let (heads, e) = match &l.share {
        Some(s) => (s.part(heads), s.part(e)),
        None => (heads, e),
    };
    let qkv = linear::affine(
        net,
        l,
        &format!("{prefix}in_proj_weight"),
        &format!("{prefix}in_proj_bias"),
        &split::enter(l, x)?,
    )?;
    let qkv = qkv
        .f_reshape([b, n, 3, heads, dim])
        .at(s)?
        .f_permute([2, 0, 3, 1, 4])
        .at(s)?;
    let (q, k, v) = (
        qkv.f_get(0).at(s)?,
        qkv.f_get(1).at(s)?,
        qkv.f_get(2).at(s)?,
    );
    // Causal attention alone takes SDPA's own flag; any other mask is given as a tensor.
    let mask = if keep.is_some() || window.is_some() {
        Some(mask::attention(keep, b, n, causal, window, x.device()).at(s)?)
    } else {
        None
    };
    let flag = causal && mask.is_none();
    let o = if dropout > 0.0 && dropout::drawn_here(&q) {
        drop_attention(l, &q, &k, &v, mask, flag, dropout).at(s)?
    } else {
        Tensor::f_scaled_dot_product_attention(&q, &k, &v, mask, dropout, flag, None::<f64>, false)
            .at(s)?
    };
    let o = o.f_transpose(1, 2).at(s)?.f_reshape([b, n, e]).at(s)?;
    let out = format!("{prefix}out_proj.");
    match e == width {
        true => linear::forward(net, l, &out, &o),
        false => linear::rows(net, l, &out, &o),
    }
}

/// Scaled dot-product attention with dropout `p` on the attention weights, as SDPA's math path
/// computes it (the one libtorch takes on the CPU with dropout), with Kiln's CPU dropout: `q` and
/// `k` each scaled by `d^(-1/4)`, the keys `mask` (true: attend) or `causal` forbids at `-inf`,
/// the safe softmax (zeros for a query with no key to attend to), dropout, then the values.
fn drop_attention(
    l: &LayerRun,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<Tensor>,
    causal: bool,
    p: f64,
) -> Result<Tensor, tch::TchError> {
    let d = q.size().last().copied().unwrap_or(1) as f64;
    let scale = (1.0 / d.sqrt()).sqrt();
    let mut att = q
        .f_mul_scalar(scale)?
        .f_matmul(&k.f_transpose(-2, -1)?.f_mul_scalar(scale)?)?;
    let n = q.size()[q.dim() - 2];
    let allowed = match (mask, causal) {
        (Some(m), _) => Some(m),
        (None, true) => Some(Tensor::f_ones([n, n], (tch::Kind::Bool, q.device()))?.f_tril(0)?),
        (None, false) => None,
    };
    if let Some(allowed) = allowed {
        att = att.f_masked_fill(&allowed.f_logical_not()?, f64::NEG_INFINITY)?;
    }
    // SDPA's safe softmax: a query that may attend to no key gets zeros, not NaN.
    let att = att.f_internal_safe_softmax(-1, tch::Kind::Float)?;
    // Under tensor parallel, this rank's heads of the mask one process draws.
    split::dropout(l, &att, p, true, 1)?.f_matmul(v)
}

/// A transformer block. Pre-norm: `x + dropout(attention(norm1(x)))`, then
/// `x + dropout(linear2(dropout(act(linear1(norm2(x))))))`; post-norm:
/// `norm1(x + dropout(attention(x)))`, then `norm2(x + dropout(linear2(...(x))))`.
#[allow(clippy::too_many_arguments)]
pub(super) fn block(
    net: &Net,
    l: &LayerRun,
    x: &Tensor,
    heads: i64,
    dropout: f64,
    causal: bool,
    window: Option<i64>,
    options: &Block,
    train: bool,
    keep: Option<&Tensor>,
) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    let p = if train { dropout } else { 0.0 };
    let width = x.size().last().copied().unwrap_or(1);
    let norm = |prefix: &str, x: &Tensor| norm::layer(net, l, prefix, &[width], options.eps, x);
    let add = |x: &Tensor, y: &Tensor| net.fp32_input(l, x)?.f_add(&net.fp32_input(l, y)?).at(s);
    let attend = |h: &Tensor| {
        let a = forward(net, l, "self_attn.", h, heads, p, causal, window, keep)?;
        dropout::dropout(&a, p, train).at(s)
    };
    let mlp = |h: &Tensor| {
        let h = linear::forward(net, l, "linear1.", &split::enter(l, h)?)?;
        let h = match options.activation {
            BlockActivation::Relu => h.f_relu(),
            BlockActivation::Gelu => h.f_gelu("none"),
            BlockActivation::Silu => h.f_silu(),
            BlockActivation::Tanh => h.f_tanh(),
        }
        .at(s)?;
        let h = split::dropout(l, &h, p, train, -1).at(s)?;
        dropout::dropout(&linear::rows(net, l, "linear2.", &h)?, p, train).at(s)
    };
    if options.norm_first {
        let x = add(x, &attend(&norm("norm1.", x)?)?)?;
        add(&x, &mlp(&norm("norm2.", &x)?)?)
    } else {
        let x = norm("norm1.", &add(x, &attend(x)?)?)?;
        norm("norm2.", &add(&x, &mlp(&x)?)?)
    }
}
