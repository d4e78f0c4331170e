//! `embedding`: token ids to vectors.

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
