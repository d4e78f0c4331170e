//! The `compress` block: pruning and quantization of named layers.

mod placed;
mod schedule;
mod targets;

use std::collections::HashMap;

use super::cx::{Cx, Range};
use super::model::ModelOut;
use super::read::{callee, Called};
use super::words::{Choice, COMPRESS};
use crate::diagnostic::problem::{
    Arguments, Form, GroupedLayer, Names, OutOfRange, Strategies, INT4_GROUP_SIZES,
};
use crate::diagnostic::{Code, Problem};
use crate::ir::{
    layers, Compression, Granularity, LayerKind, Precision, PruneMethod, QuantScheme, Target,
};
use crate::span::Span;
use crate::syntax::ast::{Statement, Value};

pub use placed::{check_combined, check_placed};
use schedule::{prune_schedule, Bounds, DEFAULT};
use targets::{targets, Applies};

/// The pruning methods.
#[derive(Clone, Copy)]
enum Method {
    L1Unstructured,
    RandomUnstructured,
    LnStructured,
    GlobalUnstructured,
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
    (
        "global_unstructured",
        Method::GlobalUnstructured,
        &["amount", "schedule"],
    ),
];

/// The quantization schemes.
#[derive(Clone, Copy, PartialEq)]
enum Scheme {
    Int8,
    Int4,
    Fp8,
    Qat,
    Bf16,
    Fp16,
}

/// Quantization schemes and their parameters.
const QUANT_SCHEMES: &[Choice<Scheme>] = &[
    (
        "int8",
        Scheme::Int8,
        &["granularity", "symmetric", "activations"],
    ),
    ("int4", Scheme::Int4, &["group_size"]),
    ("fp8", Scheme::Fp8, &["granularity"]),
    ("qat", Scheme::Qat, &["granularity"]),
    ("bf16", Scheme::Bf16, &[]),
    ("fp16", Scheme::Fp16, &[]),
];

/// What the compress block is checked against besides the model: the training's precision and
/// an upper bound of its length.
pub struct Training {
    /// The `precision` setting's span when it is `fp16`.
    pub fp16: Option<Span>,
    /// The most optimizer steps the training can last, when the file says.
    pub max_steps: Option<u64>,
}

/// Checks `compress { ... }`.
pub fn check_compress(
    cx: &mut Cx,
    stmt: &Statement,
    model: Option<&ModelOut>,
    training: &Training,
) -> Option<Vec<Compression>> {
    cx.block_statement(stmt);
    let Some(body) = &stmt.body else {
        cx.report(Problem::Names(Names::WrongArguments {
            span: stmt.span,
            situation: Arguments::NoBlock {
                keyword: "compress".into(),
                example: "compress { prune fc1 l1_unstructured(amount: 0.5) }",
            },
        }));
        return None;
    };
    let mut out = Vec::new();
    let mut ok = true;
    for s in &body.statements {
        let step = match s.keyword.name.as_str() {
            "prune" => prune(cx, s, model, training),
            "quantize" => quantize(cx, s, model, training),
            _ => {
                cx.unknown(
                    Code::UnknownKeyword,
                    "compression step",
                    &s.keyword,
                    COMPRESS,
                );
                None
            }
        };
        match step {
            Some(c) => out.push(c),
            None => ok = false,
        }
    }
    ok &= conflicts(cx, &out);
    ok.then_some(out)
}

/// K0217: a layer named twice in one statement, or quantized by two statements.
fn conflicts(cx: &mut Cx, steps: &[Compression]) -> bool {
    let mut quantized: HashMap<&str, Span> = HashMap::new();
    let mut ok = true;
    for c in steps {
        let (targets, quantize) = match c {
            Compression::Prune { targets, .. } => (targets, false),
            Compression::Quantize { targets, .. } => (targets, true),
        };
        // Pruning may name a layer's weight and its bias; quantization names whole layers.
        let mut here: HashMap<(&str, Option<&str>), Span> = HashMap::new();
        for t in targets {
            let param = if quantize { None } else { t.param.as_deref() };
            let key = (t.layer.as_str(), param);
            let first = here.get(&key).map(|f| (*f, true)).or_else(|| {
                quantize
                    .then(|| quantized.get(t.layer.as_str()).map(|f| (*f, false)))
                    .flatten()
            });
            if let Some((first, same_statement)) = first {
                cx.report(Problem::Strategies(Strategies::CompressConflict {
                    span: t.span,
                    layer: t.layer.clone(),
                    first,
                    same_statement,
                }));
                ok = false;
            }
            here.entry(key).or_insert(t.span);
        }
        if quantize {
            for ((layer, _), span) in here {
                quantized.entry(layer).or_insert(span);
            }
        }
    }
    ok
}

/// Splits `prune TARGETS... METHOD(args)` into targets and the method statement.
fn split<'s>(cx: &mut Cx, s: &'s Statement) -> Option<(&'s [Value], Statement)> {
    cx.plain_statement(s, false);
    let Some((method, targets)) = s.values.split_last().filter(|(_, t)| !t.is_empty()) else {
        cx.report(Problem::Names(Names::WrongArguments {
            span: s.span,
            situation: Arguments::Form(if s.keyword.name == "prune" {
                Form::Prune
            } else {
                Form::Quantize
            }),
        }));
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

fn prune(
    cx: &mut Cx,
    s: &Statement,
    model: Option<&ModelOut>,
    training: &Training,
) -> Option<Compression> {
    let (target_values, method_stmt) = split(cx, s)?;
    let targets = targets(cx, target_values, model, "pruning", Applies::Prune);
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
    let bounds = Bounds {
        amount,
        max_steps: training.max_steps,
    };
    let schedule = match b.get("schedule") {
        None => Some(DEFAULT),
        Some(sv) => prune_schedule(cx, sv, &bounds),
    };
    let method = match method {
        Method::L1Unstructured => Some(PruneMethod::L1Unstructured),
        Method::RandomUnstructured => Some(PruneMethod::RandomUnstructured),
        Method::GlobalUnstructured => Some(PruneMethod::GlobalL1),
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
                    cx.report(Problem::Names(Names::OutOfRange {
                        span: at,
                        situation: OutOfRange::PruneDim { dim },
                    }));
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

/// Reads `granularity`: `per_channel` or `per_tensor` (for FP8, `per_row` or `per_tensor`).
fn granularity(cx: &mut Cx, v: Option<&Value>, fp8: bool) -> Option<Granularity> {
    let (options, default): (&[&'static str], _) = if fp8 {
        (&["per_tensor", "per_row"], Granularity::PerTensor)
    } else {
        (&["per_channel", "per_tensor"], Granularity::PerChannel)
    };
    let Some(v) = v else { return Some(default) };
    match cx.choice(v, "granularity", options)? {
        "per_tensor" => Some(Granularity::PerTensor),
        _ => Some(Granularity::PerChannel),
    }
}

fn quantize(
    cx: &mut Cx,
    s: &Statement,
    model: Option<&ModelOut>,
    training: &Training,
) -> Option<Compression> {
    let (target_values, method_stmt) = split(cx, s)?;
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
    let applies = match scheme {
        Scheme::Int4 => Applies::Linear { int4: true },
        Scheme::Int8 | Scheme::Fp8 | Scheme::Qat | Scheme::Bf16 | Scheme::Fp16 => {
            Applies::Linear { int4: false }
        }
    };
    let step = match scheme {
        Scheme::Bf16 | Scheme::Fp16 => format!("casting to {kind}"),
        Scheme::Qat => "quantization-aware training".to_string(),
        _ => format!("{kind} quantization"),
    };
    let targets = targets(cx, target_values, model, &step, applies);
    let b = cx.bind(kind, args, v.span, params);
    let scheme = match scheme {
        Scheme::Int8 => {
            let g = granularity(cx, b.get("granularity"), false);
            let symmetric = b.get("symmetric").map_or(Some(true), |v| cx.boolean(v));
            let dynamic = b.get("activations").map_or(Some(false), |v| {
                cx.choice(v, "activations", &["none", "dynamic"])
                    .map(|a| a == "dynamic")
            });
            Some(QuantScheme::Int8 {
                granularity: g?,
                symmetric: symmetric?,
                dynamic: dynamic?,
            })
        }
        Scheme::Int4 => int4(cx, b.get("group_size"), targets.as_deref(), model),
        Scheme::Fp8 => granularity(cx, b.get("granularity"), true)
            .map(|granularity| QuantScheme::Fp8 { granularity }),
        Scheme::Qat => {
            if let Some(precision) = training.fp16 {
                cx.report(Problem::Strategies(Strategies::QatFp16 {
                    span: v.span,
                    precision,
                }));
                return None;
            }
            granularity(cx, b.get("granularity"), false)
                .map(|granularity| QuantScheme::Qat { granularity })
        }
        Scheme::Bf16 => Some(QuantScheme::Cast {
            to: Precision::Bf16,
        }),
        Scheme::Fp16 => Some(QuantScheme::Cast {
            to: Precision::Fp16,
        }),
    };
    Some(Compression::Quantize {
        targets: targets?,
        scheme: scheme?,
        span: s.span,
    })
}

/// Reads `int4(group_size)` and checks that the group size divides each target's input
/// features (K0212).
fn int4(
    cx: &mut Cx,
    v: Option<&Value>,
    targets: Option<&[Target]>,
    model: Option<&ModelOut>,
) -> Option<QuantScheme> {
    let group_size = match v {
        None => 128,
        Some(v) => {
            let g = cx.uint(v)?;
            if !INT4_GROUP_SIZES.contains(&g) {
                cx.report(Problem::Strategies(Strategies::Int4GroupSize {
                    span: v.span,
                    group_size: g,
                    layer: None,
                }));
                return None;
            }
            g
        }
    };
    let (Some(targets), Some(model)) = (targets, model) else {
        return Some(QuantScheme::Int4 { group_size });
    };
    let all = layers(&model.nodes);
    let mut ok = true;
    for t in targets {
        let Some(l) = all.iter().find(|l| l.name == t.layer) else {
            continue;
        };
        if let LayerKind::Linear { inputs, .. } = l.kind {
            let inputs = inputs as u64;
            if !inputs.is_multiple_of(group_size) {
                cx.report(Problem::Strategies(Strategies::Int4GroupSize {
                    span: t.span,
                    group_size,
                    layer: Some(GroupedLayer {
                        name: l.name.clone(),
                        span: l.span,
                        inputs,
                    }),
                }));
                ok = false;
            }
        }
    }
    ok.then_some(QuantScheme::Int4 { group_size })
}
