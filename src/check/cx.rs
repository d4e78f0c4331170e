//! The checker's context: the diagnostics collected so far, and the helpers that read values
//! and bind arguments while reporting every problem they meet.

use crate::diagnostic::problem::{
    Arguments, Expected, KeywordHint, Misplaced, Names, OutOfRange, Unknown,
};
use crate::diagnostic::{Code, Diagnostic, Problem};
use crate::ir::Device;
use crate::span::Span;
use crate::syntax::ast::{Arg, Args, Ident, Statement, Unit, Value, ValueKind};

/// The hint for an unknown keyword that is at home elsewhere.
fn elsewhere(word: &str) -> Option<KeywordHint> {
    let homes = super::homes::homes(word);
    (!homes.is_empty()).then_some(KeywordHint::Elsewhere(homes))
}

/// Collects diagnostics while the checker walks one experiment.
#[derive(Default)]
pub struct Cx {
    /// Everything found so far.
    pub diags: Vec<Diagnostic>,
    /// The warnings the experiment allows (`allow`), by code: left out of its diagnostics.
    pub allowed: Vec<String>,
}

pub use crate::diagnostic::problem::Range;

/// Arguments bound to parameter names: the result of [`Cx::bind`].
pub struct Bound<'a> {
    values: Vec<(&'static str, &'a Value, Option<Span>)>,
    /// The span of the whole call, for "missing argument" reports.
    pub span: Span,
}

impl<'a> Bound<'a> {
    /// The value given for `name`.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.values
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, v, _)| *v)
    }
}

impl Cx {
    /// Records a diagnostic.
    pub fn push(&mut self, diag: Diagnostic) {
        self.diags.push(diag);
    }

    /// Records a problem.
    pub fn report(&mut self, problem: Problem) {
        self.diags.push(problem.diagnostic());
    }

    /// Reports an unknown name of the category `code` names, with `known` as its candidates;
    /// `what` says where it stands for keywords and choices (`data setting`, `mode`).
    pub fn unknown(&mut self, code: Code, what: &str, name: &Ident, known: &[&str]) {
        let unknown = Unknown {
            span: name.span,
            name: name.name.clone(),
            candidates: known.iter().map(|k| k.to_string()).collect(),
        };
        self.report(match code {
            Code::UnknownKeyword => Problem::Names(Names::UnknownKeyword {
                hint: elsewhere(&unknown.name),
                unknown,
                place: what.to_string(),
            }),
            Code::UnknownLayer => Problem::Names(Names::UnknownLayer(unknown)),
            Code::UnknownOptimizer => Problem::Names(Names::UnknownOptimizer(unknown)),
            Code::UnknownLoss => Problem::Names(Names::UnknownLoss(unknown)),
            Code::UnknownSchedule => Problem::Names(Names::UnknownSchedule(unknown)),
            Code::UnknownMetric => Problem::Names(Names::UnknownMetric(unknown)),
            Code::UnknownSource => Problem::Names(Names::UnknownSource {
                unknown,
                generator: what == "generator",
            }),
            Code::UnknownPruneMethod => Problem::Names(Names::UnknownPruneMethod(unknown)),
            Code::UnknownQuantScheme => Problem::Names(Names::UnknownQuantScheme(unknown)),
            Code::UnknownStrategy => Problem::Names(Names::UnknownStrategy(unknown)),
            Code::UnknownReference => Problem::Names(Names::UnknownReference {
                unknown,
                suffix: String::new(),
            }),
            _ => Problem::Names(Names::UnknownChoice {
                unknown,
                what: what.to_string(),
            }),
        });
    }

    /// Reports the unknown keyword of `stmt`, a `place` (`train setting`) whose keywords are
    /// `known`: with the colon that made a setting a label (`loss: cross_entropy`), or where the
    /// keyword belongs when it is at home elsewhere.
    pub fn unknown_keyword(&mut self, place: &str, stmt: &Statement, known: &[&str]) {
        let Some(label) = stmt
            .label
            .as_ref()
            .filter(|l| known.contains(&l.name.as_str()))
        else {
            self.unknown(Code::UnknownKeyword, place, &stmt.keyword, known);
            return;
        };
        self.report(Problem::Names(Names::UnknownKeyword {
            unknown: Unknown {
                span: stmt.keyword.span,
                name: stmt.keyword.name.clone(),
                candidates: strings(known),
            },
            place: place.to_string(),
            hint: Some(KeywordHint::Colon {
                setting: label.name.clone(),
                colon: Span {
                    file: label.span.file,
                    start: label.span.end,
                    end: stmt.keyword.span.start,
                },
            }),
        }));
    }

    /// Binds a call's arguments to `params` (positional arguments fill them in order). Reports
    /// unknown names, repeats and surplus positional arguments.
    pub fn bind<'a>(
        &mut self,
        callee: &str,
        args: Option<&'a Args>,
        fallback: Span,
        params: &[&'static str],
    ) -> Bound<'a> {
        let span = args.map_or(fallback, |a| a.span);
        let mut bound = Bound {
            values: Vec::new(),
            span,
        };
        let Some(args) = args else { return bound };
        let mut next_positional = 0;
        for Arg { name, value } in &args.items {
            let (param, name_span) = match name {
                Some(n) => match params.iter().find(|p| **p == n.name) {
                    Some(p) => (*p, Some(n.span)),
                    None => {
                        self.report(Problem::Names(Names::UnknownParameter {
                            unknown: Unknown {
                                span: n.span,
                                name: n.name.clone(),
                                candidates: strings(params),
                            },
                            callee: callee.to_string(),
                        }));
                        continue;
                    }
                },
                None => {
                    if bound.values.iter().any(|(_, _, s)| s.is_some()) {
                        self.report(Problem::Names(Names::WrongArguments {
                            span: value.span,
                            situation: Arguments::PositionalAfterNamed,
                        }));
                        continue;
                    }
                    match params.get(next_positional) {
                        Some(p) => {
                            next_positional += 1;
                            (*p, None)
                        }
                        None => {
                            self.report(Problem::Names(Names::WrongArguments {
                                span: value.span,
                                situation: Arguments::TooManyPositional {
                                    callee: callee.to_string(),
                                    params: strings(params),
                                },
                            }));
                            continue;
                        }
                    }
                }
            };
            if let Some((_, first, _)) = bound.values.iter().find(|(n, _, _)| *n == param) {
                self.report(Problem::Names(Names::DuplicateSetting {
                    span: name_span.unwrap_or(value.span),
                    first: first.span,
                    name: param.to_string(),
                }));
                continue;
            }
            bound.values.push((param, value, name_span));
        }
        bound
    }

    /// Reports a missing argument.
    pub fn missing(&mut self, callee: &str, param: &str, span: Span) {
        self.report(Problem::Names(Names::WrongArguments {
            span,
            situation: Arguments::Missing {
                callee: callee.to_string(),
                param: param.to_string(),
            },
        }));
    }

    /// Reports a value of the wrong type; a sweep left in place was reported already (K0211).
    pub fn wrong_type(&mut self, value: &Value, expected: Expected) {
        if matches!(value.kind, ValueKind::Sweep(_)) {
            return;
        }
        self.report(Problem::Names(Names::WrongType {
            span: value.span,
            expected,
            found: value.type_name(),
        }));
    }

    /// Reads a plain number (no unit).
    pub fn number(&mut self, value: &Value) -> Option<f64> {
        match &value.kind {
            ValueKind::Number {
                value: x,
                unit: None,
                ..
            } if x.is_finite() => Some(*x),
            _ => {
                self.wrong_type(value, Expected::Number);
                None
            }
        }
    }

    /// Reads a number and checks its range.
    pub fn number_in(&mut self, value: &Value, what: &str, range: Range) -> Option<f64> {
        let x = self.number(value)?;
        if !range.holds(x) {
            self.report(Problem::Names(Names::OutOfRange {
                span: value.span,
                situation: OutOfRange::Number {
                    what: what.to_string(),
                    range,
                    value: x,
                },
            }));
            return None;
        }
        Some(x)
    }

    /// Reads a non-negative integer (no unit).
    pub fn uint(&mut self, value: &Value) -> Option<u64> {
        match &value.kind {
            ValueKind::Number {
                value: x,
                integer: true,
                unit: None,
            } if *x >= 0.0 && *x <= 9.0e15 => Some(*x as u64),
            ValueKind::Number {
                value: x,
                integer: true,
                unit: None,
            } => {
                self.report(Problem::Names(Names::OutOfRange {
                    span: value.span,
                    situation: OutOfRange::NotUnsigned { value: *x },
                }));
                None
            }
            _ => {
                self.wrong_type(value, Expected::Integer);
                None
            }
        }
    }

    /// Reads an integer that must be at least `min`.
    pub fn uint_min(&mut self, value: &Value, what: &str, min: u64) -> Option<u64> {
        let x = self.uint(value)?;
        if x < min {
            self.report(Problem::Names(Names::OutOfRange {
                span: value.span,
                situation: OutOfRange::Below {
                    what: what.to_string(),
                    min,
                    value: x,
                },
            }));
            return None;
        }
        Some(x)
    }

    /// Reads a signed integer (used for dimensions such as `dim: -1`).
    pub fn int(&mut self, value: &Value) -> Option<i64> {
        match &value.kind {
            ValueKind::Number {
                value: x,
                integer: true,
                unit: None,
            } if x.abs() <= 9.0e15 => Some(*x as i64),
            _ => {
                self.wrong_type(value, Expected::Integer);
                None
            }
        }
    }

    /// Reads `true` or `false`.
    pub fn boolean(&mut self, value: &Value) -> Option<bool> {
        match &value.kind {
            ValueKind::Bool(b) => Some(*b),
            _ => {
                self.wrong_type(value, Expected::Boolean);
                None
            }
        }
    }

    /// Reads a string.
    pub fn string(&mut self, value: &Value) -> Option<String> {
        match &value.kind {
            ValueKind::Str(s) => Some(s.clone()),
            _ => {
                self.wrong_type(value, Expected::String);
                None
            }
        }
    }

    /// Reads a plain name (not a dotted path).
    pub fn name(&mut self, value: &Value) -> Option<Ident> {
        match &value.kind {
            ValueKind::Path(p) => Some(Ident {
                name: p.clone(),
                span: value.span,
            }),
            _ => {
                self.wrong_type(value, Expected::Name);
                None
            }
        }
    }

    /// Reads a reference to a layer or block: a name or dotted path (`fc1`, `encoder.1`,
    /// `3.weight`), or a position the grammar reads as a number (`3`, or `3.1` inside an
    /// unnamed residual).
    pub fn reference(&mut self, value: &Value) -> Option<Ident> {
        match &value.kind {
            ValueKind::Number {
                value: x,
                integer,
                unit: None,
            } => match position(*x, *integer, value.span.len()) {
                Some(name) => Some(Ident {
                    name,
                    span: value.span,
                }),
                None => {
                    self.wrong_type(value, Expected::Name);
                    None
                }
            },
            _ => self.name(value),
        }
    }

    /// Reads one of a fixed set of words.
    pub fn choice(
        &mut self,
        value: &Value,
        what: &str,
        options: &[&'static str],
    ) -> Option<&'static str> {
        let ident = self.name(value)?;
        match options.iter().find(|o| **o == ident.name) {
            Some(o) => Some(*o),
            None => {
                self.unknown(Code::UnknownChoice, what, &ident, options);
                None
            }
        }
    }

    /// Reads a shape: a list of positive integers.
    pub fn shape(&mut self, value: &Value) -> Option<Vec<i64>> {
        let ValueKind::List(items) = &value.kind else {
            self.wrong_type(value, Expected::Shape);
            return None;
        };
        let mut dims = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            match self.uint_min(item, "a dimension", 1) {
                Some(d) => dims.push(d as i64),
                None => ok = false,
            }
        }
        ok.then_some(dims)
    }

    /// Reads a number with an optional unit of steps or epochs; a bare integer is `default`.
    pub fn duration(&mut self, value: &Value, default: Unit) -> Option<(u64, Unit)> {
        match &value.kind {
            ValueKind::Number {
                value: x,
                integer: true,
                unit,
            } if *x >= 1.0 && matches!(unit, None | Some(Unit::Steps | Unit::Epochs)) => {
                Some((*x as u64, unit.unwrap_or(default)))
            }
            ValueKind::Number { .. } => {
                self.report(Problem::Names(Names::WrongType {
                    span: value.span,
                    expected: Expected::WholeDuration,
                    found: value.type_name(),
                }));
                None
            }
            _ => {
                self.wrong_type(value, Expected::Duration);
                None
            }
        }
    }

    /// Reads a byte size such as `80 GiB`.
    pub fn bytes(&mut self, value: &Value) -> Option<u64> {
        match &value.kind {
            ValueKind::Number {
                value: x,
                unit: Some(Unit::Bytes(m)),
                ..
            } if *x > 0.0 => Some((*x * *m as f64) as u64),
            _ => {
                self.wrong_type(value, Expected::Bytes);
                None
            }
        }
    }

    /// Reads a device: `cpu`, `cuda`, `cuda:N` or `auto`.
    pub fn device(&mut self, value: &Value) -> Option<Device> {
        let text = match &value.kind {
            ValueKind::Path(p) => p.clone(),
            ValueKind::Device(name, index) => format!("{name}:{index}"),
            _ => {
                self.wrong_type(value, Expected::Device);
                return None;
            }
        };
        match text.parse() {
            Ok(device) => Some(device),
            Err(_) => {
                self.report(Problem::Names(Names::UnknownDevice {
                    span: value.span,
                    name: text,
                }));
                None
            }
        }
    }

    /// Reports a statement that may take no nested block, label or arguments.
    pub fn plain_statement(&mut self, stmt: &Statement, takes_args: bool) {
        if let Some(label) = &stmt.label {
            self.report(Problem::Names(Names::Misplaced {
                span: label.span,
                situation: Misplaced::Label {
                    keyword: stmt.keyword.name.clone(),
                },
            }));
        }
        if let Some(body) = &stmt.body {
            self.report(Problem::Names(Names::Misplaced {
                span: body.span,
                situation: Misplaced::Block {
                    keyword: stmt.keyword.name.clone(),
                },
            }));
        }
        if !takes_args {
            if let Some(args) = &stmt.args {
                self.report(Problem::Names(Names::WrongArguments {
                    span: args.span,
                    situation: Arguments::NoParentheses {
                        keyword: stmt.keyword.name.clone(),
                    },
                }));
            }
        }
    }

    /// Reports a block statement (`data { }`) written with a label, arguments or values.
    pub fn block_statement(&mut self, stmt: &Statement) {
        let kw = &stmt.keyword.name;
        if let Some(label) = &stmt.label {
            self.report(Problem::Names(Names::Misplaced {
                span: label.span,
                situation: Misplaced::Label {
                    keyword: kw.clone(),
                },
            }));
        }
        let extra = stmt
            .args
            .as_ref()
            .map(|a| a.span)
            .into_iter()
            .chain(stmt.values.iter().map(|v| v.span));
        if let Some(span) = extra.reduce(|a, b| a.to(b)) {
            self.report(Problem::Names(Names::WrongArguments {
                span,
                situation: Arguments::OnlyBlock {
                    keyword: kw.clone(),
                },
            }));
        }
    }

    /// The single value of a `keyword value` setting, reporting a missing or extra value.
    pub fn single<'s>(&mut self, stmt: &'s Statement) -> Option<&'s Value> {
        self.plain_statement(stmt, false);
        match stmt.values.as_slice() {
            [one] => Some(one),
            [] => {
                self.report(Problem::Names(Names::WrongArguments {
                    span: stmt.keyword.span,
                    situation: Arguments::NoValue {
                        keyword: stmt.keyword.name.clone(),
                    },
                }));
                None
            }
            [_, extra, ..] => {
                let last = stmt.values.last().map_or(extra.span, |v| v.span);
                self.report(Problem::Names(Names::WrongArguments {
                    span: extra.span.to(last),
                    situation: Arguments::ExtraValues {
                        keyword: stmt.keyword.name.clone(),
                    },
                }));
                None
            }
        }
    }
}

/// Owned copies of a table of names, for a problem's facts.
pub fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The name a number written `width` bytes long stands for as a position: `3`, or `3.1` (the
/// number's text, which has as many decimals as the width leaves). `None` for a number that is
/// not written as positions are (a sign, an exponent, `_` separators).
fn position(x: f64, integer: bool, width: usize) -> Option<String> {
    if !(0.0..=9.0e15).contains(&x) || x.is_sign_negative() {
        return None;
    }
    let whole = (x.trunc() as u64).to_string();
    let name = if integer {
        whole
    } else {
        let places = width.checked_sub(whole.len() + 1).filter(|p| *p > 0)?;
        format!("{x:.places$}")
    };
    (name.len() == width).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::position;

    #[test]
    fn positions_are_read_back_as_written() {
        assert_eq!(position(3.0, true, 1).as_deref(), Some("3"));
        assert_eq!(position(12.0, true, 2).as_deref(), Some("12"));
        assert_eq!(position(3.0, false, 3).as_deref(), Some("3.0"));
        assert_eq!(position(3.1, false, 4).as_deref(), Some("3.10"));
        assert_eq!(position(3.01, false, 4).as_deref(), Some("3.01"));
        // A sign, `_` separators and exponents are not how positions are written.
        assert_eq!(position(-1.0, true, 2), None);
        assert_eq!(position(1000.0, true, 5), None);
        assert_eq!(position(30.0, false, 3), None);
    }
}
