//! `embedding`: token ids to vectors.

use super::memory::{Keeps, Value};
use super::spec::{given, required, Spec};
use super::Weight;

/// `embedding(num_embeddings, embedding_dim, pad)`; `pad` is `nn.Embedding`'s `padding_idx`
/// and also masks those tokens out of attention and of `mean` over the sequence.
pub static EMBEDDING: Spec = Spec {
    params: &[
        required("num_embeddings"),
        required("embedding_dim"),
        given("pad", "none"),
    ],
    note: None,
    shapes: "integer ids `[...]` -> `[..., embedding_dim]`; the `pad` id's row starts at zero and is not trained (`padding_idx`), and attention and `mean(0)` skip its positions",
};

/// The table `[vocab, dim]`: an embedding, and a weight that pruning applies to.
pub(super) fn weights(out: &mut Vec<Weight>, vocab: i64, dim: i64) {
    out.push(Weight {
        embedding: true,
        ..Weight::prunable("weight".into(), vec![vocab, dim])
    });
}

/// An embedding keeps its ids (the batch itself) and makes fp32 rows; with a `pad`, the boolean
/// mask of the tokens is kept while the sequence flows.
pub(super) fn keeps(ids: u64, pad: bool) -> Keeps {
    Keeps {
        inner: if pad { ids } else { 0 },
        ..Keeps::input(Value::F32)
    }
}
