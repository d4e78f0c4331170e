//! Token ids from data files. A file source feeds the model floats, unless the model's first
//! layer is an `embedding`: then its integer arrays are read as int64 token ids, exactly as
//! synthetic `randint` inputs are. The checker then refuses inputs stored as floats (K0220, once
//! the headers are read), and the runtime refuses ids outside `[0, vocab)` (K0503).

use super::cx::Cx;
use super::datafiles::Declared;
use crate::diagnostic::problem::{DataFit, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{layers, DType, Data, LayerKind, Node, Source, Targets};
use crate::syntax::ast::Block;

/// The element type a source feeds the model: a synthetic source's own (`dtype`), and for a
/// file source integer token ids when the model block starts with an `embedding`.
pub(super) fn feed_dtype(source: &Source, dtype: DType, model: Option<&Block>) -> DType {
    match source {
        Source::Synthetic { .. } => dtype,
        _ if model.is_some_and(starts_with_embedding) => DType::Int,
        _ => dtype,
    }
}

/// Whether the first layer of a model block (looking into a leading `block`) is an `embedding`.
fn starts_with_embedding(model: &Block) -> bool {
    let Some(first) = model.statements.iter().find(|s| s.keyword.name != "input") else {
        return false;
    };
    match (first.keyword.name.as_str(), &first.body) {
        ("embedding", _) => true,
        ("block", Some(body)) => starts_with_embedding(body),
        _ => false,
    }
}

/// The vocabulary of the model's first layer when it is an `embedding` fed by a file source:
/// the exclusive bound the runtime checks the files' token ids against.
pub(super) fn file_vocab(source: &Source, nodes: &[Node]) -> Option<u64> {
    if matches!(source, Source::Synthetic { .. }) {
        return None;
    }
    match layers(nodes).first().map(|l| &l.kind) {
        Some(LayerKind::Embedding { vocab, .. }) => u64::try_from(*vocab).ok(),
        _ => None,
    }
}

/// A text's vocabulary as `kiln check` read it: the classes of its per-token targets, within
/// the ids of the model's first layer, an `embedding` (K0220 otherwise). False after a report.
pub(super) fn text_vocabulary(
    cx: &mut Cx,
    data: &mut Data,
    nodes: &[Node],
    declared: &[Declared],
) -> bool {
    let Some(chars) = declared.iter().find(|d| d.trains()).and_then(|d| d.vocab) else {
        return true;
    };
    if let Targets::Tokens { classes, .. } = &mut data.targets {
        *classes = Some(chars);
    }
    let Some(first) = layers(nodes).first().copied() else {
        return true;
    };
    match first.kind {
        LayerKind::Embedding { vocab, .. } if u64::try_from(vocab).unwrap_or(0) < chars => {
            let (kind, files) = data.source.kind_and_files();
            cx.report(Problem::Strategies(Strategies::DataMismatch {
                span: data.source_span,
                file: format!("the {kind} `{}`", files.join("`, `")),
                situation: DataFit::Vocabulary {
                    chars,
                    vocab: u64::try_from(vocab).unwrap_or(0),
                    embedding: first.span,
                },
            }));
            false
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {

    /// The model's input element type and the checked file vocabulary of `model`, fed by an
    /// `.npy` source that is not read (no loader).
    fn fed(model: &str) -> Option<(crate::ir::DType, Option<u64>)> {
        let text = format!(
            "experiment \"t\" {{\n data {{ source npy(\"x.npy\", targets: \"y.npy\", classes: 4); batch 2 }}\n model {{ {model} }}\n optimizer sgd(lr: 0.1)\n train {{ loss cross_entropy; steps 1 }}\n}}\n"
        );
        let checked = crate::check::check_text("t.exp", text);
        assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
        let e = checked.trials.first()?;
        Some((e.model.input_dtype, e.data.token_vocab))
    }

    #[test]
    fn a_file_feeds_token_ids_to_a_leading_embedding() {
        use crate::ir::DType;
        assert_eq!(
            fed("input [6]; embedding(10, 8, pad: 0); mean(0); linear(4)"),
            Some((DType::Int, Some(10)))
        );
        assert_eq!(
            fed("input [6]; block enc { embedding(12, 8) }; mean(0); linear(4)"),
            Some((DType::Int, Some(12)))
        );
        assert_eq!(fed("input [6]; linear(4)"), Some((DType::Float, None)));
    }
}
