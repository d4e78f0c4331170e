//! Samples moved to the model's layout as they load (`layout: channels_last`), and the one rule
//! of how a stored sample may be reshaped to the model's input ([`kiln::ir::sample_fit`]), the
//! rule `kiln check` applies to the files' headers.

use kiln::ir::{sample_fit, Layout, SampleFit};
use kiln::span::Span;

use super::error::At;
use super::{fmt_shape, invalid, DataError, Raw};

/// `raw` with its inputs arranged channels first: for `layout: channels_last`, each sample (of
/// the declared shape, or as stored) has its last dimension moved first, as
/// `x.permute(0, k, 1, ..., k - 1)` does to a batch `[N, ..., C]`.
pub(super) fn arrange(mut raw: Raw, layout: &Layout, span: Span) -> Result<Raw, DataError> {
    let Layout::ChannelsLast(declared) = layout else {
        return Ok(raw);
    };
    let size = raw.inputs.size();
    let (n, stored) = (size[0], &size[1..]);
    let sample: Vec<i64> = declared
        .as_ref()
        .map_or_else(|| stored.to_vec(), |s| s.to_vec());
    let values = |s: &[i64]| s.iter().product::<i64>();
    if values(&sample) != values(stored) {
        return Err(invalid(
            span,
            format!(
                "{} holds samples of {} values {}, but the declared `shape` {} holds {}",
                raw.inputs_from,
                values(stored),
                fmt_shape(stored),
                fmt_shape(&sample),
                values(&sample)
            ),
            "wrong sample size",
            format!(
                "declare the shape the file stores, `shape: {}`",
                fmt_shape(stored)
            ),
        ));
    }
    if sample.len() < 2 {
        return Err(invalid(
            span,
            format!(
                "`layout: channels_last` moves the last dimension of each sample first, but {} holds samples of {}",
                raw.inputs_from,
                fmt_shape(&sample)
            ),
            "no channels to move",
            "declare the shape each row stores, such as `shape: [32, 32, 3]`, or remove `layout`",
        ));
    }
    let k = sample.len() as i64;
    let mut shape = vec![n];
    shape.extend_from_slice(&sample);
    let mut order = vec![0, k];
    order.extend(1..k);
    raw.inputs = raw
        .inputs
        .f_reshape(shape.as_slice())
        .and_then(|x| x.f_permute(order.as_slice()))
        .and_then(|x| x.f_contiguous())
        .at(span)?;
    Ok(raw)
}

/// Refuses samples of shape `stored` for a model that takes `input`, when reshaping them would
/// change their number of values or scramble them.
pub(super) fn fits(from: &str, stored: &[i64], input: &[i64], span: Span) -> Result<(), DataError> {
    let fit = sample_fit(stored, input);
    let per: i64 = stored.iter().product();
    let want: i64 = input.iter().product();
    match fit {
        SampleFit::Fits => Ok(()),
        SampleFit::Size => Err(invalid(
            span,
            format!(
                "{from} holds samples of {per} values {}, but the model's input {} holds {want}",
                fmt_shape(stored),
                fmt_shape(input)
            ),
            "wrong sample size",
            format!(
                "make the model's input hold {per} values, for example `input {}`",
                fmt_shape(stored)
            ),
        )),
        SampleFit::ChannelsLast | SampleFit::Transposed => Err(invalid(
            span,
            format!(
                "{from} holds samples of {}, but the model's input is {}: reshaping them would scramble their values",
                fmt_shape(stored),
                fmt_shape(input)
            ),
            "samples in other dimensions",
            if fit == SampleFit::ChannelsLast {
                "the samples are channels last: add `layout: channels_last` to the source to move the channels first as they load".to_string()
            } else {
                format!(
                    "give the model the data's shape, `input {}`, or store the samples as {}",
                    fmt_shape(stored),
                    fmt_shape(input)
                )
            },
        )),
    }
}
