//! `embedding`: token ids to vectors.

use super::{count, required, Checked, Flow, LayerCheck, Spec};
use crate::diagnostic::{Code, Diagnostic};
use crate::ir::{DType, LayerKind};

/// `embedding(num_embeddings, embedding_dim)`.
pub static EMBEDDING: Spec = Spec {
    params: &[required("num_embeddings"), required("embedding_dim")],
    note: None,
    shapes: "integer ids `[...]` -> `[..., embedding_dim]`",
};

pub(super) fn check(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let vocab = lc.required_uint("num_embeddings", 1);
    let dim = lc.required_uint("embedding_dim", 1);
    let (vocab, vocab_span) = vocab?;
    let (dim, _) = dim?;
    let shape = lc.input(flow)?;
    if flow.dtype != DType::Int {
        lc.cx.push(
            Diagnostic::new(
                Code::DtypeMismatch,
                lc.span,
                "`embedding` receives floating-point values",
            )
            .label("needs integer token ids")
            .with(
                flow.producer.0,
                format!("{} produces floats", flow.producer.1),
            )
            .help("feed token ids, as from `randint(...)` data"),
        );
        return None;
    }
    if let Some(bound) = flow.int_bound {
        if bound > vocab as u64 {
            lc.cx.push(
                Diagnostic::new(
                    Code::OutOfRange,
                    vocab_span,
                    format!(
                        "token ids go up to {} but the embedding has {vocab} rows",
                        bound - 1
                    ),
                )
                .label(format!("{vocab} rows"))
                .with(flow.producer.0, format!("ids below {bound}"))
                .help(format!("use at least {bound} embeddings")),
            );
            return None;
        }
    }
    let mut output = shape;
    output.push(dim);
    let params = count(vocab as f64 * dim as f64);
    Some(Checked::new(
        LayerKind::Embedding { vocab, dim },
        output,
        params,
        0,
    ))
}
