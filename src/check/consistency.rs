//! Settings of different blocks that contradict each other: precision against the devices,
//! `normalize` against the input's channels, data-parallel replicas against the experiment's
//! device, and every schedule and interval against the training's length.
//!
//! The facts come from the typed settings; the spans from the statements, so that each
//! diagnostic points at the value the user will edit, with the conflicting side as a secondary
//! label.

use std::cmp::Ordering;

use super::cx::Cx;
use super::parallel::ParallelIn;
use super::placement::{within, Placement};
use crate::diagnostic::problem::{
    Ignored, Inconsistent, Interval, Outlasts, Strategies, TrainingLength, Warnings,
};
use crate::diagnostic::Problem;
use crate::ir::{
    layers, rank_micro_batches, Compression, DType, Data, Device, Duration, LayerKind, Node,
    Parallel, Precision, PruneSchedule, Schedule, Shape, Train,
};
use crate::syntax::ast::{Args, Statement, Value, ValueKind};

/// Optimizer steps in one epoch of `samples` samples: batches of the training split, the last
/// one partial, or left out with `drop_last`.
fn per_epoch(data: &Data, samples: Option<u64>) -> Option<u64> {
    let (n, _, _) = data.split.counts(samples?);
    (data.batch > 0).then(|| data.steps_per_epoch(n))
}

/// Optimizer steps in `d`, when an epoch's steps are known or not needed.
fn steps(d: Duration, per_epoch: Option<u64>) -> Option<u64> {
    match d {
        Duration::Steps(n) => Some(n),
        Duration::Epochs(n) => n.checked_mul(per_epoch?),
    }
}

/// The training's length, in optimizer steps as the runtime's budget counts them when the file
/// tells (a length in steps, or epochs of data whose count is known).
pub(super) fn training_length(train: &Train, data: &Data, samples: Option<u64>) -> TrainingLength {
    TrainingLength {
        written: train.length,
        steps: steps(train.length, per_epoch(data, samples)),
        span: train.length_span,
    }
}

/// `d` against the training's length: in their unit when they share one, else in steps when an
/// epoch's steps are known.
fn against(d: Duration, length: &TrainingLength, per_epoch: Option<u64>) -> Option<Ordering> {
    match (d, length.written) {
        (Duration::Epochs(a), Duration::Epochs(b)) | (Duration::Steps(a), Duration::Steps(b)) => {
            Some(a.cmp(&b))
        }
        _ => Some(steps(d, per_epoch)?.cmp(&length.steps?)),
    }
}

/// What the cross-setting checks read: the checked settings and the statements they came from.
pub(super) struct Settings<'a> {
    /// The experiment block's statements.
    pub statements: &'a [Statement],
    /// The data settings.
    pub data: &'a Data,
    /// The input's element type.
    pub dtype: DType,
    /// The model's input shape.
    pub input: &'a Shape,
    /// Whether the data's samples fit the input; when they do not, that is the problem
    /// reported, not its consequences for `normalize`.
    pub input_fits: bool,
    /// The model's nodes, each layer on its device.
    pub nodes: &'a [Node],
    /// The placements written.
    pub placements: &'a [Placement],
    /// The experiment's device.
    pub device: Device,
    /// The training settings.
    pub train: &'a Train,
    /// The parallel strategy.
    pub parallel: &'a ParallelIn,
}

/// What the checks of lengths against the training read. They run once the number of samples
/// is known as well as it can be: at once for synthetic data, after the data files' headers are
/// read for a file source.
pub(super) struct Lengths<'a> {
    /// The experiment block's statements.
    pub statements: &'a [Statement],
    /// The data settings.
    pub data: &'a Data,
    /// The training settings.
    pub train: &'a Train,
    /// The learning-rate schedule.
    pub schedule: &'a Schedule,
    /// The compression steps.
    pub compression: &'a [Compression],
    /// The model's nodes.
    pub nodes: &'a [Node],
    /// How the work is spread.
    pub parallel: &'a Parallel,
}

/// Runs every cross-setting check; false when one found an error.
pub(super) fn check_consistency(cx: &mut Cx, s: &Settings) -> bool {
    let ok = precision(cx, s);
    let ok = replicas(cx, s) && ok;
    normalize(cx, s) && ok
}

/// K0412 and K0406: every schedule and interval against the training's length (warnings);
/// K0227: batch norm over passes of one sample (an error).
pub(super) fn check_lengths(cx: &mut Cx, s: &Lengths) {
    let samples = s.data.samples();
    let per_epoch = per_epoch(s.data, samples);
    let length = training_length(s.train, s.data, samples);
    lr_schedule(cx, s, length, per_epoch);
    gradual(cx, s, length, per_epoch);
    evaluation(cx, s, length, per_epoch);
    if let Some(n) = samples {
        batch_norm_one_value(cx, s, n);
    }
}

/// `n` samples cut as `Tensor.chunk(parts)` cuts them: pieces of `ceil(n / parts)`, the last
/// smaller.
fn chunk(n: u64, parts: u64) -> Vec<u64> {
    let size = n.div_ceil(parts.clamp(1, n.max(1)));
    (0..n.div_ceil(size.max(1)))
        .map(|i| size.min(n - i * size))
        .collect()
}

/// The samples of each forward pass that a training batch of `b` samples runs as: micro-batches
/// of `accumulate`, then data-parallel replicas' slices (`Tensor.tensor_split`), ranks'
/// micro-batches (a micro-batch without rows runs one stand-in row), or pipeline micro-batches.
fn passes(b: u64, accumulate: u64, parallel: &Parallel) -> Vec<u64> {
    let micro = |n: u64| chunk(n, accumulate.min(n).max(1));
    match parallel {
        Parallel::Data { devices, .. } => {
            let w = devices.len().max(1) as u64;
            micro(b)
                .into_iter()
                .flat_map(|m| (0..w).map(move |r| m / w + u64::from(r < m % w)))
                .filter(|n| *n > 0)
                .collect()
        }
        // The data ranks' micro-batches (tensor ranks share their data rank's).
        Parallel::Distributed { .. } => {
            rank_micro_batches(b, parallel.data_parallel_size(), accumulate)
                .into_iter()
                .map(|slot| slot.map_or(1, |(_, rows)| rows))
                .collect()
        }
        Parallel::Pipeline { micro_batches, .. } => micro(b)
            .into_iter()
            .flat_map(|m| chunk(m, *micro_batches))
            .collect(),
        Parallel::None | Parallel::Model => micro(b),
    }
}

/// What cuts a batch into passes, for the diagnostic.
fn cut_by(accumulate: u64, parallel: &Parallel) -> String {
    let mut by = Vec::new();
    if accumulate > 1 {
        by.push(format!("`accumulate {accumulate}`"));
    }
    match parallel {
        Parallel::Data { devices, .. } => by.push(format!("{} replicas", devices.len())),
        Parallel::Distributed { .. } => {
            by.push(format!("{} data ranks", parallel.data_parallel_size()))
        }
        Parallel::Pipeline { micro_batches, .. } => {
            by.push(format!("{micro_batches} pipeline micro-batches"))
        }
        Parallel::None | Parallel::Model => {}
    }
    by.join(" and ")
}

/// K0227: a batch norm layer that sees one value per channel and sample, normalising a pass of
/// one sample with its batch statistics: in training, the last partial batch of an epoch or a
/// micro-batch, replica slice or rank's share; in evaluation (a layer without running
/// statistics), the last batch of a split. `n` is the source's sample count.
fn batch_norm_one_value(cx: &mut Cx, s: &Lengths, n: u64) {
    let one_value = |l: &&crate::ir::Layer| {
        let per_channel = l.input.0.iter().skip(1).product::<i64>();
        per_channel == 1
    };
    let norms: Vec<_> = layers(s.nodes)
        .into_iter()
        .filter_map(|l| match &l.kind {
            LayerKind::BatchNorm1d { norm } | LayerKind::BatchNorm2d { norm } => Some((l, norm)),
            _ => None,
        })
        .filter(|(l, _)| one_value(l))
        .collect();
    let Some((layer, _)) = norms.first() else {
        return;
    };
    let d = s.data;
    let (train, val, test) = d.split.counts(n);
    let b = d.batch;
    // The training batches of an epoch: full ones, and the last, partial one.
    let mut batches = Vec::new();
    if b > 0 && train > 0 {
        if train >= b {
            batches.push(b);
        }
        if !d.drop_last && train % b > 0 {
            batches.push(train % b);
        }
    }
    let cut = cut_by(s.train.accumulate, s.parallel);
    let lone = batches.iter().find_map(|&batch| {
        let sizes = passes(batch, s.train.accumulate, s.parallel);
        sizes.contains(&1).then(|| {
            let which = if batch == b {
                format!("batches of {b}")
            } else {
                format!(
                    "the last batch of each epoch ({train} = {} × {b} + {batch})",
                    train / b
                )
            };
            if batch == 1 {
                format!("{which}: a pass of 1 sample")
            } else {
                format!("{which}, cut by {cut}, run passes of 1 sample")
            }
        })
    });
    if let Some(how) = lone {
        cx.report(Problem::Strategies(Strategies::BatchNormOneValue {
            span: layer.span,
            layer: layer.name.clone(),
            cause: Some((d.batch_span, how)),
            evaluation: false,
        }));
        return;
    }
    // Without running statistics, evaluation normalises with batch statistics too. Ranks share
    // an evaluation, which the run itself checks.
    let Some((layer, _)) = norms.iter().find(|(_, norm)| !norm.track_running_stats) else {
        return;
    };
    if matches!(s.parallel, Parallel::Distributed { .. }) {
        return;
    }
    let e = d.eval_batch.max(1);
    let lone = [
        ("validation", val, d.val.is_none()),
        ("test", test, d.test.is_none()),
    ]
    .into_iter()
    .find(|(_, count, counted)| *counted && *count > 0 && (e == 1 || *count % e == 1));
    if let Some((split, count, _)) = lone {
        let at = find_in(s.statements, "data", "eval_batch").map_or(d.batch_span, |s| s.span);
        cx.report(Problem::Strategies(Strategies::BatchNormOneValue {
            span: layer.span,
            layer: layer.name.clone(),
            cause: Some((
                at,
                if e == 1 {
                    format!("the {split} split is evaluated in batches of 1, with batch statistics (`track_running_stats: false`)")
                } else {
                    format!(
                        "the {split} split's last batch holds 1 sample ({count} = {} × {e} + 1), evaluated with batch statistics (`track_running_stats: false`)",
                        count / e
                    )
                },
            )),
            evaluation: true,
        }));
    }
}

/// The statement `keyword` among `statements`.
fn find<'a>(statements: &'a [Statement], keyword: &str) -> Option<&'a Statement> {
    statements.iter().find(|s| s.keyword.name == keyword)
}

/// The statement `keyword` inside the block of the experiment's statement `block`.
fn find_in<'a>(statements: &'a [Statement], block: &str, keyword: &str) -> Option<&'a Statement> {
    find(&find(statements, block)?.body.as_ref()?.statements, keyword)
}

/// The argument `name`, written by name or as the `position`-th positional argument.
fn arg<'a>(args: Option<&'a Args>, name: &str, position: usize) -> Option<&'a Value> {
    let items = &args?.items;
    items
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == name))
        .or_else(|| items.iter().filter(|a| a.name.is_none()).nth(position))
        .map(|a| &a.value)
}

/// The arguments of a call value.
fn call_args(v: &Value) -> Option<&Args> {
    match &v.kind {
        ValueKind::Call(_, args) => Some(args),
        _ => None,
    }
}

/// K0210: fp16 where a layer or a replica runs on the CPU, which PyTorch cannot train.
fn precision(cx: &mut Cx, s: &Settings) -> bool {
    if s.train.precision != Precision::Fp16 {
        return true;
    }
    let device_span = find(s.statements, "device").map(|d| d.span);
    let cpu = match &s.parallel.parallel {
        Parallel::Data { devices, span } if devices.contains(&Device::Cpu) => Some(
            device_span
                .filter(|_| s.device == Device::Cpu)
                .unwrap_or(*span),
        ),
        Parallel::Data { .. } => None,
        Parallel::None
        | Parallel::Model
        | Parallel::Pipeline { .. }
        | Parallel::Distributed { .. } => layers(s.nodes)
            .iter()
            .find(|l| l.device == Device::Cpu)
            .map(|l| {
                s.placements
                    .iter()
                    .filter(|p| p.device == Device::Cpu && within(&l.name, &p.name))
                    .max_by_key(|p| p.name.len())
                    .map(|p| p.span)
                    .or(device_span)
                    .unwrap_or(l.span)
            }),
    };
    let (Some(cpu), Some(at)) = (
        cpu,
        find_in(s.statements, "train", "precision").and_then(|p| p.values.first()),
    ) else {
        return true;
    };
    cx.report(Problem::Strategies(Strategies::Inconsistent {
        span: at.span,
        situation: Inconsistent::Fp16OnCpu { cpu },
    }));
    false
}

/// K0210: an experiment device that none of the data-parallel replicas runs on. A bare `cuda`
/// agrees with any CUDA replica.
fn replicas(cx: &mut Cx, s: &Settings) -> bool {
    let Parallel::Data { devices, span } = &s.parallel.parallel else {
        return true;
    };
    let Some(value) = find(s.statements, "device").and_then(|d| d.values.first()) else {
        return true;
    };
    let bare_cuda = matches!(&value.kind, ValueKind::Path(p) if p == "cuda");
    let agrees = match s.device {
        Device::Auto => true,
        Device::Cuda(_) if bare_cuda => devices.iter().any(|d| matches!(d, Device::Cuda(_))),
        d => devices.contains(&d),
    };
    if agrees {
        return true;
    }
    cx.report(Problem::Strategies(Strategies::Inconsistent {
        span: value.span,
        situation: Inconsistent::DeviceNotReplica {
            device: s.device,
            replicas: s.parallel.dp_span.unwrap_or(*span),
        },
    }));
    false
}

/// K0218: a per-channel `normalize` whose values are not one per channel of the model's input
/// (its first dimension, as the runtime reads it).
fn normalize(cx: &mut Cx, s: &Settings) -> bool {
    let Some(norm) = &s.data.normalize else {
        return true;
    };
    let values = norm.mean.len().max(norm.std.len());
    let channels = s.input.first().copied().unwrap_or(0);
    if s.dtype != DType::Float || values <= 1 || channels == values as i64 || !s.input_fits {
        return true;
    }
    let Some(stmt) = find_in(s.statements, "data", "normalize") else {
        return true;
    };
    let input_span = find_in(s.statements, "model", "input").map_or(s.data.source_span, |i| i.span);
    cx.report(Problem::Strategies(Strategies::NormalizeChannels {
        span: stmt.span,
        values,
        channels,
        input: s.input.clone(),
        input_span,
    }));
    false
}

/// K0412: a learning-rate schedule whose decay or warmup lasts longer than the training.
fn lr_schedule(cx: &mut Cx, s: &Lengths, length: TrainingLength, per_epoch: Option<u64>) {
    let Some(value) = find(s.statements, "schedule").and_then(|st| st.values.first()) else {
        return;
    };
    let at = |name: &str| arg(call_args(value), name, 0).map_or(value.span, |v| v.span);
    let reaches = |d: Duration, or_equal: bool| {
        against(d, &length, per_epoch)
            .is_some_and(|o| o == Ordering::Greater || (or_equal && o == Ordering::Equal))
    };
    let interval = |d: Duration| Interval {
        written: d,
        steps: steps(d, per_epoch),
    };
    let found = match *s.schedule {
        Schedule::Step { every, .. } => reaches(every, true).then(|| {
            (
                at("every"),
                Outlasts::FirstDecay {
                    every: interval(every),
                },
            )
        }),
        // The first decay comes when the first epoch ends, at or after the end of a training of
        // one epoch or fewer steps than one.
        Schedule::Exponential { .. } => reaches(Duration::Epochs(1), true)
            .then_some((value.span, Outlasts::FirstEpoch { per_epoch })),
        Schedule::Cosine {
            warmup: Some(w), ..
        } => reaches(w, true).then(|| {
            (
                at("warmup"),
                Outlasts::Warmup {
                    schedule: "cosine",
                    length: interval(w),
                },
            )
        }),
        Schedule::Linear {
            length: Some(w), ..
        } => reaches(w, false).then(|| {
            (
                at("length"),
                Outlasts::Warmup {
                    schedule: "linear",
                    length: interval(w),
                },
            )
        }),
        Schedule::Sequence { ref milestones, .. } => {
            milestones.iter().enumerate().find_map(|(i, &m)| {
                reaches(m, true).then(|| {
                    (
                        super::schedule::milestone_span(value, i).unwrap_or(value.span),
                        Outlasts::Milestone { at: interval(m) },
                    )
                })
            })
        }
        Schedule::Warmup { length: w, .. } => reaches(w, false).then(|| {
            (
                at("length"),
                Outlasts::Warmup {
                    schedule: "warmup",
                    length: interval(w),
                },
            )
        }),
        Schedule::Constant
        | Schedule::Cosine { warmup: None, .. }
        | Schedule::OneCycle(_)
        | Schedule::Linear { length: None, .. }
        | Schedule::ReduceOnPlateau(_) => None,
    };
    if let Some((span, situation)) = found {
        cx.report(Problem::Warnings(Warnings::OutlastsTraining {
            span,
            situation,
            length,
        }));
    }
}

/// The run's steps: the training's, plus what a pruning schedule adds after it (fine-tuning, or
/// iterative rounds), as the runtime's timeline counts them.
fn run_steps(s: &Lengths, length: TrainingLength, per_epoch: Option<u64>) -> Option<u64> {
    let train = length.steps?;
    let mut end = train;
    for c in s.compression {
        if let Compression::Prune { schedule, .. } = c {
            match *schedule {
                PruneSchedule::After { finetune } => {
                    end = end.max(train.checked_add(steps(finetune, per_epoch)?)?);
                }
                PruneSchedule::Iterative { rounds, rewind } => {
                    let round = train - rewind.min(train.saturating_sub(1));
                    end = end.max(train.checked_add(rounds.checked_mul(round)?)?);
                }
                PruneSchedule::Before | PruneSchedule::Gradual { .. } => {}
            }
        }
    }
    Some(end)
}

/// K0412: a gradual pruning schedule that reaches its amount after the run ends (pruning stops
/// with training, so the amount is never reached).
fn gradual(cx: &mut Cx, s: &Lengths, length: TrainingLength, per_epoch: Option<u64>) {
    let Some(end_of_run) = run_steps(s, length, per_epoch) else {
        return;
    };
    let body = find(s.statements, "compress")
        .and_then(|c| c.body.as_ref())
        .map_or(&[][..], |b| &b.statements[..]);
    for c in s.compression {
        let Compression::Prune {
            schedule: PruneSchedule::Gradual { start, end, .. },
            span,
            ..
        } = *c
        else {
            continue;
        };
        if end <= end_of_run {
            continue;
        }
        // The `end` argument of the statement's `schedule: gradual(...)`.
        let end_span = body
            .iter()
            .find(|st| st.span == span)
            .and_then(|st| st.values.iter().rev().find_map(call_args))
            .and_then(|method| arg(Some(method), "schedule", usize::MAX))
            .and_then(|sched| arg(call_args(sched), "end", 1))
            .map_or(span, |v| v.span);
        cx.report(Problem::Warnings(Warnings::OutlastsTraining {
            span: end_span,
            situation: Outlasts::GradualEnd { start, end },
            // With fine-tuning or rounds after it, the run is longer than the length written.
            length: if Some(end_of_run) == length.steps {
                length
            } else {
                TrainingLength {
                    written: Duration::Steps(end_of_run),
                    steps: Some(end_of_run),
                    ..length
                }
            },
        }));
    }
}

/// K0412 and K0406: evaluation, early stopping and checkpoints against the training's length.
/// Without a validation split there is no evaluation, which other checks report.
fn evaluation(cx: &mut Cx, s: &Lengths, length: TrainingLength, per_epoch: Option<u64>) {
    let train_block = find(s.statements, "train")
        .and_then(|t| t.body.as_ref())
        .map_or(&[][..], |b| &b.statements[..]);
    if let (Some(ck), Some(stmt)) = (&s.train.checkpoint, find(train_block, "checkpoint")) {
        // Intervals in the training's own unit are compared where the setting is read.
        let same_unit = matches!(
            (ck.every, s.train.length),
            (Duration::Epochs(_), Duration::Epochs(_)) | (Duration::Steps(_), Duration::Steps(_))
        );
        if !same_unit && against(ck.every, &length, per_epoch) == Some(Ordering::Greater) {
            cx.report(Problem::Warnings(Warnings::IgnoredSetting {
                span: stmt.keyword.span,
                situation: Ignored::CheckpointAfterEnd,
            }));
        }
    }
    if !s.data.has_val() {
        return;
    }
    // Evaluations during training: every `n` steps, or at the end of every `n`-th whole epoch.
    let evaluations = match s.train.eval_every {
        Duration::Steps(n) => length.steps.map(|total| total / n.max(1)),
        Duration::Epochs(n) => {
            let epochs = match s.train.length {
                Duration::Epochs(e) => Some(e),
                Duration::Steps(t) => per_epoch.filter(|p| *p > 0).map(|p| t / p),
            };
            epochs.map(|e| e / n.max(1))
        }
    };
    let Some(evaluations) = evaluations else {
        return;
    };
    let eval_every = find(train_block, "eval_every").and_then(|e| e.values.first());
    if let (0, Some(v)) = (evaluations, eval_every) {
        cx.report(Problem::Warnings(Warnings::OutlastsTraining {
            span: v.span,
            situation: Outlasts::EvalEvery {
                every: Interval {
                    written: s.train.eval_every,
                    steps: steps(s.train.eval_every, per_epoch),
                },
            },
            length,
        }));
    }
    if let (Some(es), Some(stmt)) = (&s.train.early_stop, find(train_block, "early_stop")) {
        if evaluations <= es.patience {
            let span = arg(stmt.args.as_ref(), "patience", 1).map_or(stmt.keyword.span, |v| v.span);
            cx.report(Problem::Warnings(Warnings::OutlastsTraining {
                span,
                situation: Outlasts::Patience {
                    patience: es.patience,
                    evaluations,
                },
                length,
            }));
        }
    }
}
