//! Sweeps: `sweep [..]` values anywhere in an experiment expand into a grid of trials, each
//! checked and planned on its own.

use crate::diagnostic::problem::{Strategies, Sweep};
use crate::diagnostic::{Diagnostic, Problem};
use crate::span::Span;
use crate::syntax::ast::{Args, Statement, Value, ValueKind};

/// The most trials one file may make.
pub const MAX_TRIALS: usize = 10_000;

/// One swept setting: its name and the values to try.
pub struct Axis {
    /// The setting's name (the argument or statement keyword it belongs to).
    pub name: String,
    /// The values, each with its own span.
    pub values: Vec<Value>,
    /// Which sweep of the file it is, in source order (rejected sweeps count too).
    pub position: usize,
}

/// Finds every sweep in the statements, in source order.
pub fn axes(statements: &[Statement], diags: &mut Vec<Diagnostic>) -> Vec<Axis> {
    let mut out = Vec::new();
    let mut position = 0;
    visit(statements, &mut |name, v| {
        if let ValueKind::Sweep(inner) = &v.kind {
            position += 1;
            if let Some(values) = expand(inner, diags) {
                if values.iter().any(contains_sweep) {
                    diags.push(
                        Problem::Strategies(Strategies::BadSweep {
                            span: v.span,
                            situation: Sweep::Nested,
                        })
                        .diagnostic(),
                    );
                } else {
                    out.push(Axis {
                        name: name.to_string(),
                        values,
                        position: position - 1,
                    });
                }
            }
        }
    });
    out
}

fn contains_sweep(v: &Value) -> bool {
    match &v.kind {
        ValueKind::Sweep(_) => true,
        ValueKind::List(items) => items.iter().any(contains_sweep),
        ValueKind::Call(_, args) => args.items.iter().any(|a| contains_sweep(&a.value)),
        ValueKind::Arrow(a, b) => contains_sweep(a) || contains_sweep(b),
        _ => false,
    }
}

fn expand(inner: &Value, diags: &mut Vec<Diagnostic>) -> Option<Vec<Value>> {
    let bad = |diags: &mut Vec<Diagnostic>, span: Span, situation: Sweep| {
        diags.push(Problem::Strategies(Strategies::BadSweep { span, situation }).diagnostic());
        None
    };
    let values = match &inner.kind {
        ValueKind::List(items) => items.clone(),
        ValueKind::Call(name, args) if name.name == "range" || name.name == "logspace" => {
            let nums: Option<Vec<f64>> = args
                .items
                .iter()
                .map(|a| match a.value.kind {
                    ValueKind::Number {
                        value, unit: None, ..
                    } if a.name.is_none() => Some(value),
                    _ => None,
                })
                .collect();
            let integer = args
                .items
                .iter()
                .all(|a| matches!(a.value.kind, ValueKind::Number { integer: true, .. }));
            let Some(nums) =
                nums.filter(|n| n.len() == 3 || (n.len() == 2 && name.name == "range"))
            else {
                return bad(diags, args.span, Sweep::Arguments);
            };
            let (a, b) = (nums[0], nums[1]);
            let mut out = Vec::new();
            if name.name == "range" {
                let step = nums.get(2).copied().unwrap_or(1.0);
                if step <= 0.0 || b <= a {
                    return bad(diags, args.span, Sweep::EmptyRange);
                }
                let mut x = a;
                while x < b - step * 1e-9 && out.len() <= MAX_TRIALS {
                    out.push(x);
                    x += step;
                }
            } else {
                let count = nums[2];
                if a <= 0.0 || b <= 0.0 || count < 2.0 || count.fract() != 0.0 {
                    return bad(diags, args.span, Sweep::Logspace);
                }
                let n = count as usize;
                for i in 0..n.min(MAX_TRIALS + 1) {
                    out.push(a * (b / a).powf(i as f64 / (n - 1) as f64));
                }
            }
            out.into_iter()
                .map(|x| Value {
                    kind: ValueKind::Number {
                        value: x,
                        integer: integer && name.name == "range",
                        unit: None,
                    },
                    span: inner.span,
                })
                .collect()
        }
        _ => return bad(diags, inner.span, Sweep::NotAList),
    };
    if values.is_empty() {
        return bad(diags, inner.span, Sweep::Empty);
    }
    Some(values)
}

/// The number of trials of a grid, or `None` when it exceeds [`MAX_TRIALS`].
pub fn grid_size(axes: &[Axis]) -> Option<usize> {
    axes.iter().try_fold(1usize, |acc, a| {
        acc.checked_mul(a.values.len()).filter(|n| *n <= MAX_TRIALS)
    })
}

/// The statements of trial `index` (row-major over the axes), and its `(name, value)` pairs.
pub fn trial(
    statements: &[Statement],
    axes: &[Axis],
    index: usize,
    text: impl Fn(Span) -> String,
) -> (Vec<Statement>, Vec<(String, String)>) {
    let mut choice = Vec::with_capacity(axes.len());
    let mut rest = index;
    for axis in axes.iter().rev() {
        choice.push(rest % axis.values.len());
        rest /= axis.values.len();
    }
    choice.reverse();
    let picked: Vec<&Value> = axes
        .iter()
        .zip(&choice)
        .map(|(a, c)| &a.values[*c])
        .collect();
    let labels = axes
        .iter()
        .zip(&picked)
        .map(|(a, v)| {
            let shown = match v.kind {
                ValueKind::Number { value, .. }
                    if v.span.is_empty()
                        || text(v.span).starts_with("range")
                        || text(v.span).starts_with("logspace") =>
                {
                    format!("{value}")
                }
                _ => text(v.span),
            };
            (a.name.clone(), shown)
        })
        .collect();
    let mut out = statements.to_vec();
    // A rejected sweep keeps its place (and is ignored by the checker, which reported it).
    let mut k = 0;
    visit_mut(&mut out, &mut |v| {
        if matches!(v.kind, ValueKind::Sweep(_)) {
            if let Some(i) = axes.iter().position(|a| a.position == k) {
                *v = picked[i].clone();
            }
            k += 1;
        }
    });
    (out, labels)
}

fn visit(statements: &[Statement], f: &mut dyn FnMut(&str, &Value)) {
    for s in statements {
        if let Some(args) = &s.args {
            visit_args(args, f);
        }
        for v in &s.values {
            visit_value(&s.keyword.name, v, f);
        }
        if let Some(b) = &s.body {
            visit(&b.statements, f);
        }
    }
}

fn visit_args(args: &Args, f: &mut dyn FnMut(&str, &Value)) {
    for a in &args.items {
        let name = a.name.as_ref().map_or("argument", |n| n.name.as_str());
        visit_value(name, &a.value, f);
    }
}

fn visit_value(name: &str, v: &Value, f: &mut dyn FnMut(&str, &Value)) {
    f(name, v);
    match &v.kind {
        ValueKind::List(items) => items.iter().for_each(|i| visit_value(name, i, f)),
        ValueKind::Call(callee, args) => {
            let _ = callee;
            visit_args(args, f)
        }
        ValueKind::Arrow(a, b) => {
            visit_value(name, a, f);
            visit_value(name, b, f);
        }
        _ => {}
    }
}

fn visit_mut(statements: &mut [Statement], f: &mut dyn FnMut(&mut Value)) {
    for s in statements {
        if let Some(args) = &mut s.args {
            args.items
                .iter_mut()
                .for_each(|a| visit_value_mut(&mut a.value, f));
        }
        s.values.iter_mut().for_each(|v| visit_value_mut(v, f));
        if let Some(b) = &mut s.body {
            visit_mut(&mut b.statements, f);
        }
    }
}

fn visit_value_mut(v: &mut Value, f: &mut dyn FnMut(&mut Value)) {
    f(v);
    match &mut v.kind {
        ValueKind::List(items) => items.iter_mut().for_each(|i| visit_value_mut(i, f)),
        ValueKind::Call(_, args) => args
            .items
            .iter_mut()
            .for_each(|a| visit_value_mut(&mut a.value, f)),
        ValueKind::Arrow(a, b) => {
            visit_value_mut(a, f);
            visit_value_mut(b, f);
        }
        _ => {}
    }
}
