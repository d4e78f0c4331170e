//! The `train` block: the training's length, loss, metrics, evaluation, precision,
//! checkpoints, gradient accumulation and clipping.

use std::collections::HashMap;

use super::cx::{Cx, Range};
use super::loss::check_loss;
use super::read::{block, duration_of};
use super::words::TRAIN;
use crate::diagnostic::problem::{Expected, Inconsistent, Names, Strategies};
use crate::diagnostic::{Code, Problem};
use crate::ir::{Checkpoint, Duration, EarlyStop, Metric, Precision, Train};
use crate::span::Span;
use crate::syntax::ast::{Ident, Statement, Unit, Value, ValueKind};

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
            cx.report(Problem::Names(Names::WrongType {
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
            }));
            return None;
        }
    }
    cx.uint_min(v, what, 1)
}

/// Metrics.
const METRICS: &[&str] = &["accuracy", "top_k", "loss", "mae", "rmse", "r2"];

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
    let (statements, seen) = block(
        cx,
        stmt,
        "train setting",
        TRAIN,
        &[],
        "train { epochs 10; loss cross_entropy }",
    )?;
    let get = |k: &str| seen.get(k).copied();
    let value = |cx: &mut Cx, k: &str| get(k).and_then(|s| cx.single(s));
    // A setting written `loss: cross_entropy` is already reported; it is not missing too.
    let labelled = |k: &str| {
        statements
            .iter()
            .any(|s| s.label.as_ref().is_some_and(|l| l.name == k))
    };

    let length = match (get("epochs"), get("steps")) {
        (Some(e), Some(s)) => {
            cx.report(Problem::Strategies(Strategies::Inconsistent {
                span: s.keyword.span,
                situation: Inconsistent::EpochsAndSteps {
                    epochs: e.keyword.span,
                },
            }));
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
            cx.report(Problem::Names(Names::MissingSetting {
                span: stmt.keyword.span,
                block: "training",
                settings: &["epochs", "steps"],
                example: "epochs 10",
            }));
            None
        }
    };
    let loss = match get("loss") {
        Some(s) => check_loss(cx, s).map(|l| (l, s.span)),
        None if labelled("loss") => None,
        None => {
            cx.report(Problem::Names(Names::MissingSetting {
                span: stmt.keyword.span,
                block: "training",
                settings: &["loss"],
                example: "loss cross_entropy",
            }));
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
        given: TRAIN
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
