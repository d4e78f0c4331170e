//! The `loss` setting: the losses, their options (class weights, `ignore_index`, label
//! smoothing, `pos_weight`, Huber's `delta`, smooth L1's `beta`), and the options' sizes
//! against the model's output.

use super::cx::{Cx, Range};
use super::model::ModelOut;
use super::read::{callee, Called};
use super::words::{LossName, LOSSES};
use crate::diagnostic::problem::{LossShape, Shapes, Warnings};
use crate::diagnostic::{Code, Problem};
use crate::ir::{Loss, Shape, Targets};
use crate::span::Span;
use crate::syntax::ast::{Statement, Value, ValueKind};

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
fn option_sizes(loss: &Loss, out: &Shape) -> Option<LossShape> {
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

/// The loss against the model's output and the targets, as PyTorch would meet them but never
/// broadcasting: class scores against class indices (one per sample, or one per token), and for
/// real-valued targets an output of exactly the targets' shape, a one-unit output meeting one
/// target per sample (`[1]` against `[]`, squeezed as the runtime squeezes it). `file_targets`
/// is the per-sample shape of the training files' targets, read from their headers, which
/// stands for targets the source does not declare.
pub(super) fn against_targets(
    cx: &mut Cx,
    loss: &Loss,
    loss_span: Span,
    model: &ModelOut,
    targets: &Targets,
    file_targets: Option<&Shape>,
    data_span: Span,
) -> bool {
    let Some(out) = &model.output else {
        return true;
    };
    let name = loss.name();
    let err = |cx: &mut Cx, situation: LossShape| {
        cx.report(Problem::Shapes(Shapes::LossShape {
            span: loss_span,
            loss: name.to_string(),
            output: (out.clone(), model.output_span),
            data: data_span,
            situation,
        }));
        false
    };
    if let Some(situation) = option_sizes(loss, out) {
        return err(cx, situation);
    }
    let class_loss = matches!(loss, Loss::CrossEntropy { .. } | Loss::Nll { .. });
    let read;
    let targets = match (targets, file_targets) {
        // Class indices one per sample; other shapes were reported against the file.
        (Targets::Unknown, Some(shape)) if class_loss => {
            if shape.numel() != 1 {
                return true;
            }
            &Targets::Classes(None)
        }
        (Targets::Unknown, Some(shape)) => {
            read = Targets::Values(shape.clone());
            &read
        }
        _ => targets,
    };
    match loss {
        Loss::CrossEntropy { .. } | Loss::Nll { .. } => {
            if let Some(at) = model
                .ends_in_softmax
                .filter(|_| matches!(loss, Loss::CrossEntropy { .. }))
            {
                cx.report(Problem::Warnings(Warnings::DoubleSoftmax {
                    span: at,
                    loss: loss_span,
                }));
            }
            // The class scores are the output's last dimension; the dimensions before it
            // are the targets' own: none for a class per sample, `[S]` for one per token.
            let (classes, tokens) = match targets {
                Targets::Classes(c) => (*c, None),
                Targets::Tokens { classes, shape } => (*classes, Some(shape)),
                Targets::Values(shape) => {
                    return err(
                        cx,
                        LossShape::ClassesOnValues {
                            targets: shape.clone(),
                        },
                    );
                }
                Targets::Unknown => (None, None),
            };
            if let Some(tokens) = tokens {
                if out.len() != tokens.len() + 1 || out[..tokens.len()] != tokens[..] {
                    return err(
                        cx,
                        LossShape::TokenScores {
                            tokens: tokens.clone(),
                        },
                    );
                }
            } else if out.is_empty() {
                return err(cx, LossShape::ScalarOutput);
            } else if out.len() > 1 {
                return err(cx, LossShape::NotFlat);
            }
            let scores = out.last().copied().unwrap_or(0);
            if scores == 1 {
                return err(cx, LossShape::OneClass);
            }
            if let Some(c) = classes {
                if scores != c as i64 {
                    return err(
                        cx,
                        LossShape::ClassCount {
                            classes: c,
                            per_token: tokens.is_some(),
                        },
                    );
                }
            }
            true
        }
        Loss::Mse
        | Loss::L1
        | Loss::Huber { .. }
        | Loss::SmoothL1 { .. }
        | Loss::BceWithLogits { .. } => {
            let want: Vec<i64> = match targets {
                Targets::Values(shape) => shape.to_vec(),
                Targets::Classes(Some(classes))
                    if *classes > 2 && matches!(loss, Loss::BceWithLogits { .. }) =>
                {
                    return err(cx, LossShape::BinaryOnClasses { classes: *classes });
                }
                Targets::Classes(_) if matches!(loss, Loss::BceWithLogits { .. }) => vec![],
                Targets::Tokens {
                    classes: Some(classes),
                    ..
                } if *classes > 2 && matches!(loss, Loss::BceWithLogits { .. }) => {
                    return err(cx, LossShape::BinaryOnClasses { classes: *classes });
                }
                Targets::Tokens { shape, .. } if matches!(loss, Loss::BceWithLogits { .. }) => {
                    shape.to_vec()
                }
                Targets::Classes(_) | Targets::Tokens { .. } => {
                    return err(cx, LossShape::ValuesOnClasses);
                }
                Targets::Unknown => return true,
            };
            let fits = **out == want || (want.is_empty() && **out == [1]);
            if !fits {
                return err(
                    cx,
                    LossShape::Shapes {
                        targets: want.into(),
                    },
                );
            }
            true
        }
    }
}
