//! `allow [K0411, ...]`: warnings the experiment silences. The checker drops them from the
//! trial's diagnostics, so `kiln check`, `kiln plan`, `kiln run`, `kiln eval` and editors all
//! stop showing them; the runtime silences its own warnings (K0512, K0513) the same way. Only
//! warnings can be allowed: an error's code is K0119, a code that does not exist K0113, each
//! naming the warnings that can be.

use super::cx::Cx;
use super::words::warning_codes;
use crate::diagnostic::problem::{Expected, Names};
use crate::diagnostic::{Code, Diagnostic, Problem, Severity};
use crate::syntax::ast::{Statement, ValueKind};

/// Reads an `allow` statement: a warning's code or a list of them. Returns the codes read (an
/// unknown one is reported and left out).
pub fn check(cx: &mut Cx, stmt: &Statement) -> Vec<String> {
    let codes = warning_codes();
    let Some(value) = cx.single(stmt) else {
        return Vec::new();
    };
    let items = match &value.kind {
        ValueKind::List(items) => items.iter().collect(),
        _ => vec![value],
    };
    let mut allowed = Vec::new();
    for item in items {
        let error = match &item.kind {
            ValueKind::Path(word) => Code::ALL
                .iter()
                .any(|c| c.code() == word && c.severity() == Severity::Error),
            _ => false,
        };
        if error {
            cx.report(Problem::Names(Names::WrongType {
                span: item.span,
                expected: Expected::Callee {
                    what: "a warning code".into(),
                    known: codes.iter().map(|c| c.to_string()).collect(),
                },
                found: "an error's code (errors cannot be allowed)",
            }));
        } else if let Some(code) = cx.choice(item, "warning code", &codes) {
            allowed.push(code.to_string());
        }
    }
    allowed
}

/// Drops the warnings of `diags` that `allowed` names; errors always stay.
pub fn silence(diags: &mut Vec<Diagnostic>, allowed: &[String]) {
    if allowed.is_empty() {
        return;
    }
    diags.retain(|d| d.is_error() || !allowed.iter().any(|a| a == d.code.code()));
}
