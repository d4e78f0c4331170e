//! Samples against the model's input by the one rule of [`kiln::ir::input_fit`] (the rule
//! `kiln check` applies to the files' headers), and moved to the model's layout as they load
//! (`layout: channels_last`).

use kiln::ir::{input_fit, InputMisfit, Layout};
use kiln::span::Span;

use super::error::At;
use super::{fmt_shape, invalid, DataError, Raw};

/// `raw` with its inputs checked against the model's `input` and arranged channels first: for
/// `layout: channels_last`, each sample (of the declared shape, or as stored) has its last
/// dimension moved first, as `x.permute(0, k, 1, ..., k - 1)` does to a batch `[N, ..., C]`.
pub(super) fn arrange(
    mut raw: Raw,
    layout: &Layout,
    input: &[i64],
    span: Span,
) -> Result<Raw, DataError> {
    let size = raw.inputs.size();
    let (n, stored) = (size[0], &size[1..]);
    let declared = match layout {
        Layout::ChannelsLast(declared) => declared.as_ref().map(|s| &s[..]),
        Layout::AsStored => None,
    };
    let sample = declared.unwrap_or(stored);
    let from = &raw.inputs_from;
    let values = |s: &[i64]| s.iter().product::<i64>();
    let misfit = match input_fit(stored, declared, layout, input) {
        Ok(()) => None,
        Err(InputMisfit::DeclaredSize) => Some(invalid(
            span,
            format!(
                "{from} holds samples of {} values {}, but the declared `shape` {} holds {}",
                values(stored),
                fmt_shape(stored),
                fmt_shape(sample),
                values(sample)
            ),
            "wrong sample size",
            format!(
                "declare the shape the file stores, `shape: {}`",
                fmt_shape(stored)
            ),
        )),
        Err(InputMisfit::DeclaredOrder { .. }) => Some(invalid(
            span,
            format!(
                "{from} holds samples of {}, but the declared `shape` is {}: reading them so would scramble their values",
                fmt_shape(stored),
                fmt_shape(sample)
            ),
            "samples in other dimensions",
            format!(
                "declare the shape the file stores, `shape: {}`",
                fmt_shape(stored)
            ),
        )),
        Err(InputMisfit::FlatLayout) => Some(invalid(
            span,
            format!(
                "`layout: channels_last` moves the last dimension of each sample first, but {from} holds samples of {}",
                fmt_shape(sample)
            ),
            "no channels to move",
            "declare the shape each row stores, such as `shape: [32, 32, 3]`, or remove `layout`",
        )),
        Err(misfit) => Some(unfit(from, &layout.arranged(sample), input, misfit, span)),
    };
    if let Some(error) = misfit {
        return Err(error);
    }
    if !matches!(layout, Layout::ChannelsLast(_)) {
        return Ok(raw);
    }
    let k = sample.len() as i64;
    let mut shape = vec![n];
    shape.extend_from_slice(sample);
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

/// The refusal of samples of shape `stored` (as the model receives them) for a model that takes
/// `input`: reshaping them would change their number of values or scramble them.
fn unfit(from: &str, stored: &[i64], input: &[i64], misfit: InputMisfit, span: Span) -> DataError {
    let per: i64 = stored.iter().product();
    let want: i64 = input.iter().product();
    if misfit == InputMisfit::Size {
        return invalid(
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
        );
    }
    invalid(
        span,
        format!(
            "{from} holds samples of {}, but the model's input is {}: reshaping them would scramble their values",
            fmt_shape(stored),
            fmt_shape(input)
        ),
        "samples in other dimensions",
        if misfit == (InputMisfit::Order { channels_last: true }) {
            "the samples are channels last: add `layout: channels_last` to the source to move the channels first as they load".to_string()
        } else {
            format!(
                "give the model the data's shape, `input {}`, or store the samples as {}",
                fmt_shape(stored),
                fmt_shape(input)
            )
        },
    )
}
