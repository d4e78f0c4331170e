//! The pest parser and the conversion of its pairs into the syntax tree.

use std::num::NonZeroUsize;

use pest::iterators::Pair;
use pest::Parser as _;
use pest_derive::Parser;

use super::ast::*;
use super::MAX_NESTING;
use crate::diagnostic::problem::Reading;
use crate::diagnostic::{Diagnostic, Problem};
use crate::span::{FileId, Span};

#[derive(Parser)]
#[grammar = "../grammar/kiln.pest"]
struct KilnParser;

/// Parses one file. Returns the tree, or the one syntax diagnostic that stopped the parse.
pub fn parse(file: FileId, text: &str) -> Result<File, Box<Diagnostic>> {
    check_nesting(file, text)?;
    // Bounds backtracking on adversarial input; real files use far fewer calls.
    pest::set_call_limit(NonZeroUsize::new(200 * text.len() + 100_000));
    let mut pairs = KilnParser::parse(Rule::file, text)
        .map_err(|e| Box::new(super::errors::syntax_error(file, text, e)))?;
    let Some(root) = pairs.next() else {
        return Ok(File { statements: vec![] });
    };
    let b = Builder { file, text };
    let statements = root
        .into_inner()
        .filter(|p| p.as_rule() == Rule::statement)
        .map(|p| b.statement(p))
        .collect();
    Ok(File { statements })
}

/// Refuses inputs that nest brackets deeper than [`MAX_NESTING`], before pest recurses into them.
fn check_nesting(file: FileId, text: &str) -> Result<(), Box<Diagnostic>> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(Box::new(
                        Problem::Reading(Reading::TooDeep {
                            span: Span::new(file, i, i + 1),
                            max: MAX_NESTING,
                        })
                        .diagnostic(),
                    ));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

struct Builder<'t> {
    file: FileId,
    /// The whole text parsed.
    text: &'t str,
}

impl Builder<'_> {
    /// The pair's span. Only rules that end with their own token may use it: a rule that ends
    /// in an optional part also holds the whitespace and comments pest skipped after its last
    /// inner pair (see [`Builder::trimmed`]).
    fn span(&self, pair: &Pair<Rule>) -> Span {
        let s = pair.as_span();
        Span::new(self.file, s.start(), s.end())
    }

    /// The span of a pair that ends in an optional part: from its start to the end of its last
    /// inner pair (`inner_end`) when only skipped text follows that.
    fn trimmed(&self, pair: &pest::Span<'_>, inner_end: usize) -> Span {
        let end = pair.end();
        let end = if only_skipped(self.text.get(inner_end..end).unwrap_or("")) {
            inner_end
        } else {
            end
        };
        Span::new(self.file, pair.start(), end)
    }

    fn ident(&self, pair: Pair<Rule>) -> Ident {
        Ident {
            name: pair.as_str().to_string(),
            span: self.span(&pair),
        }
    }

    fn statement(&self, pair: Pair<Rule>) -> Statement {
        let whole = pair.as_span();
        let mut label = None;
        let mut keyword = None;
        let mut args = None;
        let mut values = Vec::new();
        let mut body = None;
        let mut inner_end = whole.start();
        for p in pair.into_inner() {
            match p.as_rule() {
                // The first word is the keyword unless a second follows it after a `:`.
                Rule::keyword => {
                    let word = self.ident(p);
                    inner_end = word.span.end as usize;
                    label = keyword.replace(word);
                }
                Rule::call_args => {
                    let a = self.args(p);
                    inner_end = a.span.end as usize;
                    args = Some(a);
                }
                Rule::value_expr => {
                    let v = self.value_expr(p);
                    inner_end = v.span.end as usize;
                    values.push(v);
                }
                Rule::block => {
                    let b = self.block(p);
                    inner_end = b.span.end as usize;
                    body = Some(b);
                }
                _ => unreachable!("statement holds only the rules above"),
            }
        }
        Statement {
            label,
            keyword: keyword.unwrap_or_else(|| unreachable!("the grammar requires a keyword")),
            args,
            values,
            body,
            span: self.trimmed(&whole, inner_end),
        }
    }

    fn block(&self, pair: Pair<Rule>) -> Block {
        let span = self.span(&pair);
        Block {
            statements: pair.into_inner().map(|p| self.statement(p)).collect(),
            span,
        }
    }

    fn args(&self, pair: Pair<Rule>) -> Args {
        let span = self.span(&pair);
        let items = pair
            .into_inner()
            .map(|arg| {
                let mut name = None;
                let mut value = None;
                for p in arg.into_inner() {
                    match p.as_rule() {
                        Rule::arg_name => name = Some(self.ident(p)),
                        _ => value = Some(self.value_expr(p)),
                    }
                }
                Arg {
                    name,
                    value: value.unwrap_or_else(|| unreachable!("an argument has a value")),
                }
            })
            .collect();
        Args { items, span }
    }

    fn value_expr(&self, pair: Pair<Rule>) -> Value {
        let whole = pair.as_span();
        let mut inner = pair.into_inner();
        let first = self.value(
            inner
                .next()
                .unwrap_or_else(|| unreachable!("value_expr has a value")),
        );
        match inner.next() {
            Some(second) => {
                let second = self.value(second);
                Value {
                    span: self.trimmed(&whole, second.span.end as usize),
                    kind: ValueKind::Arrow(Box::new(first), Box::new(second)),
                }
            }
            None => first,
        }
    }

    fn value(&self, pair: Pair<Rule>) -> Value {
        let whole = pair.as_span();
        let mut span = self.span(&pair);
        let kind = match pair.as_rule() {
            Rule::sweep => {
                let inner = pair.into_inner().next().unwrap_or_else(|| unreachable!());
                ValueKind::Sweep(Box::new(self.value(inner)))
            }
            Rule::list => ValueKind::List(pair.into_inner().map(|p| self.value_expr(p)).collect()),
            Rule::call => {
                let mut inner = pair.into_inner();
                let name = self.ident(inner.next().unwrap_or_else(|| unreachable!()));
                let args = self.args(inner.next().unwrap_or_else(|| unreachable!()));
                ValueKind::Call(name, args)
            }
            Rule::quantity => {
                let mut inner = pair.into_inner();
                let number = inner.next().unwrap_or_else(|| unreachable!());
                let unit = inner.next();
                let last_end = unit.as_ref().unwrap_or(&number).as_span().end();
                span = self.trimmed(&whole, last_end);
                let unit = unit.and_then(|u| Unit::parse(u.as_str()));
                let clean: String = number.as_str().chars().filter(|&c| c != '_').collect();
                ValueKind::Number {
                    value: clean.parse().unwrap_or(f64::NAN),
                    integer: !clean.contains(['.', 'e', 'E']),
                    unit,
                }
            }
            Rule::string => {
                let raw = pair.into_inner().next().map_or("", |p| p.as_str());
                ValueKind::Str(unescape(raw))
            }
            Rule::boolean => ValueKind::Bool(pair.as_str() == "true"),
            Rule::device => {
                let (name, index) = pair
                    .as_str()
                    .rsplit_once(':')
                    .unwrap_or_else(|| unreachable!());
                ValueKind::Device(name.to_string(), index.parse().unwrap_or(u32::MAX))
            }
            Rule::path | Rule::position_path | Rule::digit_word => {
                ValueKind::Path(pair.as_str().to_string())
            }
            _ => unreachable!("value alternatives are listed above"),
        };
        Value { kind, span }
    }
}

/// Whether text holds only what the grammar skips: spaces, tabs, escaped newlines, comments.
fn only_skipped(mut text: &str) -> bool {
    loop {
        text = text.trim_start_matches([' ', '\t', '\u{FEFF}']);
        if let Some(rest) = text.strip_prefix('#') {
            text = rest.find('\n').map_or("", |i| &rest[i..]);
        } else if let Some(rest) = text
            .strip_prefix("\\\n")
            .or_else(|| text.strip_prefix("\\\r\n"))
        {
            text = rest;
        } else {
            return text.is_empty();
        }
    }
}

fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}
