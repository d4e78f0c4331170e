//! The `model` block: layers, blocks and residual connections, with shape inference from the
//! input through every layer.

use std::collections::HashMap;

use super::cx::{Bound, Cx, Range};
use crate::diagnostic::{Code, Diagnostic};
use crate::ir::{Conv, DType, Device, Layer, LayerKind, Node, Pool, Shape};
use crate::span::Span;
use crate::syntax::ast::{Block, Ident, Statement, Value, ValueKind};

/// Every layer kind, with its parameters in positional order.
pub const LAYERS: &[(&str, &[&str])] = &[
    ("linear", &["out_features", "bias", "in_features"]),
    ("conv1d", CONV),
    ("conv2d", CONV),
    ("max_pool1d", POOL),
    ("max_pool2d", POOL),
    ("avg_pool1d", POOL),
    ("avg_pool2d", POOL),
    ("adaptive_avg_pool1d", &["output_size"]),
    ("adaptive_avg_pool2d", &["output_size"]),
    ("batchnorm1d", &["num_features", "eps", "momentum"]),
    ("batchnorm2d", &["num_features", "eps", "momentum"]),
    ("layernorm", &["normalized_shape", "eps"]),
    ("groupnorm", &["num_groups", "num_channels", "eps"]),
    ("dropout", &["p"]),
    ("relu", &[]),
    ("gelu", &[]),
    ("silu", &[]),
    ("tanh", &[]),
    ("sigmoid", &[]),
    ("softmax", &["dim"]),
    ("log_softmax", &["dim"]),
    ("flatten", &[]),
    ("reshape", &["shape"]),
    ("mean", &["dim"]),
    ("embedding", &["num_embeddings", "embedding_dim"]),
    ("attention", &["heads", "dropout", "causal"]),
    (
        "transformer_block",
        &["heads", "hidden", "dropout", "causal"],
    ),
];

const CONV: &[&str] = &[
    "out_channels",
    "kernel_size",
    "stride",
    "padding",
    "dilation",
    "groups",
    "bias",
    "in_channels",
];
const POOL: &[&str] = &["kernel_size", "stride", "padding"];

/// What flows from one layer to the next.
#[derive(Clone)]
struct Flow {
    /// The per-sample shape, unknown after an error.
    shape: Option<Shape>,
    dtype: DType,
    /// Exclusive bound of integer values (token ids), when known.
    int_bound: Option<u64>,
    /// Who produced the shape: the layer's span and a description.
    producer: (Span, String),
}

/// The result of checking the model block.
pub struct ModelOut {
    /// The input shape.
    pub input: Shape,
    /// The tree of nodes.
    pub nodes: Vec<Node>,
    /// The output shape, when inference got through.
    pub output: Option<Shape>,
    /// The span of the last layer (or the input), for loss diagnostics.
    pub output_span: Span,
    /// Whether the last layer is a softmax, and where.
    pub ends_in_softmax: Option<Span>,
    /// Qualified names of layers and blocks, with their statements' keyword spans.
    pub names: HashMap<String, Span>,
    /// Inline placements (`... on cuda:0`), by qualified name.
    pub inline_placements: Vec<(String, Device, Span)>,
}

/// What the data feeds the model.
pub struct Feed {
    /// The data's per-sample shape when it is declared.
    pub shape: Option<(Shape, Span)>,
    /// The data's element type.
    pub dtype: DType,
    /// Exclusive bound of integer inputs.
    pub int_bound: Option<u64>,
}

/// Checks the `model { ... }` block.
pub fn check_model(cx: &mut Cx, block: &Block, feed: &Feed) -> Option<ModelOut> {
    let mut input: Option<(Shape, Span)> = None;
    let mut layers_start = 0;
    for (i, stmt) in block.statements.iter().enumerate() {
        if stmt.keyword.name != "input" {
            continue;
        }
        if let Some((_, first)) = &input {
            cx.push(
                Diagnostic::new(
                    Code::DuplicateSetting,
                    stmt.keyword.span,
                    "`input` is given twice",
                )
                .label("given again here")
                .with(*first, "first given here")
                .help("a model has one input shape"),
            );
            continue;
        }
        if let Some(v) = cx.single(stmt) {
            if let Some(shape) = cx.shape(v) {
                input = Some((shape.into(), v.span));
            }
        }
        if i == layers_start {
            layers_start = i + 1;
        }
    }
    if let Some((shape, span)) = &input {
        if numel(shape) > MAX_VALUES {
            cx.push(
                Diagnostic::new(
                    Code::OutOfRange,
                    *span,
                    format!(
                        "an input of {} holds more than 2^40 values per sample",
                        fmt_shape(shape)
                    ),
                )
                .label("far too large")
                .help("check the input shape: it is per sample, without the batch"),
            );
            return None;
        }
    }
    let Some((input_shape, input_span)) = input else {
        cx.push(
            Diagnostic::new(
                Code::MissingSetting,
                block.span,
                "the model has no `input` shape",
            )
            .label("`input` missing in this block")
            .help("start the model with its per-sample input shape, as in `input [784]`"),
        );
        return None;
    };
    if let Some((data_shape, data_span)) = &feed.shape {
        if numel(data_shape) != numel(&input_shape) {
            cx.push(
                Diagnostic::new(
                    Code::DataShape,
                    input_span,
                    format!(
                        "the model takes {} but the data's samples are {}",
                        fmt_shape(&input_shape),
                        fmt_shape(data_shape)
                    ),
                )
                .label(format!("{} values per sample", numel(&input_shape)))
                .with(
                    *data_span,
                    format!("samples of {} values", numel(data_shape)),
                )
                .help("make `input` hold as many values as one sample of the data"),
            );
        }
    }
    let mut walker = Walker {
        cx,
        names: HashMap::new(),
        placements: Vec::new(),
        last_softmax: None,
        last_span: input_span,
    };
    let mut flow = Flow {
        shape: Some(input_shape.clone()),
        dtype: feed.dtype,
        int_bound: feed.int_bound,
        producer: (input_span, "the model's input".to_string()),
    };
    let statements: Vec<&Statement> = block
        .statements
        .iter()
        .filter(|s| s.keyword.name != "input")
        .collect();
    let nodes = walker.nodes(&statements, "", None, &mut flow);
    Some(ModelOut {
        input: input_shape,
        nodes,
        output: flow.shape,
        output_span: walker.last_span,
        ends_in_softmax: walker.last_softmax,
        names: walker.names,
        inline_placements: walker.placements,
    })
}

struct Walker<'c> {
    cx: &'c mut Cx,
    names: HashMap<String, Span>,
    placements: Vec<(String, Device, Span)>,
    last_softmax: Option<Span>,
    last_span: Span,
}

impl Walker<'_> {
    fn nodes(
        &mut self,
        statements: &[&Statement],
        prefix: &str,
        device: Option<Device>,
        flow: &mut Flow,
    ) -> Vec<Node> {
        let mut nodes = Vec::new();
        for (index, stmt) in statements.iter().enumerate() {
            if let Some(node) = self.node(stmt, prefix, index, device, flow) {
                nodes.push(node);
            }
        }
        nodes
    }

    fn declare(&mut self, name: &str, ident: &Ident) {
        if let Some(first) = self.names.get(name) {
            self.cx.push(
                Diagnostic::new(
                    Code::DuplicateName,
                    ident.span,
                    format!("`{name}` is defined twice"),
                )
                .label("defined again here")
                .with(*first, "first defined here")
                .help("give each layer and block its own name"),
            );
        } else {
            self.names.insert(name.to_string(), ident.span);
        }
    }

    /// Reads a trailing `on DEVICE`.
    fn placement(&mut self, stmt: &Statement, values: &[Value]) -> Option<(Device, Span)> {
        match values {
            [] => None,
            [on, device] if matches!(&on.kind, ValueKind::Path(p) if p == "on") => {
                self.cx.device(device).map(|d| (d, on.span.to(device.span)))
            }
            [first, ..] => {
                let last = values.last().map_or(first.span, |v| v.span);
                self.cx.push(
                    Diagnostic::new(
                        Code::WrongArguments,
                        first.span.to(last),
                        format!("unexpected values after `{}`", stmt.keyword.name),
                    )
                    .label("expected nothing, or `on <device>`")
                    .help("layer arguments go in parentheses, as in `linear(256)`; a placement is written `on cuda:0`"),
                );
                None
            }
        }
    }

    fn node(
        &mut self,
        stmt: &Statement,
        prefix: &str,
        index: usize,
        device: Option<Device>,
        flow: &mut Flow,
    ) -> Option<Node> {
        let kw = &stmt.keyword;
        match kw.name.as_str() {
            "block" => {
                let (name_value, rest) = stmt
                    .values
                    .split_first()
                    .map_or((None, &[][..]), |(f, r)| (Some(f), r));
                let Some(ident) = name_value.and_then(|v| self.cx.name(v)) else {
                    if name_value.is_none() {
                        self.cx.push(
                            Diagnostic::new(Code::WrongArguments, kw.span, "a block needs a name")
                                .label("name missing")
                                .help("write `block encoder { ... }`"),
                        );
                    }
                    return None;
                };
                let name = qualify(prefix, &ident.name);
                self.declare(&name, &ident);
                let placed = self.placement(stmt, rest);
                if let Some((d, span)) = placed {
                    self.placements.push((name.clone(), d, span));
                }
                let Some(body) = &stmt.body else {
                    self.cx.push(
                        Diagnostic::new(Code::WrongArguments, stmt.span, "a block needs a body")
                            .label("`{ ... }` missing")
                            .help("write the block's layers between braces"),
                    );
                    return None;
                };
                let inner: Vec<&Statement> = body.statements.iter().collect();
                let device = placed.map(|(d, _)| d).or(device);
                let nodes = self.nodes(&inner, &name, device, flow);
                Some(Node::Block {
                    name,
                    nodes,
                    span: stmt.span,
                })
            }
            "residual" => {
                let name = match &stmt.label {
                    Some(label) => {
                        let name = qualify(prefix, &label.name);
                        self.declare(&name, label);
                        name
                    }
                    None => qualify(prefix, &index.to_string()),
                };
                let placed = self.placement(stmt, &stmt.values);
                if let Some((d, span)) = placed {
                    self.placements.push((name.clone(), d, span));
                }
                let Some(body) = &stmt.body else {
                    self.cx.push(
                        Diagnostic::new(Code::WrongArguments, stmt.span, "a residual needs a body")
                            .label("`{ ... }` missing")
                            .help("write the layers whose output is added to their input between braces"),
                    );
                    return None;
                };
                let before = flow.clone();
                let inner: Vec<&Statement> = body.statements.iter().collect();
                let device = placed.map(|(d, _)| d).or(device);
                let nodes = self.nodes(&inner, &name, device, flow);
                if let (Some(a), Some(b)) = (&before.shape, &flow.shape) {
                    if a != b {
                        self.cx.push(
                            Diagnostic::new(
                                Code::ResidualShape,
                                kw.span,
                                format!(
                                    "a residual adds {} to its input {}",
                                    fmt_shape(b),
                                    fmt_shape(a)
                                ),
                            )
                            .label(format!("input is {}", fmt_shape(a)))
                            .with(flow.producer.0, format!("produces {}", fmt_shape(b)))
                            .help(
                                "the layers inside a residual must keep the shape of their input",
                            ),
                        );
                        flow.shape = None;
                    }
                }
                flow.producer = (kw.span, "the residual".into());
                Some(Node::Residual {
                    nodes,
                    span: stmt.span,
                })
            }
            _ => {
                let spec = LAYERS.iter().find(|(k, _)| *k == kw.name);
                let Some((kind, params)) = spec else {
                    let known: Vec<&str> = LAYERS
                        .iter()
                        .map(|(k, _)| *k)
                        .chain(["block", "residual"])
                        .collect();
                    self.cx.unknown(Code::UnknownLayer, "layer", kw, &known);
                    flow.shape = None;
                    return None;
                };
                if let Some(body) = &stmt.body {
                    self.cx.push(
                        Diagnostic::new(
                            Code::Misplaced,
                            body.span,
                            format!("`{kind}` takes no block"),
                        )
                        .label("unexpected block")
                        .help("only `block` and `residual` hold other layers"),
                    );
                }
                let name = match &stmt.label {
                    Some(label) => {
                        let name = qualify(prefix, &label.name);
                        self.declare(&name, label);
                        name
                    }
                    None => qualify(prefix, &index.to_string()),
                };
                let placed = self.placement(stmt, &stmt.values);
                if let Some((d, span)) = placed {
                    self.placements.push((name.clone(), d, span));
                }
                let device = placed.map(|(d, _)| d).or(device).unwrap_or(Device::Auto);
                let bound = self.cx.bind(kind, stmt.args.as_ref(), kw.span, params);
                let layer = LayerCheck {
                    cx: self.cx,
                    kind,
                    span: kw.span,
                    bound: &bound,
                }
                .run(flow);
                self.last_span = stmt.span;
                self.last_softmax = matches!(
                    layer.as_ref().map(|(k, ..)| k),
                    Some(LayerKind::Softmax { .. })
                )
                .then_some(kw.span);
                let Some((kind, output, dtype, params, flops)) = layer else {
                    flow.shape = None;
                    return None;
                };
                if numel(&output) > MAX_VALUES {
                    self.cx.push(
                        Diagnostic::new(
                            Code::OutOfRange,
                            kw.span,
                            format!("`{kind_name}` makes {} per sample, more than 2^40 values", fmt_shape(&output), kind_name = kw.name),
                        )
                        .label("far too large")
                        .help("check the layer's sizes: no real model holds this many values per sample"),
                    );
                    flow.shape = None;
                    return None;
                }
                let input = flow.shape.replace(output.clone().into())?;
                flow.dtype = dtype;
                if dtype == DType::Float {
                    flow.int_bound = None;
                }
                flow.producer = (kw.span, format!("`{}`", kw.name));
                Some(Node::Layer(Layer {
                    name,
                    kind,
                    input,
                    output: output.into(),
                    dtype,
                    params,
                    flops,
                    device,
                    span: stmt.span,
                }))
            }
        }
    }
}

fn qualify(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Formats a per-sample shape as `[16, 14, 14]`.
pub fn fmt_shape(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// Number of elements of a shape.
pub fn numel(shape: &[i64]) -> i64 {
    shape.iter().fold(1i64, |n, d| n.saturating_mul(*d))
}

/// A parameter or FLOP count from a product of sizes. Counts are computed in f64, exact below
/// 2^53, so that absurd sizes saturate instead of overflowing.
fn count(x: f64) -> u64 {
    x as u64
}

/// The most values one sample may hold at any layer: far beyond any real model, small enough
/// that every count stays finite.
pub const MAX_VALUES: i64 = 1 << 40;

type Checked = (LayerKind, Vec<i64>, DType, u64, u64);

/// A size the file declares, with where it declares it.
type Declared = Option<(i64, Span)>;

/// Checks one layer's arguments against what flows into it.
struct LayerCheck<'a, 'c> {
    cx: &'c mut Cx,
    kind: &'static str,
    span: Span,
    bound: &'a Bound<'a>,
}

impl<'a> LayerCheck<'a, '_> {
    fn run(mut self, flow: &mut Flow) -> Option<Checked> {
        // Read every argument first, so their problems are reported even when the shape is
        // unknown after an earlier error.
        let args = self.read_args();
        let shape = flow.shape.clone()?;
        let args = args?;
        self.infer(args, &shape, flow)
    }

    fn opt_uint(&mut self, name: &str, min: u64) -> Option<Option<i64>> {
        match self.bound.get(name) {
            None => Some(None),
            Some(v) => self
                .cx
                .uint_min(v, &format!("`{name}`"), min)
                .map(|x| Some(x as i64)),
        }
    }

    fn bool_or(&mut self, name: &str, default: bool) -> Option<bool> {
        self.bound
            .get(name)
            .map_or(Some(default), |v| self.cx.boolean(v))
    }

    fn num_or(&mut self, name: &str, default: f64, range: Range) -> Option<f64> {
        self.bound.get(name).map_or(Some(default), |v| {
            self.cx.number_in(v, &format!("`{name}`"), range)
        })
    }

    fn required(&mut self, name: &str) -> Option<&'a Value> {
        let v = self.bound.get(name);
        if v.is_none() {
            self.cx.missing(self.kind, name, self.bound.span);
        }
        v
    }

    /// One size or a list of sizes, one per spatial dimension.
    fn sizes(&mut self, name: &str, dims: usize, min: u64) -> Option<Option<Vec<i64>>> {
        let Some(v) = self.bound.get(name) else {
            return Some(None);
        };
        match &v.kind {
            ValueKind::List(items) => {
                if items.len() != dims {
                    self.cx.push(
                        Diagnostic::new(
                            Code::WrongArguments,
                            v.span,
                            format!("`{name}` needs {dims} values, one per spatial dimension"),
                        )
                        .label(format!("{} values", items.len()))
                        .help(format!("give one number, or a list of {dims}")),
                    );
                    return None;
                }
                let mut out = Vec::new();
                for item in items {
                    out.push(self.cx.uint_min(item, &format!("`{name}`"), min)? as i64);
                }
                Some(Some(out))
            }
            _ => {
                let x = self.cx.uint_min(v, &format!("`{name}`"), min)? as i64;
                Some(Some(vec![x; dims]))
            }
        }
    }

    /// A size that may be written `in -> out`: returns `(declared in, out)`.
    fn arrow(&mut self, name: &str) -> Option<(Declared, Option<i64>)> {
        let Some(v) = self.bound.get(name) else {
            return Some((None, None));
        };
        match &v.kind {
            ValueKind::Arrow(a, b) => {
                let a_val = self.cx.uint_min(a, "an input size", 1);
                let b_val = self.cx.uint_min(b, "an output size", 1);
                Some((Some((a_val? as i64, a.span)), Some(b_val? as i64)))
            }
            _ => Some((
                None,
                Some(self.cx.uint_min(v, &format!("`{name}`"), 1)? as i64),
            )),
        }
    }

    fn read_args(&mut self) -> Option<Args> {
        let k = self.kind;
        Some(match k {
            "linear" => {
                let (arrow_in, out) = self.arrow("out_features")?;
                let declared_in = match (arrow_in, self.bound.get("in_features")) {
                    (Some(a), _) => Some(a),
                    (None, Some(v)) => {
                        Some((self.cx.uint_min(v, "`in_features`", 1)? as i64, v.span))
                    }
                    (None, None) => None,
                };
                let bias = self.bool_or("bias", true)?;
                let Some(out) = out else {
                    self.cx.missing(k, "out_features", self.bound.span);
                    return None;
                };
                Args::Linear {
                    declared_in,
                    out,
                    bias,
                }
            }
            "conv1d" | "conv2d" => {
                let dims = if k == "conv1d" { 1 } else { 2 };
                let (arrow_in, out) = self.arrow("out_channels")?;
                let declared_in = match (arrow_in, self.bound.get("in_channels")) {
                    (Some(a), _) => Some(a),
                    (None, Some(v)) => {
                        Some((self.cx.uint_min(v, "`in_channels`", 1)? as i64, v.span))
                    }
                    (None, None) => None,
                };
                let kernel = self.sizes("kernel_size", dims, 1);
                let stride = self.sizes("stride", dims, 1);
                let padding = self.sizes("padding", dims, 0);
                let dilation = self.sizes("dilation", dims, 1);
                let groups = self.opt_uint("groups", 1);
                let bias = self.bool_or("bias", true);
                let Some(out) = out else {
                    self.cx.missing(k, "out_channels", self.bound.span);
                    return None;
                };
                let Some(kernel) = kernel? else {
                    self.cx.missing(k, "kernel_size", self.bound.span);
                    return None;
                };
                Args::Conv {
                    dims,
                    declared_in,
                    conv: Conv {
                        inputs: 0,
                        outputs: out,
                        stride: stride?.unwrap_or(vec![1; dims]),
                        padding: padding?.unwrap_or(vec![0; dims]),
                        dilation: dilation?.unwrap_or(vec![1; dims]),
                        groups: groups?.unwrap_or(1),
                        bias: bias?,
                        kernel,
                    },
                }
            }
            "max_pool1d" | "max_pool2d" | "avg_pool1d" | "avg_pool2d" => {
                let dims = if k.ends_with("1d") { 1 } else { 2 };
                let kernel = self.sizes("kernel_size", dims, 1);
                let stride = self.sizes("stride", dims, 1);
                let padding = self.sizes("padding", dims, 0);
                let Some(kernel) = kernel? else {
                    self.cx.missing(k, "kernel_size", self.bound.span);
                    return None;
                };
                let pool = Pool {
                    stride: stride?.unwrap_or_else(|| kernel.clone()),
                    padding: padding?.unwrap_or(vec![0; dims]),
                    kernel,
                };
                for (p, kk) in pool.padding.iter().zip(&pool.kernel) {
                    if 2 * p > *kk {
                        let span = self.bound.get("padding").map_or(self.span, |v| v.span);
                        self.cx.push(
                            Diagnostic::new(
                                Code::OutOfRange,
                                span,
                                format!("padding {p} is more than half the kernel size {kk}"),
                            )
                            .label("too much padding")
                            .help("pooling padding must be at most half the kernel size"),
                        );
                        return None;
                    }
                }
                Args::Pool {
                    dims,
                    pool,
                    max: k.starts_with("max"),
                }
            }
            "adaptive_avg_pool1d" | "adaptive_avg_pool2d" => {
                let dims = if k.ends_with("1d") { 1 } else { 2 };
                let Some(size) = self.sizes("output_size", dims, 1)? else {
                    self.cx.missing(k, "output_size", self.bound.span);
                    return None;
                };
                Args::Adaptive { dims, size }
            }
            "batchnorm1d" | "batchnorm2d" => Args::BatchNorm {
                two_d: k == "batchnorm2d",
                declared: self.opt_uint("num_features", 1)?.map(|f| {
                    (
                        f,
                        self.bound.get("num_features").map_or(self.span, |v| v.span),
                    )
                }),
                eps: self.num_or("eps", 1e-5, Range::Positive)?,
                momentum: self.num_or("momentum", 0.1, Range::Unit)?,
            },
            "layernorm" => {
                let shape = match self.bound.get("normalized_shape") {
                    None => None,
                    Some(v) if matches!(v.kind, ValueKind::List(_)) => {
                        Some((self.cx.shape(v)?, v.span))
                    }
                    Some(v) => Some((
                        vec![self.cx.uint_min(v, "`normalized_shape`", 1)? as i64],
                        v.span,
                    )),
                };
                Args::LayerNorm {
                    shape,
                    eps: self.num_or("eps", 1e-5, Range::Positive)?,
                }
            }
            "groupnorm" => {
                let groups_v = self.required("num_groups")?;
                let groups = self.cx.uint_min(groups_v, "`num_groups`", 1)? as i64;
                let groups_span = groups_v.span;
                let channels = self.opt_uint("num_channels", 1)?;
                Args::GroupNorm {
                    groups,
                    groups_span,
                    channels,
                    eps: self.num_or("eps", 1e-5, Range::Positive)?,
                }
            }
            "dropout" => {
                let p = self.num_or("p", 0.5, Range::UnitOpen)?;
                if p == 0.0 {
                    self.cx.push(
                        Diagnostic::new(
                            Code::NoOpLayer,
                            self.span,
                            "dropout with p = 0 does nothing",
                        )
                        .label("has no effect")
                        .help("remove the layer, or give a drop probability above 0"),
                    );
                }
                Args::Dropout(p)
            }
            "softmax" | "log_softmax" | "mean" => {
                let dim = match self.bound.get("dim") {
                    Some(v) => Some((self.cx.int(v)?, v.span)),
                    None if k == "mean" => {
                        self.cx.missing(k, "dim", self.bound.span);
                        return None;
                    }
                    None => None,
                };
                Args::Dim(dim)
            }
            "reshape" => {
                let v = self.required("shape")?;
                let ValueKind::List(items) = &v.kind else {
                    self.cx.push(
                        Diagnostic::new(
                            Code::WrongType,
                            v.span,
                            format!("expected a shape, found {}", v.type_name()),
                        )
                        .label("expected a shape such as `[1, 28, 28]`")
                        .help("write the per-sample shape; one dimension may be -1"),
                    );
                    return None;
                };
                let mut dims = Vec::new();
                for item in items {
                    let d = self.cx.int(item)?;
                    if d == 0 || d < -1 {
                        self.cx.push(
                            Diagnostic::new(
                                Code::OutOfRange,
                                item.span,
                                format!("dimension {d} is not allowed"),
                            )
                            .label("must be positive, or -1 once")
                            .help("dimensions are positive; -1 stands for what is left"),
                        );
                        return None;
                    }
                    dims.push(d);
                }
                if dims.iter().filter(|d| **d == -1).count() > 1 {
                    self.cx.push(
                        Diagnostic::new(Code::OutOfRange, v.span, "more than one -1 in a reshape")
                            .label("only one dimension can be inferred")
                            .help("write every dimension but one"),
                    );
                    return None;
                }
                Args::Reshape(dims, v.span)
            }
            "embedding" => {
                let vocab_v = self.required("num_embeddings");
                let dim_v = self.required("embedding_dim");
                let vocab = vocab_v.and_then(|v| self.cx.uint_min(v, "`num_embeddings`", 1));
                let dim = dim_v.and_then(|v| self.cx.uint_min(v, "`embedding_dim`", 1));
                Args::Embedding {
                    vocab: vocab? as i64,
                    vocab_span: vocab_v?.span,
                    dim: dim? as i64,
                }
            }
            "attention" | "transformer_block" => {
                let heads_v = self.required("heads");
                let heads = heads_v.and_then(|v| self.cx.uint_min(v, "`heads`", 1));
                let hidden = self.opt_uint("hidden", 1);
                let dropout = self.num_or(
                    "dropout",
                    if k == "attention" { 0.0 } else { 0.1 },
                    Range::UnitOpen,
                );
                let causal = self.bool_or("causal", false);
                Args::Attention {
                    heads: heads? as i64,
                    heads_span: heads_v?.span,
                    hidden: hidden?,
                    dropout: dropout?,
                    causal: causal?,
                }
            }
            _ => Args::Plain,
        })
    }

    fn mismatch(&mut self, at: Span, flow: &Flow, message: String, label: String, help: &str) {
        self.cx.push(
            Diagnostic::new(Code::ShapeMismatch, at, message)
                .label(label)
                .with(
                    flow.producer.0,
                    format!(
                        "{} produces {}",
                        flow.producer.1,
                        fmt_shape(flow.shape.as_deref().map_or(&[][..], |s| s))
                    ),
                )
                .help(help.to_string()),
        );
    }

    fn rank(&mut self, shape: &[i64], flow: &Flow, want: &str, ok: bool) -> Option<()> {
        if ok {
            return Some(());
        }
        self.cx.push(
            Diagnostic::new(
                Code::RankMismatch,
                self.span,
                format!("`{}` needs {want} input, got {}", self.kind, fmt_shape(shape)),
            )
            .label(format!("receives {}", fmt_shape(shape)))
            .with(flow.producer.0, format!("{} produces {}", flow.producer.1, fmt_shape(shape)))
            .help(match self.kind {
                "linear" => "add a `flatten` or `reshape` before it".to_string(),
                "conv2d" | "max_pool2d" | "avg_pool2d" | "batchnorm2d" | "adaptive_avg_pool2d" => {
                    "2-D layers take [channels, height, width]: add a `reshape([1, 28, 28])`-style layer before it".to_string()
                }
                "conv1d" | "max_pool1d" | "avg_pool1d" | "adaptive_avg_pool1d" => {
                    "1-D layers take [channels, length]: add a `reshape` before it".to_string()
                }
                _ => format!("give `{}` {want} input", self.kind),
            }),
        );
        None
    }

    fn float_input(&mut self, flow: &Flow) -> Option<()> {
        if flow.dtype == DType::Float || self.kind == "embedding" {
            return Some(());
        }
        self.cx.push(
            Diagnostic::new(
                Code::DtypeMismatch,
                self.span,
                format!("`{}` receives integer token ids", self.kind),
            )
            .label("needs floating-point input")
            .with(
                flow.producer.0,
                format!("{} produces integers", flow.producer.1),
            )
            .help("turn token ids into vectors with an `embedding` layer first"),
        );
        None
    }

    fn infer(&mut self, args: Args, shape: &[i64], flow: &Flow) -> Option<Checked> {
        use LayerKind as K;
        self.float_input(flow)?;
        let n = numel(shape).max(0) as u64;
        let f = DType::Float;
        Some(match args {
            Args::Linear {
                declared_in,
                out,
                bias,
            } => {
                self.rank(shape, flow, "at least 1-D", !shape.is_empty())?;
                let inputs = *shape.last()?;
                if let Some((d, at)) = declared_in {
                    if d != inputs {
                        self.mismatch(
                            at,
                            flow,
                            format!("`linear` declares {d} input features but receives {inputs}"),
                            format!("declared {d}, receives {}", fmt_shape(shape)),
                            "drop the declared input size to infer it, or fix the layer before",
                        );
                        return None;
                    }
                }
                let positions = (n as f64 / inputs as f64).max(1.0);
                let mut output = shape.to_vec();
                *output.last_mut()? = out;
                let (i, o) = (inputs as f64, out as f64);
                let params = count(i * o + if bias { o } else { 0.0 });
                let flops = count(2.0 * positions * i * o);
                (
                    K::Linear {
                        inputs,
                        outputs: out,
                        bias,
                    },
                    output,
                    f,
                    params,
                    flops,
                )
            }
            Args::Conv {
                dims,
                declared_in,
                mut conv,
            } => {
                self.rank(
                    shape,
                    flow,
                    if dims == 1 {
                        "[channels, length]"
                    } else {
                        "[channels, height, width]"
                    },
                    shape.len() == dims + 1,
                )?;
                let inputs = shape[0];
                if let Some((d, at)) = declared_in {
                    if d != inputs {
                        self.mismatch(
                            at,
                            flow,
                            format!("`{}` declares {d} input channels but receives {inputs}", self.kind),
                            format!("declared {d}, receives {}", fmt_shape(shape)),
                            "drop the declared input channels to infer them, or fix the layer before",
                        );
                        return None;
                    }
                }
                if inputs % conv.groups != 0 || conv.outputs % conv.groups != 0 {
                    let at = self.bound.get("groups").map_or(self.span, |v| v.span);
                    self.cx.push(
                        Diagnostic::new(
                            Code::OutOfRange,
                            at,
                            format!(
                                "{} groups do not divide {inputs} input and {} output channels",
                                conv.groups, conv.outputs
                            ),
                        )
                        .label("must divide both channel counts")
                        .help("choose groups that divide the input and output channels"),
                    );
                    return None;
                }
                conv.inputs = inputs;
                let mut output = vec![conv.outputs];
                for i in 0..dims {
                    let len = (shape[i + 1] + 2 * conv.padding[i]
                        - conv.dilation[i] * (conv.kernel[i] - 1)
                        - 1)
                    .div_euclid(conv.stride[i])
                        + 1;
                    self.positive_dim(len, shape, flow)?;
                    output.push(len);
                }
                let kernel: f64 = conv.kernel.iter().map(|k| *k as f64).product();
                let per_group = (inputs / conv.groups) as f64;
                let outputs = conv.outputs as f64;
                let params =
                    count(outputs * per_group * kernel + if conv.bias { outputs } else { 0.0 });
                let out_positions: f64 = output[1..].iter().map(|d| *d as f64).product();
                let flops = count(2.0 * per_group * kernel * outputs * out_positions);
                let kind = if dims == 1 {
                    K::Conv1d { conv }
                } else {
                    K::Conv2d { conv }
                };
                (kind, output, f, params, flops)
            }
            Args::Pool { dims, pool, max } => {
                self.rank(
                    shape,
                    flow,
                    if dims == 1 {
                        "[channels, length]"
                    } else {
                        "[channels, height, width]"
                    },
                    shape.len() == dims + 1,
                )?;
                let mut output = vec![shape[0]];
                for i in 0..dims {
                    let len = (shape[i + 1] + 2 * pool.padding[i] - pool.kernel[i])
                        .div_euclid(pool.stride[i])
                        + 1;
                    self.positive_dim(len, shape, flow)?;
                    output.push(len);
                }
                let window = numel(&pool.kernel);
                let flops = count(numel(&output) as f64 * window as f64);
                let kind = if max {
                    K::MaxPool { pool }
                } else {
                    K::AvgPool { pool }
                };
                (kind, output, f, 0, flops)
            }
            Args::Adaptive { dims, size } => {
                self.rank(
                    shape,
                    flow,
                    if dims == 1 {
                        "[channels, length]"
                    } else {
                        "[channels, height, width]"
                    },
                    shape.len() == dims + 1,
                )?;
                let mut output = vec![shape[0]];
                output.extend(&size);
                (K::AdaptiveAvgPool { output: size }, output, f, 0, n)
            }
            Args::BatchNorm {
                two_d,
                declared,
                eps,
                momentum,
            } => {
                let ok = if two_d {
                    shape.len() == 3
                } else {
                    shape.len() == 1 || shape.len() == 2
                };
                self.rank(
                    shape,
                    flow,
                    if two_d {
                        "[channels, height, width]"
                    } else {
                        "[features] or [channels, length]"
                    },
                    ok,
                )?;
                let features = shape[0];
                if let Some((d, at)) = declared {
                    if d != features {
                        self.mismatch(
                            at,
                            flow,
                            format!(
                                "`{}` declares {d} features but receives {features}",
                                self.kind
                            ),
                            format!("declared {d}, receives {}", fmt_shape(shape)),
                            "drop the declared size to infer it",
                        );
                        return None;
                    }
                }
                (
                    K::BatchNorm {
                        features,
                        eps,
                        momentum,
                    },
                    shape.to_vec(),
                    f,
                    2 * features as u64,
                    n,
                )
            }
            Args::LayerNorm {
                shape: declared,
                eps,
            } => {
                self.rank(shape, flow, "at least 1-D", !shape.is_empty())?;
                let norm = match declared {
                    Some((d, at)) => {
                        if d.len() > shape.len() || shape[shape.len() - d.len()..] != d[..] {
                            self.mismatch(at, flow, format!("`layernorm` over {} does not match the trailing dimensions of {}", fmt_shape(&d), fmt_shape(shape)), format!("receives {}", fmt_shape(shape)), "the normalized shape must equal the input's last dimensions");
                            return None;
                        }
                        d
                    }
                    None => vec![*shape.last()?],
                };
                let params = count(2.0 * numel(&norm) as f64);
                (
                    K::LayerNorm { shape: norm, eps },
                    shape.to_vec(),
                    f,
                    params,
                    n,
                )
            }
            Args::GroupNorm {
                groups,
                groups_span,
                channels,
                eps,
            } => {
                self.rank(shape, flow, "[channels, ...]", shape.len() >= 2)?;
                let c = shape[0];
                if let Some(d) = channels {
                    if d != c {
                        let at = self.bound.get("num_channels").map_or(self.span, |v| v.span);
                        self.mismatch(
                            at,
                            flow,
                            format!("`groupnorm` declares {d} channels but receives {c}"),
                            format!("receives {}", fmt_shape(shape)),
                            "drop `num_channels` to infer it",
                        );
                        return None;
                    }
                }
                if c % groups != 0 {
                    self.cx.push(
                        Diagnostic::new(
                            Code::OutOfRange,
                            groups_span,
                            format!("{groups} groups do not divide {c} channels"),
                        )
                        .label("must divide the channel count")
                        .help(format!("choose a divisor of {c}")),
                    );
                    return None;
                }
                (
                    K::GroupNorm {
                        groups,
                        channels: c,
                        eps,
                    },
                    shape.to_vec(),
                    f,
                    2 * c as u64,
                    n,
                )
            }
            Args::Dropout(p) => (K::Dropout { p }, shape.to_vec(), f, 0, n),
            Args::Dim(dim) => {
                let rank = shape.len() as i64;
                let (d, at) = dim.unwrap_or((-1, self.span));
                let resolved = if d < 0 { d + rank } else { d };
                if resolved < 0 || resolved >= rank {
                    self.cx.push(
                        Diagnostic::new(
                            Code::OutOfRange,
                            at,
                            format!(
                                "dimension {d} is outside a {rank}-D sample {}",
                                fmt_shape(shape)
                            ),
                        )
                        .label(format!("valid: {} to {}", -rank, rank - 1))
                        .with(
                            flow.producer.0,
                            format!("{} produces {}", flow.producer.1, fmt_shape(shape)),
                        )
                        .help("dimensions count per sample, from 0, without the batch"),
                    );
                    return None;
                }
                match self.kind {
                    "softmax" => (K::Softmax { dim: resolved }, shape.to_vec(), f, 0, n),
                    "log_softmax" => (K::LogSoftmax { dim: resolved }, shape.to_vec(), f, 0, n),
                    _ => {
                        let mut output = shape.to_vec();
                        output.remove(resolved as usize);
                        (K::Mean { dim: resolved }, output, f, 0, n)
                    }
                }
            }
            Args::Reshape(dims, at) => {
                let known: i64 = dims.iter().filter(|d| **d != -1).product();
                let total = numel(shape);
                let output: Vec<i64> = if dims.contains(&-1) {
                    if known == 0 || total % known != 0 {
                        self.reshape_error(at, shape, &dims, flow);
                        return None;
                    }
                    dims.iter()
                        .map(|d| if *d == -1 { total / known } else { *d })
                        .collect()
                } else {
                    if known != total {
                        self.reshape_error(at, shape, &dims, flow);
                        return None;
                    }
                    dims.clone()
                };
                if output == shape {
                    self.cx.push(
                        Diagnostic::new(
                            Code::NoOpLayer,
                            self.span,
                            format!("reshape to {} keeps the shape", fmt_shape(&output)),
                        )
                        .label("has no effect")
                        .help("remove the layer"),
                    );
                }
                (
                    K::Reshape {
                        shape: output.clone(),
                    },
                    output,
                    f,
                    0,
                    0,
                )
            }
            Args::Embedding {
                vocab,
                vocab_span,
                dim,
            } => {
                if flow.dtype != DType::Int {
                    self.cx.push(
                        Diagnostic::new(
                            Code::DtypeMismatch,
                            self.span,
                            "`embedding` receives floating-point values",
                        )
                        .label("needs integer token ids")
                        .with(
                            flow.producer.0,
                            format!("{} produces floats", flow.producer.1),
                        )
                        .help("feed token ids, as from `randint(...)` data"),
                    );
                    return None;
                }
                if let Some(bound) = flow.int_bound {
                    if bound > vocab as u64 {
                        self.cx.push(
                            Diagnostic::new(
                                Code::OutOfRange,
                                vocab_span,
                                format!(
                                    "token ids go up to {} but the embedding has {vocab} rows",
                                    bound - 1
                                ),
                            )
                            .label(format!("{vocab} rows"))
                            .with(flow.producer.0, format!("ids below {bound}"))
                            .help(format!("use at least {bound} embeddings")),
                        );
                        return None;
                    }
                }
                let mut output = shape.to_vec();
                output.push(dim);
                (
                    K::Embedding { vocab, dim },
                    output,
                    f,
                    count(vocab as f64 * dim as f64),
                    0,
                )
            }
            Args::Attention {
                heads,
                heads_span,
                hidden,
                dropout,
                causal,
            } => {
                self.rank(shape, flow, "[sequence, width]", shape.len() == 2)?;
                let (s, e) = (shape[0], shape[1]);
                if e % heads != 0 {
                    self.cx.push(
                        Diagnostic::new(
                            Code::HeadsIndivisible,
                            heads_span,
                            format!("{heads} heads do not divide the width {e}"),
                        )
                        .label(format!("{e} is not a multiple of {heads}"))
                        .with(
                            flow.producer.0,
                            format!("{} produces {}", flow.producer.1, fmt_shape(shape)),
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
                if self.kind == "attention" {
                    (
                        K::Attention {
                            width: e,
                            heads,
                            dropout,
                            causal,
                        },
                        shape.to_vec(),
                        f,
                        count(attn_params),
                        count(attn_flops),
                    )
                } else {
                    let h = hidden.unwrap_or(4 * e);
                    let hf = h as f64;
                    let params = attn_params + 4.0 * ef + 2.0 * ef * hf + hf + ef;
                    let flops = attn_flops + 4.0 * sf * ef * hf;
                    (
                        K::TransformerBlock {
                            width: e,
                            heads,
                            hidden: h,
                            dropout,
                            causal,
                        },
                        shape.to_vec(),
                        f,
                        count(params),
                        count(flops),
                    )
                }
            }
            Args::Plain => {
                let kind = match self.kind {
                    "relu" => K::Relu,
                    "gelu" => K::Gelu,
                    "silu" => K::Silu,
                    "tanh" => K::Tanh,
                    "sigmoid" => K::Sigmoid,
                    _ => {
                        return Some((K::Flatten, vec![numel(shape)], f, 0, 0));
                    }
                };
                (kind, shape.to_vec(), f, 0, n)
            }
        })
    }

    fn positive_dim(&mut self, len: i64, shape: &[i64], flow: &Flow) -> Option<()> {
        if len >= 1 {
            return Some(());
        }
        self.cx.push(
            Diagnostic::new(
                Code::EmptyDimension,
                self.span,
                format!("`{}` leaves no output from {}", self.kind, fmt_shape(shape)),
            )
            .label(format!("output size {len}"))
            .with(
                flow.producer.0,
                format!("{} produces {}", flow.producer.1, fmt_shape(shape)),
            )
            .help("use a smaller kernel or stride, or add padding"),
        );
        None
    }

    fn reshape_error(&mut self, at: Span, shape: &[i64], dims: &[i64], flow: &Flow) {
        self.cx.push(
            Diagnostic::new(
                Code::ReshapeSize,
                at,
                format!(
                    "cannot reshape {} ({} values) to {}",
                    fmt_shape(shape),
                    numel(shape),
                    fmt_shape(dims)
                ),
            )
            .label(format!("{} values do not fit", numel(shape)))
            .with(
                flow.producer.0,
                format!("{} produces {}", flow.producer.1, fmt_shape(shape)),
            )
            .help("the new shape must hold the same number of values"),
        );
    }
}

fn divisors_near(e: i64, heads: i64) -> String {
    // The nearest divisors of `e` around `heads`, looking a bounded distance either way (a huge
    // prime width would otherwise mean searching all of it).
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

/// A layer's arguments, read and range-checked, before shape inference.
enum Args {
    Linear {
        declared_in: Option<(i64, Span)>,
        out: i64,
        bias: bool,
    },
    Conv {
        dims: usize,
        declared_in: Option<(i64, Span)>,
        conv: Conv,
    },
    Pool {
        dims: usize,
        pool: Pool,
        max: bool,
    },
    Adaptive {
        dims: usize,
        size: Vec<i64>,
    },
    BatchNorm {
        two_d: bool,
        declared: Option<(i64, Span)>,
        eps: f64,
        momentum: f64,
    },
    LayerNorm {
        shape: Option<(Vec<i64>, Span)>,
        eps: f64,
    },
    GroupNorm {
        groups: i64,
        groups_span: Span,
        channels: Option<i64>,
        eps: f64,
    },
    Dropout(f64),
    Dim(Option<(i64, Span)>),
    Reshape(Vec<i64>, Span),
    Embedding {
        vocab: i64,
        vocab_span: Span,
        dim: i64,
    },
    Attention {
        heads: i64,
        heads_span: Span,
        hidden: Option<i64>,
        dropout: f64,
        causal: bool,
    },
    Plain,
}
