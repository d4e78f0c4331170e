//! The `experiment` block: every setting outside the model, and the checks that tie the
//! settings together (batch arithmetic, strategies, placement, losses).

use std::collections::HashMap;

use super::compress::{check_combined, check_compress, check_placed, Training};
use super::cx::Cx;
use super::data::{check_data, DataOut};
use super::model::{check_model, Feed, ModelOut};
use super::schedule::{check_plateau, check_schedule};
use super::settings::{check_optimizer, check_parallel, check_train, ParallelIn};
use crate::diagnostic::problem::{
    Arguments, Form, Ignored, Inconsistent, LossShape, OutOfRange, Unknown,
};
use crate::diagnostic::Problem;
use crate::ir::{
    layers, DType, Data, Device, Duration, Experiment, Loss, Metric, Node, Parallel, Precision,
    Source, Targets,
};
use crate::span::Span;
use crate::syntax::ast::{Statement, ValueKind};

/// Keywords of the experiment block.
pub const KEYWORDS: &[&str] = &[
    "allow",
    "description",
    "tags",
    "seed",
    "data",
    "model",
    "device",
    "place",
    "memory",
    "parallel",
    "compress",
    "optimizer",
    "schedule",
    "train",
];

/// Keywords that may appear more than once.
const REPEATABLE: &[&str] = &["place", "memory"];

/// Checks one experiment (one sweep trial) and builds its typed form when it has no errors.
pub fn check_experiment(
    cx: &mut Cx,
    stmt: &Statement,
    trial: Vec<(String, String)>,
) -> Option<Experiment> {
    let name = match stmt.values.as_slice() {
        [v] => cx.string(v),
        _ => {
            cx.report(Problem::WrongArguments {
                span: stmt.keyword.span,
                situation: Arguments::NoName {
                    keyword: "experiment".into(),
                    example: "experiment \"name\" { ... }",
                },
            });
            None
        }
    };
    let Some(body) = &stmt.body else {
        cx.report(Problem::WrongArguments {
            span: stmt.span,
            situation: Arguments::NoBlock {
                keyword: "experiment".into(),
                example: "experiment \"name\" { ... }",
            },
        });
        return None;
    };
    let mut seen: HashMap<&str, &Statement> = HashMap::new();
    for s in &body.statements {
        let kw = s.keyword.name.as_str();
        if !KEYWORDS.contains(&kw) {
            cx.unknown_keyword("experiment setting", s, KEYWORDS);
            continue;
        }
        if REPEATABLE.contains(&kw) {
            continue;
        }
        if let Some(first) = seen.get(kw) {
            duplicate(cx, kw, first, s);
        } else {
            seen.insert(kw, s);
        }
    }
    let get = |k: &str| seen.get(k).copied();
    let require = |cx: &mut Cx, k: &'static [&'static str], example: &'static str| {
        let s = get(k[0]);
        if s.is_none() {
            cx.report(Problem::MissingSetting {
                span: stmt.keyword.span,
                block: "experiment",
                settings: k,
                example,
            });
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
    let model_stmt = require(cx, &["model"], "model { input [784]; linear(10) }");
    let feed = match &data {
        Some(d) => Feed {
            shape: d.sample.clone(),
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
            cx.report(Problem::WrongArguments {
                span: s.span,
                situation: Arguments::NoBlock {
                    keyword: "model".into(),
                    example: "model { input [784]; linear(10) }",
                },
            });
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
    let memory = check_memory(cx, &body.statements);

    let dp_devices_default = device.unwrap_or(Device::Auto);
    let parallel = get("parallel").map_or(Some(ParallelIn::plain(Parallel::None)), |s| {
        check_parallel(cx, s, dp_devices_default)
    });

    // Placement: inline `on` and `place` statements.
    let placements = model
        .as_ref()
        .and_then(|m| check_placements(cx, &body.statements, m));

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

    // Everything below ties settings together and needs them all.
    let (name, description, tags, seed, device) = (
        name?,
        description_ok(description, get("description"))?,
        tags?,
        seed?,
        device?,
    );
    let (data, model, optimizer, schedule, train_in, parallel) =
        (data?, model?, optimizer?, schedule?, train_in?, parallel?);
    let compression = compression?;
    let placements = placements?;
    let mut data = data;
    let tokens_ok = file_token_targets(cx, &mut data, &model, feed.dtype);

    let mut nodes = model.nodes.clone();
    place_nodes(&mut nodes, &placements, device);
    let compress_ok = check_placed(cx, &compression, &nodes, data.data.batch);
    let compress_ok =
        check_combined(cx, &compression, &parallel.parallel, parallel.span) && compress_ok;

    let mut train = train_in.train.clone();
    let evaluation_ok = check_evaluation(cx, &data.data, &train, &train_in.given)
        & check_plateau(cx, &schedule, &data.data, get("schedule"));
    let loss_ok = check_loss(
        cx,
        &train.loss,
        train.loss_span,
        &model,
        &data.data.targets,
        data.data.source_span,
    );
    let dp = parallel.parallel.data_parallel_size();
    let batch_ok = check_batch(
        cx,
        data.data.batch,
        data.data.batch_span,
        dp,
        &train_in,
        &parallel,
        &mut train,
    );
    let strategy_ok = check_strategy(cx, &parallel, &nodes, device, &placements);
    let strategy_ok = super::shrink::check_structured(cx, &nodes, &compression) && strategy_ok;
    let consistent = super::consistency::check_consistency(
        cx,
        &super::consistency::Settings {
            statements: &body.statements,
            data: &data.data,
            dtype: feed.dtype,
            input: &model.input,
            nodes: &nodes,
            placements: &placements,
            device,
            train: &train,
            parallel: &parallel,
        },
    );
    // A file source's samples are counted once its headers are read (`check::datafiles`).
    if matches!(data.data.source, Source::Synthetic { .. }) {
        super::consistency::check_lengths(
            cx,
            &super::consistency::Lengths {
                statements: &body.statements,
                data: &data.data,
                train: &train,
                schedule: &schedule,
                compression: &compression,
                nodes: &nodes,
                parallel: &parallel.parallel,
            },
        );
    }
    if batch_ok {
        pipeline_batch_norm(cx, &parallel, &nodes, train.micro_batch);
    }
    let output = model.output.clone();
    let size_ok = check_size(
        cx,
        &nodes,
        &model.input,
        data.data.batch,
        data.data.batch_span,
    );
    if !(loss_ok
        && tokens_ok
        && batch_ok
        && strategy_ok
        && evaluation_ok
        && size_ok
        && compress_ok
        && consistent)
        || output.is_none()
    {
        return None;
    }
    let parallel = finish_pipeline(parallel.parallel, &nodes);
    Some(Experiment {
        name,
        span: stmt.keyword.span,
        description,
        tags,
        seed,
        trial,
        allow: cx.allowed.clone(),
        settings: Vec::new(),
        data: crate::ir::Data {
            ignore_label: train.loss.ignore_index(),
            token_vocab: super::tokens::file_vocab(&data.data.source, &nodes),
            ..data.data
        },
        model: crate::ir::Model {
            input: model.input,
            input_dtype: feed.dtype,
            nodes,
            output: output?,
        },
        device,
        device_span: get("device").map_or(stmt.keyword.span, |s| s.span),
        memory: memory?,
        parallel,
        compression,
        optimizer,
        schedule,
        train,
    })
}

/// The most optimizer steps a training of `length` can last: the steps, or for epochs of
/// synthetic data, epochs x batches of all its samples (the training split is no larger).
fn max_steps(length: &Duration, data: Option<&Data>) -> Option<u64> {
    match (length, data) {
        (Duration::Steps(n), _) => Some(*n),
        (
            Duration::Epochs(e),
            Some(Data {
                source: Source::Synthetic { count, .. },
                batch,
                ..
            }),
        ) if *batch > 0 => e.checked_mul(count.div_ceil(*batch)),
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

/// Reports a setting given twice in one block.
pub fn duplicate(cx: &mut Cx, kw: &str, first: &Statement, again: &Statement) {
    cx.report(Problem::DuplicateSetting {
        span: again.keyword.span,
        first: first.keyword.span,
        name: kw.to_string(),
    });
}

fn check_memory(cx: &mut Cx, statements: &[Statement]) -> Option<Vec<(Device, u64, Span)>> {
    let mut out: Vec<(Device, u64, Span)> = Vec::new();
    let mut ok = true;
    for s in statements.iter().filter(|s| s.keyword.name == "memory") {
        cx.plain_statement(s, false);
        let [device, size] = s.values.as_slice() else {
            cx.report(Problem::WrongArguments {
                span: s.span,
                situation: Arguments::Form(Form::Memory),
            });
            ok = false;
            continue;
        };
        let (Some(d), Some(b)) = (cx.device(device), cx.bytes(size)) else {
            ok = false;
            continue;
        };
        if let Some((_, _, first)) = out.iter().find(|(x, _, _)| *x == d) {
            cx.report(Problem::DuplicateSetting {
                span: device.span,
                first: *first,
                name: format!("memory {d}"),
            });
            ok = false;
            continue;
        }
        out.push((d, b, s.span));
    }
    ok.then_some(out)
}

/// A layer or block placed on a device.
pub struct Placement {
    /// Qualified layer or block name.
    pub name: String,
    /// The device.
    pub device: Device,
    /// The placement's span.
    pub span: Span,
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
                cx.report(Problem::WrongArguments {
                    span: s.span,
                    situation: Arguments::Form(Form::Place),
                });
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
                cx.report(Problem::PlacementConflict {
                    span: b.span,
                    name: b.name.clone(),
                    device: b.device,
                    first: (a.span, a.name.clone(), a.device),
                });
                ok = false;
            }
            None => {
                first.insert(&b.name, b);
            }
        }
    }
    ok.then_some(out)
}

/// Reports a name that is no layer or block of the model.
/// A `suffix` such as `.weight` is set aside while looking for a similar name.
pub fn unknown_reference(
    cx: &mut Cx,
    ident: &crate::syntax::ast::Ident,
    known: &[&str],
    suffix: &str,
) {
    cx.report(Problem::UnknownReference {
        unknown: Unknown {
            span: ident.span,
            name: ident.name.clone(),
            candidates: super::cx::strings(known),
        },
        suffix: suffix.to_string(),
    });
}

fn place_nodes(nodes: &mut [Node], placements: &[Placement], default: Device) {
    fn device_for(name: &str, placements: &[Placement]) -> Option<Device> {
        // The most specific placement wins: the layer's own, else its innermost placed block.
        placements
            .iter()
            .filter(|p| within(name, &p.name))
            .max_by_key(|p| p.name.len())
            .map(|p| p.device)
    }
    for node in nodes {
        match node {
            Node::Layer(l) => l.device = device_for(&l.name, placements).unwrap_or(default),
            Node::Block { nodes, .. } | Node::Residual { nodes, .. } => {
                place_nodes(nodes, placements, default)
            }
        }
    }
}

/// Whether the qualified name `name` is `outer` or lies inside the block `outer`.
pub(super) fn within(name: &str, outer: &str) -> bool {
    name.strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn check_loss(
    cx: &mut Cx,
    loss: &Loss,
    loss_span: Span,
    model: &ModelOut,
    targets: &Targets,
    data_span: Span,
) -> bool {
    let Some(out) = &model.output else {
        return true;
    };
    let name = super::loss::name(loss);
    let err = |cx: &mut Cx, situation: LossShape| {
        cx.report(Problem::LossShape {
            span: loss_span,
            loss: name.to_string(),
            output: (out.clone(), model.output_span),
            data: data_span,
            situation,
        });
        false
    };
    if let Some(situation) = super::loss::option_sizes(loss, out) {
        return err(cx, situation);
    }
    match loss {
        Loss::CrossEntropy { .. } | Loss::Nll { .. } => {
            if let Some(at) = model
                .ends_in_softmax
                .filter(|_| matches!(loss, Loss::CrossEntropy { .. }))
            {
                cx.report(Problem::DoubleSoftmax {
                    span: at,
                    loss: loss_span,
                });
            }
            // The class scores are the output's last dimension; the dimensions before it
            // are the targets' own: none for a class per sample, `[S]` for one per token.
            let (classes, tokens) = match targets {
                Targets::Classes(c) => (*c, None),
                Targets::Tokens { classes, shape } => (*classes, Some(shape)),
                Targets::Values(shape) => {
                    return err(
                        cx,
                        LossShape::ClassesOnValues {
                            targets: shape.clone(),
                        },
                    );
                }
                Targets::Unknown => (None, None),
            };
            if let Some(tokens) = tokens {
                if out.len() != tokens.len() + 1 || out[..tokens.len()] != tokens[..] {
                    return err(
                        cx,
                        LossShape::TokenScores {
                            tokens: tokens.clone(),
                        },
                    );
                }
            } else if out.is_empty() {
                return err(cx, LossShape::ScalarOutput);
            } else if out.len() > 1 {
                return err(cx, LossShape::NotFlat);
            }
            let scores = out.last().copied().unwrap_or(0);
            if scores == 1 {
                return err(cx, LossShape::OneClass);
            }
            if let Some(c) = classes {
                if scores != c as i64 {
                    return err(
                        cx,
                        LossShape::ClassCount {
                            classes: c,
                            per_token: tokens.is_some(),
                        },
                    );
                }
            }
            true
        }
        Loss::Mse | Loss::L1 | Loss::BceWithLogits { .. } => {
            let want: Vec<i64> = match targets {
                Targets::Values(shape) => shape.to_vec(),
                Targets::Classes(Some(classes))
                    if *classes > 2 && matches!(loss, Loss::BceWithLogits { .. }) =>
                {
                    return err(cx, LossShape::BinaryOnClasses { classes: *classes });
                }
                Targets::Classes(_) if matches!(loss, Loss::BceWithLogits { .. }) => vec![],
                Targets::Tokens {
                    classes: Some(classes),
                    ..
                } if *classes > 2 && matches!(loss, Loss::BceWithLogits { .. }) => {
                    return err(cx, LossShape::BinaryOnClasses { classes: *classes });
                }
                Targets::Tokens { shape, .. } if matches!(loss, Loss::BceWithLogits { .. }) => {
                    shape.to_vec()
                }
                Targets::Classes(_) | Targets::Tokens { .. } => {
                    return err(cx, LossShape::ValuesOnClasses);
                }
                Targets::Unknown => return true,
            };
            let fits = **out == want || (want.is_empty() && **out == [1]);
            if !fits {
                return err(
                    cx,
                    LossShape::Shapes {
                        targets: want.into(),
                    },
                );
            }
            true
        }
    }
}

/// The largest model Kiln plans: far beyond any real one, small enough that every byte and FLOP
/// count of the plan is exact in 64 bits.
const MAX_PARAMS: u128 = 1 << 48;
/// The most activation values a batch may hold.
const MAX_BATCH_VALUES: u128 = 1 << 56;
/// The most forward FLOPs a batch may cost (a step costs three times as much).
const MAX_BATCH_FLOPS: u128 = 1 << 61;

/// Rejects sizes so large that they can only be mistakes, before the plan would overflow.
fn check_size(cx: &mut Cx, nodes: &[Node], input: &[i64], batch: u64, batch_span: Span) -> bool {
    let all = layers(nodes);
    let params: u128 = all.iter().map(|l| u128::from(l.params)).sum();
    if params > MAX_PARAMS {
        let biggest = all
            .iter()
            .max_by_key(|l| l.params)
            .map_or(batch_span, |l| l.span);
        cx.report(Problem::OutOfRange {
            span: biggest,
            situation: OutOfRange::TooManyParameters { params },
        });
        return false;
    }
    let values: u128 = all
        .iter()
        .map(|l| u128::from(crate::plan::values(&l.output)))
        .sum::<u128>()
        + u128::from(crate::plan::values(input));
    let flops: u128 = all.iter().map(|l| u128::from(l.flops)).sum();
    let b = u128::from(batch);
    if values * b > MAX_BATCH_VALUES || flops * b > MAX_BATCH_FLOPS {
        cx.report(Problem::OutOfRange {
            span: batch_span,
            situation: OutOfRange::BatchTooLarge {
                batch,
                values: values * b,
                flops: flops * b,
            },
        });
        return false;
    }
    true
}

/// Evaluation settings against the data: a validation split to evaluate on, metrics that fit the
/// targets.
fn check_evaluation(
    cx: &mut Cx,
    data: &crate::ir::Data,
    train: &crate::ir::Train,
    given: &HashMap<&'static str, Span>,
) -> bool {
    let mut ok = true;
    let no_val = !data.has_val();
    if let (true, Some(es), Some(at)) = (no_val, &train.early_stop, given.get("early_stop")) {
        if es.metric.starts_with("val_") {
            cx.report(Problem::Inconsistent {
                span: *at,
                situation: Inconsistent::EarlyStopWithoutValidation {
                    metric: es.metric.to_string(),
                    source: data.source_span,
                },
            });
            ok = false;
        }
    }
    if let (true, Some(at)) = (no_val, given.get("eval_every")) {
        cx.report(Problem::IgnoredSetting {
            span: *at,
            situation: Ignored::EvalWithoutValidation,
        });
    }
    if let (Some(ck), Some(at)) = (&train.checkpoint, given.get("checkpoint")) {
        let longer = match (ck.every, train.length) {
            (Duration::Epochs(e), Duration::Epochs(n))
            | (Duration::Steps(e), Duration::Steps(n)) => e > n,
            _ => false,
        };
        if longer {
            cx.report(Problem::IgnoredSetting {
                span: *at,
                situation: Ignored::CheckpointAfterEnd,
            });
        }
    }
    let classes = match &data.targets {
        Targets::Classes(c) | Targets::Tokens { classes: c, .. } => Some(*c),
        _ => None,
    };
    for m in &train.metrics {
        let at = given.get("metrics").copied().unwrap_or(train.loss_span);
        match (m, classes) {
            (Metric::Accuracy | Metric::TopK(_), None)
                if matches!(train.loss, Loss::Mse | Loss::L1) =>
            {
                cx.report(Problem::IgnoredSetting {
                    span: at,
                    situation: Ignored::AccuracyOnValues,
                });
            }
            (Metric::TopK(k), Some(Some(c))) if *k > c => {
                cx.report(Problem::OutOfRange {
                    span: at,
                    situation: OutOfRange::TopK { k: *k, classes: c },
                });
                ok = false;
            }
            _ => {}
        }
    }
    ok
}

fn check_batch(
    cx: &mut Cx,
    batch: u64,
    batch_span: Span,
    dp: u64,
    t: &super::settings::TrainIn,
    p: &ParallelIn,
    train: &mut crate::ir::Train,
) -> bool {
    let accumulate = train.accumulate;
    let per_step = accumulate * dp;
    let mut ok = true;
    if !batch.is_multiple_of(per_step) {
        cx.report(Problem::BatchArithmetic {
            span: batch_span,
            batch,
            accumulate: (accumulate, t.accumulate_span),
            replicas: (dp, p.dp_span),
            micro: None,
        });
        return false;
    }
    let micro = batch / per_step;
    if let Some((declared, span)) = t.micro_batch {
        if declared != micro {
            cx.report(Problem::BatchArithmetic {
                span,
                batch,
                accumulate: (accumulate, t.accumulate_span),
                replicas: (dp, p.dp_span),
                micro: Some((declared, batch_span)),
            });
            ok = false;
        }
    }
    if let Parallel::Pipeline { micro_batches, .. } = p.parallel {
        if !micro.is_multiple_of(micro_batches) {
            cx.report(Problem::MicroBatches {
                span: p.micro_batches_span.unwrap_or(batch_span),
                micro_batches,
                per_step: micro,
                batch: (batch, batch_span),
                accumulate: (accumulate > 1)
                    .then(|| (accumulate, t.accumulate_span.unwrap_or(batch_span))),
            });
            ok = false;
        }
    }
    train.micro_batch = micro;
    ok
}

fn check_strategy(
    cx: &mut Cx,
    p: &ParallelIn,
    nodes: &[Node],
    default: Device,
    placements: &[Placement],
) -> bool {
    let all = layers(nodes);
    let mut ok = true;
    let devices: Vec<Device> = {
        let mut d: Vec<Device> = all.iter().map(|l| l.device).collect();
        d.sort();
        d.dedup();
        d
    };
    match &p.parallel {
        Parallel::Model if devices.len() < 2 => {
            cx.report(Problem::ModelParallelOneDevice {
                span: p.span,
                device: devices.first().copied().unwrap_or(default),
            });
        }
        Parallel::Pipeline { stages, .. } => {
            let top = nodes.len() as u64;
            if *stages > top {
                cx.report(Problem::TooManyStages {
                    span: p.stages_span.unwrap_or(p.span),
                    stages: *stages,
                    layers: top,
                });
                ok = false;
            }
        }
        Parallel::Data { .. } | Parallel::Distributed { .. } => {
            if let Some(first) = placements.first() {
                cx.report(Problem::PlacementIgnored {
                    span: first.span,
                    parallel: p.span,
                });
            }
        }
        _ => {}
    }
    if let Parallel::Data { devices: dp, .. } = &p.parallel {
        if dp.len() == 1 {
            cx.report(Problem::DataParallelOneDevice { span: p.span });
        }
        shared_generator(cx, p, dp, &all);
    }
    if let Parallel::Distributed {
        backend: crate::ir::Backend::Nccl,
        ..
    } = &p.parallel
    {
        if default == Device::Cpu {
            cx.report(Problem::Inconsistent {
                span: p.backend_span.unwrap_or(p.span),
                situation: Inconsistent::NcclOnCpu,
            });
            ok = false;
        }
    }
    ok
}

/// Warns of batch norm in a pipeline, whose statistics come from one micro-batch at a time
/// (`micro` samples per step, cut into the pipeline's micro-batches).
/// A file source's `per_token: true`: its targets are a class per token id of the model's
/// input, whose shape they take. K0309 when the model does not read token ids (its first layer
/// is not an `embedding`).
fn file_token_targets(cx: &mut Cx, data: &mut DataOut, model: &ModelOut, dtype: DType) -> bool {
    let Some(at) = data.per_token else {
        return true;
    };
    if dtype != DType::Int {
        cx.report(Problem::TokenTargets {
            span: at,
            first: layers(&model.nodes).first().map_or(at, |l| l.span),
        });
        return false;
    }
    if let Targets::Tokens { shape, .. } = &mut data.data.targets {
        *shape = model.input.clone();
    }
    true
}

fn pipeline_batch_norm(cx: &mut Cx, p: &ParallelIn, nodes: &[Node], micro: u64) {
    let Parallel::Pipeline { micro_batches, .. } = p.parallel else {
        return;
    };
    let norm = layers(nodes).into_iter().find(|l| {
        matches!(
            l.kind,
            crate::ir::LayerKind::BatchNorm1d { .. } | crate::ir::LayerKind::BatchNorm2d { .. }
        )
    });
    if let Some(l) = norm {
        cx.report(Problem::PipelineBatchNorm {
            span: l.span,
            layer: l.name.clone(),
            parallel: p.span,
            samples: micro / micro_batches.max(1),
        });
    }
}

/// K0408: dropout on data-parallel replicas that share a device, whose masks then come from
/// one generator in thread order.
fn shared_generator(cx: &mut Cx, p: &ParallelIn, replicas: &[Device], all: &[&crate::ir::Layer]) {
    use crate::ir::LayerKind;
    let shared = replicas.iter().find_map(|d| {
        let n = replicas.iter().filter(|e| *e == d).count() as u64;
        (n > 1).then_some((*d, n))
    });
    let dropout = all.iter().find(|l| match l.kind {
        LayerKind::Dropout { p } => p > 0.0,
        LayerKind::Attention { dropout, .. } | LayerKind::TransformerBlock { dropout, .. } => {
            dropout > 0.0
        }
        _ => false,
    });
    if let (Some((device, n)), Some(layer)) = (shared, dropout) {
        cx.report(Problem::DropoutSharedGenerator {
            span: layer.span,
            parallel: p.dp_span.unwrap_or(p.span),
            device,
            replicas: n,
        });
    }
}

fn finish_pipeline(parallel: Parallel, nodes: &[Node]) -> Parallel {
    let Parallel::Pipeline {
        stages,
        micro_batches,
        schedule,
        ..
    } = parallel
    else {
        return parallel;
    };
    // Balance stages by forward FLOPs over top-level nodes, keeping each stage non-empty.
    let cost: Vec<u64> = nodes
        .iter()
        .map(|n| {
            layers(std::slice::from_ref(n))
                .iter()
                .map(|l| l.flops.max(1))
                .sum()
        })
        .collect();
    let total: u64 = cost.iter().sum();
    let mut boundaries = vec![0];
    let mut acc = 0;
    for (i, c) in cost.iter().enumerate() {
        let remaining_nodes = nodes.len() - i;
        let remaining_stages = stages as usize - boundaries.len();
        let target = total * boundaries.len() as u64 / stages;
        if i > *boundaries.last().unwrap_or(&0)
            && boundaries.len() < stages as usize
            && (acc >= target || remaining_nodes == remaining_stages)
        {
            boundaries.push(i);
        }
        acc += c;
    }
    Parallel::Pipeline {
        stages,
        micro_batches,
        schedule,
        boundaries,
    }
}
