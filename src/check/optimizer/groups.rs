//! The optimizer's parameter groups, as in `adamw(lr: 3e-4, groups: [group(biases, norms,
//! embeddings, weight_decay: 0)])`. A group's positional arguments select parameters: a layer or
//! block by name, one parameter by its `state_dict` name (`fc1.bias`), or a class (`biases`,
//! `norms`, `embeddings`); its named arguments are the optimizer's own settings, each defaulting to
//! the optimizer's value. A parameter is in at most one group (K0226); one in none takes the
//! optimizer's settings. A group that selects nothing is a warning (K0419).

use std::collections::HashSet;

use super::super::cx::{Bound, Cx};
use super::super::model::ModelOut;
use super::super::placement::within;
use super::super::read::unknown_reference;
use super::Hyper;
use crate::diagnostic::problem::{Expected, Strategies, Warnings};
use crate::diagnostic::{Code, Problem};
use crate::ir::{layers, tensors, ParamGroup, Tensor, CLASSES};
use crate::span::Span;
use crate::syntax::ast::{Args, Ident, Value, ValueKind};

/// Where a parameter was selected: the group, the selector's span and its text.
type Owner = (usize, Span, String);

/// Checks the optimizer's `groups` value against `model`. `settings` are the parameters a
/// group's named arguments may set; `read` reads them, defaulting to the optimizer's own.
pub(super) fn check_groups(
    cx: &mut Cx,
    value: &Value,
    settings: &[&'static str],
    model: Option<&ModelOut>,
    read: impl Fn(&mut Cx, &Bound) -> Option<Hyper>,
) -> Option<Vec<ParamGroup>> {
    let items: Vec<&Value> = match &value.kind {
        ValueKind::List(items) => items.iter().collect(),
        ValueKind::Call(..) => vec![value],
        _ => {
            cx.wrong_type(value, Expected::Groups);
            return None;
        }
    };
    let all: Vec<Tensor> = model.map_or_else(Vec::new, |m| {
        layers(&m.nodes).into_iter().flat_map(tensors).collect()
    });
    let mut owners: Vec<Option<Owner>> = vec![None; all.len()];
    let mut reported: HashSet<(Span, Span)> = HashSet::new();
    let mut out = Vec::new();
    let mut ok = true;
    for (g, item) in items.into_iter().enumerate() {
        let ValueKind::Call(name, args) = &item.kind else {
            cx.wrong_type(item, Expected::Groups);
            ok = false;
            continue;
        };
        if name.name != "group" {
            cx.unknown(Code::UnknownChoice, "parameter group", name, &["group"]);
            ok = false;
            continue;
        }
        // Positional arguments select; named ones are settings.
        let (named, selectors): (Vec<_>, Vec<_>) =
            args.items.iter().partition(|a| a.name.is_some());
        let named = Args {
            items: named.into_iter().cloned().collect(),
            span: args.span,
        };
        let bound = cx.bind("group", Some(&named), args.span, settings);
        let hyper = read(cx, &bound);
        let mut picked: Vec<usize> = Vec::new();
        let mut select = Vec::new();
        let mut resolved = true;
        for arg in selectors {
            let Some(ident) = cx.reference(&arg.value) else {
                resolved = false;
                continue;
            };
            select.push(ident.name.clone());
            let Some(model) = model else { continue };
            let Some(found) = resolve(cx, &ident, model, &all) else {
                resolved = false;
                continue;
            };
            for t in found {
                if picked.contains(&t) {
                    continue;
                }
                picked.push(t);
                match &owners[t] {
                    Some((earlier, first, first_selector)) if *earlier != g => {
                        if reported.insert((*first, ident.span)) {
                            cx.report(Problem::Strategies(Strategies::GroupOverlap {
                                span: ident.span,
                                param: all[t].name.clone(),
                                selector: ident.name.clone(),
                                first: *first,
                                first_selector: first_selector.clone(),
                            }));
                        }
                        ok = false;
                    }
                    _ => owners[t] = Some((g, ident.span, ident.name.clone())),
                }
            }
        }
        // A model whose shapes were not all inferred may lack layers; its groups are not judged.
        let inferred = model.is_some_and(|m| m.output.is_some());
        ok &= resolved;
        if picked.is_empty() && inferred && resolved {
            cx.report(Problem::Warnings(Warnings::EmptyGroup {
                span: item.span,
                selectors: select.clone(),
            }));
        }
        picked.sort_unstable();
        let Some(hyper) = hyper else {
            ok = false;
            continue;
        };
        out.push(ParamGroup {
            select,
            kind: hyper.kind,
            lr: hyper.lr,
            weight_decay: hyper.weight_decay,
            params: picked.iter().map(|t| all[*t].name.clone()).collect(),
            count: picked.iter().map(|t| all[*t].count).sum(),
            span: item.span,
        });
    }
    ok.then_some(out)
}

/// The tensors (indices into `all`) one selector stands for; reports an unknown one (K0114).
fn resolve(cx: &mut Cx, ident: &Ident, model: &ModelOut, all: &[Tensor]) -> Option<Vec<usize>> {
    let name = ident.name.as_str();
    let indices = |keep: &dyn Fn(&Tensor) -> bool| -> Vec<usize> {
        (0..all.len()).filter(|i| keep(&all[*i])).collect()
    };
    if model.names.contains_key(name) {
        // A layer, or a block and every layer inside it.
        return Some(indices(&|t| within(&t.layer, name)));
    }
    if let Some(c) = CLASSES.iter().position(|(class, _)| *class == name) {
        return Some(indices(&|t| t.classes[c]));
    }
    if let Some(i) = all.iter().position(|t| t.name == name) {
        return Some(vec![i]);
    }
    let mut known: Vec<&str> = model.names.keys().map(String::as_str).collect();
    known.extend(CLASSES.iter().map(|(class, _)| *class));
    // A near miss of a parameter's name is answered with the parameters of its layer.
    if let Some((owner, _)) = name.rsplit_once('.') {
        if model.names.contains_key(owner) {
            known.extend(
                all.iter()
                    .filter(|t| t.layer == owner)
                    .map(|t| t.name.as_str()),
            );
        }
    }
    unknown_reference(cx, ident, &known, "");
    None
}

#[cfg(test)]
mod tests {
    use crate::ir::{layers, tensors, Kind};

    /// Experiments whose layers hold every kind of parameter.
    const MODELS: [&str; 3] = [
        "input [3, 16, 16]
        conv2d(8, 3, groups: 1, bias: false)
        batchnorm2d
        prelu(num_parameters: 8)
        conv2d(8, 3, groups: 4)
        groupnorm(2)
        flatten
        linear(10, bias: false)
        layernorm
        linear(4)",
        "input [8]
        embedding(16, 12)
        attention(heads: 2)
        block encoder { t: transformer_block(heads: 3, hidden: 20) }
        conv1d(6, 3, padding: 1)
        batchnorm1d
        mean(dim: 0)
        linear(4)",
        "input [8]
        embedding(16, 12)
        transformer_block(heads: 3, hidden: 20, bias: false, norm: post)
        conv1d(6, 3, padding: 1)
        batchnorm1d(affine: false)
        mean(dim: 0)
        linear(4)",
    ];

    fn experiment(model: &str, inputs: &str) -> String {
        format!(
            "experiment \"t\" {{
              data {{ source synthetic(inputs: {inputs}, targets: randint(4), count: 64); batch 8 }}
              model {{ {model} }}
              optimizer adam
              train {{ steps 1; loss cross_entropy }}
            }}"
        )
    }

    /// The tensors of every layer add up to the parameters the layer checks count, for every
    /// kind with parameters, so the names groups select are those the runtime creates.
    #[test]
    fn tensors_add_up_to_every_layers_parameters() {
        let mut kinds = std::collections::HashSet::new();
        let inputs = [
            "normal([3, 16, 16])",
            "randint(16, shape: [8])",
            "randint(16, shape: [8])",
        ];
        for (model, inputs) in MODELS.iter().zip(inputs) {
            let checked = crate::check::check_text("t.exp", experiment(model, inputs));
            assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
            for l in layers(&checked.trials[0].model.nodes) {
                let sum: u64 = tensors(l).iter().map(|t| t.count).sum();
                assert_eq!(sum, l.params, "{}", l.name);
                if l.params > 0 {
                    kinds.insert(l.kind.kind());
                }
            }
        }
        for kind in [
            Kind::Conv1d,
            Kind::Conv2d,
            Kind::BatchNorm1d,
            Kind::GroupNorm,
        ] {
            assert!(kinds.contains(&kind), "{kind:?} not covered");
        }
        assert_eq!(kinds.len(), 11, "{kinds:?}");
    }

    /// Classes, layers and parameters select the tensors the runtime names, in the model's
    /// order; a block's layers overlap its norms (K0226).
    #[test]
    fn selectors_pick_classes_layers_and_parameters() {
        let check = |groups: &str| {
            let text = experiment(MODELS[1], "randint(16, shape: [8])").replace(
                "optimizer adam",
                &format!("optimizer adam(groups: [{groups}])"),
            );
            crate::check::check_text("t.exp", text)
        };
        let checked = check(
            "group(norms, embeddings, 6.bias, weight_decay: 0), group(1, 6.weight, lr: 1e-4)",
        );
        assert!(checked.diagnostics.is_empty(), "{:?}", checked.diagnostics);
        let groups = &checked.trials[0].optimizer.groups;
        let norm = |n: &str| format!("encoder.t.{n}");
        let first = [
            "0.weight".to_string(),
            norm("norm1.weight"),
            norm("norm1.bias"),
            norm("norm2.weight"),
            norm("norm2.bias"),
            "4.weight".to_string(),
            "4.bias".to_string(),
            "6.bias".to_string(),
        ];
        assert_eq!(groups[0].params, first);
        assert_eq!(groups[0].weight_decay, 0.0);
        assert_eq!(groups[0].lr, 1e-3);
        let second = [
            "1.in_proj_weight",
            "1.in_proj_bias",
            "1.out_proj.weight",
            "1.out_proj.bias",
            "6.weight",
        ];
        assert_eq!(groups[1].params, second);
        assert_eq!(groups[1].lr, 1e-4);
        assert_eq!(groups[1].count, 3 * 144 + 36 + 144 + 12 + 12 * 4);

        let overlap = check("group(norms, weight_decay: 0), group(encoder, lr: 1e-4)");
        let codes: Vec<&str> = overlap.diagnostics.iter().map(|d| d.code.code()).collect();
        assert_eq!(codes, ["K0226"]);
        assert!(overlap.diagnostics[0]
            .message
            .contains("encoder.t.norm1.weight"));
    }
}
