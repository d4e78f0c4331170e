//! Reading statements, shared by the block checkers: a block's settings by keyword, a choice
//! named from a table (bare or called), a duration, and the reports of a setting given twice
//! and of a name that is no layer or block of the model.

use std::collections::HashMap;

use super::cx::{strings, Cx};
use super::words::Choice;
use crate::diagnostic::problem::{Arguments, Expected, Names, Unknown};
use crate::diagnostic::{Code, Problem};
use crate::ir::Duration;
use crate::syntax::ast::{Args, Ident, Statement, Unit, Value, ValueKind};

/// The statements of a block (`data { ... }`), and its settings by keyword: a statement whose
/// keyword is not one of the block's is reported (`what` names them: `data setting`), and so is
/// a setting given twice, unless it is `repeatable`. `None`, reported with `example`, when the
/// statement has no block.
pub fn block<'s>(
    cx: &mut Cx,
    stmt: &'s Statement,
    what: &str,
    keywords: &[&str],
    repeatable: &[&str],
    example: &'static str,
) -> Option<(&'s [Statement], HashMap<&'s str, &'s Statement>)> {
    let Some(body) = &stmt.body else {
        cx.report(Problem::Names(Names::WrongArguments {
            span: stmt.span,
            situation: Arguments::NoBlock {
                keyword: stmt.keyword.name.clone(),
                example,
            },
        }));
        return None;
    };
    let mut seen: HashMap<&str, &Statement> = HashMap::new();
    for s in &body.statements {
        let kw = s.keyword.name.as_str();
        if !keywords.contains(&kw) {
            cx.unknown_keyword(what, s, keywords);
        } else if !repeatable.contains(&kw) {
            match seen.get(kw) {
                Some(first) => duplicate(cx, kw, first, s),
                None => {
                    seen.insert(kw, s);
                }
            }
        }
    }
    Some((&body.statements, seen))
}

/// Reports a setting given twice in one block.
pub fn duplicate(cx: &mut Cx, kw: &str, first: &Statement, again: &Statement) {
    cx.report(Problem::Names(Names::DuplicateSetting {
        span: again.keyword.span,
        first: first.keyword.span,
        name: kw.to_string(),
    }));
}

/// A choice read from a statement.
pub struct Called<'s, T> {
    /// The word, as the table spells it.
    pub word: &'static str,
    /// Its tag.
    pub tag: T,
    /// Its parameters in positional order.
    pub params: &'static [&'static str],
    /// The call's arguments, when it is called.
    pub args: Option<&'s Args>,
    /// The whole value.
    pub value: &'s Value,
}

/// Reads a statement whose value names a choice, bare (`sgd`) or called (`sgd(lr: 0.1)`).
pub fn callee<'s, T: Copy>(
    cx: &mut Cx,
    stmt: &'s Statement,
    code: Code,
    what: &str,
    table: &[Choice<T>],
) -> Option<Called<'s, T>> {
    let v = cx.single(stmt)?;
    callee_value(cx, v, code, what, table)
}

/// Reads a value that names a choice, bare (`cosine`) or called (`cosine(min_lr: 0)`).
pub fn callee_value<'s, T: Copy>(
    cx: &mut Cx,
    v: &'s Value,
    code: Code,
    what: &str,
    table: &[Choice<T>],
) -> Option<Called<'s, T>> {
    let (ident, args) = match &v.kind {
        ValueKind::Call(name, args) => (name.clone(), Some(args)),
        ValueKind::Path(p) => (
            Ident {
                name: p.clone(),
                span: v.span,
            },
            None,
        ),
        _ => {
            cx.wrong_type(
                v,
                Expected::Callee {
                    what: what.to_string(),
                    known: table.iter().map(|(k, ..)| k.to_string()).collect(),
                },
            );
            return None;
        }
    };
    match table.iter().find(|(k, ..)| *k == ident.name) {
        Some((word, tag, params)) => Some(Called {
            word,
            tag: *tag,
            params,
            args,
            value: v,
        }),
        None => {
            let known: Vec<&str> = table.iter().map(|(k, ..)| *k).collect();
            cx.unknown(code, what, &ident, &known);
            None
        }
    }
}

/// A duration (`5 steps`, `2 epochs`), a bare integer counting `default` units.
pub fn duration_of(cx: &mut Cx, v: &Value, default: Unit) -> Option<Duration> {
    let (n, unit) = cx.duration(v, default)?;
    Some(if unit == Unit::Epochs {
        Duration::Epochs(n)
    } else {
        Duration::Steps(n)
    })
}

/// Reports a name that is no layer or block of the model.
/// A `suffix` such as `.weight` is set aside while looking for a similar name.
pub fn unknown_reference(cx: &mut Cx, ident: &Ident, known: &[&str], suffix: &str) {
    cx.report(Problem::Names(Names::UnknownReference {
        unknown: Unknown {
            span: ident.span,
            name: ident.name.clone(),
            candidates: strings(known),
        },
        suffix: suffix.to_string(),
    }));
}
