//! `embedding`: token ids to vectors.

use super::{Check, Checked, Flow, LayerCheck};
use crate::diagnostic::problem::{Names, OutOfRange, Shapes};
use crate::diagnostic::Problem;
use crate::ir::Kind;
use crate::ir::{DType, LayerKind};

/// The check of `kind` when it is `embedding`.
pub(super) fn checker(kind: Kind) -> Option<Check> {
    Some(match kind {
        Kind::Embedding => Box::new(|lc: &mut LayerCheck, flow: &Flow| check(lc, flow)),
        _ => return None,
    })
}

pub(super) fn check(lc: &mut LayerCheck, flow: &Flow) -> Option<Checked> {
    let vocab = lc.required_uint("num_embeddings", 1);
    let dim = lc.required_uint("embedding_dim", 1);
    let pad = lc.opt_uint("pad", 0);
    let (vocab, vocab_span) = vocab?;
    let (dim, _) = dim?;
    let pad = pad?;
    if let Some(p) = pad.filter(|p| *p >= vocab) {
        lc.cx.report(Problem::Names(Names::OutOfRange {
            span: lc.at("pad"),
            situation: OutOfRange::PadId {
                pad: p as u64,
                vocab: vocab as u64,
            },
        }));
        return None;
    }
    let shape = lc.input(flow)?;
    if flow.dtype != DType::Int {
        lc.cx.report(Problem::Shapes(Shapes::DtypeMismatch {
            span: lc.span,
            layer: lc.kind.name().to_string(),
            integers: false,
            producer: super::producer(flow, &shape),
        }));
        return None;
    }
    if let Some(bound) = flow.int_bound {
        if bound > vocab as u64 {
            lc.cx.report(Problem::Names(Names::OutOfRange {
                span: vocab_span,
                situation: OutOfRange::TokenIds {
                    vocab: vocab as u64,
                    bound,
                    producer: super::producer(flow, &shape),
                },
            }));
            return None;
        }
    }
    let mut output = shape.clone();
    output.push(dim);
    let kind = LayerKind::Embedding { vocab, dim, pad };
    Some(Checked::new(kind, &shape, output))
}
