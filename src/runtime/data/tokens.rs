//! Token ids read from data files: an `embedding` takes int64 ids in `[0, vocab)`, so ids stored
//! as floats (outside CSV, whose cells are text) and ids out of that range are refused as K0503,
//! naming the file, the value and the sample, before libtorch would index out of bounds.

use kiln::span::Span;
use tch::{Kind, Tensor};

use super::error::At;
use super::{first_true, invalid, is_float, kind_name, DataError, Raw};

/// Refuses token ids stored as floats in a binary file (`.npy`, `.npz`, safetensors); CSV cells
/// are text, checked to be whole numbers instead.
pub(super) fn refuse_floats(raw: &Raw, kind: Kind, span: Span) -> Result<(), DataError> {
    if raw.lines.is_some() || !is_float(kind) {
        return Ok(());
    }
    Err(invalid(
        span,
        format!(
            "{} holds {} values, but the model's first layer, an `embedding`, takes integer token ids",
            raw.inputs_from,
            kind_name(kind)
        ),
        "token ids stored as floats",
        "store the ids as integers (int64, int32, int16, int8 or uint8), for example `np.save(path, ids.astype(np.int64))`",
    ))
}

/// Refuses the first id of `ids` (int64, `[N, ..]`) outside `[0, vocab)`.
pub(super) fn check_range(
    raw: &Raw,
    ids: &Tensor,
    vocab: u64,
    span: Span,
) -> Result<(), DataError> {
    let v = i64::try_from(vocab).unwrap_or(i64::MAX);
    let outside = ids
        .f_lt(0)
        .and_then(|low| low.f_logical_or(&ids.f_ge(v)?))
        .at(span)?;
    let Some(i) = first_true(&outside).at(span)? else {
        return Ok(());
    };
    let id = ids
        .f_reshape([-1])
        .and_then(|flat| flat.f_int64_value(&[i]))
        .at(span)?;
    let per = ids.size().iter().skip(1).product::<i64>().max(1);
    Err(invalid(
        span,
        format!(
            "{} holds the token id {id} for {}, outside the embedding's vocabulary [0, {vocab})",
            raw.inputs_from,
            raw.sample(i / per)
        ),
        "token id out of range",
        format!("token ids must lie in [0, {vocab}): raise the embedding's `num_embeddings` or fix the file"),
    ))
}
