//! Wording of syntax errors (K0001): the token found, what the parser was in the middle of, and
//! targeted help for habits brought from other formats.

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::Reading;
use crate::span::Span;

/// What the parser was in the middle of when it stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Within {
    /// A `{ ... }` block opened by this keyword (`data`, `train`).
    Block(String),
    /// The arguments of a call to this name (`linear`, `adam`).
    Arguments(String),
    /// A `[ ... ]` list.
    List,
}

/// A habit from another format that the syntax error shows, with the edit that fixes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Habit {
    /// `batch: 64`, as in YAML or JSON: a setting written with a colon.
    Colon {
        /// The setting's name.
        key: String,
        /// The colon.
        colon: Span,
        /// Whether a space follows the colon, so that removing it leaves `batch 64`.
        spaced: bool,
    },
    /// `batch = 64`, as in TOML or Python: a setting written with `=`.
    Equals {
        /// The setting's name.
        key: String,
        /// The `=` and the spaces around it, replaced by one space.
        sign: Span,
        /// The value written after the `=`.
        value: String,
    },
    /// `"batch": 64`, as in JSON: a quoted name and a colon.
    QuotedKey {
        /// The setting's name, without its quotes.
        key: String,
        /// From the opening quote to the value, replaced by the name and a space.
        span: Span,
        /// The value written after the colon.
        value: String,
    },
    /// Two arguments or list items with no comma between them.
    MissingComma {
        /// The empty span where the comma goes.
        at: Span,
    },
}

/// A syntax error in words. Only [`Reading::Syntax`] is passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let Problem::Reading(Reading::Syntax {
        span,
        found,
        expected,
        within,
        habit,
        gave_up,
    }) = problem
    else {
        unreachable!("only syntax errors are worded here")
    };
    let new = |message: String| Diagnostic::new(code, span, message);
    let found_text = match found.as_deref() {
        None => "end of file".to_string(),
        Some("\n") => "end of line".to_string(),
        Some(token) => format!("`{}`", printable(token)),
    };
    let place = within.as_ref().map_or(String::new(), |w| match w {
        Within::Block(name) => format!(" in the `{name}` block"),
        Within::Arguments(name) => format!(" in the arguments of `{name}(...)`"),
        Within::List => " in a list".to_string(),
    });
    if let Some(message) = gave_up {
        return new(format!("the parser gave up: {message}"))
            .label("here")
            .help("this input is too complex to parse; check it for stray brackets");
    }
    let first = found.as_deref().and_then(|t| t.chars().next());
    match habit {
        Some(Habit::Colon { key, colon, spaced }) => {
            let value = found.as_deref().unwrap_or("...");
            new(format!("unexpected {found_text} after `{key}:`{place}"))
                .label("a value after `name:`")
                .with(colon, "remove this colon")
                .help(format!(
                    "settings are written `{key} {value}`, without a colon; `name: layer(...)` \
                     only labels a layer"
                ))
                .fix(colon, if spaced { "" } else { " " })
        }
        Some(Habit::Equals { key, sign, value }) => {
            new(format!("unexpected `=` after `{key}`{place}"))
                .label("`=` is not Kiln syntax")
                .help(format!(
                    "settings are written `{key} {value}`, without `=`; arguments are written \
                     `name: value`"
                ))
                .fix(sign, " ")
        }
        Some(Habit::QuotedKey { key, span, value }) => {
            new(format!("unexpected {found_text}{place}"))
                .label("a quoted name")
                .help(format!(
                    "settings are written `{key} {value}`, without quotes or a colon"
                ))
                .fix(span, format!("{key} "))
        }
        Some(Habit::MissingComma { at }) => new(format!("expected `,` before {found_text}{place}"))
            .label("a `,` is missing before this")
            .help("separate arguments and list items with commas")
            .fix(at, ","),
        None if expected.is_empty() => new(format!("unexpected {found_text}{place}"))
            .label("unexpected here")
            .help(help(first)),
        None => new(format!("expected {expected}, found {found_text}{place}"))
            .label(format!("expected {expected}"))
            .help(help(first)),
    }
}

/// A token as it can be quoted on one line: control characters escaped, quotes kept.
fn printable(token: &str) -> String {
    token
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn help(found: Option<char>) -> &'static str {
    match found {
        Some('}') => "a `}` here closes a block that was never opened, or a statement before it is unfinished",
        Some('=') => "Kiln writes settings as `name value` (as in `batch 64`) and arguments as `name: value`",
        Some(',') => "commas separate items only inside `( )` and `[ ]`",
        None => "a block or list is not closed: add the missing `}`, `)` or `]`",
        _ => "statements are written `keyword value ...` or `name: layer(args)`, one per line",
    }
}
