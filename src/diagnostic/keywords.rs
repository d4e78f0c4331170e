//! Wording of unknown keywords (K0101), with the help for a setting written in the wrong block
//! and for a setting written `key: value`.

use super::problem::{Problem, Unknown};
use super::Diagnostic;
use crate::diagnostic::problem::Names;
use crate::span::Span;

/// Where a keyword that is unknown in its block is at home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Home {
    /// A setting of this block (`data`, `train`, `experiment`).
    Block(&'static str),
    /// A named argument of a setting's call, as in `optimizer sgd(lr: ...)`.
    Argument {
        /// The setting (`optimizer`).
        setting: &'static str,
        /// A choice of that setting that takes the argument (`sgd`).
        callee: &'static str,
    },
}

/// More than the name of an unknown keyword: why it is probably there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeywordHint {
    /// The keyword belongs elsewhere: in another block, or as an argument.
    Elsewhere(Vec<Home>),
    /// `loss: cross_entropy`: a setting of this block written with a colon, which made it a
    /// label and its value the keyword.
    Colon {
        /// The setting (the label, as written).
        setting: String,
        /// From the label's end to the keyword: replaced by one space.
        colon: Span,
    },
}

/// An unknown keyword in words. Only [`Names::UnknownKeyword`] is passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let Problem::Names(Names::UnknownKeyword {
        unknown,
        place,
        hint,
    }) = problem
    else {
        unreachable!("only unknown keywords are worded here")
    };
    let Unknown { span, name, .. } = &unknown;
    match hint {
        Some(KeywordHint::Colon { setting, colon }) => Diagnostic::new(
            code,
            *span,
            format!("unknown {place} `{name}` after `{setting}:`"),
        )
        .label(format!("`{setting}:` made this a labelled statement"))
        .help(format!(
            "settings are written `{setting} {name}`, without a colon; `name: layer(...)` \
                     only labels a layer"
        ))
        .fix(colon, " "),
        Some(KeywordHint::Elsewhere(homes)) if !homes.is_empty() => {
            let places: Vec<String> = homes.iter().map(|h| home(name, h)).collect();
            Diagnostic::new(code, *span, format!("`{name}` is not a {place}"))
                .label(format!("not a {place}"))
                .help(format!(
                    "`{name}` belongs {}",
                    super::wording::or_list(&places)
                ))
        }
        _ => super::wording::unknown_name(code, &place, unknown),
    }
}

/// Where the keyword `name` belongs, in words: "in the `data` block".
fn home(name: &str, h: &Home) -> String {
    match h {
        Home::Block("experiment") => "directly in the `experiment` block".to_string(),
        Home::Block(block) => format!("in the `{block}` block"),
        Home::Argument { setting, callee } => {
            format!("in the arguments of `{setting}`, as in `{setting} {callee}({name}: ...)`")
        }
    }
}
