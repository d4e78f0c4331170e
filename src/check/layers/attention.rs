//! `attention` (multi-head self-attention) and `transformer_block`.

use super::{Check, Checked, Flow, LayerCheck};
use crate::check::cx::Range;
use crate::diagnostic::problem::{Ignored, Strategies, Warnings};
use crate::diagnostic::Problem;
use crate::ir::Kind;
use crate::ir::{Block, BlockActivation, LayerKind};

/// Reads a transformer block's options: `norm`, `activation`, `eps`, `bias`.
fn block_options(lc: &mut LayerCheck) -> Option<Block> {
    let norm = lc
        .bound
        .get("norm")
        .map_or(Some("pre"), |v| lc.cx.choice(v, "norm", &["pre", "post"]));
    let names: Vec<&'static str> = BlockActivation::ALL.iter().map(|(n, _)| *n).collect();
    let activation = lc
        .bound
        .get("activation")
        .map_or(Some("gelu"), |v| lc.cx.choice(v, "activation", &names));
    let eps = lc.num_or("eps", 1e-5, Range::Positive);
    let bias = lc.bool_or("bias", true);
    let activation = activation?;
    let activation = BlockActivation::ALL
        .iter()
        .find(|(n, _)| *n == activation)
        .map(|(_, a)| *a)?;
    Some(Block {
        norm_first: norm? == "pre",
        activation,
        eps: eps?,
        bias: bias?,
    })
}

/// The check of `kind` when it is attention.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Attention => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, false)),
        Kind::TransformerBlock => {
            Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow, true))
        }
        _ => return None,
    })
}

/// Checks an attention layer, or a whole transformer block when `block`.
pub(super) fn check(lc: &mut LayerCheck, flow: &Flow, block: bool) -> Option<Checked> {
    let heads = lc.required_uint("heads", 1);
    let hidden = if block {
        lc.opt_uint("hidden", 1)
    } else {
        Some(None)
    };
    let dropout = lc.num_or("dropout", if block { 0.1 } else { 0.0 }, Range::UnitOpen);
    let causal = lc.bool_or("causal", false);
    let window = lc.opt_uint("window", 1);
    let options = block.then(|| block_options(lc));
    let (heads, heads_span) = heads?;
    let (hidden, dropout, causal, window) = (hidden?, dropout?, causal?, window?);
    if options == Some(None) {
        return None;
    }
    let shape = lc.input(flow)?;
    lc.rank(&shape, flow, "[sequence, width]", shape.len() == 2)?;
    let (s, e) = (shape[0], shape[1]);
    if e % heads != 0 {
        lc.cx
            .report(Problem::Strategies(Strategies::HeadsIndivisible {
                span: heads_span,
                heads,
                producer: super::producer(flow, &shape),
            }));
        return None;
    }
    if window.is_some_and(|k| k >= s) {
        // Every key is then within `|i - j| < K` of every query: the window masks nothing.
        lc.cx.report(Problem::Warnings(Warnings::IgnoredSetting {
            span: lc.at("window"),
            situation: Ignored::WindowCoversSequence,
        }));
    }
    let Some(Some(options)) = options else {
        let kind = LayerKind::Attention {
            width: e,
            heads,
            dropout,
            causal,
            window,
        };
        return Some(Checked::new(kind, &shape, shape.clone()));
    };
    let h = hidden.unwrap_or(4 * e);
    let kind = LayerKind::TransformerBlock {
        width: e,
        heads,
        hidden: h,
        dropout,
        causal,
        window,
        block: options,
    };
    Some(Checked::new(kind, &shape, shape.clone()))
}

#[cfg(test)]
mod tests {
    use crate::ir::{LayerKind, Node};

    /// The checked layer kinds of a model over sequences of 6 positions of width 8.
    fn checked(layers: &str) -> (Vec<String>, Vec<LayerKind>) {
        let text = format!(
            "experiment \"w\" {{\n  data {{\n    source synthetic(inputs: normal([6, 8]), targets: normal([6, 8]), count: 8)\n    batch 4\n  }}\n  model {{\n    input [6, 8]\n    {layers}\n  }}\n  optimizer sgd(lr: 0.1)\n  train {{\n    steps 1\n    loss mse\n  }}\n}}\n"
        );
        let checked = crate::check::check_text("w.exp", text);
        let codes = checked
            .diagnostics
            .iter()
            .map(|d| d.code.code().to_string())
            .collect();
        let kinds = checked
            .trials
            .first()
            .map(|t| {
                t.model
                    .nodes
                    .iter()
                    .filter_map(|n| match n {
                        Node::Layer(l) => Some(l.kind.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        (codes, kinds)
    }

    /// A window shorter than the sequence reaches the IR silently; one as long warns (K0406).
    #[test]
    fn window_reaches_the_ir_and_warns_when_it_masks_nothing() {
        let (codes, kinds) = checked("a: attention(2, causal: true, window: 5)");
        assert!(codes.is_empty(), "{codes:?}");
        assert!(matches!(
            kinds[..],
            [LayerKind::Attention {
                causal: true,
                window: Some(5),
                ..
            }]
        ));
        let (codes, kinds) = checked("t: transformer_block(2, window: 6)");
        assert_eq!(codes, ["K0406"]);
        assert!(matches!(
            kinds[..],
            [LayerKind::TransformerBlock {
                window: Some(6),
                ..
            }]
        ));
        let (codes, _) = checked("t: transformer_block(2)");
        assert!(codes.is_empty(), "{codes:?}");
    }
}
