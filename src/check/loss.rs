//! The `loss` setting: the losses, their options (class weights, `ignore_index`, label
//! smoothing, `pos_weight`, Huber's `delta`, smooth L1's `beta`), and the options' sizes
//! against the model's output.

use super::cx::{Cx, Range};
use super::settings::{callee, Called, Choice};
use crate::diagnostic::problem::LossShape;
use crate::diagnostic::Code;
use crate::ir::{Loss, Shape};
use crate::syntax::ast::{Statement, Value, ValueKind};

/// The losses.
#[derive(Clone, Copy)]
pub(super) enum LossName {
    CrossEntropy,
    Mse,
    L1,
    Huber,
    SmoothL1,
    BceWithLogits,
    Nll,
}

/// Losses and their parameters in positional order.
pub(super) const LOSSES: &[Choice<LossName>] = &[
    (
        "cross_entropy",
        LossName::CrossEntropy,
        &["label_smoothing", "weight", "ignore_index"],
    ),
    ("mse", LossName::Mse, &[]),
    ("l1", LossName::L1, &[]),
    ("huber", LossName::Huber, &["delta"]),
    ("smooth_l1", LossName::SmoothL1, &["beta"]),
    ("bce_with_logits", LossName::BceWithLogits, &["pos_weight"]),
    ("nll", LossName::Nll, &["weight", "ignore_index"]),
];

/// PyTorch's default `ignore_index`.
const IGNORE_INDEX: i64 = -100;

/// Checks `loss NAME(args)`.
pub(super) fn check_loss(cx: &mut Cx, stmt: &Statement) -> Option<Loss> {
    let Called {
        word: kind,
        tag: loss,
        params,
        args,
        value: v,
    } = callee(cx, stmt, Code::UnknownLoss, "loss", LOSSES)?;
    let b = cx.bind(kind, args, v.span, params);
    let weights = |cx: &mut Cx, p: &str| {
        b.get(p)
            .map_or(Some(None), |v| non_negative_list(cx, v, p).map(Some))
    };
    let ignore = |cx: &mut Cx| {
        b.get("ignore_index")
            .map_or(Some(IGNORE_INDEX), |v| cx.int(v))
    };
    Some(match loss {
        LossName::CrossEntropy => {
            let label_smoothing = b.get("label_smoothing").map_or(Some(0.0), |v| {
                cx.number_in(v, "label smoothing", Range::UnitOpen)
            });
            let weight = weights(cx, "weight");
            let ignore_index = ignore(cx);
            Loss::CrossEntropy {
                label_smoothing: label_smoothing?,
                weight: weight?,
                ignore_index: ignore_index?,
            }
        }
        LossName::Nll => {
            let weight = weights(cx, "weight");
            let ignore_index = ignore(cx);
            Loss::Nll {
                weight: weight?,
                ignore_index: ignore_index?,
            }
        }
        LossName::BceWithLogits => Loss::BceWithLogits {
            pos_weight: weights(cx, "pos_weight")?,
        },
        LossName::Mse => Loss::Mse,
        LossName::L1 => Loss::L1,
        // `F.huber_loss` refuses a `delta` of 0 or less; `F.smooth_l1_loss` takes a `beta` of
        // 0, where it is `l1`.
        LossName::Huber => Loss::Huber {
            delta: b
                .get("delta")
                .map_or(Some(1.0), |v| cx.number_in(v, "`delta`", Range::Positive))?,
        },
        LossName::SmoothL1 => Loss::SmoothL1 {
            beta: b
                .get("beta")
                .map_or(Some(1.0), |v| cx.number_in(v, "`beta`", Range::NonNegative))?,
        },
    })
}

/// A number or a non-empty list of numbers, each at least 0.
fn non_negative_list(cx: &mut Cx, v: &Value, p: &str) -> Option<Vec<f64>> {
    let what = format!("`{p}`");
    match &v.kind {
        ValueKind::List(items) if !items.is_empty() => {
            let read: Vec<Option<f64>> = items
                .iter()
                .map(|i| cx.number_in(i, &what, Range::NonNegative))
                .collect();
            read.into_iter().collect()
        }
        _ => cx.number_in(v, &what, Range::NonNegative).map(|x| vec![x]),
    }
}

/// The sizes of the loss's options against the model's per-sample output `out`: a class
/// weight per class score, and one `pos_weight` or one per score of the output's last
/// dimension. `Some(situation)` when they disagree.
pub(super) fn option_sizes(loss: &Loss, out: &Shape) -> Option<LossShape> {
    match loss {
        Loss::CrossEntropy {
            weight: Some(w), ..
        }
        | Loss::Nll {
            weight: Some(w), ..
        } => {
            let classes = out.last().copied().unwrap_or(1);
            (w.len() as i64 != classes).then_some(LossShape::WeightCount {
                option: "weight",
                given: w.len(),
                wants: classes,
            })
        }
        Loss::BceWithLogits {
            pos_weight: Some(w),
        } => {
            let scores = out.last().copied().unwrap_or(1);
            (w.len() != 1 && w.len() as i64 != scores).then_some(LossShape::WeightCount {
                option: "pos_weight",
                given: w.len(),
                wants: scores,
            })
        }
        _ => None,
    }
}
