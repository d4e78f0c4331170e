//! The `experiment` block: every setting outside the model, and the checks that tie the
//! settings together (batch arithmetic, strategies, placement, losses).

use std::collections::HashMap;

use super::compress::check_compress;
use super::cx::Cx;
use super::data::check_data;
use super::layers::fmt_shape;
use super::model::{check_model, Feed, ModelOut};
use super::settings::{check_optimizer, check_parallel, check_schedule, check_train, ParallelIn};
use crate::diagnostic::{Code, Diagnostic};
use crate::ir::{
    layers, Compression, Device, Duration, Experiment, Loss, Metric, Node, Parallel, QuantScheme,
    Targets,
};
use crate::span::Span;
use crate::syntax::ast::{Statement, ValueKind};

/// Keywords of the experiment block.
pub const KEYWORDS: &[&str] = &[
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
            cx.push(
                Diagnostic::new(
                    Code::WrongArguments,
                    stmt.keyword.span,
                    "an experiment needs a name",
                )
                .label("expected `experiment \"name\" { ... }`")
                .help("write the experiment's name as a string after `experiment`"),
            );
            None
        }
    };
    let Some(body) = &stmt.body else {
        cx.push(
            Diagnostic::new(
                Code::WrongArguments,
                stmt.span,
                "an experiment needs a body",
            )
            .label("`{ ... }` missing")
            .help("write the experiment's settings between braces"),
        );
        return None;
    };
    let mut seen: HashMap<&str, &Statement> = HashMap::new();
    for s in &body.statements {
        let kw = s.keyword.name.as_str();
        if !KEYWORDS.contains(&kw) {
            cx.unknown(
                Code::UnknownKeyword,
                "experiment setting",
                &s.keyword,
                KEYWORDS,
            );
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
    let require = |cx: &mut Cx, k: &str, example: &str| {
        let s = get(k);
        if s.is_none() {
            cx.push(
                Diagnostic::new(
                    Code::MissingSetting,
                    stmt.keyword.span,
                    format!("the experiment has no `{k}`"),
                )
                .label(format!("`{k}` missing in this experiment"))
                .help(format!("add `{example}`")),
            );
        }
        s
    };

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

    let data_stmt = require(cx, "data", "data { source ...; batch 64 }");
    let data = data_stmt.and_then(|s| check_data(cx, s));
    let model_stmt = require(cx, "model", "model { input [784]; linear(10) }");
    let feed = match &data {
        Some(d) => Feed {
            shape: d.sample.clone(),
            dtype: d.dtype,
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
            cx.push(
                Diagnostic::new(
                    Code::WrongArguments,
                    s.span,
                    "`model` needs a block of layers",
                )
                .label("`{ ... }` missing")
                .help("write `model { input [784]; linear(10) }`"),
            );
            None
        }
    });
    let optimizer =
        require(cx, "optimizer", "optimizer adam(lr: 1e-3)").and_then(|s| check_optimizer(cx, s));
    let schedule = get("schedule").map_or(Some(crate::ir::Schedule::Constant), |s| {
        check_schedule(cx, s)
    });
    let train_stmt = require(cx, "train", "train { epochs 10; loss cross_entropy }");
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

    let compression =
        get("compress").map_or(Some(vec![]), |s| check_compress(cx, s, model.as_ref()));

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
    let mut compression = compression?;
    let placements = placements?;

    let mut nodes = model.nodes.clone();
    place_nodes(&mut nodes, &placements, device);

    let mut train = train_in.train.clone();
    let evaluation_ok = check_evaluation(cx, &data.data, &train, &train_in.given);
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
    let strategy_ok = check_strategy(cx, &parallel, &nodes, device, &placements, &mut compression);
    let output = model.output.clone();
    let size_ok = check_size(
        cx,
        &nodes,
        &model.input,
        data.data.batch,
        data.data.batch_span,
    );
    if !(loss_ok && batch_ok && strategy_ok && evaluation_ok && size_ok) || output.is_none() {
        return None;
    }
    let parallel = finish_pipeline(parallel.parallel, &nodes);
    Some(Experiment {
        name,
        description,
        tags,
        seed,
        trial,
        data: data.data,
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

fn description_ok(d: Option<String>, stmt: Option<&Statement>) -> Option<Option<String>> {
    match (d, stmt) {
        (Some(d), _) => Some(Some(d)),
        (None, None) => Some(None),
        (None, Some(_)) => None,
    }
}

/// Reports a setting given twice in one block.
pub fn duplicate(cx: &mut Cx, kw: &str, first: &Statement, again: &Statement) {
    cx.push(
        Diagnostic::new(
            Code::DuplicateSetting,
            again.keyword.span,
            format!("`{kw}` is set twice"),
        )
        .label("set again here")
        .with(first.keyword.span, "first set here")
        .help(format!(
            "keep one `{kw}`; Kiln never silently picks one of two values"
        )),
    );
}

fn check_memory(cx: &mut Cx, statements: &[Statement]) -> Option<Vec<(Device, u64, Span)>> {
    let mut out: Vec<(Device, u64, Span)> = Vec::new();
    let mut ok = true;
    for s in statements.iter().filter(|s| s.keyword.name == "memory") {
        cx.plain_statement(s, false);
        let [device, size] = s.values.as_slice() else {
            cx.push(
                Diagnostic::new(
                    Code::WrongArguments,
                    s.span,
                    "`memory` takes a device and a size",
                )
                .label("expected `memory cuda:0 80 GiB`")
                .help("write `memory <device> <size>`"),
            );
            ok = false;
            continue;
        };
        let (Some(d), Some(b)) = (cx.device(device), cx.bytes(size)) else {
            ok = false;
            continue;
        };
        if let Some((_, _, first)) = out.iter().find(|(x, _, _)| *x == d) {
            cx.push(
                Diagnostic::new(
                    Code::DuplicateSetting,
                    device.span,
                    format!("the memory of `{d}` is set twice"),
                )
                .label("set again here")
                .with(*first, "first set here")
                .help("keep one `memory` line per device"),
            );
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
                cx.push(
                    Diagnostic::new(
                        Code::WrongArguments,
                        s.span,
                        "`place` needs targets and a device",
                    )
                    .label("expected `place fc1 on cuda:0`")
                    .help("write `place <layer or block>... on <device>`"),
                );
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
                let Some(ident) = cx.name(v) else {
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
    // A name placed twice, or a layer placed inside a block placed elsewhere.
    for i in 0..out.len() {
        for j in 0..i {
            let (a, b) = (&out[j], &out[i]);
            let nested = within(&b.name, &a.name) || within(&a.name, &b.name);
            if a.name == b.name || (nested && a.device != b.device) {
                cx.push(
                    Diagnostic::new(
                        Code::PlacementConflict,
                        b.span,
                        format!("`{}` is placed twice", b.name),
                    )
                    .label(format!("placed on {} here", b.device))
                    .with(a.span, format!("`{}` placed on {} here", a.name, a.device))
                    .help("place each layer once, in one place"),
                );
                ok = false;
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
    let name = ident.name.strip_suffix(suffix).unwrap_or(&ident.name);
    let suggestion = crate::diagnostic::did_you_mean(name, known.iter().copied())
        .map(|s| format!("{s}{suffix}"));
    let mut sorted: Vec<&str> = known.to_vec();
    sorted.sort_unstable();
    cx.push(
        Diagnostic::new(
            Code::UnknownReference,
            ident.span,
            format!("the model has no layer or block `{}`", ident.name),
        )
        .label("not defined in the model")
        .help(match suggestion {
            Some(s) => format!("did you mean `{s}`?"),
            None if sorted.is_empty() => {
                "name layers with `name: layer(...)` to refer to them".into()
            }
            None if sorted.len() <= 12 => {
                format!("named layers and blocks: {}", sorted.join(", "))
            }
            None => format!(
                "named layers and blocks include {}, ... ({} in all)",
                sorted[..12].join(", "),
                sorted.len()
            ),
        }),
    );
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
fn within(name: &str, outer: &str) -> bool {
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
    let name = match loss {
        Loss::CrossEntropy { .. } => "cross_entropy",
        Loss::Nll => "nll",
        Loss::Mse => "mse",
        Loss::L1 => "l1",
        Loss::BceWithLogits => "bce_with_logits",
    };
    let err = |cx: &mut Cx, message: String, label: String, help: &str| {
        cx.push(
            Diagnostic::new(Code::LossShape, loss_span, message)
                .label(label)
                .with(
                    model.output_span,
                    format!("the model outputs {}", fmt_shape(out)),
                )
                .with(data_span, "targets come from here")
                .help(help.to_string()),
        );
        false
    };
    match loss {
        Loss::CrossEntropy { .. } | Loss::Nll => {
            if let Some(at) = model
                .ends_in_softmax
                .filter(|_| matches!(loss, Loss::CrossEntropy { .. }))
            {
                cx.push(
                    Diagnostic::new(
                        Code::DoubleSoftmax,
                        at,
                        "the model ends in softmax but `cross_entropy` applies its own",
                    )
                    .label("softmax applied twice")
                    .with(loss_span, "expects raw logits")
                    .help("remove the final softmax; `cross_entropy` takes logits"),
                );
            }
            let classes = match targets {
                Targets::Classes(c) => *c,
                Targets::Values(shape) => {
                    return err(cx, format!("`{name}` needs class labels, but the targets are real values of shape {}", fmt_shape(shape)), format!("`{name}` needs class indices"), "use `randint(classes)` targets or a regression loss such as `mse`");
                }
                Targets::Unknown => None,
            };
            if out.is_empty() {
                return err(
                    cx,
                    format!("`{name}` needs class scores, but the model outputs a scalar"),
                    "needs [classes]".into(),
                    "end the model with `linear(classes)`",
                );
            }
            if out.len() > 1 {
                return err(
                    cx,
                    format!(
                        "`{name}` needs [classes] per sample, but the model outputs {}",
                        fmt_shape(out)
                    ),
                    "needs [classes]".into(),
                    "add `flatten` or pool before the last `linear`",
                );
            }
            if let Some(c) = classes {
                if out[0] != c as i64 {
                    return err(
                        cx,
                        format!(
                            "the data has {c} classes but the model outputs {} scores",
                            out[0]
                        ),
                        format!("needs {c} scores per sample"),
                        &format!("end the model with `linear({c})`"),
                    );
                }
            }
            true
        }
        Loss::Mse | Loss::L1 | Loss::BceWithLogits => {
            let want: Vec<i64> = match targets {
                Targets::Values(shape) => shape.to_vec(),
                Targets::Classes(_) if matches!(loss, Loss::BceWithLogits) => vec![],
                Targets::Classes(_) => {
                    return err(
                        cx,
                        format!(
                            "`{name}` needs real-valued targets, but the targets are class labels"
                        ),
                        format!("`{name}` compares values"),
                        "use `cross_entropy` for class labels, or real-valued targets",
                    );
                }
                Targets::Unknown => return true,
            };
            let fits = **out == want || (want.is_empty() && **out == [1]);
            if !fits {
                return err(
                    cx,
                    format!(
                        "`{name}` compares the output {} with targets {}",
                        fmt_shape(out),
                        fmt_shape(&want)
                    ),
                    format!("needs output {}", fmt_shape(&want)),
                    "make the model's output shape equal the targets' shape",
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
        cx.push(
            Diagnostic::new(
                Code::OutOfRange,
                biggest,
                format!("the model has {params} parameters, more than Kiln plans for (2^48)"),
            )
            .label("the largest layer")
            .help("check the layer sizes: no real model is this large"),
        );
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
        cx.push(
            Diagnostic::new(
                Code::OutOfRange,
                batch_span,
                format!(
                    "a batch of {batch} would hold {} activation values and cost {} FLOPs",
                    values * b,
                    flops * b
                ),
            )
            .label("far too large")
            .help("lower the batch or the layer sizes: this is beyond any machine"),
        );
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
    let no_val = data.split.val == 0.0;
    if let (true, Some(es), Some(at)) = (no_val, &train.early_stop, given.get("early_stop")) {
        if es.metric.starts_with("val_") {
            cx.push(
                Diagnostic::new(
                    Code::Inconsistent,
                    *at,
                    format!(
                        "early stopping watches `{}` but the data has no validation split",
                        es.metric
                    ),
                )
                .label("nothing to watch")
                .with(data.source_span, "all samples go to training")
                .help("add `split(train: 0.8, val: 0.2)` to the data, or watch `train_loss`"),
            );
            ok = false;
        }
    }
    if let (true, Some(at)) = (no_val, given.get("eval_every")) {
        cx.push(
            Diagnostic::new(
                Code::IgnoredSetting,
                *at,
                "`eval_every` has no effect without a validation split",
            )
            .label("nothing to evaluate on")
            .help("add `split(train: 0.8, val: 0.2)` to the data, or drop `eval_every`"),
        );
    }
    if let (Some(ck), Some(at)) = (&train.checkpoint, given.get("checkpoint")) {
        let longer = match (ck.every, train.length) {
            (Duration::Epochs(e), Duration::Epochs(n))
            | (Duration::Steps(e), Duration::Steps(n)) => e > n,
            _ => false,
        };
        if longer {
            cx.push(
                Diagnostic::new(
                    Code::IgnoredSetting,
                    *at,
                    "the checkpoint interval is longer than the training",
                )
                .label("no checkpoint would be written before the end")
                .help("checkpoint more often than the training length"),
            );
        }
    }
    let classes = match &data.targets {
        Targets::Classes(c) => Some(*c),
        _ => None,
    };
    for m in &train.metrics {
        let at = given.get("metrics").copied().unwrap_or(train.loss_span);
        match (m, classes) {
            (Metric::Accuracy | Metric::TopK(_), None)
                if matches!(train.loss, Loss::Mse | Loss::L1) =>
            {
                cx.push(
                    Diagnostic::new(
                        Code::IgnoredSetting,
                        at,
                        "accuracy is not measured on real-valued targets",
                    )
                    .label("ignored with a regression loss")
                    .help("drop accuracy metrics, or train a classifier"),
                );
            }
            (Metric::TopK(k), Some(Some(c))) if *k > c => {
                cx.push(
                    Diagnostic::new(
                        Code::OutOfRange,
                        at,
                        format!("top-{k} accuracy over {c} classes"),
                    )
                    .label(format!("k must be at most {c}"))
                    .help(format!("choose k of {c} or less")),
                );
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
    if batch % per_step != 0 {
        let mut d = Diagnostic::new(
            Code::BatchArithmetic,
            batch_span,
            format!(
                "batch {batch} does not split into {accumulate} accumulation step{} x {dp} replica{}",
                if accumulate == 1 { "" } else { "s" },
                if dp == 1 { "" } else { "s" }
            ),
        )
        .label(format!("{batch} is not a multiple of {per_step}"));
        if let Some(s) = t.accumulate_span {
            d = d.with(s, format!("{accumulate} accumulation steps"));
        }
        if let Some(s) = p.dp_span {
            d = d.with(s, format!("{dp} replicas"));
        }
        cx.push(d.help(format!("choose a batch that is a multiple of {per_step}")));
        return false;
    }
    let micro = batch / per_step;
    if let Some((declared, span)) = t.micro_batch {
        if declared != micro {
            let mut d = Diagnostic::new(
                Code::BatchArithmetic,
                span,
                format!("micro-batch {declared} x {accumulate} accumulation x {dp} replicas = {}, not the batch {batch}", declared * per_step),
            )
            .label(format!("the batch gives micro-batches of {micro}"))
            .with(batch_span, format!("global batch {batch}"));
            if let Some(s) = p.dp_span {
                d = d.with(s, format!("{dp} replicas"));
            }
            cx.push(d.help("global batch = micro-batch x accumulation x data-parallel size"));
            ok = false;
        }
    }
    if let Parallel::Pipeline { micro_batches, .. } = p.parallel {
        if micro % micro_batches != 0 {
            let mut d = Diagnostic::new(
                Code::MicroBatches,
                p.micro_batches_span.unwrap_or(batch_span),
                format!("{micro_batches} micro-batches do not divide the batch of {micro}"),
            )
            .label(format!("{micro} is not a multiple of {micro_batches}"))
            .with(batch_span, format!("batch {batch}"));
            if accumulate > 1 {
                d = d.with(
                    t.accumulate_span.unwrap_or(batch_span),
                    format!("{accumulate} accumulation steps leave {micro} per step"),
                );
            }
            cx.push(d.help(format!("choose micro-batches that divide {micro}")));
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
    compression: &mut [Compression],
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
            cx.push(
                Diagnostic::new(Code::ModelParallelOneDevice, p.span, format!("model parallel, but every layer runs on {}", devices.first().copied().unwrap_or(default)))
                    .label("no layer is placed elsewhere")
                    .help("place layers or blocks on other devices with `place fc2 on cuda:1`, or drop `parallel model`"),
            );
        }
        Parallel::Pipeline { stages, .. } => {
            let top = nodes.len() as u64;
            if *stages > top {
                cx.push(
                    Diagnostic::new(
                        Code::TooManyStages,
                        p.stages_span.unwrap_or(p.span),
                        format!(
                            "{stages} pipeline stages but the model has {top} top-level layers"
                        ),
                    )
                    .label(format!("at most {top}"))
                    .help("use fewer stages, or group fewer layers into blocks"),
                );
                ok = false;
            }
        }
        Parallel::Data { .. } | Parallel::Distributed { .. } => {
            if let Some(first) = placements.first() {
                cx.push(
                    Diagnostic::new(
                        Code::PlacementIgnored,
                        first.span,
                        "per-layer placement is ignored under data parallel",
                    )
                    .label("ignored")
                    .with(p.span, "every replica holds the whole model")
                    .help("remove the placement, or use `parallel model` or `pipeline`"),
                );
            }
        }
        _ => {}
    }
    if let Parallel::Data { devices: dp } = &p.parallel {
        if dp.len() == 1 {
            cx.push(
                Diagnostic::new(
                    Code::DataParallelOneDevice,
                    p.span,
                    "data parallel over one device",
                )
                .label("one replica")
                .help("list two or more devices, or drop `parallel data`"),
            );
        }
    }
    if let Parallel::Distributed {
        backend: crate::ir::Backend::Nccl,
        ..
    } = &p.parallel
    {
        if default == Device::Cpu {
            cx.push(
                Diagnostic::new(
                    Code::Inconsistent,
                    p.backend_span.unwrap_or(p.span),
                    "the NCCL backend needs CUDA devices, but the experiment runs on the CPU",
                )
                .label("NCCL is CUDA-only")
                .help("use `backend: gloo` on the CPU, or `device cuda`"),
            );
            ok = false;
        }
    }
    for c in compression.iter_mut() {
        if let Compression::Quantize {
            targets, scheme, ..
        } = c
        {
            for t in targets.iter() {
                for l in all.iter().filter(|l| within(&l.name, &t.layer)) {
                    if *scheme == QuantScheme::Fp8 && l.device == Device::Cpu {
                        cx.push(
                            Diagnostic::new(
                                Code::Fp8OnCpu,
                                t.span,
                                format!("FP8 quantization of `{}`, which runs on the CPU", l.name),
                            )
                            .label("FP8 needs a CUDA device")
                            .with(l.span, "runs on cpu")
                            .help("place the layer on a CUDA device, or use `int8`"),
                        );
                        ok = false;
                    }
                    if *scheme == QuantScheme::Int4
                        && !matches!(l.kind, crate::ir::LayerKind::Linear { .. })
                        && l.params > 0
                    {
                        cx.push(
                            Diagnostic::new(
                                Code::Int4NonLinear,
                                t.span,
                                format!("INT4 quantization of `{}`, which is not linear", l.name),
                            )
                            .label("INT4 applies to linear layers")
                            .with(l.span, "this layer is not linear")
                            .help("quantize this layer with `int8`, or target linear layers only"),
                        );
                        ok = false;
                    }
                }
            }
        }
    }
    ok
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
