//! Wording of shape problems (K0207, K0301 to K0308, K0404).

use super::counted;
use super::problem::{Declared, LossShape, NoOp, Problem, Producer};
use super::Diagnostic;
use crate::diagnostic::problem::{Shapes, Strategies, Warnings};
use crate::ir::Kind;
use crate::span::Span;

/// A kernel sliding over one spatial dimension of a convolution or pooling layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Which spatial dimension (0 is the first after the channels).
    pub axis: usize,
    /// How many spatial dimensions the layer has (1 or 2).
    pub rank: usize,
    /// The input's size along it.
    pub input: i64,
    /// The kernel's size.
    pub kernel: i64,
    /// The stride.
    pub stride: i64,
    /// The padding on each side.
    pub padding: i64,
    /// The dilation (1 for pooling).
    pub dilation: i64,
    /// Whether the division rounds up (pooling's `ceil_mode`; false for convolutions).
    pub ceil_mode: bool,
}

impl Window {
    /// The output size: `(input + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1`,
    /// the division rounded down; with `ceil_mode` rounded up, less one when the last window
    /// would start in the right padding (at or past `input + padding`), as PyTorch counts it.
    pub fn output(&self) -> i64 {
        let stride = self.stride.max(1);
        let span = self.input + 2 * self.padding - self.dilation * (self.kernel - 1) - 1;
        let up = if self.ceil_mode { stride - 1 } else { 0 };
        let out = (span + up).div_euclid(stride) + 1;
        if self.ceil_mode && (out - 1) * stride >= self.input + self.padding {
            out - 1
        } else {
            out
        }
    }

    /// The dimension's name: `length`, `height` or `width`.
    fn dimension(&self) -> &'static str {
        match (self.rank, self.axis) {
            (1, _) => "length",
            (_, 0) => "height",
            _ => "width",
        }
    }

    /// The settings that shape the window, as written: `kernel 5, stride 1, padding 0`, with
    /// the dilation when it is not 1.
    fn settings(&self) -> String {
        let mut s = format!(
            "kernel {}, stride {}, padding {}",
            self.kernel, self.stride, self.padding
        );
        if self.dilation != 1 {
            s.push_str(&format!(", dilation {}", self.dilation));
        }
        if self.ceil_mode {
            s.push_str(", ceil_mode");
        }
        s
    }

    /// Why nothing is left: the kernel's reach against the (padded) input.
    fn overreach(&self) -> String {
        let padded = if self.padding == 0 {
            String::new()
        } else {
            format!(" padded to {}", self.input + 2 * self.padding)
        };
        let input = format!("the {} of {}{padded}", self.dimension(), self.input);
        if self.dilation == 1 {
            format!("a kernel of {} is larger than {input}", self.kernel)
        } else {
            format!(
                "a kernel of {} with dilation {} spans {}, more than {input}",
                self.kernel,
                self.dilation,
                self.dilation * (self.kernel - 1) + 1
            )
        }
    }

    /// What would fit: the largest kernel at this padding, and the least padding for this
    /// kernel.
    fn remedy(&self) -> String {
        let reach = self.dilation * (self.kernel - 1) + 1;
        let padding = (reach - self.input + 1).div_euclid(2).max(0);
        let largest = (self.input + 2 * self.padding - 1).div_euclid(self.dilation.max(1)) + 1;
        if largest >= 1 {
            format!("use a kernel of at most {largest}, or padding of at least {padding}")
        } else {
            format!(
                "use padding of at least {padding}, or a larger input {}",
                self.dimension()
            )
        }
    }
}

/// The secondary label naming what flows into a layer.
fn produces(p: &Producer) -> (Span, String) {
    (p.span, format!("{} produces {}", p.name, p.shape))
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

/// Shape problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Shapes(Shapes::ShapeMismatch {
            span,
            layer,
            declared,
            producer,
        }) => {
            let (at, text) = produces(&producer);
            let received = &producer.shape;
            match declared {
                Declared::Size {
                    what,
                    declared,
                    received: got,
                } => new(
                    span,
                    format!("`{layer}` declares {declared} {what} but receives {got}"),
                )
                .label(format!("declared {declared}, receives {received}"))
                .with(at, text)
                .help(format!(
                    "drop the declared {what} to infer them, or fix the layer before"
                )),
                Declared::Slopes { declared } => new(
                    span,
                    format!(
                        "`{layer}` learns {} but its input {received} does not have {}",
                        counted(declared, "slope"),
                        counted(declared, "channel")
                    ),
                )
                .label(format!("receives {received}"))
                .with(at, text)
                .help("use 1 slope, or one per channel (the first dimension of the sample)"),
                Declared::Trailing { shape } => new(
                    span,
                    format!(
                        "`{layer}` over {shape} does not match the trailing dimensions of {received}"
                    ),
                )
                .label(format!("receives {received}"))
                .with(at, text)
                .help("the normalized shape must equal the input's last dimensions"),
            }
        }
        Problem::Shapes(Shapes::RankMismatch {
            span,
            layer,
            wants,
            producer,
        }) => {
            let (at, text) = produces(&producer);
            let help = match (layer, layer.spatial()) {
                (Kind::Linear, _) => "add a `flatten` or `reshape` before it".to_string(),
                (_, Some(2)) => {
                    "2-D layers take [channels, height, width]: add a `reshape([1, 28, 28])`-style layer before it".to_string()
                }
                (_, Some(_)) => {
                    "1-D layers take [channels, length]: add a `reshape` before it".to_string()
                }
                (_, None) => format!("give `{layer}` {wants} input"),
            };
            new(
                span,
                format!("`{layer}` needs {wants} input, got {}", producer.shape),
            )
            .label(format!("receives {}", producer.shape))
            .with(at, text)
            .help(help)
        }
        Problem::Shapes(Shapes::LossShape {
            span,
            loss,
            output: (out, out_span),
            data,
            situation,
        }) => {
            let (message, label, help) = match situation {
                LossShape::ClassesOnValues { targets } => (
                    format!("`{loss}` needs class labels, but the targets are real values of shape {targets}"),
                    format!("`{loss}` needs class indices"),
                    "use `randint(classes)` targets or a regression loss such as `mse`".to_string(),
                ),
                LossShape::ScalarOutput => (
                    format!("`{loss}` needs class scores, but the model outputs a scalar"),
                    "needs [classes]".to_string(),
                    "end the model with `linear(classes)`".to_string(),
                ),
                LossShape::NotFlat => (
                    format!("`{loss}` needs [classes] per sample, but the model outputs {out}"),
                    "needs [classes]".to_string(),
                    "add `flatten` or pool before the last `linear`".to_string(),
                ),
                LossShape::TokenScores { tokens } => {
                    let dims: String = tokens.iter().map(|d| format!("{d}, ")).collect();
                    (
                        format!("`{loss}` on targets of {tokens} per sample needs a score per class for each token, [{dims}classes], but the model outputs {out}"),
                        format!("needs [{dims}classes]"),
                        "keep the token dimension and end the model with `linear(classes)`, which scores each token, without pooling or `flatten`".to_string(),
                    )
                }
                LossShape::ClassCount { classes, per_token } => (
                    format!(
                        "the data has {} but the model outputs {}",
                        counted(classes, "class"),
                        counted(out.last().copied().unwrap_or(0), "score")
                    ),
                    format!(
                        "needs {} per {}",
                        counted(classes, "score"),
                        if per_token { "token" } else { "sample" }
                    ),
                    format!("end the model with `linear({classes})`"),
                ),
                LossShape::ValuesOnClasses => (
                    format!("`{loss}` needs real-valued targets, but the targets are class labels"),
                    format!("`{loss}` compares values"),
                    "use `cross_entropy` for class labels, or real-valued targets".to_string(),
                ),
                LossShape::BinaryOnClasses { classes } => (
                    format!("`{loss}` needs targets of 0 or 1, but the targets are class indices of {classes} classes"),
                    format!("`{loss}` is binary; the targets go up to {}", classes.saturating_sub(1)),
                    format!("use `cross_entropy` with `linear({classes})` for {classes} classes, or 0/1 targets"),
                ),
                LossShape::OneClass => (
                    format!("`{loss}` on one score per sample is always zero"),
                    "needs two or more class scores".to_string(),
                    "end the model with `linear(classes)`, or use `bce_with_logits` for a binary target".to_string(),
                ),
                LossShape::WeightCount { option, given, wants } => (
                    format!(
                        "`{option}` gives {} but the model outputs {} per sample",
                        counted(given as u64, "value"),
                        counted(wants as u64, "score")
                    ),
                    format!("needs {}", counted(wants as u64, "value")),
                    if option == "pos_weight" {
                        format!("give one `pos_weight` for all scores, or {wants}, one per score")
                    } else {
                        format!("give one class weight per class score: {wants}")
                    },
                ),
                LossShape::Shapes { targets } => (
                    if targets.is_empty() {
                        format!("`{loss}` compares the output {out} with one target value per sample")
                    } else {
                        format!("`{loss}` compares the output {out} with targets {targets}")
                    },
                    format!("needs output {}", if targets.is_empty() { "[1]".to_string() } else { targets.to_string() }),
                    match targets.as_slice() {
                        [] => "the targets are one value per sample: end the model with one output, such as `linear(1)`".to_string(),
                        [k] => format!("end the model with {k} outputs per sample, such as `linear({k})`"),
                        _ => "make the model's output shape equal the targets' shape (PyTorch would broadcast them into a wrong loss)".to_string(),
                    },
                ),
            };
            new(span, message)
                .label(label)
                .with(out_span, format!("the model outputs {out}"))
                .with(data, "targets come from here")
                .help(help)
        }
        Problem::Shapes(Shapes::ResidualShape {
            span,
            input,
            producer,
        }) => new(
            producer.span,
            format!("a residual adds {} to its input {input}", producer.shape),
        )
        .label(format!("produces {}", producer.shape))
        .with(span, format!("input is {input}"))
        .help("the layers inside a residual must keep the shape of their input"),
        Problem::Shapes(Shapes::ReshapeSize {
            span,
            target,
            producer,
        }) => {
            let (at, text) = produces(&producer);
            let values = producer.shape.numel();
            new(
                span,
                format!(
                    "cannot reshape {} ({}) to {target}",
                    producer.shape,
                    counted(values, "value")
                ),
            )
            .label(format!("{} do not fit", counted(values, "value")))
            .with(at, text)
            .help("the new shape must hold the same number of values")
        }
        Problem::Shapes(Shapes::DtypeMismatch {
            span,
            layer,
            integers: true,
            producer,
        }) => new(span, format!("`{layer}` receives integer token ids"))
            .label("needs floating-point input")
            .with(
                producer.span,
                format!("{} produces integers", producer.name),
            )
            .help("turn token ids into vectors with an `embedding` layer first"),
        Problem::Shapes(Shapes::DtypeMismatch {
            span,
            layer,
            integers: false,
            producer,
        }) => new(span, format!("`{layer}` receives floating-point values"))
            .label("needs integer token ids")
            .with(producer.span, format!("{} produces floats", producer.name))
            .help("feed token ids, as from `randint(...)` data"),
        Problem::Shapes(Shapes::DataShape {
            span,
            input,
            data: (shape, at),
            scrambled: false,
        }) => new(
            span,
            format!("the model takes {input} but the data's samples are {shape}"),
        )
        .label(format!("{} per sample", counted(input.numel(), "value")))
        .with(
            at,
            format!("samples of {}", counted(shape.numel(), "value")),
        )
        .help("make `input` hold as many values as one sample of the data"),
        Problem::Shapes(Shapes::DataShape {
            span,
            input,
            data: (shape, at),
            scrambled: true,
        }) => new(
            span,
            format!("the model takes {input} but the data's samples are {shape}: reshaping them would scramble their values"),
        )
        .label(format!("takes {input}"))
        .with(at, format!("samples of {shape}"))
        .help(format!("give the model the data's shape, `input {shape}`, or make the samples {input}")),
        Problem::Shapes(Shapes::SequenceTask {
            span,
            task,
            inputs: (shape, at),
            integers,
            classes,
        }) => {
            let (message, label, help) = if !integers {
                (
                    format!("`{task}()` targets are computed from token ids, but the inputs are real numbers"),
                    "real-valued samples".to_string(),
                    "draw the inputs with `randint(V, shape: [S])`".to_string(),
                )
            } else if shape.len() != 1 {
                (
                    format!("`{task}()` targets need one sequence of ids per sample, got {shape}"),
                    format!("samples of {shape}"),
                    "give the inputs one dimension: `randint(V, shape: [S])`".to_string(),
                )
            } else {
                (
                    format!(
                        "`{task}()` targets over these inputs have {}",
                        counted(classes, "class")
                    ),
                    format!("samples of {shape}"),
                    "use at least 2 token ids and sequences of at least 2 tokens".to_string(),
                )
            };
            new(span, message)
                .label("needs a sequence of token ids")
                .with(at, label)
                .help(help)
        }
        Problem::Shapes(Shapes::TokenTargets { span, first }) => new(
            span,
            "`per_token: true` gives a class per token id, but the model does not read token ids"
                .to_string(),
        )
        .label("a class per token of the input")
        .with(first, "not an `embedding`: the inputs are read as real numbers")
        .help("start the model with `embedding(V, E)` over `input [S]`, or drop `per_token` for one class per sample"),
        Problem::Shapes(Shapes::EmptyDimension {
            span,
            layer,
            window,
            producer,
        }) => {
            let (at, text) = produces(&producer);
            let dim = window.dimension();
            new(
                span,
                format!(
                    "`{layer}` leaves no output from {}: {}",
                    producer.shape,
                    window.overreach()
                ),
            )
            .label(format!(
                "{} on {dim} {} gives {dim} {}",
                window.settings(),
                window.input,
                window.output()
            ))
            .with(at, text)
            .help(window.remedy())
        }
        Problem::Strategies(Strategies::HeadsIndivisible {
            span,
            heads,
            producer,
        }) => {
            let e = producer.shape.last().copied().unwrap_or(0);
            let (at, text) = produces(&producer);
            new(span, format!("{heads} heads do not divide the width {e}"))
                .label(format!("{e} is not a multiple of {heads}"))
                .with(at, text)
                .help(format!(
                    "choose heads that divide {e}, such as {}",
                    divisors_near(e, heads)
                ))
        }
        Problem::Warnings(Warnings::NoOpLayer {
            span,
            situation: NoOp::Dropout,
        }) => new(span, "dropout with p = 0 does nothing".into())
            .label("has no effect")
            .help("remove the layer, or give a drop probability above 0"),
        Problem::Warnings(Warnings::NoOpLayer {
            span,
            situation: NoOp::Reshape { shape },
        }) => new(span, format!("reshape to {shape} keeps the shape"))
            .label("has no effect")
            .help("remove the layer"),
        _ => unreachable!("only shape problems are worded here"),
    }
}
