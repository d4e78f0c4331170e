//! Wording of argument and statement-form problems (K0120, K0124).

use super::counted;
use super::problem::{Arguments, Form, Misplaced};
use super::wording::takes;
use super::{Code, Diagnostic};
use crate::span::Span;

/// K0120 in words.
pub(super) fn words(code: Code, span: Span, situation: Arguments) -> Diagnostic {
    let new = |message: String| Diagnostic::new(code, span, message);
    match situation {
        Arguments::PositionalAfterNamed => new("positional argument after a named one".into())
            .label("give this argument a name")
            .help("write positional arguments first, then `name: value` ones"),
        Arguments::TooManyPositional { callee, params } => new(format!(
            "`{callee}` takes at most {} positional argument{}",
            params.len(),
            if params.len() == 1 { "" } else { "s" }
        ))
        .label("one too many")
        .help(takes(&callee, &params)),
        Arguments::Missing { callee, param } => new(format!("`{callee}` needs `{param}`"))
            .label(format!("`{param}` is missing"))
            .help(format!("add `{param}: ...` to the arguments")),
        Arguments::NoParentheses { keyword } => {
            new(format!("`{keyword}` takes no arguments in parentheses"))
                .label("unexpected arguments")
                .help(format!("write `{keyword} value`"))
        }
        Arguments::OnlyBlock { keyword } => new(format!("`{keyword}` takes only a block"))
            .label("unexpected here")
            .help(format!("write `{keyword} {{ ... }}`")),
        Arguments::NoValue { keyword } => new(format!("`{keyword}` needs a value"))
            .label("value missing")
            .help(format!("write `{keyword} <value>`")),
        Arguments::ExtraValues { keyword } => new(format!("`{keyword}` takes one value"))
            .label("extra values")
            .help("put each setting on its own line, or separate them with `;`"),
        Arguments::NoBlock { keyword, example } => new(format!("`{keyword}` needs a block"))
            .label("`{ ... }` missing")
            .help(format!("write `{example}`")),
        Arguments::NoName { keyword, example } => new(format!("`{keyword}` needs a name"))
            .label("name missing")
            .help(format!("write `{example}`")),
        Arguments::NoArguments { callee } => new(format!("`{callee}` needs arguments"))
            .label("arguments missing")
            .help(format!(
                "write `{callee}(...)` with its files or generators"
            )),
        Arguments::Form(form) => {
            let (message, written) = match form {
                Form::Memory => ("`memory` takes a device and a size", "memory cuda:0 80 GiB"),
                Form::Place => ("`place` needs targets and a device", "place fc1 on cuda:0"),
                Form::Prune => (
                    "`prune` needs targets and a method",
                    "prune fc1 l1_unstructured(amount: 0.5)",
                ),
                Form::Quantize => (
                    "`quantize` needs targets and a method",
                    "quantize fc1 int8(per_channel)",
                ),
                Form::Split => ("`split` takes named fractions", "split(train: 0.8, val: 0.2)"),
            };
            new(message.into())
                .label(format!("expected `{written}`"))
                .help(format!("write `{written}`"))
        }
        Arguments::NormalizeLengths { means, stds } => new(format!(
            "{} but {}",
            counted(means, "mean"),
            counted(stds, "standard deviation")
        ))
        .label("lengths differ")
        .help("give one mean and one std per channel"),
        Arguments::AfterLayer { keyword } => new(format!("unexpected values after `{keyword}`"))
            .label("expected nothing, or `on <device>`")
            .help("layer arguments go in parentheses, as in `linear(256)`; a placement is written `on cuda:0`"),
        Arguments::SpatialValues { param, dims, given } => new(format!(
            "`{param}` needs {}, one per spatial dimension",
            counted(dims, "value")
        ))
        .label(counted(given, "value"))
        .help(format!("give one number, or a list of {dims}")),
    }
}

/// K0124 in words.
pub(super) fn misplaced(code: Code, span: Span, situation: Misplaced) -> Diagnostic {
    match situation {
        Misplaced::Label { keyword } => {
            Diagnostic::new(code, span, format!("`{keyword}` cannot be named"))
                .label("names are for layers and blocks")
                .help("remove the `name:` in front")
        }
        Misplaced::Block { keyword } => {
            Diagnostic::new(code, span, format!("`{keyword}` takes no block"))
                .label("unexpected block")
                .help("remove the `{ ... }`")
        }
        Misplaced::LayerBlock { kind } => {
            Diagnostic::new(code, span, format!("`{kind}` takes no block"))
                .label("unexpected block")
                .help("only `block` and `residual` hold other layers")
        }
    }
}
