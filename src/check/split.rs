//! The `split` statement: each split a fraction of `source` (`split(train: 0.8, val: 0.2)`) or
//! a source of its own (`split(train: 0.9, val: 0.1, test: idx(...))`, or every split its own
//! file with no `source` at all).

use super::cx::{Cx, Range};
use super::source::{source_value, SourceOut};
use crate::diagnostic::problem::{
    Arguments, Expected, Form, Inconsistent, Names, OutOfRange, Strategies,
};
use crate::diagnostic::Problem;
use crate::ir::{HeldOut, Source, Split, Targets};
use crate::syntax::ast::{Statement, Value, ValueKind};

/// The checked `split` statement.
pub(super) struct SplitOut {
    /// The fractions of `source` (all of it to training when training has its own source).
    pub split: Split,
    /// The training split's own source, when it has one.
    pub train: Option<SourceOut>,
    /// The validation split's own source, when it has one.
    pub val: Option<SourceOut>,
    /// The test split's own source, when it has one.
    pub test: Option<SourceOut>,
}

impl Default for SplitOut {
    /// Every sample of `source` to training.
    fn default() -> SplitOut {
        SplitOut {
            split: Split {
                train: 1.0,
                val: 0.0,
                test: 0.0,
            },
            train: None,
            val: None,
            test: None,
        }
    }
}

/// One split as written: a fraction or a source.
enum Part {
    Fraction(f64),
    Own(Box<SourceOut>),
}

/// A split's value: a number is a fraction of `source`, a call its own source.
fn part(cx: &mut Cx, v: &Value, name: &str) -> Option<Part> {
    match &v.kind {
        ValueKind::Call(callee, args) => {
            let own = source_value(cx, v)?;
            if let (Source::Images { augment, .. }, "val" | "test") = (&own.source, name) {
                if augment.any() {
                    // At the first augmentation written.
                    let params = super::words::SOURCES
                        .iter()
                        .find(|(k, _)| *k == "images")
                        .map_or(&[][..], |(_, p)| p);
                    let b = Cx::default().bind("images", Some(args), callee.span, params);
                    let at = ["crop", "flip"]
                        .iter()
                        .find_map(|p| b.get(p).map(|x| x.span))
                        .unwrap_or(v.span);
                    let split = if name == "val" { "val" } else { "test" };
                    // Reported; the source is still checked against the others.
                    cx.report(Problem::Names(Names::OutOfRange {
                        span: at,
                        situation: OutOfRange::HeldOutAugment { split },
                    }));
                }
            }
            Some(Part::Own(Box::new(own)))
        }
        ValueKind::Number { .. } => cx
            .number_in(v, &format!("the `{name}` fraction"), Range::Unit)
            .map(Part::Fraction),
        _ => {
            cx.wrong_type(v, Expected::SplitPart);
            None
        }
    }
}

/// A split's fraction of `source`; a split with its own source keeps it in `own` and takes
/// none of `source`.
fn take(part: Part, own: &mut Option<SourceOut>) -> f64 {
    match part {
        Part::Own(s) => {
            *own = Some(*s);
            0.0
        }
        Part::Fraction(f) => f,
    }
}

/// Checks `split(train: ..., val: ..., test: ...)`.
pub(super) fn check_split(cx: &mut Cx, stmt: &Statement) -> Option<SplitOut> {
    cx.plain_statement(stmt, true);
    let b = cx.bind(
        "split",
        stmt.args.as_ref(),
        stmt.keyword.span,
        &["train", "val", "test"],
    );
    if stmt.args.is_none() || !stmt.values.is_empty() {
        cx.report(Problem::Names(Names::WrongArguments {
            span: stmt.span,
            situation: Arguments::Form(Form::Split),
        }));
        return None;
    }
    let read = |cx: &mut Cx, p: &str| {
        b.get(p)
            .map_or(Some(Part::Fraction(0.0)), |v| part(cx, v, p))
    };
    let (train, val, test) = (read(cx, "train"), read(cx, "val"), read(cx, "test"));
    let (train, val, test) = (train?, val?, test?);
    let mut out = SplitOut::default();
    if let Part::Own(own) = train {
        // Training has its own file: every other split needs one too.
        for (name, p) in [("val", &val), ("test", &test)] {
            if let (Part::Fraction(_), Some(v)) = (p, b.get(name)) {
                cx.report(Problem::Strategies(Strategies::Inconsistent {
                    span: v.span,
                    situation: Inconsistent::FractionWithoutSource {
                        split: name,
                        train: own.span,
                    },
                }));
                return None;
            }
        }
        out.train = Some(*own);
        take(val, &mut out.val);
        take(test, &mut out.test);
        return Some(out);
    }
    let Part::Fraction(train) = train else {
        return None;
    };
    let val = take(val, &mut out.val);
    let test = take(test, &mut out.test);
    let split = Split { train, val, test };
    let sum = split.train + split.val + split.test;
    if sum > 1.0 + 1e-9 {
        cx.report(Problem::Names(Names::OutOfRange {
            span: b.span,
            situation: OutOfRange::SplitSum { sum },
        }));
        return None;
    }
    if split.train == 0.0 {
        let at = b.get("train").map_or(b.span, |v| v.span);
        cx.report(Problem::Names(Names::OutOfRange {
            span: at,
            situation: OutOfRange::EmptyTrainSplit,
        }));
        return None;
    }
    out.split = split;
    Some(out)
}

/// A split's own source as the experiment keeps it, refused when it declares other classes or
/// another sample shape than the training source.
pub(super) fn held_out(
    cx: &mut Cx,
    own: &Option<SourceOut>,
    name: &'static str,
    train: &SourceOut,
) -> Option<Option<HeldOut>> {
    let Some(own) = own else {
        return Some(None);
    };
    let known = |t: &Targets| {
        !matches!(
            t,
            Targets::Unknown | Targets::Classes(None) | Targets::Tokens { classes: None, .. }
        )
    };
    // Per-token targets of a file take the model's input shape later: their classes tell.
    let same = match (&own.targets, &train.targets) {
        (Targets::Tokens { classes: a, .. }, Targets::Tokens { classes: b, .. }) => a == b,
        (a, b) => a == b,
    };
    let differs = if known(&own.targets) && known(&train.targets) && !same {
        Some("classes")
    } else {
        match (&own.sample, &train.sample) {
            (Some((a, _)), Some((b, _))) if a != b => Some("shape"),
            _ => None,
        }
    };
    if let Some(what) = differs {
        cx.report(Problem::Strategies(Strategies::Inconsistent {
            span: own.span,
            situation: Inconsistent::SplitSourcesDiffer {
                split: name,
                what,
                train: train.span,
            },
        }));
        return None;
    }
    Some(Some(HeldOut {
        source: own.source.clone(),
        span: own.span,
        scale: own.scale,
        layout: own.layout.clone(),
    }))
}
