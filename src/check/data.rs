//! The `data` block: sources, generators, splits, batching and normalisation.

use std::collections::HashMap;

use super::cx::{Cx, Range};
use super::experiment::duplicate;
use crate::diagnostic::problem::{Arguments, Expected, Form, OutOfRange};
use crate::diagnostic::{Code, Problem};
use crate::ir::{DType, Data, Generator, Normalize, SequenceTask, Shape, Source, Split, Targets};
use crate::span::Span;
use crate::syntax::ast::{Statement, Value, ValueKind};

/// Keywords of the data block.
pub const KEYWORDS: &[&str] = &["source", "split", "batch", "shuffle", "normalize"];

/// Data sources and their parameters in positional order.
pub const SOURCES: &[(&str, &[&str])] = &[
    ("synthetic", &["inputs", "targets", "count"]),
    ("idx", &["images", "labels", "classes", "shape"]),
    ("npy", &["inputs", "targets", "classes", "shape"]),
    ("npz", &["path", "inputs", "targets", "classes", "shape"]),
    ("csv", &["path", "target", "header", "classes"]),
    (
        "safetensors",
        &["path", "inputs", "targets", "classes", "shape"],
    ),
];

/// Random generators for synthetic data.
pub const GENERATORS: &[(&str, &[&str])] = &[
    ("normal", &["shape", "mean", "std"]),
    ("uniform", &["shape", "low", "high"]),
    ("randint", &["high", "shape"]),
    ("majority", &[]),
    ("first", &[]),
    ("argmax", &[]),
];

/// The checked data block with what the model checker needs.
pub struct DataOut {
    /// The typed data settings.
    pub data: Data,
    /// The declared per-sample input shape, when the source declares one.
    pub sample: Option<(Shape, Span)>,
    /// Input element type.
    pub dtype: DType,
    /// Exclusive bound of integer inputs.
    pub int_bound: Option<u64>,
}

/// Checks a `data { ... }` statement.
pub fn check_data(cx: &mut Cx, stmt: &Statement) -> Option<DataOut> {
    cx.block_statement(stmt);
    let Some(body) = &stmt.body else {
        cx.report(Problem::WrongArguments {
            span: stmt.span,
            situation: Arguments::NoBlock {
                keyword: "data".into(),
                example: "data { source ...; batch 64 }",
            },
        });
        return None;
    };
    let mut seen: HashMap<&str, &Statement> = HashMap::new();
    for s in &body.statements {
        let kw = s.keyword.name.as_str();
        if !KEYWORDS.contains(&kw) {
            cx.unknown_keyword("data setting", s, KEYWORDS);
        } else if let Some(first) = seen.get(kw) {
            duplicate(cx, kw, first, s);
        } else {
            seen.insert(kw, s);
        }
    }
    let missing = |cx: &mut Cx, settings: &'static [&'static str], example: &'static str| {
        cx.report(Problem::MissingSetting {
            span: stmt.keyword.span,
            block: "data",
            settings,
            example,
        });
    };
    let source = match seen.get("source") {
        Some(s) => check_source(cx, s),
        None => {
            missing(
                cx,
                &["source"],
                "source synthetic(inputs: normal([784]), targets: randint(10), count: 1000)",
            );
            None
        }
    };
    let batch = match seen.get("batch") {
        Some(s) => cx
            .single(s)
            .and_then(|v| cx.uint_min(v, "the batch size", 1).map(|b| (b, v.span))),
        None => {
            missing(cx, &["batch"], "batch 64");
            None
        }
    };
    let shuffle = seen
        .get("shuffle")
        .map_or(Some(true), |s| cx.single(s).and_then(|v| cx.boolean(v)));
    let split = seen.get("split").map_or(
        Some(Split {
            train: 1.0,
            val: 0.0,
            test: 0.0,
        }),
        |s| check_split(cx, s),
    );
    let normalize = match seen.get("normalize") {
        None => Some(None),
        Some(s) => check_normalize(cx, s).map(Some),
    };
    let (source, source_span, sample, dtype, int_bound, targets) = source?;
    let (batch, batch_span) = batch?;
    if let Source::Synthetic { count, .. } = &source {
        let split = split.as_ref()?;
        let train = (*count as f64 * split.train).floor() as u64;
        if train < batch {
            cx.report(Problem::OutOfRange {
                span: batch_span,
                situation: OutOfRange::BatchOverSamples {
                    batch,
                    train,
                    count: *count,
                    source: source_span,
                },
            });
            return None;
        }
    }
    Some(DataOut {
        data: Data {
            source,
            source_span,
            split: split?,
            batch,
            batch_span,
            shuffle: shuffle?,
            normalize: normalize?,
            targets,
            read: None,
        },
        sample,
        dtype,
        int_bound,
    })
}

type SourceOut = (
    Source,
    Span,
    Option<(Shape, Span)>,
    DType,
    Option<u64>,
    Targets,
);

fn check_source(cx: &mut Cx, stmt: &Statement) -> Option<SourceOut> {
    let v = cx.single(stmt)?;
    let (name, args) = match &v.kind {
        ValueKind::Call(name, args) => (name, Some(args)),
        ValueKind::Path(_) => {
            let ident = cx.name(v)?;
            let known: Vec<&str> = SOURCES.iter().map(|(k, _)| *k).collect();
            if !known.contains(&ident.name.as_str()) {
                cx.unknown(Code::UnknownSource, "data source", &ident, &known);
            } else {
                cx.report(Problem::WrongArguments {
                    span: v.span,
                    situation: Arguments::NoArguments { callee: ident.name },
                });
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
                Targets::Classes(sequence_task(cx, *task, &inputs, at, input_span))
            }
            g => Targets::Values(g.shape().clone()),
        };
        let sample = Some((inputs.shape().clone(), input_span));
        return Some((
            Source::Synthetic {
                inputs,
                targets,
                count,
            },
            v.span,
            sample,
            dtype,
            int_bound,
            t,
        ));
    }
    let string = |cx: &mut Cx, p: &str, default: &str| {
        b.get(p).map_or(Some(default.to_string()), |v| cx.string(v))
    };
    let classes = b.get("classes").map_or(Some(None), |v| {
        cx.uint_min(v, "the number of classes", 2).map(Some)
    });
    let shape = b
        .get("shape")
        .map_or(Some(None), |v| cx.shape(v).map(|s| Some((s, v.span))));
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
    let classes = classes?;
    let targets = match classes {
        Some(c) => Targets::Classes(Some(c)),
        None => Targets::Unknown,
    };
    Some((
        source,
        v.span,
        shape?.map(|(s, at)| (s.into(), at)),
        DType::Float,
        None,
        targets,
    ))
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
                cx.report(Problem::OutOfRange {
                    span: at,
                    situation: OutOfRange::UniformBounds { low, high },
                });
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
    cx.report(Problem::SequenceTask {
        span,
        task: task.name().to_string(),
        inputs: (inputs.shape().clone(), input_span),
        integers,
        classes,
    });
    None
}

fn check_split(cx: &mut Cx, stmt: &Statement) -> Option<Split> {
    cx.plain_statement(stmt, true);
    let b = cx.bind(
        "split",
        stmt.args.as_ref(),
        stmt.keyword.span,
        &["train", "val", "test"],
    );
    if stmt.args.is_none() || !stmt.values.is_empty() {
        cx.report(Problem::WrongArguments {
            span: stmt.span,
            situation: Arguments::Form(Form::Split),
        });
        return None;
    }
    let frac = |cx: &mut Cx, p: &str| {
        b.get(p).map_or(Some(0.0), |v| {
            cx.number_in(v, &format!("the `{p}` fraction"), Range::Unit)
        })
    };
    let (train, val, test) = (frac(cx, "train"), frac(cx, "val"), frac(cx, "test"));
    let split = Split {
        train: train?,
        val: val?,
        test: test?,
    };
    let sum = split.train + split.val + split.test;
    if sum > 1.0 + 1e-9 {
        cx.report(Problem::OutOfRange {
            span: b.span,
            situation: OutOfRange::SplitSum { sum },
        });
        return None;
    }
    if split.train == 0.0 {
        let at = b.get("train").map_or(b.span, |v| v.span);
        cx.report(Problem::OutOfRange {
            span: at,
            situation: OutOfRange::EmptyTrainSplit,
        });
        return None;
    }
    Some(split)
}

fn check_normalize(cx: &mut Cx, stmt: &Statement) -> Option<Normalize> {
    cx.plain_statement(stmt, true);
    let b = cx.bind(
        "normalize",
        stmt.args.as_ref(),
        stmt.keyword.span,
        &["mean", "std"],
    );
    let list = |cx: &mut Cx, p: &str, range: Range| -> Option<Vec<f64>> {
        let Some(v) = b.get(p) else {
            cx.missing("normalize", p, b.span);
            return None;
        };
        match &v.kind {
            ValueKind::List(items) => items
                .iter()
                .map(|i| cx.number_in(i, &format!("`{p}`"), range))
                .collect(),
            _ => cx.number_in(v, &format!("`{p}`"), range).map(|x| vec![x]),
        }
    };
    let mean = list(cx, "mean", Range::Any);
    let std = list(cx, "std", Range::Positive);
    let (mean, std) = (mean?, std?);
    if mean.len() != std.len() {
        cx.report(Problem::WrongArguments {
            span: b.span,
            situation: Arguments::NormalizeLengths {
                means: mean.len(),
                stds: std.len(),
            },
        });
        return None;
    }
    Some(Normalize { mean, std })
}
