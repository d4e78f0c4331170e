//! The `model` block: layers, blocks and residual connections, with shape inference from the
//! input through every layer.

use std::collections::HashMap;

use super::cx::Cx;
use super::layers::{self, Flow};
use crate::diagnostic::problem::{Arguments, Misplaced, Names, OutOfRange, Producer, Shapes};
use crate::diagnostic::{Code, Problem};
use crate::ir::{numel, sample_fit, DType, Device, Kind, Layer, LayerKind, Node, SampleFit, Shape};
use crate::span::Span;
use crate::syntax::ast::{Block, Ident, Statement, Value, ValueKind};

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
    /// Qualified names of layers and blocks, named (with their labels' spans) or positional
    /// (`encoder.1`, with their keywords' spans).
    pub names: HashMap<String, Span>,
    /// Inline placements (`... on cuda:0`), by qualified name.
    pub inline_placements: Vec<(String, Device, Span)>,
    /// Whether the data's declared sample shape (when there is one) fits the input.
    pub input_fits: bool,
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
            cx.report(Problem::Names(Names::DuplicateSetting {
                span: stmt.keyword.span,
                first: *first,
                name: "input".to_string(),
            }));
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
            cx.report(Problem::Names(Names::OutOfRange {
                span: *span,
                situation: OutOfRange::InputTooLarge {
                    shape: shape.clone(),
                },
            }));
            return None;
        }
    }
    let Some((input_shape, input_span)) = input else {
        cx.report(Problem::Names(Names::MissingSetting {
            span: block.span,
            block: "model",
            settings: &["input"],
            example: "input [784]",
        }));
        return None;
    };
    let mut input_fits = true;
    if let Some((data_shape, data_span)) = &feed.shape {
        let fit = sample_fit(data_shape, &input_shape);
        if fit != SampleFit::Fits {
            input_fits = false;
            cx.report(Problem::Shapes(Shapes::DataShape {
                span: input_span,
                input: input_shape.clone(),
                data: (data_shape.clone(), *data_span),
                scrambled: fit != SampleFit::Size,
            }));
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
        input_fits,
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
            self.cx.report(Problem::Names(Names::DuplicateName {
                span: ident.span,
                first: *first,
                name: name.to_string(),
            }));
        } else {
            self.names.insert(name.to_string(), ident.span);
        }
    }

    /// Names an unnamed layer or residual by its position among its block's statements, as
    /// `nn.Sequential` does, so that it can be placed and compressed by that name.
    fn position(&mut self, prefix: &str, index: usize, keyword: &Ident) -> String {
        let name = qualify(prefix, &index.to_string());
        // Labels are words, so a position never collides with a declared name.
        self.names.insert(name.clone(), keyword.span);
        name
    }

    /// Reads what may follow a layer, block or residual: `on DEVICE` (the placement, with its
    /// span) and `recompute` (its span), in either order.
    fn trailing(&mut self, stmt: &Statement, values: &[Value]) -> Trailing {
        let word = |v: &Value, w: &str| matches!(&v.kind, ValueKind::Path(p) if p == w);
        let mut out = Trailing::default();
        let mut rest = values;
        loop {
            match rest {
                [] => return out,
                [r, tail @ ..] if word(r, "recompute") && out.recompute.is_none() => {
                    out.recompute = Some(r.span);
                    rest = tail;
                }
                [on, device, tail @ ..] if word(on, "on") && out.placed.is_none() => {
                    out.placed = self.cx.device(device).map(|d| (d, on.span.to(device.span)));
                    rest = tail;
                }
                [first, ..] => {
                    let last = rest.last().map_or(first.span, |v| v.span);
                    self.cx.report(Problem::Names(Names::WrongArguments {
                        span: first.span.to(last),
                        situation: Arguments::AfterLayer {
                            keyword: stmt.keyword.name.clone(),
                        },
                    }));
                    return out;
                }
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
                        self.cx.report(Problem::Names(Names::WrongArguments {
                            span: kw.span,
                            situation: Arguments::NoName {
                                keyword: "block".to_string(),
                                example: "block encoder { ... }",
                            },
                        }));
                    }
                    return None;
                };
                let name = qualify(prefix, &ident.name);
                self.declare(&name, &ident);
                let Trailing { placed, recompute } = self.trailing(stmt, rest);
                if let Some((d, span)) = placed {
                    self.placements.push((name.clone(), d, span));
                }
                let Some(body) = &stmt.body else {
                    self.cx.report(Problem::Names(Names::WrongArguments {
                        span: stmt.span,
                        situation: Arguments::NoBlock {
                            keyword: "block".to_string(),
                            example: "block encoder { ... }",
                        },
                    }));
                    return None;
                };
                let inner: Vec<&Statement> = body.statements.iter().collect();
                let device = placed.map(|(d, _)| d).or(device);
                let nodes = self.nodes(&inner, &name, device, flow);
                Some(Node::Block {
                    name,
                    nodes,
                    span: stmt.span,
                    recompute,
                })
            }
            "residual" => {
                let name = match &stmt.label {
                    Some(label) => {
                        let name = qualify(prefix, &label.name);
                        self.declare(&name, label);
                        name
                    }
                    None => self.position(prefix, index, kw),
                };
                let Trailing { placed, recompute } = self.trailing(stmt, &stmt.values);
                if let Some((d, span)) = placed {
                    self.placements.push((name.clone(), d, span));
                }
                let Some(body) = &stmt.body else {
                    self.cx.report(Problem::Names(Names::WrongArguments {
                        span: stmt.span,
                        situation: Arguments::NoBlock {
                            keyword: "residual".to_string(),
                            example: "residual { ... }",
                        },
                    }));
                    return None;
                };
                let before = flow.clone();
                let inner: Vec<&Statement> = body.statements.iter().collect();
                let device = placed.map(|(d, _)| d).or(device);
                let nodes = self.nodes(&inner, &name, device, flow);
                if let (Some(a), Some(b)) = (&before.shape, &flow.shape) {
                    if a != b {
                        self.cx.report(Problem::Shapes(Shapes::ResidualShape {
                            span: kw.span,
                            input: a.clone(),
                            producer: Producer {
                                span: flow.producer.0,
                                name: flow.producer.1.clone(),
                                shape: b.clone(),
                            },
                        }));
                        flow.shape = None;
                    }
                }
                flow.producer = (kw.span, "the residual".into());
                Some(Node::Residual {
                    nodes,
                    span: stmt.span,
                    recompute,
                })
            }
            _ => {
                let Some(kind) = Kind::from_name(&kw.name) else {
                    let known: Vec<&str> = Kind::ALL
                        .iter()
                        .map(|k| k.name())
                        .chain(["block", "residual"])
                        .collect();
                    self.cx.unknown(Code::UnknownLayer, "layer", kw, &known);
                    flow.shape = None;
                    return None;
                };
                if let Some(body) = &stmt.body {
                    self.cx.report(Problem::Names(Names::Misplaced {
                        span: body.span,
                        situation: Misplaced::LayerBlock {
                            kind: kind.name().to_string(),
                        },
                    }));
                }
                let name = match &stmt.label {
                    Some(label) => {
                        let name = qualify(prefix, &label.name);
                        self.declare(&name, label);
                        name
                    }
                    None => self.position(prefix, index, kw),
                };
                let Trailing { placed, recompute } = self.trailing(stmt, &stmt.values);
                if let Some((d, span)) = placed {
                    self.placements.push((name.clone(), d, span));
                }
                let device = placed.map(|(d, _)| d).or(device).unwrap_or(Device::Auto);
                let bound = self.cx.bind(
                    kind.name(),
                    stmt.args.as_ref(),
                    kw.span,
                    &layers::param_names(kind),
                );
                let layer = layers::check(self.cx, kind, kw.span, &bound, flow);
                self.last_span = stmt.span;
                self.last_softmax = matches!(
                    layer.as_ref().map(|l| &l.kind),
                    Some(LayerKind::Softmax { .. })
                )
                .then_some(kw.span);
                let Some(layers::Checked {
                    kind,
                    output,
                    dtype,
                    params,
                    flops,
                }) = layer
                else {
                    flow.shape = None;
                    return None;
                };
                if numel(&output) > MAX_VALUES {
                    self.cx.report(Problem::Names(Names::OutOfRange {
                        span: kw.span,
                        situation: OutOfRange::OutputTooLarge {
                            kind: kind.kind().name().to_string(),
                            shape: output.as_slice().into(),
                        },
                    }));
                    flow.shape = None;
                    return None;
                }
                let input = flow.shape.replace(output.clone().into())?;
                // The producer a later shape diagnostic names is the last layer that changed the
                // shape or type: after `linear(128); relu` that is the linear, the line to edit.
                if input.as_slice() != output.as_slice() || flow.dtype != dtype {
                    flow.producer = (kw.span, format!("`{}`", kw.name));
                }
                flow.dtype = dtype;
                if dtype == DType::Float {
                    flow.int_bound = None;
                }
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
                    recompute,
                }))
            }
        }
    }
}

/// What follows a layer, block or residual statement's arguments.
#[derive(Default)]
struct Trailing {
    /// `on DEVICE`: the device and the span of the two words.
    placed: Option<(Device, Span)>,
    /// `recompute`.
    recompute: Option<Span>,
}

fn qualify(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The most values one sample may hold at any layer: far beyond any real model, small enough
/// that every count stays finite.
pub const MAX_VALUES: i64 = 1 << 40;
