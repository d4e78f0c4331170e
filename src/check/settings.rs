//! Optimizer, schedule, training loop and parallel strategy settings.

use std::collections::HashMap;

use super::cx::{Bound, Cx, Range};
use super::experiment::duplicate;
use super::loss::{check_loss, LOSSES};
use super::model::ModelOut;
use crate::diagnostic::problem::{Arguments, Expected, Inconsistent, OutOfRange};
use crate::diagnostic::{Code, Problem};
use crate::ir::{
    Backend, Checkpoint, Device, Duration, EarlyStop, Metric, Optimizer, OptimizerKind, Parallel,
    PipelineSchedule, Precision, Train,
};
use crate::span::Span;
use crate::syntax::ast::{Args, Ident, Statement, Unit, Value, ValueKind};

/// A word of the language that names a choice (an optimizer, a loss...), the tag the checker
/// matches on, and the choice's parameters in positional order.
pub type Choice<T> = (&'static str, T, &'static [&'static str]);

/// The optimizers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opt {
    Sgd,
    Adam,
    AdamW,
    RmsProp,
}

/// Optimizers and their parameters in positional order.
const OPTIMIZERS: &[Choice<Opt>] = &[
    (
        "sgd",
        Opt::Sgd,
        &[
            "lr",
            "momentum",
            "dampening",
            "nesterov",
            "weight_decay",
            "groups",
        ],
    ),
    (
        "adam",
        Opt::Adam,
        &["lr", "betas", "eps", "weight_decay", "amsgrad", "groups"],
    ),
    (
        "adamw",
        Opt::AdamW,
        &["lr", "betas", "eps", "weight_decay", "amsgrad", "groups"],
    ),
    (
        "rmsprop",
        Opt::RmsProp,
        &[
            "lr",
            "alpha",
            "eps",
            "momentum",
            "centered",
            "weight_decay",
            "groups",
        ],
    ),
];

/// The parallel strategies.
#[derive(Clone, Copy)]
enum Strategy {
    None,
    Data,
    Model,
    Pipeline,
    Ddp,
}

/// Parallel strategies and their parameters.
const STRATEGIES: &[Choice<Strategy>] = &[
    ("none", Strategy::None, &[]),
    ("data", Strategy::Data, &["devices", "replicas"]),
    ("model", Strategy::Model, &[]),
    (
        "pipeline",
        Strategy::Pipeline,
        &["stages", "micro_batches", "schedule"],
    ),
    ("ddp", Strategy::Ddp, &["backend", "world_size", "timeout"]),
];

/// Optimizer names with their parameters in positional order (completion, hover).
pub fn optimizer_names() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    OPTIMIZERS.iter().map(|(n, _, p)| (*n, *p))
}

/// Loss names with their parameters in positional order (completion, hover).
pub fn loss_names() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    LOSSES.iter().map(|(n, _, p)| (*n, *p))
}

/// Keywords of the train block.
pub const TRAIN_KEYWORDS: &[&str] = &[
    "epochs",
    "steps",
    "loss",
    "metrics",
    "eval_every",
    "early_stop",
    "precision",
    "checkpoint",
    "accumulate",
    "micro_batch",
    "clip_norm",
    "clip_value",
];

/// The settings written as a call, with each choice and its parameters: `optimizer sgd(lr, ...)`,
/// `schedule`, `loss` and `parallel`.
pub fn calls() -> impl Iterator<Item = (&'static str, &'static str, &'static [&'static str])> {
    fn of<T>(
        setting: &'static str,
        table: &'static [Choice<T>],
    ) -> impl Iterator<Item = (&'static str, &'static str, &'static [&'static str])> {
        table
            .iter()
            .map(move |(word, _, params)| (setting, *word, *params))
    }
    of("optimizer", OPTIMIZERS)
        .chain(of("schedule", super::schedule::SCHEDULES))
        .chain(of("loss", LOSSES))
        .chain(of("parallel", STRATEGIES))
}

/// The count of `epochs` or `steps` (`stmt`, whose value is `v`), at least 1; a count written
/// with a unit (`epochs 500 steps`) is refused with the setting the unit names.
fn count(cx: &mut Cx, stmt: &Statement, v: &Value, what: &str) -> Option<u64> {
    if let ValueKind::Number {
        value,
        integer: true,
        unit: Some(unit @ (Unit::Steps | Unit::Epochs)),
    } = v.kind
    {
        if (0.0..=9.0e15).contains(&value) {
            cx.report(Problem::WrongType {
                span: v.span,
                expected: Expected::Count {
                    setting: if stmt.keyword.name == "epochs" {
                        "epochs"
                    } else {
                        "steps"
                    },
                    count: value as u64,
                    meant: if unit == Unit::Steps {
                        "steps"
                    } else {
                        "epochs"
                    },
                    statement: stmt.keyword.span.to(v.span),
                },
                found: v.type_name(),
            });
            return None;
        }
    }
    cx.uint_min(v, what, 1)
}

/// The most data-parallel replicas on one machine.
const MAX_REPLICAS: u64 = 1024;

/// Metrics.
pub const METRICS: &[&str] = &["accuracy", "top_k", "loss", "mae", "rmse", "r2"];

/// A choice read from a statement.
pub struct Called<'s, T> {
    /// The word, as the table spells it.
    pub word: &'static str,
    /// Its tag.
    pub tag: T,
    /// Its parameters in positional order.
    pub params: &'static [&'static str],
    /// The call's arguments, when it is called.
    pub args: Option<&'s Args>,
    /// The whole value.
    pub value: &'s Value,
}

/// Reads a statement whose value names a choice, bare (`sgd`) or called (`sgd(lr: 0.1)`).
pub fn callee<'s, T: Copy>(
    cx: &mut Cx,
    stmt: &'s Statement,
    code: Code,
    what: &str,
    table: &[Choice<T>],
) -> Option<Called<'s, T>> {
    let v = cx.single(stmt)?;
    callee_value(cx, v, code, what, table)
}

/// Reads a value that names a choice, bare (`cosine`) or called (`cosine(min_lr: 0)`).
pub fn callee_value<'s, T: Copy>(
    cx: &mut Cx,
    v: &'s Value,
    code: Code,
    what: &str,
    table: &[Choice<T>],
) -> Option<Called<'s, T>> {
    let (ident, args) = match &v.kind {
        ValueKind::Call(name, args) => (name.clone(), Some(args)),
        ValueKind::Path(p) => (
            Ident {
                name: p.clone(),
                span: v.span,
            },
            None,
        ),
        _ => {
            cx.wrong_type(
                v,
                Expected::Callee {
                    what: what.to_string(),
                    known: table.iter().map(|(k, ..)| k.to_string()).collect(),
                },
            );
            return None;
        }
    };
    match table.iter().find(|(k, ..)| *k == ident.name) {
        Some((word, tag, params)) => Some(Called {
            word,
            tag: *tag,
            params,
            args,
            value: v,
        }),
        None => {
            let known: Vec<&str> = table.iter().map(|(k, ..)| *k).collect();
            cx.unknown(code, what, &ident, &known);
            None
        }
    }
}

/// An optimizer's settings: its own, or a parameter group's.
#[derive(Clone)]
pub(super) struct Hyper {
    /// The algorithm with its settings.
    pub kind: OptimizerKind,
    /// Learning rate.
    pub lr: f64,
    /// L2 penalty.
    pub weight_decay: f64,
}

/// PyTorch's defaults for `opt` (SGD's learning rate is required, so it has none).
fn defaults(opt: Opt) -> Hyper {
    let adam = (0.9, 0.999);
    let (kind, lr, weight_decay) = match opt {
        Opt::Sgd => (
            OptimizerKind::Sgd {
                momentum: 0.0,
                dampening: 0.0,
                nesterov: false,
            },
            0.0,
            0.0,
        ),
        Opt::Adam | Opt::AdamW => {
            let (betas, eps, amsgrad) = (adam, 1e-8, false);
            if opt == Opt::Adam {
                (
                    OptimizerKind::Adam {
                        betas,
                        eps,
                        amsgrad,
                    },
                    1e-3,
                    0.0,
                )
            } else {
                (
                    OptimizerKind::AdamW {
                        betas,
                        eps,
                        amsgrad,
                    },
                    1e-3,
                    1e-2,
                )
            }
        }
        Opt::RmsProp => (
            OptimizerKind::RmsProp {
                alpha: 0.99,
                eps: 1e-8,
                momentum: 0.0,
                centered: false,
            },
            1e-2,
            0.0,
        ),
    };
    Hyper {
        kind,
        lr,
        weight_decay,
    }
}

/// Checks `optimizer NAME(args)`; `model` is what its parameter groups select from.
pub fn check_optimizer(
    cx: &mut Cx,
    stmt: &Statement,
    model: Option<&ModelOut>,
) -> Option<Optimizer> {
    let Called {
        word,
        tag: opt,
        params,
        args,
        value: v,
    } = callee(cx, stmt, Code::UnknownOptimizer, "optimizer", OPTIMIZERS)?;
    let b = cx.bind(word, args, v.span, params);
    let lr_span = b.get("lr").map_or(v.span, |v| v.span);
    if opt == Opt::Sgd && b.get("lr").is_none() {
        cx.missing(word, "lr", b.span);
    }
    let own = hyper(cx, &b, &defaults(opt));
    let groups = match (b.get("groups"), &own) {
        (None, _) => Some(vec![]),
        (Some(g), Some(own)) => {
            // A group takes the optimizer's parameters but `groups`.
            let settings: Vec<&'static str> =
                params.iter().copied().filter(|p| *p != "groups").collect();
            super::groups::check_groups(cx, g, &settings, model, |cx, b| hyper(cx, b, own))
        }
        (Some(_), None) => None,
    };
    let own = own?;
    if opt == Opt::Sgd && b.get("lr").is_none() {
        return None;
    }
    Some(Optimizer {
        kind: own.kind,
        lr: own.lr,
        weight_decay: own.weight_decay,
        span: stmt.span,
        lr_span,
        groups: groups?,
    })
}

/// Reads the settings bound in `b` (a call to `word`), each defaulting to `base`'s.
fn hyper(cx: &mut Cx, b: &Bound, base: &Hyper) -> Option<Hyper> {
    let num = |cx: &mut Cx, p: &str, d: f64, r: Range| {
        b.get(p)
            .map_or(Some(d), |v| cx.number_in(v, &format!("`{p}`"), r))
    };
    let flag = |cx: &mut Cx, p: &str, d: bool| b.get(p).map_or(Some(d), |v| cx.boolean(v));
    let lr = b.get("lr").map_or(Some(base.lr), |v| {
        cx.number_in(v, "the learning rate", Range::Positive)
    });
    let weight_decay = num(cx, "weight_decay", base.weight_decay, Range::NonNegative);
    let kind = match base.kind {
        OptimizerKind::Sgd {
            momentum,
            dampening,
            nesterov,
        } => {
            let momentum = num(cx, "momentum", momentum, Range::UnitOpen);
            let dampening = num(cx, "dampening", dampening, Range::Unit);
            let nesterov = flag(cx, "nesterov", nesterov);
            let (momentum, dampening, nesterov) = (momentum?, dampening?, nesterov?);
            if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                let at = b.get("nesterov").map_or(b.span, |v| v.span);
                cx.report(Problem::Inconsistent {
                    span: at,
                    situation: Inconsistent::Nesterov {
                        momentum,
                        dampening,
                    },
                });
                return None;
            }
            OptimizerKind::Sgd {
                momentum,
                dampening,
                nesterov,
            }
        }
        OptimizerKind::Adam {
            betas,
            eps,
            amsgrad,
        }
        | OptimizerKind::AdamW {
            betas,
            eps,
            amsgrad,
        } => {
            let betas = match b.get("betas") {
                None => Some(betas),
                Some(v) => match &v.kind {
                    ValueKind::List(items) if items.len() == 2 => {
                        let b1 = cx.number_in(&items[0], "beta1", Range::UnitOpen);
                        let b2 = cx.number_in(&items[1], "beta2", Range::UnitOpen);
                        Some((b1?, b2?))
                    }
                    _ => {
                        cx.wrong_type(v, Expected::Betas);
                        None
                    }
                },
            };
            let eps = num(cx, "eps", eps, Range::Positive);
            let amsgrad = flag(cx, "amsgrad", amsgrad);
            let (betas, eps, amsgrad) = (betas?, eps?, amsgrad?);
            if matches!(base.kind, OptimizerKind::Adam { .. }) {
                OptimizerKind::Adam {
                    betas,
                    eps,
                    amsgrad,
                }
            } else {
                OptimizerKind::AdamW {
                    betas,
                    eps,
                    amsgrad,
                }
            }
        }
        OptimizerKind::RmsProp {
            alpha,
            eps,
            momentum,
            centered,
        } => {
            let alpha = num(cx, "alpha", alpha, Range::Unit);
            let eps = num(cx, "eps", eps, Range::Positive);
            let momentum = num(cx, "momentum", momentum, Range::UnitOpen);
            let centered = flag(cx, "centered", centered);
            OptimizerKind::RmsProp {
                alpha: alpha?,
                eps: eps?,
                momentum: momentum?,
                centered: centered?,
            }
        }
    };
    Some(Hyper {
        kind,
        lr: lr?,
        weight_decay: weight_decay?,
    })
}

/// A duration (`5 steps`, `2 epochs`), a bare integer counting `default` units.
pub(super) fn duration_of(cx: &mut Cx, v: &Value, default: Unit) -> Option<Duration> {
    let (n, unit) = cx.duration(v, default)?;
    Some(if unit == Unit::Epochs {
        Duration::Epochs(n)
    } else {
        Duration::Steps(n)
    })
}

/// The train block, with the spans the batch arithmetic points at.
pub struct TrainIn {
    /// The typed settings (the micro-batch is filled in later).
    pub train: Train,
    /// Where `accumulate` is set.
    pub accumulate_span: Option<Span>,
    /// A declared micro-batch.
    pub micro_batch: Option<(u64, Span)>,
    /// The keyword span of each setting given, for checks that involve other blocks.
    pub given: HashMap<&'static str, Span>,
}

/// Checks `train { ... }`.
pub fn check_train(cx: &mut Cx, stmt: &Statement) -> Option<TrainIn> {
    cx.block_statement(stmt);
    let Some(body) = &stmt.body else {
        cx.report(Problem::WrongArguments {
            span: stmt.span,
            situation: Arguments::NoBlock {
                keyword: "train".into(),
                example: "train { epochs 10; loss cross_entropy }",
            },
        });
        return None;
    };
    let mut seen: HashMap<&str, &Statement> = HashMap::new();
    for s in &body.statements {
        let kw = s.keyword.name.as_str();
        if !TRAIN_KEYWORDS.contains(&kw) {
            cx.unknown_keyword("train setting", s, TRAIN_KEYWORDS);
        } else if let Some(first) = seen.get(kw) {
            duplicate(cx, kw, first, s);
        } else {
            seen.insert(kw, s);
        }
    }
    let get = |k: &str| seen.get(k).copied();
    let value = |cx: &mut Cx, k: &str| get(k).and_then(|s| cx.single(s));
    // A setting written `loss: cross_entropy` is already reported; it is not missing too.
    let labelled = |k: &str| {
        body.statements
            .iter()
            .any(|s| s.label.as_ref().is_some_and(|l| l.name == k))
    };

    let length = match (get("epochs"), get("steps")) {
        (Some(e), Some(s)) => {
            cx.report(Problem::Inconsistent {
                span: s.keyword.span,
                situation: Inconsistent::EpochsAndSteps {
                    epochs: e.keyword.span,
                },
            });
            None
        }
        (Some(s), None) => value(cx, "epochs").and_then(|v| {
            let n = count(cx, s, v, "the number of epochs")?;
            Some((Duration::Epochs(n), v.span))
        }),
        (None, Some(s)) => value(cx, "steps").and_then(|v| {
            let n = count(cx, s, v, "the number of steps")?;
            Some((Duration::Steps(n), v.span))
        }),
        (None, None) if labelled("epochs") || labelled("steps") => None,
        (None, None) => {
            cx.report(Problem::MissingSetting {
                span: stmt.keyword.span,
                block: "training",
                settings: &["epochs", "steps"],
                example: "epochs 10",
            });
            None
        }
    };
    let loss = match get("loss") {
        Some(s) => check_loss(cx, s).map(|l| (l, s.span)),
        None if labelled("loss") => None,
        None => {
            cx.report(Problem::MissingSetting {
                span: stmt.keyword.span,
                block: "training",
                settings: &["loss"],
                example: "loss cross_entropy",
            });
            None
        }
    };
    let metrics = match value(cx, "metrics") {
        None if get("metrics").is_some() => None,
        None => Some(vec![Metric::Loss]),
        Some(v) => check_metrics(cx, v),
    };
    let eval_every = value(cx, "eval_every").map_or(Some(Duration::Epochs(1)), |v| {
        duration_of(cx, v, Unit::Epochs)
    });
    let precision = match value(cx, "precision") {
        None if get("precision").is_some() => None,
        None => Some(Precision::Fp32),
        Some(v) => cx
            .choice(v, "precision", &["fp32", "bf16", "fp16"])
            .map(|p| match p {
                "bf16" => Precision::Bf16,
                "fp16" => Precision::Fp16,
                _ => Precision::Fp32,
            }),
    };
    let accumulate = value(cx, "accumulate").map_or(Some(1), |v| cx.uint_min(v, "`accumulate`", 1));
    let micro_batch = match value(cx, "micro_batch") {
        None => Some(None),
        Some(v) => cx
            .uint_min(v, "the micro-batch", 1)
            .map(|m| Some((m, v.span))),
    };
    let clip_norm = value(cx, "clip_norm").map_or(Some(None), |v| {
        cx.number_in(v, "`clip_norm`", Range::Positive).map(Some)
    });
    let clip_value = value(cx, "clip_value").map_or(Some(None), |v| {
        cx.number_in(v, "`clip_value`", Range::Positive).map(Some)
    });
    let early_stop = match get("early_stop") {
        None => Some(None),
        Some(s) => check_early_stop(cx, s).map(Some),
    };
    let checkpoint = match get("checkpoint") {
        None => Some(None),
        Some(s) => check_checkpoint(cx, s).map(Some),
    };
    let (loss, loss_span) = loss?;
    let (length, length_span) = length?;
    Some(TrainIn {
        train: Train {
            length,
            length_span,
            loss,
            loss_span,
            metrics: metrics?,
            eval_every: eval_every?,
            early_stop: early_stop?,
            precision: precision?,
            checkpoint: checkpoint?,
            accumulate: accumulate?,
            micro_batch: 0,
            clip_norm: clip_norm?,
            clip_value: clip_value?,
        },
        accumulate_span: get("accumulate").map(|s| s.values.first().map_or(s.span, |v| v.span)),
        micro_batch: micro_batch?,
        given: TRAIN_KEYWORDS
            .iter()
            .filter_map(|k| get(k).map(|s| (*k, s.keyword.span)))
            .collect(),
    })
}

fn check_metrics(cx: &mut Cx, v: &Value) -> Option<Vec<Metric>> {
    let items: Vec<&Value> = match &v.kind {
        ValueKind::List(items) => items.iter().collect(),
        _ => vec![v],
    };
    let mut out = Vec::new();
    let mut ok = true;
    for item in items {
        let (ident, args) = match &item.kind {
            ValueKind::Path(p) => (
                Ident {
                    name: p.clone(),
                    span: item.span,
                },
                None,
            ),
            ValueKind::Call(n, a) => (n.clone(), Some(a)),
            _ => {
                cx.wrong_type(item, Expected::Metric);
                ok = false;
                continue;
            }
        };
        match ident.name.as_str() {
            name @ ("accuracy" | "loss" | "mae" | "rmse" | "r2") => {
                cx.bind(name, args, ident.span, &[]);
                out.push(match name {
                    "loss" => Metric::Loss,
                    "mae" => Metric::Mae,
                    "rmse" => Metric::Rmse,
                    "r2" => Metric::R2,
                    _ => Metric::Accuracy,
                });
            }
            "top_k" => {
                let b = cx.bind("top_k", args, ident.span, &["k"]);
                match b.get("k") {
                    Some(k) => match cx.uint_min(k, "`k`", 1) {
                        Some(k) => out.push(Metric::TopK(k)),
                        None => ok = false,
                    },
                    None => {
                        cx.missing("top_k", "k", b.span);
                        ok = false;
                    }
                }
            }
            _ => {
                cx.unknown(Code::UnknownMetric, "metric", &ident, METRICS);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn check_early_stop(cx: &mut Cx, stmt: &Statement) -> Option<EarlyStop> {
    cx.plain_statement(stmt, true);
    let b = cx.bind(
        "early_stop",
        stmt.args.as_ref(),
        stmt.keyword.span,
        &["metric", "patience", "min_delta", "mode"],
    );
    let metric = b.get("metric").map_or(Some("val_loss"), |v| {
        cx.choice(
            v,
            "watched metric",
            &["val_loss", "val_accuracy", "train_loss"],
        )
    });
    let patience = b
        .get("patience")
        .map_or(Some(3), |v| cx.uint_min(v, "`patience`", 1));
    let min_delta = b.get("min_delta").map_or(Some(0.0), |v| {
        cx.number_in(v, "`min_delta`", Range::NonNegative)
    });
    let mode = b.get("mode").map_or(Some(None), |v| {
        cx.choice(v, "mode", &["min", "max"]).map(Some)
    });
    let metric = metric?;
    let maximize = match mode? {
        Some(m) => m == "max",
        None => metric.ends_with("accuracy"),
    };
    Some(EarlyStop {
        metric: metric.to_string(),
        patience: patience?,
        min_delta: min_delta?,
        maximize,
    })
}

fn check_checkpoint(cx: &mut Cx, stmt: &Statement) -> Option<Checkpoint> {
    cx.plain_statement(stmt, true);
    let b = cx.bind(
        "checkpoint",
        stmt.args.as_ref(),
        stmt.keyword.span,
        &["every", "keep"],
    );
    let every = b.get("every").map_or(Some(Duration::Epochs(1)), |v| {
        duration_of(cx, v, Unit::Epochs)
    });
    let keep = b
        .get("keep")
        .map_or(Some(3), |v| cx.uint_min(v, "`keep`", 1));
    Some(Checkpoint {
        every: every?,
        keep: keep?,
    })
}

/// The parallel strategy, with the spans other checks point at.
pub struct ParallelIn {
    /// The typed strategy (pipeline boundaries are filled in later).
    pub parallel: Parallel,
    /// The `parallel` statement.
    pub span: Span,
    /// What sets the data-parallel size.
    pub dp_span: Option<Span>,
    /// The pipeline's `micro_batches`.
    pub micro_batches_span: Option<Span>,
    /// The pipeline's `stages`.
    pub stages_span: Option<Span>,
    /// The ddp `backend`.
    pub backend_span: Option<Span>,
}

impl ParallelIn {
    /// A strategy without spans (the default).
    pub fn plain(parallel: Parallel) -> ParallelIn {
        ParallelIn {
            parallel,
            span: Span::default(),
            dp_span: None,
            micro_batches_span: None,
            stages_span: None,
            backend_span: None,
        }
    }
}

/// How long a distributed run waits for its other ranks unless `timeout` says otherwise.
pub const DDP_TIMEOUT_S: u64 = 60;

/// Reads a time as a whole number of seconds: `20s`, `2 min`, or a bare number of seconds.
fn seconds(cx: &mut Cx, value: &Value) -> Option<u64> {
    if let ValueKind::Number {
        value: x,
        integer: true,
        unit: None | Some(Unit::Seconds(_)),
    } = &value.kind
    {
        let scale = match &value.kind {
            ValueKind::Number {
                unit: Some(Unit::Seconds(m)),
                ..
            } => *m,
            _ => 1,
        };
        if *x >= 1.0 && *x * scale as f64 <= u32::MAX as f64 {
            return Some(*x as u64 * scale);
        }
    }
    cx.wrong_type(value, Expected::Seconds);
    None
}

/// Checks `parallel STRATEGY(args)`.
pub fn check_parallel(cx: &mut Cx, stmt: &Statement, default: Device) -> Option<ParallelIn> {
    let Called {
        word: kind,
        tag: strategy,
        params,
        args,
        value: v,
    } = callee(
        cx,
        stmt,
        Code::UnknownStrategy,
        "parallel strategy",
        STRATEGIES,
    )?;
    let b = cx.bind(kind, args, v.span, params);
    let mut out = ParallelIn::plain(Parallel::None);
    out.span = stmt.span;
    out.parallel = match strategy {
        Strategy::None => Parallel::None,
        Strategy::Model => Parallel::Model,
        Strategy::Data => {
            let devices = match (b.get("devices"), b.get("replicas")) {
                (Some(d), Some(r)) => {
                    cx.report(Problem::Inconsistent {
                        span: r.span,
                        situation: Inconsistent::DevicesAndReplicas { devices: d.span },
                    });
                    return None;
                }
                (Some(d), None) => {
                    out.dp_span = Some(d.span);
                    let ValueKind::List(items) = &d.kind else {
                        cx.wrong_type(d, Expected::DeviceList);
                        return None;
                    };
                    // A device listed twice holds two replicas (`[cuda:0, cuda:0]`).
                    let devices: Vec<Device> =
                        items.iter().map(|i| cx.device(i)).collect::<Option<_>>()?;
                    if devices.is_empty() {
                        cx.report(Problem::OutOfRange {
                            span: d.span,
                            situation: OutOfRange::NoDevices,
                        });
                        return None;
                    }
                    devices
                }
                (None, Some(r)) => {
                    out.dp_span = Some(r.span);
                    let n = cx.uint_min(r, "the number of replicas", 1)?;
                    if n > MAX_REPLICAS {
                        cx.report(Problem::OutOfRange {
                            span: r.span,
                            situation: OutOfRange::TooManyReplicas {
                                replicas: n,
                                max: MAX_REPLICAS,
                            },
                        });
                        return None;
                    }
                    // Every replica on the experiment's device.
                    vec![default; n as usize]
                }
                (None, None) => {
                    cx.missing("data", "devices", b.span);
                    return None;
                }
            };
            Parallel::Data {
                devices,
                span: out.dp_span.unwrap_or(stmt.span),
            }
        }
        Strategy::Pipeline => {
            let stages = b
                .get("stages")
                .map(|v| (cx.uint_min(v, "the number of stages", 1), v.span));
            let micro = b
                .get("micro_batches")
                .map(|v| (cx.uint_min(v, "the number of micro-batches", 1), v.span));
            let schedule = b.get("schedule").map_or(Some("gpipe"), |v| {
                cx.choice(v, "pipeline schedule", &["gpipe", "1f1b"])
            });
            let Some((stages, stages_span)) = stages else {
                cx.missing("pipeline", "stages", b.span);
                return None;
            };
            let stages = stages?;
            out.stages_span = Some(stages_span);
            if stages < 2 {
                cx.report(Problem::PipelineOneStage {
                    span: stages_span,
                    stages,
                });
                return None;
            }
            let (micro, micro_span) = micro.unwrap_or((Some(stages), b.span));
            out.micro_batches_span = Some(micro_span);
            Parallel::Pipeline {
                stages,
                micro_batches: micro?,
                schedule: if schedule? == "gpipe" {
                    PipelineSchedule::GPipe
                } else {
                    PipelineSchedule::OneFOneB
                },
                boundaries: vec![],
            }
        }
        Strategy::Ddp => {
            let backend = b
                .get("backend")
                .map_or(Some("gloo"), |v| cx.choice(v, "backend", &["gloo", "nccl"]));
            out.backend_span = b.get("backend").map(|v| v.span);
            let Some(ws) = b.get("world_size") else {
                cx.report(Problem::DdpWithoutWorldSize { span: b.span });
                return None;
            };
            out.dp_span = Some(ws.span);
            let world_size = cx.uint_min(ws, "the world size", 1);
            let timeout_s = b
                .get("timeout")
                .map_or(Some(DDP_TIMEOUT_S), |v| seconds(cx, v));
            Parallel::Distributed {
                backend: if backend? == "nccl" {
                    Backend::Nccl
                } else {
                    Backend::Gloo
                },
                world_size: world_size?,
                timeout_s: timeout_s?,
                span: stmt.span,
            }
        }
    };
    Some(out)
}
