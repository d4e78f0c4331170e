//! Token ids from data files. A file source feeds the model floats, unless the model's first
//! layer is an `embedding`: then its integer arrays are read as int64 token ids, exactly as
//! synthetic `randint` inputs are. The checker then refuses inputs stored as floats (K0220, once
//! the headers are read), and the runtime refuses ids outside `[0, vocab)` (K0503).

use crate::ir::{layers, DType, LayerKind, Node, Source};
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
