//! Lowering: the checked model tree becomes libtorch tensors (parameters and buffers) and a
//! forward pass made of `f_*` calls. Parameters get PyTorch's default initialisation for the
//! module each layer corresponds to, so a user porting from PyTorch gets the same statistics.
//!
//! Each layer family has one file here, mirroring `check::layers`: it creates the layer's
//! weights under their `state_dict` names and runs its forward. [`init`] and [`forward`] dispatch
//! over [`LayerKind`] with exhaustive matches. Layers read their weights by name through
//! [`Net::weight`], the one place a weight enters a computation (where a quantizer would swap
//! it), and a weight that is not there is a diagnostic, never a panic.

mod activation;
mod attention;
mod conv;
mod dropout;
mod embedding;
mod linear;
mod mask;
mod norm;
mod pool;
mod positional;
mod recompute;
mod shape;
mod split;

use tch::{Device, Kind, Tensor};

pub use dropout::{
    draw as dropout_draw, seed_for as dropout_seed, with_keys as with_dropout_keys,
    with_rows as with_dropout_rows,
};
pub use split::{piece, whole, Collective};

use super::failure::At;
use kiln::diagnostic::problem::{Running, Torch};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{LayerKind, Node, Precision};
use kiln::span::Span;

/// A trainable tensor with its qualified name (`fc1.weight`).
pub struct Param {
    /// Qualified name, as in PyTorch's `state_dict`.
    pub name: String,
    /// The tensor (requires grad).
    pub tensor: Tensor,
}

/// A non-trainable tensor kept with the model (batch-norm running statistics).
pub struct Buffer {
    /// Qualified name.
    pub name: String,
    /// The tensor.
    pub tensor: Tensor,
}

/// The lowered model.
pub struct Net {
    nodes: Vec<Lowered>,
    /// Where each top-level node of the checked model starts in `nodes` (blocks are flattened).
    top: Vec<usize>,
    /// Every parameter, in definition order.
    pub params: Vec<Param>,
    /// Every buffer.
    pub buffers: Vec<Buffer>,
    precision: Precision,
    /// Linear layers whose forward compression replaces, by qualified name.
    swaps: Vec<(String, Box<dyn LinearSwap>)>,
}

/// What compression runs in place of a linear layer's `x W^T + b`: fake quantization during
/// quantization-aware training, or a quantized kernel after training.
pub trait LinearSwap: Send {
    /// The layer's output for a 2-D fp32 input `[M, K]`, as fp32 `[M, N]`, given the layer's
    /// own fp32 weight `[N, K]` and bias; `train` selects training behaviour (observers
    /// update).
    fn forward(
        &self,
        x: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        train: bool,
    ) -> Result<Tensor, tch::TchError>;
}

#[derive(Clone)]
enum Lowered {
    Layer(Box<LayerRun>),
    Residual(Vec<Lowered>, Span),
    /// Nodes run as one group whose activations are recomputed in backward (`recompute`).
    Recompute(Vec<Lowered>, Span),
}

impl Lowered {
    /// The nodes inside a residual or a recomputed group.
    fn inner(&self) -> &[Lowered] {
        match self {
            Lowered::Layer(_) => &[],
            Lowered::Residual(inner, _) | Lowered::Recompute(inner, _) => inner,
        }
    }
}

/// One lowered layer: its kind and where its tensors are.
#[derive(Clone)]
struct LayerRun {
    kind: LayerKind,
    /// The layer's qualified name, for diagnostics.
    name: String,
    /// Its parameters by local name (`weight`, `self_attn.in_proj_weight`): indices into
    /// `Net::params`.
    params: Vec<(String, usize)>,
    /// Its buffers by local name: indices into `Net::buffers`.
    buffers: Vec<(String, usize)>,
    device: Device,
    span: Span,
    /// Its share of the work, when tensor parallel splits it.
    share: Option<split::Share>,
}

/// Maps a checked device to a tch device (`auto` resolves to CUDA 0 when present).
pub fn tch_device(device: kiln::ir::Device) -> Device {
    match device {
        kiln::ir::Device::Cpu => Device::Cpu,
        kiln::ir::Device::Cuda(i) => Device::Cuda(i as usize),
        kiln::ir::Device::Auto => Device::cuda_if_available(),
    }
}

/// Builds the model: every parameter created and initialised on its layer's device.
/// `device_override` (from `--device`) replaces every placement.
pub fn build(
    nodes: &[Node],
    precision: Precision,
    device_override: Option<Device>,
) -> Result<Net, Diagnostic> {
    let mut net = Net {
        nodes: Vec::new(),
        top: Vec::new(),
        params: Vec::new(),
        buffers: Vec::new(),
        precision,
        swaps: Vec::new(),
    };
    for node in nodes {
        let lowered =
            tch::no_grad(|| lower(&mut net, std::slice::from_ref(node), device_override))?;
        net.top.push(net.nodes.len());
        net.nodes.extend(lowered);
    }
    Ok(net)
}

fn lower(net: &mut Net, nodes: &[Node], over: Option<Device>) -> Result<Vec<Lowered>, Diagnostic> {
    let mut out = Vec::new();
    for node in nodes {
        match node {
            Node::Layer(l) => {
                let mut run = LayerRun {
                    kind: l.kind.clone(),
                    name: l.name.clone(),
                    params: Vec::new(),
                    buffers: Vec::new(),
                    device: over.unwrap_or_else(|| tch_device(l.device)),
                    span: l.span,
                    share: None,
                };
                init(&mut Init { net, run: &mut run })?;
                let layer = Lowered::Layer(Box::new(run));
                out.push(match l.recompute {
                    Some(at) => Lowered::Recompute(vec![layer], at),
                    None => layer,
                });
            }
            Node::Block {
                nodes, recompute, ..
            } => {
                let inner = lower(net, nodes, over)?;
                match recompute {
                    Some(at) => out.push(Lowered::Recompute(inner, *at)),
                    None => out.extend(inner),
                }
            }
            Node::Residual {
                nodes,
                span,
                recompute,
            } => {
                let residual = Lowered::Residual(lower(net, nodes, over)?, *span);
                out.push(match recompute {
                    Some(at) => Lowered::Recompute(vec![residual], *at),
                    None => residual,
                });
            }
        }
    }
    Ok(out)
}

/// Creates one layer's tensors, registered under the layer's qualified name.
struct Init<'a> {
    net: &'a mut Net,
    run: &'a mut LayerRun,
}

impl Init<'_> {
    /// `U(-bound, bound)` of a shape, on the layer's device.
    fn uniform(&self, shape: &[i64], bound: f64) -> Result<Tensor, Diagnostic> {
        let (device, span) = (self.run.device, self.run.span);
        let mut t = Tensor::f_empty(shape, (Kind::Float, device)).at(span)?;
        t.f_uniform_(-bound, bound).done_at(span)?;
        Ok(t)
    }

    /// A tensor of one value, on the layer's device.
    fn filled(&self, shape: &[i64], value: f64) -> Result<Tensor, Diagnostic> {
        Tensor::f_full(shape, value, (Kind::Float, self.run.device)).at(self.run.span)
    }

    /// Adds a trainable parameter under the layer's local name `local`.
    fn param(&mut self, local: &str, t: Tensor) {
        self.run
            .params
            .push((local.to_string(), self.net.params.len()));
        self.net.params.push(Param {
            name: format!("{}.{local}", self.run.name),
            tensor: t.set_requires_grad(true),
        });
    }

    /// Adds a buffer under the layer's local name `local`.
    fn buffer(&mut self, local: &str, t: Tensor) {
        self.run
            .buffers
            .push((local.to_string(), self.net.buffers.len()));
        self.net.buffers.push(Buffer {
            name: format!("{}.{local}", self.run.name),
            tensor: t,
        });
    }
}

/// Creates a layer's weights as PyTorch initialises its module.
fn init(i: &mut Init) -> Result<(), Diagnostic> {
    match i.run.kind.clone() {
        LayerKind::Linear {
            inputs,
            outputs,
            bias,
        } => linear::init(i, "", inputs, outputs, bias),
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => conv::init(i, &conv),
        LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
            norm::init_batch(i, &norm)
        }
        LayerKind::LayerNorm { norm } => norm::init_layer(i, &norm),
        LayerKind::GroupNorm { channels, .. } => norm::init_affine(i, "", &[channels]),
        LayerKind::Prelu { parameters, init } => activation::init_prelu(i, parameters, init),
        LayerKind::Embedding { vocab, dim, pad } => embedding::init(i, vocab, dim, pad),
        LayerKind::Positional {
            max_len,
            width,
            learned,
        } => positional::init(i, max_len, width, learned),
        LayerKind::Attention { width, .. } => attention::init(i, "", width),
        LayerKind::TransformerBlock {
            width,
            hidden,
            block,
            ..
        } => attention::init_block(i, width, hidden, &block),
        LayerKind::MaxPool1d { .. }
        | LayerKind::MaxPool2d { .. }
        | LayerKind::AvgPool1d { .. }
        | LayerKind::AvgPool2d { .. }
        | LayerKind::AdaptiveAvgPool1d { .. }
        | LayerKind::AdaptiveAvgPool2d { .. }
        | LayerKind::Dropout { .. }
        | LayerKind::Elementwise(_)
        | LayerKind::LeakyRelu { .. }
        | LayerKind::Elu { .. }
        | LayerKind::Softmax { .. }
        | LayerKind::LogSoftmax { .. }
        | LayerKind::Flatten
        | LayerKind::Reshape { .. }
        | LayerKind::Mean { .. } => Ok(()),
    }
}

/// Runs one layer. `keep` is the padding mask of the sequence (`[batch, sequence]`, true for
/// tokens) once an `embedding` with a `pad` has set it: attention masks those keys and
/// `mean(0)` averages the tokens only, ending the mask.
fn forward(
    net: &Net,
    l: &LayerRun,
    x: &Tensor,
    train: bool,
    keep: &mut Option<Tensor>,
) -> Result<Tensor, Diagnostic> {
    let s = l.span;
    match &l.kind {
        LayerKind::Linear { .. } => linear::layer(net, l, x, train),
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => conv::forward(net, l, conv, x),
        LayerKind::MaxPool1d { pool } => pool::max(l, pool, x, false),
        LayerKind::MaxPool2d { pool } => pool::max(l, pool, x, true),
        LayerKind::AvgPool1d { pool } => pool::avg(l, pool, x, false),
        LayerKind::AvgPool2d { pool } => pool::avg(l, pool, x, true),
        LayerKind::AdaptiveAvgPool1d { output } => x.f_adaptive_avg_pool1d(output.as_slice()).at(s),
        LayerKind::AdaptiveAvgPool2d { output } => x.f_adaptive_avg_pool2d(output.as_slice()).at(s),
        LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => {
            norm::batch(net, l, norm, x, train)
        }
        LayerKind::LayerNorm { norm } => norm::layer_norm(net, l, norm, x),
        LayerKind::GroupNorm { groups, eps, .. } => norm::group(net, l, *groups, *eps, x),
        LayerKind::Dropout { p } => split::dropout(l, x, *p, train, -1).at(s),
        LayerKind::Elementwise(e) => activation::elementwise(*e, x).at(s),
        LayerKind::LeakyRelu { negative_slope } => activation::leaky_relu(l, *negative_slope, x),
        LayerKind::Elu { alpha } => activation::elu(l, *alpha, x),
        LayerKind::Prelu { .. } => activation::prelu(net, l, x),
        LayerKind::Softmax { dim } => net.fp32_input(l, x)?.f_softmax(dim + 1, Kind::Float).at(s),
        LayerKind::LogSoftmax { dim } => net
            .fp32_input(l, x)?
            .f_log_softmax(dim + 1, Kind::Float)
            .at(s),
        LayerKind::Flatten => x.f_flatten(1, -1).at(s),
        LayerKind::Reshape { shape } => shape::reshape(l, shape, x),
        LayerKind::Mean { dim: 0 } if keep.is_some() => mask::mean(l, x, keep.take()),
        LayerKind::Mean { dim } => x
            .f_mean_dim(Some([dim + 1].as_slice()), false, None::<Kind>)
            .at(s),
        LayerKind::Embedding { pad, .. } => embedding::forward(net, l, x, *pad, keep),
        LayerKind::Positional { learned, .. } => positional::forward(net, l, x, *learned),
        LayerKind::Attention {
            heads,
            dropout,
            causal,
            window,
            ..
        } => {
            let p = if train { *dropout } else { 0.0 };
            let (causal, window) = (*causal, *window);
            attention::forward(net, l, "", x, *heads, p, causal, window, keep.as_ref())
        }
        LayerKind::TransformerBlock {
            heads,
            dropout,
            causal,
            window,
            block,
            ..
        } => attention::block(
            net,
            l,
            x,
            *heads,
            *dropout,
            *causal,
            *window,
            block,
            train,
            keep.as_ref(),
        ),
    }
}

/// The lower-precision kind of a mixed-precision run.
fn half_kind(p: Precision) -> Option<Kind> {
    match p {
        Precision::Fp32 => None,
        Precision::Bf16 => Some(Kind::BFloat16),
        Precision::Fp16 => Some(Kind::Half),
    }
}

impl Net {
    /// Loads weights (and batch-norm statistics) from a safetensors file keyed by PyTorch
    /// `state_dict` names; every parameter must be present with its shape.
    pub fn load(&self, path: &std::path::Path, span: Span) -> Result<(), Diagnostic> {
        let bad = |detail: String| {
            Problem::Running(Running::DataInvalid {
                span,
                detail,
                label: None,
                help: None,
                weights: true,
            })
            .diagnostic()
        };
        let tensors = Tensor::read_safetensors(path)
            .map_err(|e| bad(format!("cannot read `{}`: {e}", path.display())))?;
        let find = |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
        let targets = self
            .params
            .iter()
            .map(|p| (&p.name, &p.tensor))
            .chain(self.buffers.iter().map(|b| (&b.name, &b.tensor)));
        tch::no_grad(|| {
            for (name, t) in targets {
                let src = find(name)
                    .ok_or_else(|| bad(format!("`{}` has no tensor `{name}`", path.display())))?;
                if src.size() != t.size() {
                    return Err(bad(format!(
                        "`{name}` in `{}` has shape {:?}, the model's is {:?}",
                        path.display(),
                        src.size(),
                        t.size()
                    )));
                }
                t.shallow_clone().f_copy_(src).at(span)?;
            }
            Ok(())
        })
    }

    /// Runs `swap` in place of the linear layer `layer`'s forward (replacing an earlier swap).
    pub fn swap_linear(&mut self, layer: &str, swap: Box<dyn LinearSwap>) {
        self.swaps.retain(|(n, _)| n != layer);
        self.swaps.push((layer.to_string(), swap));
    }

    /// The names of the linear layers, with their devices, in order.
    pub fn linears(&self) -> Vec<(String, Device)> {
        let mut out = Vec::new();
        fn walk(nodes: &[Lowered], out: &mut Vec<(String, Device)>) {
            for n in nodes {
                match n {
                    Lowered::Layer(l) if matches!(l.kind, LayerKind::Linear { .. }) => {
                        out.push((l.name.clone(), l.device))
                    }
                    Lowered::Layer(_) => {}
                    other => walk(other.inner(), out),
                }
            }
        }
        walk(&self.nodes, &mut out);
        out
    }

    /// The devices the model's layers run on, in order of first use.
    pub fn devices(&self) -> Vec<Device> {
        let mut out = Vec::new();
        fn walk(nodes: &[Lowered], out: &mut Vec<Device>) {
            for n in nodes {
                match n {
                    Lowered::Layer(l) => {
                        if !out.contains(&l.device) {
                            out.push(l.device);
                        }
                    }
                    other => walk(other.inner(), out),
                }
            }
        }
        walk(&self.nodes, &mut out);
        out
    }

    /// A view of the top-level nodes `top` of the checked model (a pipeline stage): their layers,
    /// whose parameters and buffers are shallow clones of this model's, so they share storage and
    /// gradients with it.
    pub fn stage(&self, top: std::ops::Range<usize>) -> Net {
        let at = |i: usize| self.top.get(i).copied().unwrap_or(self.nodes.len());
        let (start, end) = (at(top.start), at(top.end).max(at(top.start)));
        let mut stage = Net {
            nodes: Vec::new(),
            top: (top.start..top.end.min(self.top.len()))
                .map(|i| self.top[i] - start)
                .collect(),
            params: Vec::new(),
            buffers: Vec::new(),
            precision: self.precision,
            swaps: Vec::new(),
        };
        stage.nodes = self.nodes[start..end]
            .iter()
            .map(|n| self.share(n, &mut stage))
            .collect();
        stage
    }

    /// `node` for the stage `into`: its tensors shared into `into` and its indices renumbered.
    fn share(&self, node: &Lowered, into: &mut Net) -> Lowered {
        match node {
            Lowered::Layer(l) => {
                let mut l = l.clone();
                for (_, i) in &mut l.params {
                    let p = &self.params[*i];
                    *i = into.params.len();
                    into.params.push(Param {
                        name: p.name.clone(),
                        tensor: p.tensor.shallow_clone(),
                    });
                }
                for (_, i) in &mut l.buffers {
                    let b = &self.buffers[*i];
                    *i = into.buffers.len();
                    into.buffers.push(Buffer {
                        name: b.name.clone(),
                        tensor: b.tensor.shallow_clone(),
                    });
                }
                Lowered::Layer(l)
            }
            Lowered::Residual(inner, span) => {
                Lowered::Residual(inner.iter().map(|n| self.share(n, into)).collect(), *span)
            }
            Lowered::Recompute(inner, span) => {
                Lowered::Recompute(inner.iter().map(|n| self.share(n, into)).collect(), *span)
            }
        }
    }

    /// The indices into `params` of the parameters of `nodes`' layers, in order.
    fn group_params(&self, nodes: &[Lowered], out: &mut Vec<usize>) {
        for n in nodes {
            match n {
                Lowered::Layer(l) => out.extend(l.params.iter().map(|(_, i)| *i)),
                other => self.group_params(other.inner(), out),
            }
        }
    }

    /// The device that receives the input batch.
    pub fn input_device(&self) -> Device {
        self.devices().first().copied().unwrap_or(Device::Cpu)
    }

    /// Runs the model on a batch. `train` selects training behaviour (dropout, batch statistics).
    pub fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, Diagnostic> {
        self.run(&self.nodes, xs, train, &mut None)
    }

    /// Runs a pipeline stage on a batch: `keep` is the padding mask an earlier stage's
    /// `embedding` set (`[batch, sequence]`, true for tokens), and the mask that still flows at
    /// the stage's end comes back with its output, for the next stage.
    pub fn forward_masked(
        &self,
        xs: &Tensor,
        train: bool,
        keep: Option<Tensor>,
    ) -> Result<(Tensor, Option<Tensor>), Diagnostic> {
        let mut keep = keep;
        let y = self.run(&self.nodes, xs, train, &mut keep)?;
        Ok((y, keep))
    }

    /// Runs `nodes` on `xs`; `keep` carries the padding mask from layer to layer while the
    /// sequence stays the second dimension of what flows.
    fn run(
        &self,
        nodes: &[Lowered],
        xs: &Tensor,
        train: bool,
        keep: &mut Option<Tensor>,
    ) -> Result<Tensor, Diagnostic> {
        let mut x = xs.shallow_clone();
        for node in nodes {
            x = match node {
                Lowered::Layer(l) => {
                    let input = if x.device() == l.device {
                        x
                    } else {
                        x.f_to_device(l.device).at(l.span)?
                    };
                    if let Some(k) = keep.as_ref().filter(|k| k.device() != l.device) {
                        let moved = k.f_to_device(l.device).at(l.span)?;
                        *keep = Some(moved);
                    }
                    let y = forward(self, l, &input, train, keep)?;
                    if keep.as_ref().is_some_and(|k| !mask::keeps_sequence(&y, k)) {
                        *keep = None;
                    }
                    y
                }
                Lowered::Residual(inner, span) => {
                    let y = self.run(inner, &x, train, keep)?;
                    let x = if x.device() == y.device() {
                        x
                    } else {
                        x.f_to_device(y.device()).at(*span)?
                    };
                    let y = if y.kind() == x.kind() {
                        y
                    } else {
                        y.f_to_kind(x.kind()).at(*span)?
                    };
                    x.f_add(&y).at(*span)?
                }
                Lowered::Recompute(inner, span) => {
                    recompute::run(self, inner, &x, train, keep, *span)?
                }
            };
        }
        Ok(x)
    }

    /// A layer's parameter by its local name, in fp32; a name the layer lacks is a diagnostic.
    fn param(&self, l: &LayerRun, local: &str) -> Result<&Tensor, Diagnostic> {
        match l.params.iter().find(|(n, _)| n == local) {
            Some((_, i)) => Ok(&self.params[*i].tensor),
            None => Err(missing(l, "parameter", local)),
        }
    }

    /// A layer's buffer by its local name.
    fn buffer(&self, l: &LayerRun, local: &str) -> Result<&Tensor, Diagnostic> {
        match l.buffers.iter().find(|(n, _)| n == local) {
            Some((_, i)) => Ok(&self.buffers[*i].tensor),
            None => Err(missing(l, "buffer", local)),
        }
    }

    /// A weight as a matrix product uses it: in the computation's precision (cast under
    /// bf16/fp16). Every weight of a linear, convolution or attention enters through here.
    fn weight(&self, l: &LayerRun, local: &str) -> Result<Tensor, Diagnostic> {
        let t = self.param(l, local)?;
        match half_kind(self.precision) {
            Some(k) => t.f_to_kind(k).at(l.span),
            None => Ok(t.shallow_clone()),
        }
    }

    /// The input of a matrix product in the computation's precision.
    fn mm_input(&self, l: &LayerRun, x: &Tensor) -> Result<Tensor, Diagnostic> {
        match half_kind(self.precision) {
            Some(k) if x.kind() != k => x.f_to_kind(k).at(l.span),
            _ => Ok(x.shallow_clone()),
        }
    }

    /// The input of a normalisation, softmax or loss, which run in fp32 (as under autocast).
    fn fp32_input(&self, l: &LayerRun, x: &Tensor) -> Result<Tensor, Diagnostic> {
        if x.kind() == Kind::Float {
            Ok(x.shallow_clone())
        } else {
            x.f_to_kind(Kind::Float).at(l.span)
        }
    }
}

/// A layer's tensor that lowering did not create: Kiln's own inconsistency, reported at the
/// layer rather than panicking.
fn missing(l: &LayerRun, what: &str, local: &str) -> Diagnostic {
    Problem::Running(Running::TorchError {
        span: l.span,
        situation: Torch::Lowering {
            layer: l.name.clone(),
            what: what.to_string(),
            name: local.to_string(),
        },
    })
    .diagnostic()
}
