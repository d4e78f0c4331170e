//! The `experiment` block: every setting outside the model, each block checked by its own
//! checker, the data files' headers read, and the parts handed to `ties`, which checks what ties
//! them together.

use std::collections::HashMap;

use super::compress::{check_compress, Training};
use super::cx::Cx;
use super::data::check_data;
use super::datafiles::{self, DataFiles};
use super::model::{check_model, Feed, ModelOut};
use super::optimizer::check_optimizer;
use super::parallel::{check_parallel, ParallelIn};
use super::placement::Placement;
use super::read::{block, unknown_reference};
use super::schedule::check_schedule;
use super::ties::Parts;
use super::train::check_train;
use super::words::EXPERIMENT;
use crate::diagnostic::problem::{Arguments, Form, Names, Strategies};
use crate::diagnostic::Problem;
use crate::ir::{Data, Device, Duration, Experiment, Node, Parallel, Precision, Source};
use crate::span::Span;
use crate::syntax::ast::{Statement, ValueKind};

/// Keywords that may appear more than once.
const REPEATABLE: &[&str] = &["place", "memory"];

/// Checks one experiment (one sweep trial) and builds its typed form when it has no errors;
/// with `keep_model`, also returns the model's layers as far as they checked, whatever failed.
pub(super) fn check_experiment(
    cx: &mut Cx,
    stmt: &Statement,
    trial: Vec<(String, String)>,
    files: &mut DataFiles,
    keep_model: bool,
) -> (Option<Experiment>, Vec<Node>) {
    let name = match stmt.values.as_slice() {
        [v] => cx.string(v),
        _ => {
            cx.report(Problem::Names(Names::WrongArguments {
                span: stmt.keyword.span,
                situation: Arguments::NoName {
                    keyword: "experiment".into(),
                    example: "experiment \"name\" { ... }",
                },
            }));
            None
        }
    };
    let Some((statements, seen)) = block(
        cx,
        stmt,
        "experiment setting",
        EXPERIMENT,
        REPEATABLE,
        "experiment \"name\" { ... }",
    ) else {
        return (None, Vec::new());
    };
    let get = |k: &str| seen.get(k).copied();
    let require = |cx: &mut Cx, k: &'static [&'static str], example: &'static str| {
        let s = get(k[0]);
        if s.is_none() {
            cx.report(Problem::Names(Names::MissingSetting {
                span: stmt.keyword.span,
                block: "experiment",
                settings: k,
                example,
            }));
        }
        s
    };

    if let Some(s) = get("allow") {
        let allowed = super::allow::check(cx, s);
        cx.allowed = allowed;
    }
    let description = get("description").and_then(|s| cx.single(s).and_then(|v| cx.string(v)));
    let tags = get("tags").map_or(Some(vec![]), |s| {
        let v = cx.single(s)?;
        match &v.kind {
            ValueKind::List(items) => items.iter().map(|i| cx.string(i)).collect(),
            _ => cx.string(v).map(|t| vec![t]),
        }
    });
    let seed = get("seed").map_or(Some(0), |s| cx.single(s).and_then(|v| cx.uint(v)));
    let device = get("device").map_or(Some(Device::Auto), |s| {
        cx.single(s).and_then(|v| cx.device(v))
    });

    let data_stmt = require(cx, &["data"], "data { source ...; batch 64 }");
    let data = data_stmt.and_then(|s| check_data(cx, s));
    // The data files' headers are read whatever else fails, so that their problems are
    // reported with every other.
    let declared = data
        .as_ref()
        .map(|d| datafiles::read(cx, files, stmt, &d.data))
        .unwrap_or_default();
    let model_stmt = require(cx, &["model"], "model { input [784]; linear(10) }");
    let feed = match &data {
        Some(d) => Feed {
            // A declared shape is as the file stores it; the model receives it arranged.
            shape: d
                .sample
                .as_ref()
                .map(|(s, at)| (d.data.layout.arranged(s), *at)),
            dtype: super::tokens::feed_dtype(
                &d.data.source,
                d.dtype,
                model_stmt.and_then(|s| s.body.as_ref()),
            ),
            int_bound: d.int_bound,
        },
        None => Feed {
            shape: None,
            dtype: crate::ir::DType::Float,
            int_bound: None,
        },
    };
    let model = model_stmt.and_then(|s| match &s.body {
        Some(b) => {
            cx.block_statement(s);
            check_model(cx, b, &feed)
        }
        None => {
            cx.report(Problem::Names(Names::WrongArguments {
                span: s.span,
                situation: Arguments::NoBlock {
                    keyword: "model".into(),
                    example: "model { input [784]; linear(10) }",
                },
            }));
            None
        }
    });
    let optimizer = require(cx, &["optimizer"], "optimizer adam(lr: 1e-3)")
        .and_then(|s| check_optimizer(cx, s, model.as_ref()));
    let schedule = get("schedule").map_or(Some(crate::ir::Schedule::Constant), |s| {
        check_schedule(cx, s)
    });
    let train_stmt = require(cx, &["train"], "train { epochs 10; loss cross_entropy }");
    let train_in = train_stmt.and_then(|s| check_train(cx, s));
    let memory = check_memory(cx, statements);

    let dp_devices_default = device.unwrap_or(Device::Auto);
    let parallel = get("parallel").map_or(Some(ParallelIn::plain(Parallel::None)), |s| {
        check_parallel(cx, s, dp_devices_default)
    });

    // Placement: inline `on` and `place` statements.
    let placements = model
        .as_ref()
        .and_then(|m| check_placements(cx, statements, m));

    let training = Training {
        fp16: train_in
            .as_ref()
            .filter(|t| t.train.precision == Precision::Fp16)
            .and_then(|t| t.given.get("precision").copied()),
        max_steps: train_in
            .as_ref()
            .and_then(|t| max_steps(&t.train.length, data.as_ref().map(|d| &d.data))),
    };
    let compression = get("compress").map_or(Some(vec![]), |s| {
        check_compress(cx, s, model.as_ref(), &training)
    });

    super::ties::assemble(
        cx,
        Parts {
            stmt,
            statements,
            trial,
            name,
            description: description_ok(description, get("description")),
            tags,
            seed,
            device,
            device_span: get("device").map_or(stmt.keyword.span, |s| s.span),
            data,
            declared,
            dtype: feed.dtype,
            model,
            optimizer,
            schedule,
            schedule_stmt: get("schedule"),
            train: train_in,
            parallel,
            placements,
            compression,
            memory,
            keep_model,
        },
    )
}

/// The most optimizer steps a training of `length` can last: the steps, or for epochs of
/// synthetic data, epochs x the steps of an epoch of all its samples (the training split is no
/// larger).
fn max_steps(length: &Duration, data: Option<&Data>) -> Option<u64> {
    match (length, data) {
        (Duration::Steps(n), _) => Some(*n),
        (
            Duration::Epochs(e),
            Some(
                data @ Data {
                    source: Source::Synthetic { count, .. },
                    batch,
                    ..
                },
            ),
        ) if *batch > 0 => e.checked_mul(data.steps_per_epoch(*count)),
        (Duration::Epochs(_), _) => None,
    }
}

fn description_ok(d: Option<String>, stmt: Option<&Statement>) -> Option<Option<String>> {
    match (d, stmt) {
        (Some(d), _) => Some(Some(d)),
        (None, None) => Some(None),
        (None, Some(_)) => None,
    }
}

fn check_memory(cx: &mut Cx, statements: &[Statement]) -> Option<Vec<(Device, u64, Span)>> {
    let mut out: Vec<(Device, u64, Span)> = Vec::new();
    let mut ok = true;
    for s in statements.iter().filter(|s| s.keyword.name == "memory") {
        cx.plain_statement(s, false);
        let [device, size] = s.values.as_slice() else {
            cx.report(Problem::Names(Names::WrongArguments {
                span: s.span,
                situation: Arguments::Form(Form::Memory),
            }));
            ok = false;
            continue;
        };
        let (Some(d), Some(b)) = (cx.device(device), cx.bytes(size)) else {
            ok = false;
            continue;
        };
        if let Some((_, _, first)) = out.iter().find(|(x, _, _)| *x == d) {
            cx.report(Problem::Names(Names::DuplicateSetting {
                span: device.span,
                first: *first,
                name: format!("memory {d}"),
            }));
            ok = false;
            continue;
        }
        out.push((d, b, s.span));
    }
    ok.then_some(out)
}

fn check_placements(
    cx: &mut Cx,
    statements: &[Statement],
    model: &ModelOut,
) -> Option<Vec<Placement>> {
    let mut out: Vec<Placement> = model
        .inline_placements
        .iter()
        .map(|(n, d, s)| Placement {
            name: n.clone(),
            device: *d,
            span: *s,
        })
        .collect();
    let mut ok = true;
    for s in statements.iter().filter(|s| s.keyword.name == "place") {
        cx.plain_statement(s, false);
        let on = s
            .values
            .iter()
            .position(|v| matches!(&v.kind, ValueKind::Path(p) if p == "on"));
        let (targets, device) = match on {
            Some(i) if i > 0 && i + 2 == s.values.len() => (&s.values[..i], &s.values[i + 1]),
            _ => {
                cx.report(Problem::Names(Names::WrongArguments {
                    span: s.span,
                    situation: Arguments::Form(Form::Place),
                }));
                ok = false;
                continue;
            }
        };
        let Some(device) = cx.device(device) else {
            ok = false;
            continue;
        };
        for t in targets {
            let names: Vec<&crate::syntax::ast::Value> = match &t.kind {
                ValueKind::List(items) => items.iter().collect(),
                _ => vec![t],
            };
            for v in names {
                let Some(ident) = cx.reference(v) else {
                    ok = false;
                    continue;
                };
                if !model.names.contains_key(&ident.name) {
                    let known: Vec<&str> = model.names.keys().map(String::as_str).collect();
                    unknown_reference(cx, &ident, &known, "");
                    ok = false;
                    continue;
                }
                out.push(Placement {
                    name: ident.name,
                    device,
                    span: v.span.to(s.values.last().map_or(v.span, |l| l.span)),
                });
            }
        }
    }
    // A layer or block given two placements of its own. A layer placed inside a placed block
    // is no conflict: its own placement takes precedence (`place_nodes`).
    let mut first: HashMap<&str, &Placement> = HashMap::new();
    for b in &out {
        match first.get(b.name.as_str()) {
            Some(a) => {
                cx.report(Problem::Strategies(Strategies::PlacementConflict {
                    span: b.span,
                    name: b.name.clone(),
                    device: b.device,
                    first: (a.span, a.name.clone(), a.device),
                }));
                ok = false;
            }
            None => {
                first.insert(&b.name, b);
            }
        }
    }
    ok.then_some(out)
}
