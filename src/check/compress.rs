//! The `compress` block: pruning and quantization of named layers.

use super::cx::{strings, Cx, Range};

/// Pruning schedules.
const SCHEDULES: &[&str] = &["oneshot", "gradual"];
use super::experiment::unknown_reference;
use super::model::ModelOut;
use super::settings::{callee, Called, Choice};
use crate::diagnostic::problem::{Arguments, Expected, Form, OutOfRange, Unknown};
use crate::diagnostic::{Code, Problem};
use crate::ir::{
    Compression, Duration, Granularity, PruneMethod, PruneSchedule, QuantScheme, Target,
};
use crate::syntax::ast::{Statement, Unit, Value, ValueKind};

/// The pruning methods.
#[derive(Clone, Copy)]
enum Method {
    L1Unstructured,
    RandomUnstructured,
    LnStructured,
}

/// Pruning methods and their parameters.
const PRUNE_METHODS: &[Choice<Method>] = &[
    (
        "l1_unstructured",
        Method::L1Unstructured,
        &["amount", "schedule"],
    ),
    (
        "random_unstructured",
        Method::RandomUnstructured,
        &["amount", "schedule"],
    ),
    (
        "ln_structured",
        Method::LnStructured,
        &["amount", "n", "dim", "schedule"],
    ),
];

/// Quantization schemes and their parameters.
const QUANT_SCHEMES: &[Choice<Scheme>] = &[
    ("int8", Scheme::Int8, &["granularity"]),
    ("int4", Scheme::Int4, &["group_size"]),
    ("fp8", Scheme::Fp8, &["granularity"]),
    ("qat", Scheme::Qat, &["granularity"]),
];

/// The quantization schemes.
#[derive(Clone, Copy, PartialEq)]
enum Scheme {
    Int8,
    Int4,
    Fp8,
    Qat,
}

/// Keywords of the compress block.
pub const KEYWORDS: &[&str] = &["prune", "quantize"];

/// Checks `compress { ... }`.
pub fn check_compress(
    cx: &mut Cx,
    stmt: &Statement,
    model: Option<&ModelOut>,
) -> Option<Vec<Compression>> {
    cx.block_statement(stmt);
    let Some(body) = &stmt.body else {
        cx.report(Problem::WrongArguments {
            span: stmt.span,
            situation: Arguments::NoBlock {
                keyword: "compress".into(),
                example: "compress { prune fc1 l1_unstructured(amount: 0.5) }",
            },
        });
        return None;
    };
    let mut out = Vec::new();
    let mut ok = true;
    for s in &body.statements {
        let step = match s.keyword.name.as_str() {
            "prune" => prune(cx, s, model),
            "quantize" => quantize(cx, s, model),
            _ => {
                cx.unknown(
                    Code::UnknownKeyword,
                    "compression step",
                    &s.keyword,
                    KEYWORDS,
                );
                None
            }
        };
        match step {
            Some(c) => out.push(c),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// Splits `prune TARGETS... METHOD(args)` into targets and the method statement.
fn split<'s>(cx: &mut Cx, s: &'s Statement) -> Option<(&'s [Value], Statement)> {
    cx.plain_statement(s, false);
    let Some((method, targets)) = s.values.split_last().filter(|(_, t)| !t.is_empty()) else {
        cx.report(Problem::WrongArguments {
            span: s.span,
            situation: Arguments::Form(if s.keyword.name == "prune" {
                Form::Prune
            } else {
                Form::Quantize
            }),
        });
        return None;
    };
    let method_stmt = Statement {
        label: None,
        keyword: s.keyword.clone(),
        args: None,
        values: vec![method.clone()],
        body: None,
        span: s.span,
    };
    Some((targets, method_stmt))
}

fn targets(cx: &mut Cx, values: &[Value], model: Option<&ModelOut>) -> Option<Vec<Target>> {
    let mut out = Vec::new();
    let mut ok = true;
    for v in values {
        let items: Vec<&Value> = match &v.kind {
            ValueKind::List(items) => items.iter().collect(),
            _ => vec![v],
        };
        for item in items {
            let Some(ident) = cx.name(item) else {
                ok = false;
                continue;
            };
            let Some(model) = model else { continue };
            let (layer, param) = match ident.name.rsplit_once('.') {
                Some((l, p @ ("weight" | "bias"))) if !model.names.contains_key(&ident.name) => {
                    (l.to_string(), Some(p.to_string()))
                }
                _ => (ident.name.clone(), None),
            };
            if !model.names.contains_key(&layer) {
                let known: Vec<&str> = model.names.keys().map(String::as_str).collect();
                let suffix = param.as_ref().map_or(String::new(), |p| format!(".{p}"));
                unknown_reference(cx, &ident, &known, &suffix);
                ok = false;
                continue;
            }
            out.push(Target {
                layer,
                param,
                span: ident.span,
            });
        }
    }
    ok.then_some(out)
}

fn prune(cx: &mut Cx, s: &Statement, model: Option<&ModelOut>) -> Option<Compression> {
    let (target_values, method_stmt) = split(cx, s)?;
    let targets = targets(cx, target_values, model);
    let Called {
        word: kind,
        tag: method,
        params,
        args,
        value: v,
    } = callee(
        cx,
        &method_stmt,
        Code::UnknownPruneMethod,
        "pruning method",
        PRUNE_METHODS,
    )?;
    let b = cx.bind(kind, args, v.span, params);
    let amount = match b.get("amount") {
        Some(a) => cx.number_in(a, "the pruning amount", Range::Unit),
        None => {
            cx.missing(kind, "amount", b.span);
            None
        }
    };
    let schedule = match b.get("schedule") {
        None => Some(PruneSchedule::After {
            finetune: Duration::Steps(0),
        }),
        Some(sv) => prune_schedule(cx, sv),
    };
    let method = match method {
        Method::L1Unstructured => Some(PruneMethod::L1Unstructured),
        Method::RandomUnstructured => Some(PruneMethod::RandomUnstructured),
        Method::LnStructured => {
            let n = b
                .get("n")
                .map_or(Some(2), |v| cx.uint_min(v, "the norm order `n`", 1));
            let dim = b.get("dim").map_or(Some(0), |v| cx.int(v));
            match (n, dim) {
                (Some(n), Some(dim)) if dim == 0 || dim == 1 || dim == -1 => {
                    Some(PruneMethod::LnStructured { n, dim })
                }
                (Some(_), Some(dim)) => {
                    let at = b.get("dim").map_or(b.span, |v| v.span);
                    cx.report(Problem::OutOfRange {
                        span: at,
                        situation: OutOfRange::PruneDim { dim },
                    });
                    None
                }
                _ => None,
            }
        }
    };
    Some(Compression::Prune {
        targets: targets?,
        method: method?,
        amount: amount?,
        schedule: schedule?,
        span: s.span,
    })
}

fn prune_schedule(cx: &mut Cx, v: &Value) -> Option<PruneSchedule> {
    match &v.kind {
        ValueKind::Path(p) if p == "oneshot" => Some(PruneSchedule::After {
            finetune: Duration::Steps(0),
        }),
        ValueKind::Call(name, args) if name.name == "gradual" => {
            let b = cx.bind("gradual", Some(args), name.span, &["start", "end", "every"]);
            let steps = |cx: &mut Cx, p: &str| -> Option<u64> {
                let Some(v) = b.get(p) else {
                    cx.missing("gradual", p, b.span);
                    return None;
                };
                match cx.duration(v, Unit::Steps)? {
                    (n, Unit::Steps) => Some(n),
                    _ => {
                        cx.report(Problem::WrongType {
                            span: v.span,
                            expected: Expected::Steps,
                            found: "epochs",
                        });
                        None
                    }
                }
            };
            let (start, end, every) = (steps(cx, "start"), steps(cx, "end"), steps(cx, "every"));
            let (start, end, every) = (start?, end?, every?);
            if end <= start {
                let at = b.get("end").map_or(b.span, |v| v.span);
                cx.report(Problem::OutOfRange {
                    span: at,
                    situation: OutOfRange::GradualOrder { start, end },
                });
                return None;
            }
            Some(PruneSchedule::Gradual {
                start,
                end,
                every,
                initial: 0.0,
            })
        }
        ValueKind::Path(p) => {
            cx.report(Problem::UnknownChoice {
                unknown: Unknown {
                    span: v.span,
                    name: p.clone(),
                    candidates: strings(SCHEDULES),
                },
                what: "pruning schedule".into(),
            });
            None
        }
        ValueKind::Call(name, _) => {
            cx.report(Problem::UnknownChoice {
                unknown: Unknown {
                    span: name.span,
                    name: name.name.clone(),
                    candidates: strings(SCHEDULES),
                },
                what: "pruning schedule".into(),
            });
            None
        }
        _ => {
            cx.wrong_type(
                v,
                Expected::Callee {
                    what: "a pruning schedule".into(),
                    known: strings(SCHEDULES),
                },
            );
            None
        }
    }
}

fn quantize(cx: &mut Cx, s: &Statement, model: Option<&ModelOut>) -> Option<Compression> {
    let (target_values, method_stmt) = split(cx, s)?;
    let targets = targets(cx, target_values, model);
    let Called {
        word: kind,
        tag: scheme,
        params,
        args,
        value: v,
    } = callee(
        cx,
        &method_stmt,
        Code::UnknownQuantScheme,
        "quantization scheme",
        QUANT_SCHEMES,
    )?;
    let b = cx.bind(kind, args, v.span, params);
    let scheme = if scheme == Scheme::Int4 {
        b.get("group_size")
            .map_or(Some(128), |v| cx.uint_min(v, "the group size", 1))
            .map(|group_size| QuantScheme::Int4 { group_size })
    } else {
        let granularity = b
            .get("granularity")
            .map_or(Some("per_channel"), |v| {
                cx.choice(v, "granularity", &["per_tensor", "per_channel"])
            })
            .map(|g| {
                if g == "per_tensor" {
                    Granularity::PerTensor
                } else {
                    Granularity::PerChannel
                }
            });
        granularity.map(|granularity| match scheme {
            Scheme::Fp8 => QuantScheme::Fp8 { granularity },
            Scheme::Qat => QuantScheme::Qat { granularity },
            _ => QuantScheme::Int8 {
                granularity,
                symmetric: true,
                dynamic: false,
            },
        })
    };
    Some(Compression::Quantize {
        targets: targets?,
        scheme: scheme?,
        span: s.span,
    })
}
