//! The checks that tie the experiment's blocks together: batch arithmetic, strategies against
//! placements, the loss against the model's output and the targets, evaluation settings,
//! compression on placed layers, the data files against the model, and the typed experiment
//! assembled from the checked parts.
//!
//! Each check runs as soon as the parts it reads checked, whatever failed elsewhere, so that one
//! pass reports every problem of a file: a typo in the optimizer does not hide a data file that
//! disagrees with the model.

mod strategy;

use std::collections::HashMap;

use super::compress::{check_combined, check_placed};
use super::consistency::{check_consistency, check_lengths, Lengths, Settings};
use super::cx::Cx;
use super::data::DataOut;
use super::datafiles::{self, Declared, Wants};
use super::model::ModelOut;
use super::parallel::ParallelIn;
use super::placement::{place_nodes, Placement};
use super::schedule::check_plateau;
use super::train::TrainIn;
use crate::diagnostic::problem::{
    Ignored, Inconsistent, Names, OutOfRange, Shapes, Strategies, Warnings,
};
use crate::diagnostic::Problem;
use crate::ir::{
    layers, Compression, DType, Device, Duration, Experiment, Metric, Node, Optimizer, Parallel,
    Schedule, Targets,
};
use crate::span::Span;
use crate::syntax::ast::Statement;
use strategy::{check_strategy, finish_pipeline, pipeline_batch_norm};

/// The experiment's parts, each `None` when its own check failed.
pub(super) struct Parts<'a> {
    /// The experiment statement.
    pub stmt: &'a Statement,
    /// The experiment block's statements.
    pub statements: &'a [Statement],
    /// The sweep values of this trial.
    pub trial: Vec<(String, String)>,
    /// The experiment's name.
    pub name: Option<String>,
    /// Its description.
    pub description: Option<Option<String>>,
    /// Its tags.
    pub tags: Option<Vec<String>>,
    /// Its seed.
    pub seed: Option<u64>,
    /// The default device.
    pub device: Option<Device>,
    /// The `device` statement.
    pub device_span: Span,
    /// The data block.
    pub data: Option<DataOut>,
    /// What the data files' headers declare.
    pub declared: Vec<Declared>,
    /// The element type the data feeds the model.
    pub dtype: DType,
    /// The model block.
    pub model: Option<ModelOut>,
    /// The optimizer.
    pub optimizer: Option<Optimizer>,
    /// The learning-rate schedule.
    pub schedule: Option<Schedule>,
    /// The `schedule` statement.
    pub schedule_stmt: Option<&'a Statement>,
    /// The train block.
    pub train: Option<TrainIn>,
    /// The parallel strategy.
    pub parallel: Option<ParallelIn>,
    /// The placements.
    pub placements: Option<Vec<Placement>>,
    /// The compression steps.
    pub compression: Option<Vec<Compression>>,
    /// Device capacities.
    pub memory: Option<Vec<(Device, u64, Span)>>,
    /// Whether to return the model's layers as far as they checked.
    pub keep_model: bool,
}

/// Runs every check that ties parts together, each when the parts it reads checked, and
/// assembles the typed experiment when nothing failed. Also returns, when asked, the model's
/// layers as far as they checked (placed on their devices when the placements checked),
/// whatever failed.
pub(super) fn assemble(cx: &mut Cx, parts: Parts) -> (Option<Experiment>, Vec<Node>) {
    let Parts {
        stmt,
        statements,
        trial,
        name,
        description,
        tags,
        seed,
        device,
        device_span,
        mut data,
        declared,
        dtype,
        model,
        optimizer,
        schedule,
        schedule_stmt,
        train: train_in,
        parallel,
        placements,
        compression,
        memory,
        keep_model,
    } = parts;
    let mut ok = true;
    // The data against the model: the files' samples and targets, token targets.
    let (mut input_fits, mut targets_fit) = (true, true);
    if let (Some(d), Some(m)) = (&mut data, &model) {
        let fit = datafiles::fit(
            cx,
            &declared,
            &Wants {
                input: &m.input,
                dtype,
                targets: &d.data.targets,
                loss: train_in.as_ref().map(|t| &t.train.loss),
            },
        );
        input_fits = m.input_fits && fit.inputs;
        targets_fit = fit.targets;
        ok &= input_fits && targets_fit;
        ok &= file_token_targets(cx, d, m, dtype);
        ok &= super::tokens::text_vocabulary(cx, &mut d.data, &m.nodes, &declared);
    }
    if let Some(d) = &mut data {
        ok &= datafiles::folder_classes(cx, &mut d.data.targets, &declared);
    }
    if let Some(d) = &mut data {
        d.data.read = declared
            .iter()
            .find(|d| d.trains())
            .map(Declared::read_data);
    }
    let nodes = match (&model, &placements, device) {
        (Some(m), Some(p), Some(device)) => {
            let mut nodes = m.nodes.clone();
            place_nodes(&mut nodes, p, device);
            Some(nodes)
        }
        _ => None,
    };
    let mut train = train_in.as_ref().map(|t| t.train.clone());
    if let (Some(c), Some(n), Some(d)) = (&compression, &nodes, &data) {
        ok &= check_placed(cx, c, n, d.data.batch);
    }
    if let (Some(c), Some(p)) = (&compression, &parallel) {
        ok &= check_combined(cx, c, &p.parallel, p.span);
    }
    if let Some(m) = &model {
        let spread = match (&parallel, &train_in, device) {
            (Some(p), Some(t), Some(device)) => Some(super::recompute::Spread {
                parallel: &p.parallel,
                span: p.span,
                precision: t.train.precision,
                device,
            }),
            _ => None,
        };
        ok &= super::recompute::check(cx, &m.nodes, compression.as_deref().unwrap_or(&[]), spread);
    }
    if let (Some(d), Some(t), Some(t_in)) = (&data, &train, &train_in) {
        ok &= check_evaluation(cx, &d.data, t, &t_in.given);
    }
    if let (Some(d), Some(s)) = (&data, &schedule) {
        ok &= check_plateau(cx, s, &d.data, schedule_stmt);
    }
    // Targets that do not fit the data's own rules were reported against the file.
    if let (Some(d), Some(m), Some(t), true) = (&data, &model, &train, targets_fit) {
        let file_targets = declared
            .iter()
            .find(|d| d.trains())
            .map(Declared::target_shape);
        ok &= super::loss::against_targets(
            cx,
            &t.loss,
            t.loss_span,
            m,
            &d.data.targets,
            file_targets.as_ref(),
            d.data.source_span,
        );
    }
    let mut batch_ok = false;
    if let (Some(d), Some(t_in), Some(p), Some(t)) = (&data, &train_in, &parallel, &mut train) {
        let dp = p.parallel.data_parallel_size();
        batch_ok = check_batch(cx, d.data.batch, d.data.batch_span, dp, t_in, p, t);
        ok &= batch_ok;
    }
    if let (Some(p), Some(n), Some(device), Some(pl)) = (&parallel, &nodes, device, &placements) {
        let precision = train_in
            .as_ref()
            .map_or(crate::ir::Precision::Fp32, |t| t.train.precision);
        // Whether every layer checked (the strategy's warnings read the whole model).
        let whole = model.as_ref().is_some_and(|m| m.output.is_some());
        ok &= check_strategy(cx, p, n, device, pl, precision, whole);
    }
    if let (Some(n), Some(c)) = (&nodes, &compression) {
        ok &= super::shrink::check_structured(cx, n, c);
    }
    if let (Some(d), Some(m), Some(n), Some(pl), Some(device), Some(t), Some(p)) = (
        &data,
        &model,
        &nodes,
        &placements,
        device,
        &train,
        &parallel,
    ) {
        ok &= check_consistency(
            cx,
            &Settings {
                statements,
                data: &d.data,
                dtype,
                input: &m.input,
                input_fits,
                nodes: n,
                placements: pl,
                device,
                train: t,
                parallel: p,
            },
        );
    }
    if let (Some(d), Some(t), Some(s), Some(c), Some(n), Some(p)) =
        (&data, &train, &schedule, &compression, &nodes, &parallel)
    {
        check_lengths(
            cx,
            &Lengths {
                statements,
                data: &d.data,
                train: t,
                schedule: s,
                compression: c,
                nodes: n,
                parallel: &p.parallel,
            },
        );
        if batch_ok {
            pipeline_batch_norm(cx, p, n, t.micro_batch);
        }
    }
    if let (Some(d), Some(m), Some(n)) = (&data, &model, &nodes) {
        ok &= check_size(cx, n, &m.input, d.data.batch, d.data.batch_span);
    }
    let checked = if keep_model {
        nodes
            .clone()
            .or_else(|| model.as_ref().map(|m| m.nodes.clone()))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let experiment = ok
        .then(|| {
            typed(Typed {
                stmt,
                trial,
                allow: cx.allowed.clone(),
                name,
                description,
                tags,
                seed,
                device,
                device_span,
                data,
                dtype,
                model,
                nodes,
                optimizer,
                schedule,
                train,
                parallel,
                compression,
                memory,
            })
        })
        .flatten();
    (experiment, checked)
}

/// The parts of a typed experiment, each `None` when it failed.
struct Typed<'a> {
    stmt: &'a Statement,
    trial: Vec<(String, String)>,
    allow: Vec<String>,
    name: Option<String>,
    description: Option<Option<String>>,
    tags: Option<Vec<String>>,
    seed: Option<u64>,
    device: Option<Device>,
    device_span: Span,
    data: Option<DataOut>,
    dtype: DType,
    model: Option<ModelOut>,
    nodes: Option<Vec<Node>>,
    optimizer: Option<Optimizer>,
    schedule: Option<Schedule>,
    train: Option<crate::ir::Train>,
    parallel: Option<ParallelIn>,
    compression: Option<Vec<Compression>>,
    memory: Option<Vec<(Device, u64, Span)>>,
}

/// The typed experiment, when every part checked.
fn typed(t: Typed) -> Option<Experiment> {
    let Typed {
        stmt,
        trial,
        allow,
        name,
        description,
        tags,
        seed,
        device,
        device_span,
        data,
        dtype,
        model,
        nodes,
        optimizer,
        schedule,
        train,
        parallel,
        compression,
        memory,
    } = t;
    let (data, model, nodes, train) = (data?, model?, nodes?, train?);
    let parallel = finish_pipeline(parallel?.parallel, &nodes);
    Some(Experiment {
        name: name?,
        span: stmt.keyword.span,
        description: description?,
        tags: tags?,
        seed: seed?,
        trial,
        allow,
        settings: Vec::new(),
        data: crate::ir::Data {
            ignore_label: train.loss.ignore_index(),
            token_vocab: super::tokens::file_vocab(&data.data.source, &nodes),
            ..data.data
        },
        model: crate::ir::Model {
            input: model.input,
            input_dtype: dtype,
            nodes,
            output: model.output?,
        },
        device: device?,
        device_span,
        memory: memory?,
        parallel,
        compression: compression?,
        optimizer: optimizer?,
        schedule: schedule?,
        train,
    })
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
        cx.report(Problem::Names(Names::OutOfRange {
            span: biggest,
            situation: OutOfRange::TooManyParameters { params },
        }));
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
        cx.report(Problem::Names(Names::OutOfRange {
            span: batch_span,
            situation: OutOfRange::BatchTooLarge {
                batch,
                values: values * b,
                flops: flops * b,
            },
        }));
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
            cx.report(Problem::Strategies(Strategies::Inconsistent {
                span: *at,
                situation: Inconsistent::EarlyStopWithoutValidation {
                    metric: es.metric.to_string(),
                    source: data.source_span,
                },
            }));
            ok = false;
        }
    }
    if let (true, Some(at)) = (no_val, given.get("eval_every")) {
        cx.report(Problem::Warnings(Warnings::IgnoredSetting {
            span: *at,
            situation: Ignored::EvalWithoutValidation,
        }));
    }
    if let (Some(ck), Some(at)) = (&train.checkpoint, given.get("checkpoint")) {
        let longer = match (ck.every, train.length) {
            (Duration::Epochs(e), Duration::Epochs(n))
            | (Duration::Steps(e), Duration::Steps(n)) => e > n,
            _ => false,
        };
        if longer {
            cx.report(Problem::Warnings(Warnings::IgnoredSetting {
                span: *at,
                situation: Ignored::CheckpointAfterEnd,
            }));
        }
    }
    let classes = match &data.targets {
        Targets::Classes(c) | Targets::Tokens { classes: c, .. } => Some(*c),
        _ => None,
    };
    let at = given.get("metrics").copied().unwrap_or(train.loss_span);
    let regression: Vec<&'static str> = train
        .metrics
        .iter()
        .filter_map(|m| match m {
            Metric::Mae => Some("mae"),
            Metric::Rmse => Some("rmse"),
            Metric::R2 => Some("r2"),
            _ => None,
        })
        .collect();
    if !regression.is_empty() && !train.loss.regression() {
        cx.report(Problem::Warnings(Warnings::IgnoredSetting {
            span: at,
            situation: Ignored::RegressionMetrics {
                metrics: regression,
                loss: train.loss.name(),
            },
        }));
    }
    for m in &train.metrics {
        match (m, classes) {
            (Metric::Accuracy | Metric::TopK(_), None) if train.loss.regression() => {
                cx.report(Problem::Warnings(Warnings::IgnoredSetting {
                    span: at,
                    situation: Ignored::AccuracyOnValues,
                }));
            }
            (Metric::TopK(k), Some(Some(c))) if *k > c => {
                cx.report(Problem::Names(Names::OutOfRange {
                    span: at,
                    situation: OutOfRange::TopK { k: *k, classes: c },
                }));
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
    t: &TrainIn,
    p: &ParallelIn,
    train: &mut crate::ir::Train,
) -> bool {
    let accumulate = train.accumulate;
    let per_step = accumulate * dp;
    let mut ok = true;
    if !batch.is_multiple_of(per_step) {
        cx.report(Problem::Strategies(Strategies::BatchArithmetic {
            span: batch_span,
            batch,
            accumulate: (accumulate, t.accumulate_span),
            replicas: (dp, p.dp_span),
            micro: None,
        }));
        return false;
    }
    let micro = batch / per_step;
    if let Some((declared, span)) = t.micro_batch {
        if declared != micro {
            cx.report(Problem::Strategies(Strategies::BatchArithmetic {
                span,
                batch,
                accumulate: (accumulate, t.accumulate_span),
                replicas: (dp, p.dp_span),
                micro: Some((declared, batch_span)),
            }));
            ok = false;
        }
    }
    if let Parallel::Pipeline { micro_batches, .. } = p.parallel {
        if !micro.is_multiple_of(micro_batches) {
            cx.report(Problem::Strategies(Strategies::MicroBatches {
                span: p.micro_batches_span.unwrap_or(batch_span),
                micro_batches,
                per_step: micro,
                batch: (batch, batch_span),
                accumulate: (accumulate > 1)
                    .then(|| (accumulate, t.accumulate_span.unwrap_or(batch_span))),
            }));
            ok = false;
        }
    }
    train.micro_batch = micro;
    ok
}

/// A file source's `per_token: true`: its targets are a class per token id of the model's
/// input, whose shape they take. K0309 when the model does not read token ids (its first layer
/// is not an `embedding`).
fn file_token_targets(cx: &mut Cx, data: &mut DataOut, model: &ModelOut, dtype: DType) -> bool {
    let Some(at) = data.per_token else {
        return true;
    };
    if dtype != DType::Int {
        cx.report(Problem::Shapes(Shapes::TokenTargets {
            span: at,
            first: layers(&model.nodes).first().map_or(at, |l| l.span),
        }));
        return false;
    }
    if let Targets::Tokens { shape, .. } = &mut data.data.targets {
        *shape = model.input.clone();
    }
    true
}
