//! Pruning schedules: `before`, `after(finetune: D)`, `gradual(start, end, every, initial)` and
//! `iterative(rounds, rewind)`.

use super::super::cx::{strings, Cx, Range};
use crate::diagnostic::problem::{Expected, Names, OutOfRange, Unknown};
use crate::diagnostic::Problem;
use crate::ir::{Duration, PruneSchedule};
use crate::syntax::ast::{Args, Ident, Unit, Value, ValueKind};

/// The schedule words.
const SCHEDULES: &[&str] = &["before", "after", "gradual", "iterative"];

/// The schedule when none is given: once after training, without fine-tuning.
pub(super) const DEFAULT: PruneSchedule = PruneSchedule::After {
    finetune: Duration::Steps(0),
};

/// What a schedule is checked against: the final amount and, when it is known, the most steps
/// the training can last.
pub(super) struct Bounds {
    /// The pruning amount, when it was read.
    pub amount: Option<f64>,
    /// An upper bound of the training's optimizer steps.
    pub max_steps: Option<u64>,
}

/// Reads a schedule value.
pub(super) fn prune_schedule(cx: &mut Cx, v: &Value, bounds: &Bounds) -> Option<PruneSchedule> {
    let (name, args) = match &v.kind {
        ValueKind::Path(p) => (
            Ident {
                name: p.clone(),
                span: v.span,
            },
            None,
        ),
        ValueKind::Call(name, args) => (name.clone(), Some(args)),
        _ => {
            cx.wrong_type(
                v,
                Expected::Callee {
                    what: "a pruning schedule".into(),
                    known: strings(SCHEDULES),
                },
            );
            return None;
        }
    };
    match name.name.as_str() {
        "before" => {
            cx.bind("before", args, name.span, &[]);
            Some(PruneSchedule::Before)
        }
        "after" => after(cx, args, &name),
        "gradual" => gradual(cx, args, &name, bounds),
        "iterative" => iterative(cx, args, &name, bounds),
        _ => {
            cx.report(Problem::Names(Names::UnknownChoice {
                unknown: Unknown {
                    span: name.span,
                    name: name.name.clone(),
                    candidates: strings(SCHEDULES),
                },
                what: "pruning schedule".into(),
            }));
            None
        }
    }
}

/// Reads a count of steps, or of epochs where `epochs` allows them: a whole number of 0 or
/// more; a bare number counts steps.
fn count(cx: &mut Cx, v: &Value, epochs: bool) -> Option<Duration> {
    match &v.kind {
        ValueKind::Number {
            value: x,
            integer: true,
            unit: None | Some(Unit::Steps),
        } if *x >= 0.0 && *x <= 9.0e15 => Some(Duration::Steps(*x as u64)),
        ValueKind::Number {
            value: x,
            integer: true,
            unit: Some(Unit::Epochs),
        } if epochs && *x >= 0.0 && *x <= 9.0e15 => Some(Duration::Epochs(*x as u64)),
        ValueKind::Number {
            unit: Some(Unit::Epochs),
            ..
        } if !epochs => {
            cx.report(Problem::Names(Names::WrongType {
                span: v.span,
                expected: Expected::Steps,
                found: "epochs",
            }));
            None
        }
        ValueKind::Number { .. } => {
            cx.report(Problem::Names(Names::WrongType {
                span: v.span,
                expected: Expected::WholeDuration,
                found: v.type_name(),
            }));
            None
        }
        _ => {
            cx.wrong_type(v, Expected::Duration);
            None
        }
    }
}

/// Reads a count of steps.
fn steps(cx: &mut Cx, v: &Value) -> Option<u64> {
    match count(cx, v, false)? {
        Duration::Steps(n) | Duration::Epochs(n) => Some(n),
    }
}

fn after(cx: &mut Cx, args: Option<&Args>, name: &Ident) -> Option<PruneSchedule> {
    let b = cx.bind("after", args, name.span, &["finetune"]);
    let finetune = match b.get("finetune") {
        None => Duration::Steps(0),
        Some(v) => count(cx, v, true)?,
    };
    Some(PruneSchedule::After { finetune })
}

fn gradual(
    cx: &mut Cx,
    args: Option<&Args>,
    name: &Ident,
    bounds: &Bounds,
) -> Option<PruneSchedule> {
    let b = cx.bind(
        "gradual",
        args,
        name.span,
        &["start", "end", "every", "initial"],
    );
    let required = |cx: &mut Cx, p: &str| -> Option<u64> {
        let Some(v) = b.get(p) else {
            cx.missing("gradual", p, b.span);
            return None;
        };
        steps(cx, v)
    };
    let (start, end) = (required(cx, "start"), required(cx, "end"));
    let every = match b.get("every") {
        None => {
            cx.missing("gradual", "every", b.span);
            None
        }
        Some(v) => match steps(cx, v)? {
            0 => {
                cx.report(Problem::Names(Names::OutOfRange {
                    span: v.span,
                    situation: OutOfRange::Below {
                        what: "the pruning interval `every`".into(),
                        min: 1,
                        value: 0,
                    },
                }));
                None
            }
            n => Some(n),
        },
    };
    let initial = match b.get("initial") {
        None => Some(0.0),
        Some(v) => {
            let x = cx.number_in(v, "the initial sparsity", Range::UnitOpen)?;
            match bounds.amount {
                Some(amount) if x >= amount => {
                    cx.report(Problem::Names(Names::OutOfRange {
                        span: v.span,
                        situation: OutOfRange::GradualInitial { initial: x, amount },
                    }));
                    None
                }
                _ => Some(x),
            }
        }
    };
    let (start, end) = (start?, end?);
    if end <= start {
        let at = b.get("end").map_or(b.span, |v| v.span);
        cx.report(Problem::Names(Names::OutOfRange {
            span: at,
            situation: OutOfRange::GradualOrder { start, end },
        }));
        return None;
    }
    let (every, initial) = (every?, initial?);
    Some(PruneSchedule::Gradual {
        start,
        end,
        every,
        initial,
    })
}

fn iterative(
    cx: &mut Cx,
    args: Option<&Args>,
    name: &Ident,
    bounds: &Bounds,
) -> Option<PruneSchedule> {
    let b = cx.bind("iterative", args, name.span, &["rounds", "rewind"]);
    let rounds = match b.get("rounds") {
        None => {
            cx.missing("iterative", "rounds", b.span);
            None
        }
        Some(v) => cx.uint_min(v, "the number of rounds", 1),
    };
    let rewind = match b.get("rewind") {
        None => {
            cx.missing("iterative", "rewind", b.span);
            None
        }
        Some(v) => {
            let rewind = steps(cx, v)?;
            match bounds.max_steps {
                Some(length) if rewind >= length => {
                    cx.report(Problem::Names(Names::OutOfRange {
                        span: v.span,
                        situation: OutOfRange::RewindTooLate { rewind, length },
                    }));
                    None
                }
                _ => Some(rewind),
            }
        }
    };
    Some(PruneSchedule::Iterative {
        rounds: rounds?,
        rewind: rewind?,
    })
}
