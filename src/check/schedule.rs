//! Learning-rate schedules: `schedule NAME(args)`, with the arguments and defaults of
//! `torch.optim.lr_scheduler`'s classes, nested schedules in `sequence`, and the checks that
//! involve the data (a validation split to watch).

use super::cx::{Cx, Range};
use super::read::{callee_value, duration_of, Called};
use super::words::{Sched, SCHEDULES};
use crate::diagnostic::problem::{Sequence, Warnings};
use crate::diagnostic::{Code, Problem};
use crate::ir::{Data, Duration, OneCycle, Plateau, PlateauMetric, Schedule, Targets};
use crate::span::Span;
use crate::syntax::ast::{Statement, Unit, Value, ValueKind};

/// Checks `schedule NAME(args)`. `one_cycle` cycles the momentum of every optimizer, as
/// `OneCycleLR` does: SGD and RMSprop without momentum get one.
pub fn check_schedule(cx: &mut Cx, stmt: &Statement) -> Option<Schedule> {
    let v = cx.single(stmt)?;
    schedule(cx, v, false)
}

/// One schedule value, possibly inside a `sequence` (`nested`).
fn schedule(cx: &mut Cx, v: &Value, nested: bool) -> Option<Schedule> {
    let Called {
        word: kind,
        tag: sched,
        params,
        args,
        value: v,
    } = callee_value(cx, v, Code::UnknownSchedule, "schedule", SCHEDULES)?;
    let b = cx.bind(kind, args, v.span, params);
    let need = |cx: &mut Cx, p: &str| {
        let v = b.get(p);
        if v.is_none() {
            cx.missing(kind, p, b.span);
        }
        v
    };
    let num = |cx: &mut Cx, p: &str, d: f64, r: Range| {
        b.get(p)
            .map_or(Some(d), |v| cx.number_in(v, &format!("`{p}`"), r))
    };
    let start_factor = |cx: &mut Cx| {
        b.get("start_factor").map_or(Some(None), |v| {
            cx.number_in(v, "`start_factor`", Range::Unit).map(Some)
        })
    };
    Some(match sched {
        Sched::Constant => Schedule::Constant,
        Sched::Step => {
            let every = need(cx, "every").and_then(|v| duration_of(cx, v, Unit::Epochs));
            let gamma = num(cx, "gamma", 0.1, Range::UnitPositive);
            Schedule::Step {
                every: every?,
                gamma: gamma?,
            }
        }
        Sched::Exponential => Schedule::Exponential {
            gamma: need(cx, "gamma")
                .and_then(|v| cx.number_in(v, "`gamma`", Range::UnitPositive))?,
        },
        Sched::Cosine => {
            let warmup = b
                .get("warmup")
                .map_or(Some(None), |v| duration_of(cx, v, Unit::Steps).map(Some));
            let min_lr = num(cx, "min_lr", 0.0, Range::NonNegative);
            let start = start_factor(cx);
            Schedule::Cosine {
                warmup: warmup?,
                min_lr: min_lr?,
                start: start?,
            }
        }
        Sched::Warmup => {
            let length = need(cx, "length").and_then(|v| duration_of(cx, v, Unit::Steps));
            let start = start_factor(cx);
            Schedule::Warmup {
                length: length?,
                start: start?,
            }
        }
        Sched::OneCycle => {
            let max_lr =
                need(cx, "max_lr").and_then(|v| cx.number_in(v, "`max_lr`", Range::Positive));
            let pct = num(cx, "pct_start", 0.3, Range::UnitOpen);
            let div = num(cx, "div_factor", 25.0, Range::Positive);
            let final_div = num(cx, "final_div_factor", 1e4, Range::Positive);
            let flag = |cx: &mut Cx, p: &str, d: bool| b.get(p).map_or(Some(d), |v| cx.boolean(v));
            let three = flag(cx, "three_phase", false);
            let cosine = b.get("anneal").map_or(Some(true), |v| {
                cx.choice(v, "annealing strategy", &["cos", "linear"])
                    .map(|a| a == "cos")
            });
            let cycle = flag(cx, "cycle_momentum", true);
            let base = num(cx, "base_momentum", 0.85, Range::UnitOpen);
            let max = num(cx, "max_momentum", 0.95, Range::UnitOpen);
            let cycle = cycle?;
            Schedule::OneCycle(OneCycle {
                max_lr: max_lr?,
                pct_start: pct?,
                div_factor: div?,
                final_div_factor: final_div?,
                three_phase: three?,
                cosine: cosine?,
                momentum: cycle.then_some((base?, max?)),
            })
        }
        Sched::Linear => {
            let start = num(cx, "start_factor", 1.0, Range::UnitPositive);
            let end = num(cx, "end_factor", 0.0, Range::Unit);
            let length = b
                .get("length")
                .map_or(Some(None), |v| duration_of(cx, v, Unit::Steps).map(Some));
            Schedule::Linear {
                start: start?,
                end: end?,
                length: length?,
            }
        }
        Sched::ReduceOnPlateau => {
            if nested {
                cx.report(Problem::Warnings(Warnings::BadSequence {
                    span: v.span,
                    situation: Sequence::Plateau,
                }));
                return None;
            }
            plateau(cx, &b)?
        }
        Sched::Sequence => sequence(cx, &b)?,
    })
}

/// `reduce_on_plateau(...)`, with `ReduceLROnPlateau`'s defaults; the mode follows the metric
/// unless given (a loss is minimized, an accuracy maximized).
fn plateau(cx: &mut Cx, b: &super::cx::Bound) -> Option<Schedule> {
    let num = |cx: &mut Cx, p: &str, d: f64, r: Range| {
        b.get(p)
            .map_or(Some(d), |v| cx.number_in(v, &format!("`{p}`"), r))
    };
    let count = |cx: &mut Cx, p: &str, d: u64| {
        b.get(p)
            .map_or(Some(d), |v| cx.uint_min(v, &format!("`{p}`"), 0))
    };
    let metric = b.get("monitor").map_or(Some(PlateauMetric::ValLoss), |v| {
        cx.choice(v, "plateau metric", &["val_loss", "val_accuracy"])
            .map(|m| {
                if m == "val_loss" {
                    PlateauMetric::ValLoss
                } else {
                    PlateauMetric::ValAccuracy
                }
            })
    });
    let mode = b.get("mode").map_or(Some(None), |v| {
        cx.choice(v, "plateau mode", &["min", "max"]).map(Some)
    });
    let factor = b.get("factor").map_or(Some(0.1), |v| {
        let f = cx.number_in(v, "`factor`", Range::UnitOpen)?;
        if f == 0.0 {
            cx.number_in(v, "`factor`", Range::Positive)
        } else {
            Some(f)
        }
    });
    let patience = count(cx, "patience", 10);
    let threshold = num(cx, "threshold", 1e-4, Range::NonNegative);
    let relative = b.get("threshold_mode").map_or(Some(true), |v| {
        cx.choice(v, "threshold mode", &["rel", "abs"])
            .map(|m| m == "rel")
    });
    let cooldown = count(cx, "cooldown", 0);
    let min_lr = num(cx, "min_lr", 0.0, Range::NonNegative);
    let metric = metric?;
    Some(Schedule::ReduceOnPlateau(Plateau {
        metric,
        maximize: mode?.map_or(metric == PlateauMetric::ValAccuracy, |m| m == "max"),
        factor: factor?,
        patience: patience?,
        threshold: threshold?,
        relative: relative?,
        cooldown: cooldown?,
        min_lr: min_lr?,
    }))
}

/// `sequence([schedules...], milestones: [...])`: one milestone between each two schedules,
/// increasing.
fn sequence(cx: &mut Cx, b: &super::cx::Bound) -> Option<Schedule> {
    let list = |cx: &mut Cx, p: &str| -> Option<Option<&Vec<Value>>> {
        let Some(v) = b.get(p) else {
            cx.missing("sequence", p, b.span);
            return None;
        };
        match &v.kind {
            ValueKind::List(items) => Some(Some(items)),
            _ => {
                cx.report(Problem::Warnings(Warnings::BadSequence {
                    span: v.span,
                    situation: Sequence::NotAList {
                        what: if p == "schedules" {
                            "schedules"
                        } else {
                            "milestones"
                        },
                    },
                }));
                None
            }
        }
    };
    let items = list(cx, "schedules")?;
    let marks = list(cx, "milestones")?;
    let (items, marks) = (items?, marks?);
    let mut schedules = Vec::new();
    let mut ok = true;
    for item in items {
        match schedule(cx, item, true) {
            Some(s) => schedules.push(s),
            None => ok = false,
        }
    }
    let mut milestones = Vec::new();
    for m in marks {
        match duration_of(cx, m, Unit::Steps) {
            Some(d) => milestones.push((d, m.span)),
            None => ok = false,
        }
    }
    if !ok {
        return None;
    }
    let list_span = |p: &str| b.get(p).map_or(b.span, |v| v.span);
    if items.is_empty() || milestones.len() + 1 != items.len() {
        cx.report(Problem::Warnings(Warnings::BadSequence {
            span: list_span("milestones"),
            situation: Sequence::Count {
                schedules: items.len(),
                milestones: milestones.len(),
                list: list_span("schedules"),
            },
        }));
        return None;
    }
    for pair in milestones.windows(2) {
        let increasing = match (pair[0].0, pair[1].0) {
            (Duration::Steps(a), Duration::Steps(b))
            | (Duration::Epochs(a), Duration::Epochs(b)) => a < b,
            _ => true,
        };
        if !increasing {
            cx.report(Problem::Warnings(Warnings::BadSequence {
                span: pair[1].1,
                situation: Sequence::NotIncreasing {
                    previous: pair[0].1,
                },
            }));
            return None;
        }
    }
    Some(Schedule::Sequence {
        schedules,
        milestones: milestones.into_iter().map(|(d, _)| d).collect(),
    })
}

/// K0415: `reduce_on_plateau` needs validation evaluations to watch (a validation split) and,
/// for `val_accuracy`, class targets. `stmt` is the `schedule` statement.
pub fn check_plateau(
    cx: &mut Cx,
    schedule: &Schedule,
    data: &Data,
    stmt: Option<&Statement>,
) -> bool {
    let Schedule::ReduceOnPlateau(p) = schedule else {
        return true;
    };
    let span = stmt.map_or(data.source_span, |s| s.span);
    let no_accuracy =
        p.metric == PlateauMetric::ValAccuracy && matches!(data.targets, Targets::Values(_));
    if data.split.val == 0.0 || no_accuracy {
        cx.report(Problem::Warnings(Warnings::PlateauWithoutValidation {
            span,
            source: data.source_span,
            accuracy: no_accuracy,
        }));
        return false;
    }
    true
}

/// Where the `index`-th milestone of the `schedule` statement's value is written.
pub(super) fn milestone_span(value: &Value, index: usize) -> Option<Span> {
    let ValueKind::Call(_, args) = &value.kind else {
        return None;
    };
    let list = args
        .items
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == "milestones"))
        .or_else(|| args.items.get(1))?;
    match &list.value.kind {
        ValueKind::List(items) => items.get(index).map(|v| v.span),
        _ => None,
    }
}
