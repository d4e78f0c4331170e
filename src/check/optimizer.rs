//! The `optimizer` setting: the optimizers with PyTorch's defaults, their settings, and (in
//! `groups`) the parameter groups that set them apart for some of the model's parameters.

mod groups;

use super::cx::{Bound, Cx, Range};
use super::model::ModelOut;
use super::read::{callee, Called};
use super::words::{Opt, OPTIMIZERS};
use crate::diagnostic::problem::{Expected, Inconsistent, Strategies};
use crate::diagnostic::{Code, Problem};
use crate::ir::{Optimizer, OptimizerKind};
use crate::syntax::ast::{Statement, ValueKind};

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
    let fused = b
        .get("fused")
        .map_or(Some(opt != Opt::RmsProp), |v| cx.boolean(v));
    let groups = match (b.get("groups"), &own) {
        (None, _) => Some(vec![]),
        (Some(g), Some(own)) => {
            // A group takes the optimizer's parameters but `groups` and `fused`, which choose
            // for the whole optimizer.
            let settings: Vec<&'static str> = params
                .iter()
                .copied()
                .filter(|p| !matches!(*p, "groups" | "fused"))
                .collect();
            groups::check_groups(cx, g, &settings, model, |cx, b| hyper(cx, b, own))
        }
        (Some(_), None) => None,
    };
    let (own, fused) = (own?, fused?);
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
        fused,
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
                cx.report(Problem::Strategies(Strategies::Inconsistent {
                    span: at,
                    situation: Inconsistent::Nesterov {
                        momentum,
                        dampening,
                    },
                }));
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
