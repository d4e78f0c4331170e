//! Lowering: the checked model tree becomes libtorch tensors (parameters and buffers) and a
//! forward pass made of `f_*` calls. Parameters get PyTorch's default initialisation for the
//! module each layer corresponds to, so a user porting from PyTorch gets the same statistics.

use tch::{Device, Kind, Tensor};

use super::failure::At;
use kiln::diagnostic::Diagnostic;
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
    /// Every parameter, in definition order.
    pub params: Vec<Param>,
    /// Every buffer.
    pub buffers: Vec<Buffer>,
    precision: Precision,
}

enum Lowered {
    Layer(LayerRun),
    Residual(Vec<Lowered>, Span),
}

struct LayerRun {
    kind: LayerKind,
    /// Indices into `Net::params`, in the order the layer's forward uses them.
    params: Vec<usize>,
    /// Indices into `Net::buffers`.
    buffers: Vec<usize>,
    device: Device,
    span: Span,
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
        params: Vec::new(),
        buffers: Vec::new(),
        precision,
    };
    let lowered = tch::no_grad(|| lower(&mut net, nodes, device_override))?;
    net.nodes = lowered;
    Ok(net)
}

fn lower(net: &mut Net, nodes: &[Node], over: Option<Device>) -> Result<Vec<Lowered>, Diagnostic> {
    let mut out = Vec::new();
    for node in nodes {
        match node {
            Node::Layer(l) => {
                let device = over.unwrap_or_else(|| tch_device(l.device));
                let mut run = LayerRun {
                    kind: l.kind.clone(),
                    params: Vec::new(),
                    buffers: Vec::new(),
                    device,
                    span: l.span,
                };
                init_layer(net, &mut run, &l.name)?;
                out.push(Lowered::Layer(run));
            }
            Node::Block { nodes, .. } => out.extend(lower(net, nodes, over)?),
            Node::Residual { nodes, span } => {
                out.push(Lowered::Residual(lower(net, nodes, over)?, *span))
            }
        }
    }
    Ok(out)
}

/// `U(-bound, bound)` of a shape, on a device.
fn uniform(shape: &[i64], bound: f64, device: Device, span: Span) -> Result<Tensor, Diagnostic> {
    let mut t = Tensor::f_empty(shape, (Kind::Float, device)).at(span)?;
    t.f_uniform_(-bound, bound).done_at(span)?;
    Ok(t)
}

fn filled(shape: &[i64], value: f64, device: Device, span: Span) -> Result<Tensor, Diagnostic> {
    Tensor::f_full(shape, value, (Kind::Float, device)).at(span)
}

fn add_param(net: &mut Net, run: &mut LayerRun, name: String, t: Tensor) {
    run.params.push(net.params.len());
    net.params.push(Param {
        name,
        tensor: t.set_requires_grad(true),
    });
}

fn add_buffer(net: &mut Net, run: &mut LayerRun, name: String, t: Tensor) {
    run.buffers.push(net.buffers.len());
    net.buffers.push(Buffer { name, tensor: t });
}

/// A linear layer's parameters as `nn.Linear` initialises them: weight and bias both
/// `U(-1/sqrt(in), 1/sqrt(in))` (kaiming-uniform with `a = sqrt(5)`).
fn linear_params(
    net: &mut Net,
    run: &mut LayerRun,
    prefix: &str,
    inputs: i64,
    outputs: i64,
    bias: bool,
) -> Result<(), Diagnostic> {
    let (d, s) = (run.device, run.span);
    let bound = 1.0 / (inputs as f64).sqrt();
    add_param(
        net,
        run,
        format!("{prefix}weight"),
        uniform(&[outputs, inputs], bound, d, s)?,
    );
    if bias {
        add_param(
            net,
            run,
            format!("{prefix}bias"),
            uniform(&[outputs], bound, d, s)?,
        );
    }
    Ok(())
}

/// `nn.MultiheadAttention`'s parameters: `in_proj_weight` xavier-uniform, `in_proj_bias` 0,
/// `out_proj.weight` as a linear layer, `out_proj.bias` 0.
fn attention_params(
    net: &mut Net,
    run: &mut LayerRun,
    prefix: &str,
    width: i64,
) -> Result<(), Diagnostic> {
    let (d, s) = (run.device, run.span);
    let xavier = (6.0 / (width + 3 * width) as f64).sqrt();
    add_param(
        net,
        run,
        format!("{prefix}in_proj_weight"),
        uniform(&[3 * width, width], xavier, d, s)?,
    );
    add_param(
        net,
        run,
        format!("{prefix}in_proj_bias"),
        filled(&[3 * width], 0.0, d, s)?,
    );
    add_param(
        net,
        run,
        format!("{prefix}out_proj.weight"),
        uniform(&[width, width], 1.0 / (width as f64).sqrt(), d, s)?,
    );
    add_param(
        net,
        run,
        format!("{prefix}out_proj.bias"),
        filled(&[width], 0.0, d, s)?,
    );
    Ok(())
}

fn norm_params(
    net: &mut Net,
    run: &mut LayerRun,
    prefix: &str,
    shape: &[i64],
) -> Result<(), Diagnostic> {
    let (d, s) = (run.device, run.span);
    add_param(
        net,
        run,
        format!("{prefix}weight"),
        filled(shape, 1.0, d, s)?,
    );
    add_param(net, run, format!("{prefix}bias"), filled(shape, 0.0, d, s)?);
    Ok(())
}

fn init_layer(net: &mut Net, run: &mut LayerRun, name: &str) -> Result<(), Diagnostic> {
    let (d, s) = (run.device, run.span);
    let p = format!("{name}.");
    match run.kind.clone() {
        LayerKind::Linear {
            inputs,
            outputs,
            bias,
        } => linear_params(net, run, &p, inputs, outputs, bias)?,
        LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
            let fan_in = conv.inputs / conv.groups * conv.kernel.iter().product::<i64>();
            let bound = 1.0 / (fan_in as f64).sqrt();
            let mut shape = vec![conv.outputs, conv.inputs / conv.groups];
            shape.extend(&conv.kernel);
            add_param(
                net,
                run,
                format!("{p}weight"),
                uniform(&shape, bound, d, s)?,
            );
            if conv.bias {
                add_param(
                    net,
                    run,
                    format!("{p}bias"),
                    uniform(&[conv.outputs], bound, d, s)?,
                );
            }
        }
        LayerKind::BatchNorm { features, .. } => {
            norm_params(net, run, &p, &[features])?;
            add_buffer(
                net,
                run,
                format!("{p}running_mean"),
                filled(&[features], 0.0, d, s)?,
            );
            add_buffer(
                net,
                run,
                format!("{p}running_var"),
                filled(&[features], 1.0, d, s)?,
            );
        }
        LayerKind::LayerNorm { shape, .. } => norm_params(net, run, &p, &shape)?,
        LayerKind::GroupNorm { channels, .. } => norm_params(net, run, &p, &[channels])?,
        LayerKind::Embedding { vocab, dim } => {
            let mut t = Tensor::f_empty([vocab, dim], (Kind::Float, d)).at(s)?;
            t.f_normal_(0.0, 1.0).done_at(s)?;
            add_param(net, run, format!("{p}weight"), t);
        }
        LayerKind::Attention { width, .. } => attention_params(net, run, &p, width)?,
        LayerKind::TransformerBlock { width, hidden, .. } => {
            // The parameters of PyTorch's `nn.TransformerEncoderLayer(norm_first=True)`.
            attention_params(net, run, &format!("{p}self_attn."), width)?;
            linear_params(net, run, &format!("{p}linear1."), width, hidden, true)?;
            linear_params(net, run, &format!("{p}linear2."), hidden, width, true)?;
            norm_params(net, run, &format!("{p}norm1."), &[width])?;
            norm_params(net, run, &format!("{p}norm2."), &[width])?;
        }
        _ => {}
    }
    Ok(())
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
        let bad = |message: String| {
            Diagnostic::new(kiln::diagnostic::Code::DataInvalid, span, message)
                .label("while loading initial weights for this experiment")
                .help("give a safetensors file saved from the same model, keyed by `state_dict` names such as `fc1.weight`")
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
                    Lowered::Residual(inner, _) => walk(inner, out),
                }
            }
        }
        walk(&self.nodes, &mut out);
        out
    }

    /// The device that receives the input batch.
    pub fn input_device(&self) -> Device {
        self.devices().first().copied().unwrap_or(Device::Cpu)
    }

    /// Runs the model on a batch. `train` selects training behaviour (dropout, batch statistics).
    pub fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, Diagnostic> {
        self.run(&self.nodes, xs, train)
    }

    fn run(&self, nodes: &[Lowered], xs: &Tensor, train: bool) -> Result<Tensor, Diagnostic> {
        let mut x = xs.shallow_clone();
        for node in nodes {
            x = match node {
                Lowered::Layer(l) => {
                    let input = if x.device() == l.device {
                        x
                    } else {
                        x.f_to_device(l.device).at(l.span)?
                    };
                    self.layer(l, &input, train)?
                }
                Lowered::Residual(inner, span) => {
                    let y = self.run(inner, &x, train)?;
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
            };
        }
        Ok(x)
    }

    fn p(&self, l: &LayerRun, i: usize) -> &Tensor {
        &self.params[l.params[i]].tensor
    }

    /// A weight in the computation's precision: cast for matrix products under bf16/fp16.
    fn w(&self, l: &LayerRun, i: usize) -> Result<Tensor, Diagnostic> {
        let t = self.p(l, i);
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

    fn linear(
        &self,
        l: &LayerRun,
        x: &Tensor,
        w: usize,
        b: Option<usize>,
    ) -> Result<Tensor, Diagnostic> {
        let x = self.mm_input(l, x)?;
        let weight = self.w(l, w)?;
        let bias = b.map(|i| self.w(l, i)).transpose()?;
        x.f_linear(&weight, bias.as_ref()).at(l.span)
    }

    fn layer(&self, l: &LayerRun, x: &Tensor, train: bool) -> Result<Tensor, Diagnostic> {
        let s = l.span;
        match &l.kind {
            LayerKind::Linear { bias, .. } => self.linear(l, x, 0, bias.then_some(1)),
            LayerKind::Conv1d { conv } | LayerKind::Conv2d { conv } => {
                let x = self.mm_input(l, x)?;
                let weight = self.w(l, 0)?;
                let bias = if conv.bias { Some(self.w(l, 1)?) } else { None };
                // `convolution` is what `conv1d` and `conv2d` call, for either rank.
                let output_padding = vec![0; conv.kernel.len()];
                x.f_convolution(
                    &weight,
                    bias.as_ref(),
                    conv.stride.as_slice(),
                    conv.padding.as_slice(),
                    conv.dilation.as_slice(),
                    false,
                    output_padding.as_slice(),
                    conv.groups,
                )
                .at(s)
            }
            LayerKind::MaxPool { pool } => {
                let dilation = vec![1; pool.kernel.len()];
                if pool.kernel.len() == 1 {
                    x.f_max_pool1d(
                        pool.kernel.as_slice(),
                        pool.stride.as_slice(),
                        pool.padding.as_slice(),
                        dilation.as_slice(),
                        false,
                    )
                    .at(s)
                } else {
                    x.f_max_pool2d(
                        pool.kernel.as_slice(),
                        pool.stride.as_slice(),
                        pool.padding.as_slice(),
                        dilation.as_slice(),
                        false,
                    )
                    .at(s)
                }
            }
            LayerKind::AvgPool { pool } => {
                if pool.kernel.len() == 1 {
                    x.f_avg_pool1d(
                        pool.kernel.as_slice(),
                        pool.stride.as_slice(),
                        pool.padding.as_slice(),
                        false,
                        true,
                    )
                    .at(s)
                } else {
                    x.f_avg_pool2d(
                        pool.kernel.as_slice(),
                        pool.stride.as_slice(),
                        pool.padding.as_slice(),
                        false,
                        true,
                        None::<i64>,
                    )
                    .at(s)
                }
            }
            LayerKind::AdaptiveAvgPool { output } => {
                if output.len() == 1 {
                    x.f_adaptive_avg_pool1d(output.as_slice()).at(s)
                } else {
                    x.f_adaptive_avg_pool2d(output.as_slice()).at(s)
                }
            }
            LayerKind::BatchNorm { eps, momentum, .. } => {
                let x = self.fp32_input(l, x)?;
                let (mean, var) = (
                    &self.buffers[l.buffers[0]].tensor,
                    &self.buffers[l.buffers[1]].tensor,
                );
                x.f_batch_norm(
                    Some(self.p(l, 0)),
                    Some(self.p(l, 1)),
                    Some(mean),
                    Some(var),
                    train,
                    *momentum,
                    *eps,
                    true,
                )
                .at(s)
            }
            LayerKind::LayerNorm { shape, eps } => {
                let x = self.fp32_input(l, x)?;
                x.f_layer_norm(
                    shape.as_slice(),
                    Some(self.p(l, 0)),
                    Some(self.p(l, 1)),
                    *eps,
                    true,
                )
                .at(s)
            }
            LayerKind::GroupNorm { groups, eps, .. } => {
                let x = self.fp32_input(l, x)?;
                x.f_group_norm(*groups, Some(self.p(l, 0)), Some(self.p(l, 1)), *eps, true)
                    .at(s)
            }
            LayerKind::Dropout { p } => x.f_dropout(*p, train).at(s),
            LayerKind::Relu => x.f_relu().at(s),
            LayerKind::Gelu => x.f_gelu("none").at(s),
            LayerKind::Silu => x.f_silu().at(s),
            LayerKind::Tanh => x.f_tanh().at(s),
            LayerKind::Sigmoid => x.f_sigmoid().at(s),
            LayerKind::Softmax { dim } => {
                self.fp32_input(l, x)?.f_softmax(dim + 1, Kind::Float).at(s)
            }
            LayerKind::LogSoftmax { dim } => self
                .fp32_input(l, x)?
                .f_log_softmax(dim + 1, Kind::Float)
                .at(s),
            LayerKind::Flatten => x.f_flatten(1, -1).at(s),
            LayerKind::Reshape { shape } => {
                let mut dims = vec![-1];
                dims.extend(shape);
                x.f_reshape(dims.as_slice()).at(s)
            }
            LayerKind::Mean { dim } => x
                .f_mean_dim(Some([dim + 1].as_slice()), false, None::<Kind>)
                .at(s),
            LayerKind::Embedding { .. } => {
                Tensor::f_embedding(self.p(l, 0), x, -1, false, false).at(s)
            }
            LayerKind::Attention {
                heads,
                dropout,
                causal,
                ..
            } => self.attention(l, x, 0, *heads, if train { *dropout } else { 0.0 }, *causal),
            LayerKind::TransformerBlock {
                heads,
                dropout,
                causal,
                ..
            } => {
                let p = if train { *dropout } else { 0.0 };
                // x + dropout(attention(norm1(x)))
                let h = self.norm(l, x, 8)?;
                let a = self
                    .attention(l, &h, 0, *heads, p, *causal)?
                    .f_dropout(p, train)
                    .at(s)?;
                let x = self
                    .fp32_input(l, x)?
                    .f_add(&self.fp32_input(l, &a)?)
                    .at(s)?;
                // x + dropout(linear2(dropout(gelu(linear1(norm2(x))))))
                let h = self.norm(l, &x, 10)?;
                let h = self
                    .linear(l, &h, 4, Some(5))?
                    .f_gelu("none")
                    .at(s)?
                    .f_dropout(p, train)
                    .at(s)?;
                let m = self.linear(l, &h, 6, Some(7))?.f_dropout(p, train).at(s)?;
                x.f_add(&self.fp32_input(l, &m)?).at(s)
            }
        }
    }

    /// Layer normalisation over the last dimension with the parameters at `i` and `i + 1`.
    fn norm(&self, l: &LayerRun, x: &Tensor, i: usize) -> Result<Tensor, Diagnostic> {
        let width = x.size().last().copied().unwrap_or(1);
        self.fp32_input(l, x)?
            .f_layer_norm(
                [width].as_slice(),
                Some(self.p(l, i)),
                Some(self.p(l, i + 1)),
                1e-5,
                true,
            )
            .at(l.span)
    }

    /// Multi-head self-attention with the four parameters starting at `first`.
    fn attention(
        &self,
        l: &LayerRun,
        x: &Tensor,
        first: usize,
        heads: i64,
        dropout: f64,
        causal: bool,
    ) -> Result<Tensor, Diagnostic> {
        let s = l.span;
        let size = x.size();
        let (b, n, e) = (size[0], size[1], size[2]);
        let qkv = self.linear(l, x, first, Some(first + 1))?;
        let qkv = qkv
            .f_reshape([b, n, 3, heads, e / heads])
            .at(s)?
            .f_permute([2, 0, 3, 1, 4])
            .at(s)?;
        let (q, k, v) = (
            qkv.f_get(0).at(s)?,
            qkv.f_get(1).at(s)?,
            qkv.f_get(2).at(s)?,
        );
        let o = Tensor::f_scaled_dot_product_attention(
            &q,
            &k,
            &v,
            None::<Tensor>,
            dropout,
            causal,
            None::<f64>,
            false,
        )
        .at(s)?;
        let o = o.f_transpose(1, 2).at(s)?.f_reshape([b, n, e]).at(s)?;
        self.linear(l, &o, first + 2, Some(first + 3))
    }
}
