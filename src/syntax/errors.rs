//! Syntax errors in words the user can act on: pest's error, read together with the text around
//! it to name the whole token found, what the parser was in the middle of, and habits brought
//! from other formats (`batch: 64`, `batch = 64`, a missing comma).

use pest::error::{ErrorVariant, InputLocation};

use super::parser::Rule;
use crate::diagnostic::problem::{Habit, Reading, Within};
use crate::diagnostic::{Diagnostic, Problem};
use crate::span::{FileId, Span};

/// The longest token a syntax error quotes, in bytes.
const MAX_TOKEN: usize = 40;

/// Readable names for grammar rules in "expected ..." messages.
fn rule_name(rule: &Rule) -> &'static str {
    match rule {
        Rule::EOI => "end of file",
        Rule::statement | Rule::keyword => "a statement",
        Rule::block => "`{`",
        Rule::call_args => "`(`",
        Rule::argument | Rule::arg_name => "an argument",
        Rule::value_expr
        | Rule::sweep
        | Rule::list
        | Rule::call
        | Rule::quantity
        | Rule::number
        | Rule::string
        | Rule::string_inner
        | Rule::boolean
        | Rule::device
        | Rule::digit_word
        | Rule::position_path
        | Rule::path_segment
        | Rule::path => "a value",
        Rule::unit => "a unit",
        Rule::identifier => "a name",
        Rule::value => "a value",
        Rule::separator => "a newline or `;`",
        Rule::file | Rule::statements | Rule::WHITESPACE | Rule::ident_char => "input",
    }
}

/// The K0001 diagnostic for pest's error `err` in `text`.
pub(super) fn syntax_error(file: FileId, text: &str, err: pest::error::Error<Rule>) -> Diagnostic {
    let pos = match err.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    let end = token_end(text, pos);
    let found = (pos < text.len()).then(|| {
        let token = &text[pos..end];
        if token.starts_with(['\n', '\r']) {
            "\n".to_string()
        } else {
            token.to_string()
        }
    });
    let scan = scan(text, pos);
    let habit = habit(file, text, pos, &scan);
    let problem = |expected: String, gave_up: Option<String>| {
        Problem::Reading(Reading::Syntax {
            span: Span::new(file, pos, end),
            found: found.clone(),
            expected,
            within: scan.within.clone(),
            habit: habit.clone(),
            gave_up,
        })
        .diagnostic()
    };
    match err.variant {
        ErrorVariant::ParsingError { positives, .. } if !positives.is_empty() => {
            let mut names: Vec<&str> = positives.iter().map(rule_name).collect();
            if names.contains(&"a statement") && !names.contains(&"end of file") {
                names.push("a newline or `;`");
            }
            names.sort_unstable();
            names.dedup();
            problem(join_or(&names), None)
        }
        // pest reports its call limit this way.
        ErrorVariant::CustomError { message } => problem(String::new(), Some(message)),
        ErrorVariant::ParsingError { .. } => problem(String::new(), None),
    }
}

/// Where the token that starts at `pos` ends: a word, a number, a string on one line, or one
/// character; at most [`MAX_TOKEN`] bytes.
fn token_end(text: &str, pos: usize) -> usize {
    let rest = &text[pos..];
    let Some(first) = rest.chars().next() else {
        return pos;
    };
    let len = if first == '"' {
        let body = &rest[1..];
        let mut escaped = false;
        let close = body.char_indices().find(|&(_, c)| {
            let stop = !escaped && (c == '"' || c == '\n');
            escaped = !escaped && c == '\\';
            stop
        });
        match close {
            Some((i, '"')) => i + 2,
            Some((i, _)) => i + 1,
            None => rest.len(),
        }
    } else if is_word(first)
        || (first == '-' && rest[1..].starts_with(|c: char| c.is_ascii_digit()))
    {
        let mut prev = first;
        let mut len = first.len_utf8();
        for c in rest[len..].chars() {
            // A sign belongs to a number's exponent, as in `1e-3`.
            let sign =
                matches!(c, '+' | '-') && matches!(prev, 'e' | 'E') && !first.is_alphabetic();
            if !(is_word(c) || c == '.' || sign) {
                break;
            }
            prev = c;
            len += c.len_utf8();
        }
        len
    } else if first == '\r' && rest.starts_with("\r\n") {
        2
    } else {
        first.len_utf8()
    };
    let mut end = pos + len.min(MAX_TOKEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// What the text before the error shows.
struct Scan {
    /// The innermost open bracket.
    within: Option<Within>,
    /// Where the statement the error is in starts.
    statement: usize,
}

/// Reads the text before `pos` once, keeping the open brackets and where the current statement
/// starts; strings and comments are skipped.
fn scan(text: &str, pos: usize) -> Scan {
    let bytes = text.as_bytes();
    let mut open: Vec<Within> = Vec::new();
    let mut statement = 0;
    let mut i = 0;
    while i < pos {
        match bytes[i] {
            b'#' => {
                while i < pos && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' => {
                i += 1;
                while i < pos && bytes[i] != b'"' && bytes[i] != b'\n' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' => {
                open.push(Within::Block(keyword(&text[statement..i])));
                statement = i + 1;
            }
            b'(' => open.push(Within::Arguments(word_before(&text[..i]))),
            b'[' => open.push(Within::List),
            b')' | b']' | b'}' => {
                open.pop();
                if bytes[i] == b'}' {
                    statement = i + 1;
                }
            }
            b'\n' | b';' if matches!(open.last(), None | Some(Within::Block(_))) => {
                statement = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    Scan {
        within: open.pop(),
        statement: statement.min(pos),
    }
}

/// A statement's keyword, from its text: the first word, or the second after `label:`.
fn keyword(statement: &str) -> String {
    let words: Vec<&str> = statement
        .split(|c: char| !is_word(c) && c != ':')
        .flat_map(|w| w.split_inclusive(':'))
        .filter(|w| !w.is_empty())
        .take(3)
        .collect();
    match words.as_slice() {
        [label, second, ..] if label.ends_with(':') => second.trim_end_matches(':').to_string(),
        [first, ..] => first.trim_end_matches(':').to_string(),
        [] => String::new(),
    }
}

/// The word that ends `text`, skipping spaces (the callee before a `(`).
fn word_before(text: &str) -> String {
    let text = text.trim_end_matches([' ', '\t']);
    let start = text
        .char_indices()
        .rev()
        .find(|&(_, c)| !is_word(c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    text[start..].to_string()
}

/// `"batch": 64`, as in JSON: a quoted name and a colon where a statement starts.
fn quoted_key(file: FileId, text: &str, pos: usize) -> Option<Habit> {
    let rest = text[pos..].strip_prefix('"')?;
    let close = rest.find('"')?;
    let key = &rest[..close];
    let after_quote = rest[close + 1..].trim_start_matches([' ', '\t']);
    let after_colon = after_quote.strip_prefix(':')?;
    let value_at = text.len() - after_colon.trim_start_matches([' ', '\t']).len();
    if key.is_empty() || !key.chars().all(is_word) || value_at >= text.len() {
        return None;
    }
    Some(Habit::QuotedKey {
        key: key.to_string(),
        span: Span::new(file, pos, value_at),
        value: text[value_at..token_end(text, value_at)].to_string(),
    })
}

/// The habit the error shows, if any.
fn habit(file: FileId, text: &str, pos: usize, scan: &Scan) -> Option<Habit> {
    let before = &text[scan.statement..pos];
    let trimmed = before.trim_end_matches([' ', '\t']);
    match scan.within {
        None | Some(Within::Block(_)) => {
            let key_then = |sign: char| {
                let head = trimmed.strip_suffix(sign)?.trim_end_matches([' ', '\t']);
                let key = head.trim_start_matches([' ', '\t', '\u{FEFF}']);
                (!key.is_empty() && key.chars().all(is_word)).then(|| {
                    let at = scan.statement + trimmed.len() - 1;
                    (key.to_string(), Span::new(file, at, at + 1))
                })
            };
            if let Some((key, colon)) = key_then(':') {
                let value = text[pos..].chars().next()?;
                let is_value = value.is_ascii_digit() || matches!(value, '"' | '[' | '-' | '{');
                let spaced = pos > colon.end as usize;
                return is_value.then_some(Habit::Colon { key, colon, spaced });
            }
            let key = before.trim_matches([' ', '\t', '\u{FEFF}']);
            if key.is_empty() {
                return quoted_key(file, text, pos);
            }
            if text[pos..].starts_with('=') && !key.is_empty() && key.chars().all(is_word) {
                let after = pos + 1 + text[pos + 1..].len()
                    - text[pos + 1..].trim_start_matches([' ', '\t']).len();
                let value_end = token_end(text, after);
                let from = scan.statement + before.trim_end_matches([' ', '\t']).len();
                return Some(Habit::Equals {
                    key: key.to_string(),
                    sign: Span::new(file, from, after),
                    value: text[after..value_end].to_string(),
                });
            }
            None
        }
        Some(Within::Arguments(_) | Within::List) => {
            let starts_value = text[pos..]
                .chars()
                .next()
                .is_some_and(|c| is_word(c) || matches!(c, '"' | '[' | '-'));
            let prev = text[..pos].trim_end_matches([' ', '\t', '\n', '\r']);
            let ends_value = prev
                .chars()
                .next_back()
                .is_some_and(|c| is_word(c) || matches!(c, ')' | ']' | '"'));
            let comment = prev.rfind('\n').is_some_and(|l| prev[l..].contains('#'));
            (starts_value && ends_value && !comment).then(|| Habit::MissingComma {
                at: Span::new(file, prev.len(), prev.len()),
            })
        }
    }
}

fn join_or(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use crate::diagnostic::Diagnostic;
    use crate::span::FileId;

    fn error(text: &str) -> Diagnostic {
        *parse(FileId::default(), text).expect_err("the text has a syntax error")
    }

    /// The fixes applied to `text`, one at a time.
    fn fixed(text: &str) -> Vec<String> {
        error(text)
            .fixes
            .iter()
            .map(|f| {
                let mut t = text.to_string();
                t.replace_range(f.span.start as usize..f.span.end as usize, &f.replacement);
                t
            })
            .collect()
    }

    #[test]
    fn the_whole_token_and_the_block_are_named() {
        let d = error("experiment \"x\" {\n  data {\n    batch: 64\n  }\n}\n");
        assert_eq!(
            d.message,
            "unexpected `64` after `batch:` in the `data` block"
        );
        assert_eq!(d.primary.span.len(), 2);
        let d = error("experiment \"x\" {\n  train { epochs 5 } }\n}\n");
        assert!(d.message.ends_with("found `}`"), "{}", d.message);
        let d = error("experiment \"x\" {\n  model { fc: linear(3, [1, 2 abc]) }\n}\n");
        assert!(d.message.contains("`abc`"), "{}", d.message);
    }

    #[test]
    fn habits_from_other_formats_come_with_fixes() {
        assert_eq!(
            fixed("data {\n  batch: 64\n}\n"),
            ["data {\n  batch 64\n}\n"]
        );
        assert_eq!(
            fixed("data {\n  batch:64\n}\n"),
            ["data {\n  batch 64\n}\n"]
        );
        assert_eq!(
            fixed("data {\n  batch = 64\n}\n"),
            ["data {\n  batch 64\n}\n"]
        );
        assert_eq!(
            fixed("data {\n  \"batch\": 64\n}\n"),
            ["data {\n  batch 64\n}\n"]
        );
        assert_eq!(
            fixed("experiment \"x\" {\n  data: {\n"),
            ["experiment \"x\" {\n  data {\n"]
        );
        assert_eq!(
            fixed("optimizer adam(lr: 1e-3 betas: [0.9, 0.99])\n"),
            ["optimizer adam(lr: 1e-3, betas: [0.9, 0.99])\n"]
        );
        let d = error("model { fc: linear(256, bias: true w: 3) }\n");
        assert_eq!(
            d.message,
            "expected `,` before `w` in the arguments of `linear(...)`"
        );
    }

    #[test]
    fn a_colon_before_a_name_is_not_taken_for_a_setting() {
        // `fc1: linear(...)` is a labelled layer; an error after it gets no colon fix.
        let d = error("model {\n  fc1: linear(3) =\n}\n");
        assert!(d.fixes.is_empty(), "{d:?}");
    }

    #[test]
    fn a_multibyte_character_before_a_bracket_is_no_panic() {
        // A byte-order mark counts as space, so the callee before `(` ends in a multibyte character.
        let d = error("source synthetic\u{FEFF}(inputs: 1\n");
        assert!(!d.message.is_empty());
    }
}
