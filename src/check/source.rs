//! Data sources: the files of each format with their options, and the generators of synthetic
//! data; a `source` statement, or a split's own source (`split(val: npy(...))`).

use super::cx::{Cx, Range};
use super::words::SOURCES;
use crate::diagnostic::problem::{Arguments, Expected, Names, OutOfRange, Shapes};
use crate::diagnostic::{Code, Problem};
use crate::ir::{DType, Generator, Layout, SequenceTask, Shape, Source, Targets};
use crate::span::Span;
use crate::syntax::ast::{Statement, Value, ValueKind};

/// Random generators for synthetic data.
pub const GENERATORS: &[(&str, &[&str])] = &[
    ("normal", &["shape", "mean", "std"]),
    ("uniform", &["shape", "low", "high"]),
    ("randint", &["high", "shape"]),
    ("majority", &[]),
    ("first", &[]),
    ("argmax", &[]),
    ("copy", &[]),
    ("reverse", &[]),
    ("sort", &[]),
];

/// A checked source with what the model checker needs.
#[derive(Clone)]
pub(super) struct SourceOut {
    /// The source.
    pub source: Source,
    /// Its call.
    pub span: Span,
    /// The declared per-sample input shape, when it declares one.
    pub sample: Option<(Shape, Span)>,
    /// Input element type.
    pub dtype: DType,
    /// Exclusive bound of integer inputs.
    pub int_bound: Option<u64>,
    /// What a target is.
    pub targets: Targets,
    /// What uint8 inputs are divided by (`scale`).
    pub scale: Option<f64>,
    /// How the samples are laid out.
    pub layout: Layout,
    /// The `per_token: true` of a file source whose targets are a class per token.
    pub per_token: Option<Span>,
}

pub(super) fn check_source(cx: &mut Cx, stmt: &Statement) -> Option<SourceOut> {
    let v = cx.single(stmt)?;
    source_value(cx, v)
}

/// Checks a source call (`idx(...)`, `npy(...)`...).
pub(super) fn source_value(cx: &mut Cx, v: &Value) -> Option<SourceOut> {
    let (name, args) = match &v.kind {
        ValueKind::Call(name, args) => (name, Some(args)),
        ValueKind::Path(_) => {
            let ident = cx.name(v)?;
            let known: Vec<&str> = SOURCES.iter().map(|(k, _)| *k).collect();
            if !known.contains(&ident.name.as_str()) {
                cx.unknown(Code::UnknownSource, "data source", &ident, &known);
            } else {
                cx.report(Problem::Names(Names::WrongArguments {
                    span: v.span,
                    situation: Arguments::NoArguments { callee: ident.name },
                }));
            }
            return None;
        }
        _ => {
            cx.wrong_type(v, Expected::Source);
            return None;
        }
    };
    let Some((kind, params)) = SOURCES.iter().find(|(k, _)| *k == name.name) else {
        let known: Vec<&str> = SOURCES.iter().map(|(k, _)| *k).collect();
        cx.unknown(Code::UnknownSource, "data source", name, &known);
        return None;
    };
    let b = cx.bind(kind, args, name.span, params);
    let need = |cx: &mut Cx, p: &str| {
        let v = b.get(p);
        if v.is_none() {
            cx.missing(kind, p, b.span);
        }
        v
    };
    if *kind == "synthetic" {
        let inputs = need(cx, "inputs").and_then(|v| generator(cx, v));
        let targets = need(cx, "targets").and_then(|v| generator(cx, v));
        let count = need(cx, "count").and_then(|v| cx.uint_min(v, "the sample count", 1));
        let (inputs, targets, count) = (inputs?, targets?, count?);
        let input_span = b.get("inputs").map_or(v.span, |x| x.span);
        let (dtype, int_bound) = match &inputs {
            Generator::Randint { high, .. } => (DType::Int, Some(*high)),
            _ => (DType::Float, None),
        };
        let t = match &targets {
            Generator::Randint { high, shape } if shape.is_empty() => Targets::Classes(Some(*high)),
            Generator::Task(task) => {
                let at = b.get("targets").map_or(v.span, |x| x.span);
                // After a problem, the classes are unknown rather than the source missing, so
                // that the model is still checked against the inputs.
                let classes = sequence_task(cx, *task, &inputs, at, input_span);
                if task.per_token() {
                    Targets::Tokens {
                        classes,
                        shape: inputs.shape().clone(),
                    }
                } else {
                    Targets::Classes(classes)
                }
            }
            g => Targets::Values(g.shape().clone()),
        };
        let sample = Some((inputs.shape().clone(), input_span));
        return Some(SourceOut {
            source: Source::Synthetic {
                inputs,
                targets,
                count,
            },
            span: v.span,
            sample,
            dtype,
            int_bound,
            targets: t,
            scale: None,
            layout: Layout::AsStored,
            per_token: None,
        });
    }
    if let Some(stream) = token_stream(cx, kind, &b, v.span) {
        return stream;
    }
    let string = |cx: &mut Cx, p: &str, default: &str| {
        b.get(p).map_or(Some(default.to_string()), |v| cx.string(v))
    };
    let classes = b.get("classes").map_or(Some(None), |v| {
        cx.uint_min(v, "the number of classes", 2).map(Some)
    });
    // An image folder's samples are its `size`.
    let shape_param = if *kind == "images" { "size" } else { "shape" };
    let shape = match b.get(shape_param) {
        None if *kind == "images" => {
            cx.missing(kind, "size", b.span);
            None
        }
        None => Some(None),
        Some(v) => cx.shape(v).map(|s| Some((s, v.span))),
    };
    // Images are divided by 255 unless told otherwise; other formats keep their values.
    let default_scale = matches!(*kind, "idx" | "images").then_some(255.0);
    let scale = b
        .get("scale")
        .map_or(Some(default_scale), |v| check_scale(cx, v));
    let source = match *kind {
        "idx" => {
            let images = need(cx, "images").and_then(|v| cx.string(v));
            let labels = need(cx, "labels").and_then(|v| cx.string(v));
            Source::Idx {
                images: images?,
                labels: labels?,
            }
        }
        "npy" => {
            let inputs = need(cx, "inputs").and_then(|v| cx.string(v));
            let targets = need(cx, "targets").and_then(|v| cx.string(v));
            Source::Npy {
                inputs: inputs?,
                targets: targets?,
            }
        }
        "npz" | "safetensors" => {
            let path = need(cx, "path").and_then(|v| cx.string(v));
            let inputs = string(cx, "inputs", "inputs");
            let targets = string(cx, "targets", "targets");
            if *kind == "npz" {
                Source::Npz {
                    path: path?,
                    inputs: inputs?,
                    targets: targets?,
                }
            } else {
                Source::Safetensors {
                    path: path?,
                    inputs: inputs?,
                    targets: targets?,
                }
            }
        }
        "parquet" => {
            let path = need(cx, "path").and_then(|v| cx.string(v));
            let inputs = need(cx, "inputs").and_then(|v| match &v.kind {
                ValueKind::List(items) if !items.is_empty() => items
                    .iter()
                    .map(|i| cx.string(i))
                    .collect::<Option<Vec<_>>>(),
                _ => cx.string(v).map(|c| vec![c]),
            });
            let target = string(cx, "target", "label");
            Source::Parquet {
                path: path?,
                inputs: inputs?,
                target: target?,
            }
        }
        "images" => {
            let path = need(cx, "path").and_then(|v| cx.string(v));
            let flag = |cx: &mut Cx, p: &str| b.get(p).map_or(Some(false), |v| cx.boolean(v));
            let (resize, flip) = (flag(cx, "resize"), flag(cx, "flip"));
            let crop = b
                .get("crop")
                .map_or(Some(0), |v| cx.uint_min(v, "the crop's padding", 0));
            let size = match &shape {
                Some(Some((size, at))) if size.len() != 3 || ![1, 3].contains(&size[0]) => {
                    cx.report(Problem::Names(Names::OutOfRange {
                        span: *at,
                        situation: OutOfRange::ImageSize { size: size.clone() },
                    }));
                    None
                }
                Some(Some((size, _))) => Some(Shape(size.clone())),
                _ => None,
            };
            Source::Images {
                path: path?,
                size: size?,
                resize: resize?,
                augment: crate::ir::Augment {
                    crop: crop?,
                    flip: flip?,
                },
            }
        }
        _ => {
            let path = need(cx, "path").and_then(|v| cx.string(v));
            let target = string(cx, "target", "label");
            let header = b.get("header").map_or(Some(true), |v| cx.boolean(v));
            Source::Csv {
                path: path?,
                target: target?,
                header: header?,
            }
        }
    };
    let per_token = b
        .get("per_token")
        .map_or(Some(None), |v| cx.boolean(v).map(|on| on.then_some(v.span)));
    let channels_last = b.get("layout").map_or(Some(false), |v| {
        cx.choice(v, "layout", &["channels_first", "channels_last"])
            .map(|w| w == "channels_last")
    });
    let (classes, per_token, shape) = (classes?, per_token?, shape?);
    let sample: Option<(Shape, Span)> = shape.map(|(s, at)| (s.into(), at));
    let layout = if channels_last? {
        Layout::ChannelsLast(sample.as_ref().map(|(s, _)| s.clone()))
    } else {
        Layout::AsStored
    };
    let targets = match (classes, per_token) {
        // A class per token of the model's input, whose shape the model check fills in.
        (classes, Some(_)) => Targets::Tokens {
            classes,
            shape: Shape::default(),
        },
        (Some(c), None) => Targets::Classes(Some(c)),
        // An image folder's classes are its folders, counted once `kiln check` lists them.
        (None, None) if matches!(source, Source::Images { .. }) => Targets::Classes(None),
        (None, None) => Targets::Unknown,
    };
    Some(SourceOut {
        source,
        span: v.span,
        sample,
        dtype: DType::Float,
        int_bound: None,
        targets,
        scale: scale?,
        layout,
        per_token,
    })
}

/// A token stream, `tokens(...)` or `text(...)`: samples are windows of `block` ids, each
/// token's target the next one (`None` for other sources; `Some(None)` after a problem).
fn token_stream(
    cx: &mut Cx,
    kind: &str,
    b: &super::cx::Bound,
    span: Span,
) -> Option<Option<SourceOut>> {
    if kind != "tokens" && kind != "text" {
        return None;
    }
    let need = |cx: &mut Cx, p: &str| {
        let v = b.get(p);
        if v.is_none() {
            cx.missing(kind, p, b.span);
        }
        v
    };
    let path = need(cx, "path").and_then(|v| cx.string(v));
    let block_value = need(cx, "block");
    let block = block_value.and_then(|v| cx.uint_min(v, "the window's `block` of tokens", 1));
    let (source, vocab) = if kind == "tokens" {
        let bits = b.get("dtype").map_or(Some(16), |v| {
            cx.choice(v, "token dtype", &["uint16", "uint32"]).map(|w| {
                if w == "uint16" {
                    16
                } else {
                    32
                }
            })
        });
        let vocab = b.get("vocab").map_or(Some(None), |v| {
            cx.uint_min(v, "the vocabulary size", 2).map(Some)
        });
        let (path, bits, block, vocab) = (path, bits?, block, vocab?);
        let source = Source::Tokens {
            path: path?,
            bits,
            block: block?,
            vocab,
        };
        (source, vocab)
    } else {
        let chars = b
            .get("tokenizer")
            .map_or(Some("chars"), |v| cx.choice(v, "tokenizer", &["chars"]));
        let (path, _, block) = (path, chars?, block);
        let source = Source::Text {
            path: path?,
            block: block?,
        };
        (source, None)
    };
    let block = source.block().unwrap_or(1);
    let shape = Shape(vec![i64::try_from(block).unwrap_or(i64::MAX)]);
    Some(Some(SourceOut {
        source,
        span,
        sample: Some((shape.clone(), block_value.map_or(span, |v| v.span))),
        dtype: DType::Int,
        int_bound: vocab,
        // A text's vocabulary is known once `kiln check` reads it (the typed experiment's).
        targets: Targets::Tokens {
            classes: vocab,
            shape,
        },
        scale: None,
        layout: Layout::AsStored,
        per_token: None,
    }))
}

/// `scale: 255` (what uint8 inputs are divided by, above 0) or `scale: none`.
fn check_scale(cx: &mut Cx, v: &Value) -> Option<Option<f64>> {
    match &v.kind {
        ValueKind::Path(p) if p == "none" => Some(None),
        ValueKind::Path(_) => {
            cx.wrong_type(v, Expected::Scale);
            None
        }
        _ => cx.number_in(v, "`scale`", Range::Positive).map(Some),
    }
}

fn generator(cx: &mut Cx, v: &Value) -> Option<Generator> {
    let ValueKind::Call(name, args) = &v.kind else {
        cx.wrong_type(v, Expected::Generator);
        return None;
    };
    let Some((kind, params)) = GENERATORS.iter().find(|(k, _)| *k == name.name) else {
        let known: Vec<&str> = GENERATORS.iter().map(|(k, _)| *k).collect();
        cx.unknown(Code::UnknownSource, "generator", name, &known);
        return None;
    };
    let b = cx.bind(kind, Some(args), name.span, params);
    if let Some(task) = SequenceTask::ALL.iter().find(|t| t.name() == *kind) {
        return Some(Generator::Task(*task));
    }
    let shape = match b.get("shape") {
        Some(s) => cx.shape(s),
        None if *kind == "randint" => Some(vec![]),
        None => {
            cx.missing(kind, "shape", b.span);
            None
        }
    };
    let num = |cx: &mut Cx, p: &str, d: f64| b.get(p).map_or(Some(d), |v| cx.number(v));
    Some(match *kind {
        "normal" => {
            let mean = num(cx, "mean", 0.0);
            let std = b
                .get("std")
                .map_or(Some(1.0), |v| cx.number_in(v, "`std`", Range::Positive));
            Generator::Normal {
                shape: shape?.into(),
                mean: mean?,
                std: std?,
            }
        }
        "uniform" => {
            let (low, high) = (num(cx, "low", 0.0)?, num(cx, "high", 1.0)?);
            if high <= low {
                let at = b.get("high").map_or(b.span, |v| v.span);
                cx.report(Problem::Names(Names::OutOfRange {
                    span: at,
                    situation: OutOfRange::UniformBounds { low, high },
                }));
                return None;
            }
            Generator::Uniform {
                shape: shape?.into(),
                low,
                high,
            }
        }
        _ => {
            let high = match b.get("high") {
                Some(v) => cx.uint_min(v, "`high`", 1),
                None => {
                    cx.missing(kind, "high", b.span);
                    None
                }
            };
            Generator::Randint {
                shape: shape?.into(),
                high: high?,
            }
        }
    })
}

/// The number of classes of `task` over `inputs`, which must be `randint(V, shape: [S])`
/// giving at least two classes.
fn sequence_task(
    cx: &mut Cx,
    task: SequenceTask,
    inputs: &Generator,
    span: Span,
    input_span: Span,
) -> Option<u64> {
    let (integers, classes) = match inputs {
        Generator::Randint { high, shape } if shape.len() == 1 => {
            (true, task.classes(*high, shape[0].max(0) as u64))
        }
        Generator::Randint { .. } => (true, 0),
        _ => (false, 0),
    };
    if classes >= 2 {
        return Some(classes);
    }
    cx.report(Problem::Shapes(Shapes::SequenceTask {
        span,
        task: task.name().to_string(),
        inputs: (inputs.shape().clone(), input_span),
        integers,
        classes,
    }));
    None
}
