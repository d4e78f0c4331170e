//! The checker's context: the diagnostics collected so far, and the helpers that read values
//! and bind arguments while reporting every problem they meet.

use crate::diagnostic::{did_you_mean, Code, Diagnostic};
use crate::ir::Device;
use crate::span::Span;
use crate::syntax::ast::{Arg, Args, Ident, Statement, Unit, Value, ValueKind};

/// Collects diagnostics while the checker walks one experiment.
#[derive(Default)]
pub struct Cx {
    /// Everything found so far.
    pub diags: Vec<Diagnostic>,
}

/// Allowed ranges for numbers.
#[derive(Clone, Copy, Debug)]
pub enum Range {
    /// `x > 0`.
    Positive,
    /// `x >= 0`.
    NonNegative,
    /// `0 <= x < 1`.
    UnitOpen,
    /// `0 <= x <= 1`.
    Unit,
    /// `0 < x <= 1`.
    UnitPositive,
    /// Any finite number.
    Any,
}

impl Range {
    fn holds(self, x: f64) -> bool {
        match self {
            Range::Positive => x > 0.0,
            Range::NonNegative => x >= 0.0,
            Range::UnitOpen => (0.0..1.0).contains(&x),
            Range::Unit => (0.0..=1.0).contains(&x),
            Range::UnitPositive => x > 0.0 && x <= 1.0,
            Range::Any => true,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Range::Positive => "greater than 0",
            Range::NonNegative => "0 or more",
            Range::UnitOpen => "in [0, 1)",
            Range::Unit => "in [0, 1]",
            Range::UnitPositive => "in (0, 1]",
            Range::Any => "finite",
        }
    }
}

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

    /// Reports an unknown name of some category, with a suggestion from `known`.
    pub fn unknown(&mut self, code: Code, what: &str, name: &Ident, known: &[&str]) {
        let suggestion = did_you_mean(&name.name, known.iter().copied());
        let help = match suggestion {
            Some(s) => format!("did you mean `{s}`?"),
            None => format!("expected one of: {}", known.join(", ")),
        };
        self.push(
            Diagnostic::new(code, name.span, format!("unknown {what} `{}`", name.name))
                .label(format!("not a known {what}"))
                .help(help),
        );
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
                        let suggestion = did_you_mean(&n.name, params.iter().copied());
                        let help = match suggestion {
                            Some(s) => format!("did you mean `{s}`?"),
                            None if params.is_empty() => format!("`{callee}` takes no arguments"),
                            None => format!("`{callee}` takes: {}", params.join(", ")),
                        };
                        self.push(
                            Diagnostic::new(
                                Code::UnknownParameter,
                                n.span,
                                format!("`{callee}` has no parameter `{}`", n.name),
                            )
                            .label("unknown parameter")
                            .help(help),
                        );
                        continue;
                    }
                },
                None => {
                    if bound.values.iter().any(|(_, _, s)| s.is_some()) {
                        self.push(
                            Diagnostic::new(
                                Code::WrongArguments,
                                value.span,
                                "positional argument after a named one",
                            )
                            .label("give this argument a name")
                            .help("write positional arguments first, then `name: value` ones"),
                        );
                        continue;
                    }
                    match params.get(next_positional) {
                        Some(p) => {
                            next_positional += 1;
                            (*p, None)
                        }
                        None => {
                            self.push(
                                Diagnostic::new(
                                    Code::WrongArguments,
                                    value.span,
                                    format!(
                                        "`{callee}` takes at most {} positional argument{}",
                                        params.len(),
                                        if params.len() == 1 { "" } else { "s" }
                                    ),
                                )
                                .label("one too many")
                                .help(if params.is_empty() {
                                    format!("`{callee}` takes no arguments")
                                } else {
                                    format!("`{callee}` takes: {}", params.join(", "))
                                }),
                            );
                            continue;
                        }
                    }
                }
            };
            if let Some((_, first, _)) = bound.values.iter().find(|(n, _, _)| *n == param) {
                self.push(
                    Diagnostic::new(
                        Code::DuplicateSetting,
                        name_span.unwrap_or(value.span),
                        format!("`{param}` is given twice"),
                    )
                    .label("given again here")
                    .with(first.span, "first given here")
                    .help(format!("keep one value for `{param}`")),
                );
                continue;
            }
            bound.values.push((param, value, name_span));
        }
        bound
    }

    /// Reports a missing argument.
    pub fn missing(&mut self, callee: &str, param: &str, span: Span) {
        self.push(
            Diagnostic::new(
                Code::WrongArguments,
                span,
                format!("`{callee}` needs `{param}`"),
            )
            .label(format!("`{param}` is missing"))
            .help(format!("add `{param}: ...` to the arguments")),
        );
    }

    fn wrong_type(&mut self, value: &Value, want: &str) {
        // Valid sweeps are replaced before checking; one still here was reported (K0211).
        if matches!(value.kind, ValueKind::Sweep(_)) {
            return;
        }
        self.push(
            Diagnostic::new(
                Code::WrongType,
                value.span,
                format!("expected {want}, found {}", value.type_name()),
            )
            .label(format!("expected {want}"))
            .help(format!("write {want} here")),
        );
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
                self.wrong_type(value, "a number");
                None
            }
        }
    }

    /// Reads a number and checks its range.
    pub fn number_in(&mut self, value: &Value, what: &str, range: Range) -> Option<f64> {
        let x = self.number(value)?;
        if !range.holds(x) {
            self.push(
                Diagnostic::new(
                    Code::OutOfRange,
                    value.span,
                    format!("{what} must be {}, got {x}", range.describe()),
                )
                .label(format!("must be {}", range.describe()))
                .help(format!("choose {what} {}", range.describe())),
            );
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
                self.push(
                    Diagnostic::new(
                        Code::OutOfRange,
                        value.span,
                        format!("expected a non-negative integer, got {x}"),
                    )
                    .label("out of range")
                    .help("write an integer from 0 to 9e15"),
                );
                None
            }
            _ => {
                self.wrong_type(value, "an integer");
                None
            }
        }
    }

    /// Reads an integer that must be at least `min`.
    pub fn uint_min(&mut self, value: &Value, what: &str, min: u64) -> Option<u64> {
        let x = self.uint(value)?;
        if x < min {
            self.push(
                Diagnostic::new(
                    Code::OutOfRange,
                    value.span,
                    format!("{what} must be at least {min}, got {x}"),
                )
                .label(format!("must be at least {min}"))
                .help(format!("choose {what} of {min} or more")),
            );
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
                self.wrong_type(value, "an integer");
                None
            }
        }
    }

    /// Reads `true` or `false`.
    pub fn boolean(&mut self, value: &Value) -> Option<bool> {
        match &value.kind {
            ValueKind::Bool(b) => Some(*b),
            _ => {
                self.wrong_type(value, "`true` or `false`");
                None
            }
        }
    }

    /// Reads a string.
    pub fn string(&mut self, value: &Value) -> Option<String> {
        match &value.kind {
            ValueKind::Str(s) => Some(s.clone()),
            _ => {
                self.wrong_type(value, "a string");
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
                self.wrong_type(value, "a name");
                None
            }
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
            self.wrong_type(value, "a shape such as `[28, 28]`");
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
                self.push(
                    Diagnostic::new(
                        Code::WrongType,
                        value.span,
                        "expected a positive whole number of steps or epochs",
                    )
                    .label("expected `N steps` or `N epochs`")
                    .help("write, for example, `200 steps` or `2 epochs`"),
                );
                None
            }
            _ => {
                self.wrong_type(value, "a duration such as `200 steps`");
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
                self.wrong_type(value, "a size such as `80 GiB`");
                None
            }
        }
    }

    /// Reads a device: `cpu`, `cuda`, `cuda:N` or `auto`.
    pub fn device(&mut self, value: &Value) -> Option<Device> {
        let bad = |cx: &mut Cx, name: &str| {
            let base = name.split(':').next().unwrap_or(name);
            let suggestion = if base == "gpu" {
                Some(name.replacen("gpu", "cuda", 1))
            } else {
                did_you_mean(base, ["cpu", "cuda", "auto"]).map(|s| name.replacen(base, s, 1))
            };
            cx.push(
                Diagnostic::new(
                    Code::UnknownDevice,
                    value.span,
                    format!("unknown device `{name}`"),
                )
                .label("not a device")
                .help(match suggestion {
                    Some(s) => {
                        format!("did you mean `{s}`? devices are cpu, cuda, cuda:N and auto")
                    }
                    None => "devices are cpu, cuda, cuda:N and auto".to_string(),
                }),
            );
        };
        let text = match &value.kind {
            ValueKind::Path(p) => p.clone(),
            ValueKind::Device(name, index) => format!("{name}:{index}"),
            _ => {
                self.wrong_type(value, "a device");
                return None;
            }
        };
        match text.parse() {
            Ok(device) => Some(device),
            Err(_) => {
                bad(self, &text);
                None
            }
        }
    }

    /// Reports a statement that may take no nested block, label or arguments.
    pub fn plain_statement(&mut self, stmt: &Statement, takes_args: bool) {
        if let Some(label) = &stmt.label {
            self.push(
                Diagnostic::new(
                    Code::Misplaced,
                    label.span,
                    format!("`{}` is a setting and cannot be named", stmt.keyword.name),
                )
                .label("names are for layers and blocks")
                .help("remove the `name:` in front"),
            );
        }
        if let Some(body) = &stmt.body {
            self.push(
                Diagnostic::new(
                    Code::Misplaced,
                    body.span,
                    format!("`{}` takes no block", stmt.keyword.name),
                )
                .label("unexpected block")
                .help("remove the `{ ... }`"),
            );
        }
        if !takes_args {
            if let Some(args) = &stmt.args {
                self.push(
                    Diagnostic::new(
                        Code::WrongArguments,
                        args.span,
                        format!("`{}` takes no arguments in parentheses", stmt.keyword.name),
                    )
                    .label("unexpected arguments")
                    .help(format!("write `{} value`", stmt.keyword.name)),
                );
            }
        }
    }

    /// Reports a block statement (`data { }`) written with a label, arguments or values.
    pub fn block_statement(&mut self, stmt: &Statement) {
        let kw = &stmt.keyword.name;
        if let Some(label) = &stmt.label {
            self.push(
                Diagnostic::new(
                    Code::Misplaced,
                    label.span,
                    format!("`{kw}` cannot be named"),
                )
                .label("names are for layers and blocks")
                .help("remove the `name:` in front"),
            );
        }
        let extra = stmt
            .args
            .as_ref()
            .map(|a| a.span)
            .into_iter()
            .chain(stmt.values.iter().map(|v| v.span));
        if let Some(span) = extra.reduce(|a, b| a.to(b)) {
            self.push(
                Diagnostic::new(
                    Code::WrongArguments,
                    span,
                    format!("`{kw}` takes only a block"),
                )
                .label("unexpected here")
                .help(format!("write `{kw} {{ ... }}`")),
            );
        }
    }

    /// The single value of a `keyword value` setting, reporting a missing or extra value.
    pub fn single<'s>(&mut self, stmt: &'s Statement) -> Option<&'s Value> {
        self.plain_statement(stmt, false);
        match stmt.values.as_slice() {
            [one] => Some(one),
            [] => {
                self.push(
                    Diagnostic::new(
                        Code::WrongArguments,
                        stmt.keyword.span,
                        format!("`{}` needs a value", stmt.keyword.name),
                    )
                    .label("value missing")
                    .help(format!("write `{} <value>`", stmt.keyword.name)),
                );
                None
            }
            [_, extra, ..] => {
                let last = stmt.values.last().map_or(extra.span, |v| v.span);
                self.push(
                    Diagnostic::new(
                        Code::WrongArguments,
                        extra.span.to(last),
                        format!("`{}` takes one value", stmt.keyword.name),
                    )
                    .label("extra values")
                    .help("put each setting on its own line, or separate them with `;`"),
                );
                None
            }
        }
    }
}
