//! Compression targets: names resolved to the model's layers, a block standing for those of its
//! layers the step applies to, and the kind of each layer checked (K0114, K0204, K0215).

use super::super::cx::Cx;
use super::super::model::ModelOut;
use super::super::placement::within;
use super::super::read::unknown_reference;
use crate::diagnostic::problem::{Strategies, TargetNeed};
use crate::diagnostic::Problem;
use crate::ir::{layers, Layer, LayerKind, Target};
use crate::syntax::ast::{Ident, Value, ValueKind};

/// The layers a step applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Applies {
    /// Pruning: layers with a weight (or a bias, for `layer.bias`).
    Prune,
    /// Quantization and casts: linear layers (the runtime stores no other layer compressed);
    /// `int4` keeps its own code (K0204) for a named layer.
    Linear {
        /// Whether the scheme is `int4`.
        int4: bool,
    },
}

/// Whether pruning applies to the layer's tensor `local` (`weight` or `bias`): the matrices,
/// kernels and biases of linear and convolution layers and embedding tables, as each family
/// says (`LayerKind::weights`); norms' biases are not pruned.
fn prunable(kind: &LayerKind, local: &str) -> bool {
    kind.weights()
        .iter()
        .any(|w| w.prunable && w.local == local)
}

/// What a step needs of a target named with `param`.
fn need(applies: Applies, param: Option<&str>) -> TargetNeed {
    match (applies, param) {
        (Applies::Prune, Some("bias")) => TargetNeed::Bias,
        (Applies::Linear { .. }, Some("bias")) => TargetNeed::NotBias,
        (Applies::Prune, _) => TargetNeed::Weight,
        (Applies::Linear { .. }, _) => TargetNeed::Linear,
    }
}

fn fits(need: TargetNeed, kind: &LayerKind) -> bool {
    match need {
        TargetNeed::Weight => prunable(kind, "weight"),
        TargetNeed::Bias => prunable(kind, "bias"),
        TargetNeed::Linear => matches!(kind, LayerKind::Linear { .. }),
        TargetNeed::NotBias => false,
    }
}

/// Resolves a statement's target values to one [`Target`] per layer, in the order written
/// (a block's layers in model order). `None` when a target is unknown or of the wrong kind.
pub(super) fn targets(
    cx: &mut Cx,
    values: &[Value],
    model: Option<&ModelOut>,
    step: &str,
    applies: Applies,
) -> Option<Vec<Target>> {
    let mut out = Vec::new();
    let mut ok = true;
    for v in values {
        let items: Vec<&Value> = match &v.kind {
            ValueKind::List(items) => items.iter().collect(),
            _ => vec![v],
        };
        for item in items {
            let Some(ident) = cx.reference(item) else {
                ok = false;
                continue;
            };
            let Some(model) = model else { continue };
            match resolve(cx, &ident, model, step, applies) {
                Some(found) => out.extend(found),
                None => ok = false,
            }
        }
    }
    ok.then_some(out)
}

/// The parameters a target may name after a layer's name.
const PARAMS: [&str; 2] = ["weight", "bias"];

/// The targets one name stands for.
fn resolve(
    cx: &mut Cx,
    ident: &Ident,
    model: &ModelOut,
    step: &str,
    applies: Applies,
) -> Option<Vec<Target>> {
    let known = || {
        model
            .names
            .keys()
            .map(String::as_str)
            .collect::<Vec<&str>>()
    };
    // A near miss of a parameter's name (`fc1.weights`) is refused with the right name offered.
    if let Some((_, p)) = ident.name.rsplit_once('.') {
        let near = crate::diagnostic::did_you_mean(p, PARAMS);
        if let [param] = near.as_slice() {
            if p != *param && !model.names.contains_key(&ident.name) {
                unknown_reference(cx, ident, &known(), &format!(".{param}"));
                return None;
            }
        }
    }
    let (name, param) = match ident.name.rsplit_once('.') {
        Some((l, p @ ("weight" | "bias"))) if !model.names.contains_key(&ident.name) => {
            (l.to_string(), Some(p.to_string()))
        }
        _ => (ident.name.clone(), None),
    };
    let Some(defined) = model.names.get(&name).copied() else {
        let suffix = param.as_ref().map_or(String::new(), |p| format!(".{p}"));
        unknown_reference(cx, ident, &known(), &suffix);
        return None;
    };
    let need = need(applies, param.as_deref());
    let all = layers(&model.nodes);
    let target = |l: &Layer| Target {
        layer: l.name.clone(),
        param: param.clone(),
        span: ident.span,
    };
    let mistake = |kind| {
        Problem::Strategies(Strategies::CompressTargetKind {
            span: ident.span,
            step: step.to_string(),
            target: ident.name.clone(),
            kind,
            layer_span: defined,
            need,
        })
    };
    if let Some(layer) = all.iter().find(|l| l.name == name) {
        if fits(need, &layer.kind) {
            return Some(vec![target(layer)]);
        }
        cx.report(match (applies, need) {
            (Applies::Linear { int4: true }, TargetNeed::Linear) => {
                Problem::Strategies(Strategies::Int4NonLinear {
                    span: ident.span,
                    layer: layer.name.clone(),
                    layer_span: layer.span,
                })
            }
            _ => mistake(Some(layer.kind.kind())),
        });
        return None;
    }
    let members: Vec<&&Layer> = all
        .iter()
        .filter(|l| within(&l.name, &name) && fits(need, &l.kind))
        .collect();
    // A block whose layers were not inferred (after an error elsewhere) is left unjudged.
    if members.is_empty() && all.iter().any(|l| within(&l.name, &name)) {
        cx.report(mistake(None));
        return None;
    }
    if members.is_empty() {
        return Some(vec![]);
    }
    Some(members.into_iter().map(|l| target(l)).collect())
}
