//! Wording of structured pruning problems (K0214, K0216).

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::Strategies;
use crate::plan::shrink::Reason;

/// What blocks the shrinking, as a label at the blocking place.
fn blocked(reason: &Reason, at_layer: Option<&str>) -> String {
    let layer = at_layer.map_or("this".to_string(), |n| format!("`{n}`"));
    match reason {
        Reason::NotUnits(kind) => format!("a `{kind}` has no output units to remove"),
        Reason::Output => format!("{layer} gives the model's output, whose size is fixed"),
        Reason::Input => "this residual adds the model's input, which keeps every unit".into(),
        Reason::Fixed(kind) => {
            format!("this residual adds the outputs of a `{kind}`, which cannot be pruned")
        }
        Reason::Consumer(kind) => format!("{layer} is a `{kind}`, which cannot be sliced"),
        Reason::Mixes(kind) => {
            format!("{layer} (`{kind}`) mixes the units or works along another dimension")
        }
        Reason::Misaligned => {
            "this residual adds units that lie along different dimensions on its two sides".into()
        }
        Reason::Grouped => format!("{layer} is a grouped convolution"),
        Reason::GroupNorm { groups, kept } => {
            format!("{layer} has {groups} groups, which do not divide the {kept} units kept")
        }
        Reason::Amounts { kept, other } => {
            format!("{layer} shares these units and keeps {other} of them; this prune keeps {kept}")
        }
        Reason::Constant(fill) => format!(
            "a pruned unit holds {fill} here (not 0), which only a linear's bias can absorb"
        ),
    }
}

/// Pruning problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    match problem {
        Problem::Strategies(Strategies::PruneLeavesNothing {
            span,
            layer,
            layer_span,
            units,
            amount,
            dim,
        }) => {
            let what = if dim == 0 {
                "output units"
            } else {
                "input features"
            };
            Diagnostic::new(
                code,
                span,
                format!("pruning {amount} of `{layer}`'s {units} {what} leaves none"),
            )
            .label(format!("round({amount} x {units}) = {units} removed"))
            .with(layer_span, format!("{units} {what}"))
            .help(format!(
                "keep at least one: an amount below {} removes fewer than {units}",
                (units as f64 - 0.5) / units as f64
            ))
        }
        Problem::Strategies(Strategies::CannotShrink {
            span,
            layer,
            reason,
            at,
            at_layer,
        }) => {
            let label = blocked(&reason, at_layer.as_deref());
            let help = match reason {
                Reason::GroupNorm { groups, .. } => format!(
                    "choose an amount that keeps a multiple of {groups} units, prune input features (`dim: 1`), or use `l1_unstructured`"
                ),
                Reason::Amounts { .. } => "give the layers of one group the same amount, or prune one of them".into(),
                _ => "prune input features instead (`dim: 1`), or use `l1_unstructured`, which keeps every shape".into(),
            };
            let d = Diagnostic::new(
                code,
                span,
                format!("the output units of `{layer}` cannot be removed from the model"),
            )
            .label("structured pruning with `dim: 0` removes whole units");
            if at == span {
                d.help(format!("{label}; {help}"))
            } else {
                d.with(at, label).help(help)
            }
        }
        other => unreachable!("not a pruning problem: {other:?}"),
    }
}
