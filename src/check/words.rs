//! The words of the language: each block's keywords, and each choice (optimizers, schedules,
//! losses, parallel strategies, data sources) with the tag its checker matches on and its
//! parameters in positional order. The checkers read them from here, and so do the hints that
//! send a setting written in the wrong block home (`homes`) and editors (completion, hover).

use crate::diagnostic::{Code, Severity};

/// Keywords of the experiment block.
pub const EXPERIMENT: &[&str] = &[
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

/// Keywords of the data block.
pub const DATA: &[&str] = &[
    "source",
    "split",
    "batch",
    "shuffle",
    "normalize",
    "drop_last",
    "eval_batch",
    "placement",
];

/// Keywords of the train block.
pub const TRAIN: &[&str] = &[
    "epochs",
    "steps",
    "loss",
    "metrics",
    "eval_every",
    "early_stop",
    "precision",
    "checkpoint",
    "accumulate",
    "micro_batch",
    "clip_norm",
    "clip_value",
];

/// Keywords of the compress block.
pub const COMPRESS: &[&str] = &["prune", "quantize"];

/// Data sources and their parameters in positional order.
pub const SOURCES: &[(&str, &[&str])] = &[
    ("synthetic", &["inputs", "targets", "count"]),
    (
        "idx",
        &["images", "labels", "classes", "shape", "scale", "layout"],
    ),
    (
        "npy",
        &[
            "inputs",
            "targets",
            "classes",
            "shape",
            "scale",
            "per_token",
            "layout",
        ],
    ),
    (
        "npz",
        &[
            "path",
            "inputs",
            "targets",
            "classes",
            "shape",
            "scale",
            "per_token",
            "layout",
        ],
    ),
    (
        "csv",
        &["path", "target", "header", "classes", "shape", "layout"],
    ),
    (
        "safetensors",
        &[
            "path",
            "inputs",
            "targets",
            "classes",
            "shape",
            "scale",
            "per_token",
            "layout",
        ],
    ),
    (
        "parquet",
        &["path", "inputs", "target", "classes", "shape", "layout"],
    ),
    ("tokens", &["path", "dtype", "block", "vocab"]),
    ("text", &["path", "tokenizer", "block"]),
    (
        "images",
        &["path", "size", "classes", "scale", "resize", "crop", "flip"],
    ),
];

/// A word of the language that names a choice (an optimizer, a loss...), the tag the checker
/// matches on, and the choice's parameters in positional order.
pub type Choice<T> = (&'static str, T, &'static [&'static str]);

/// The optimizers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Opt {
    Sgd,
    Adam,
    AdamW,
    RmsProp,
}

/// Adam's and AdamW's parameters in positional order (they differ in the default weight decay
/// and in how it applies).
const ADAM: &[&str] = &[
    "lr",
    "betas",
    "eps",
    "weight_decay",
    "amsgrad",
    "fused",
    "groups",
];

/// Optimizers and their parameters in positional order.
pub(super) const OPTIMIZERS: &[Choice<Opt>] = &[
    (
        "sgd",
        Opt::Sgd,
        &[
            "lr",
            "momentum",
            "dampening",
            "nesterov",
            "weight_decay",
            "fused",
            "groups",
        ],
    ),
    ("adam", Opt::Adam, ADAM),
    ("adamw", Opt::AdamW, ADAM),
    (
        "rmsprop",
        Opt::RmsProp,
        &[
            "lr",
            "alpha",
            "eps",
            "momentum",
            "centered",
            "weight_decay",
            "groups",
        ],
    ),
];

/// The learning-rate schedules.
#[derive(Clone, Copy)]
pub(super) enum Sched {
    Constant,
    Step,
    Exponential,
    Cosine,
    Warmup,
    OneCycle,
    Linear,
    ReduceOnPlateau,
    Sequence,
}

/// Learning-rate schedules and their parameters.
pub(super) const SCHEDULES: &[Choice<Sched>] = &[
    ("constant", Sched::Constant, &[]),
    ("step", Sched::Step, &["every", "gamma"]),
    ("exponential", Sched::Exponential, &["gamma"]),
    (
        "cosine",
        Sched::Cosine,
        &["warmup", "min_lr", "start_factor"],
    ),
    ("warmup", Sched::Warmup, &["length", "start_factor"]),
    (
        "one_cycle",
        Sched::OneCycle,
        &[
            "max_lr",
            "pct_start",
            "div_factor",
            "final_div_factor",
            "three_phase",
            "anneal",
            "cycle_momentum",
            "base_momentum",
            "max_momentum",
        ],
    ),
    (
        "linear",
        Sched::Linear,
        &["start_factor", "end_factor", "length"],
    ),
    (
        "reduce_on_plateau",
        Sched::ReduceOnPlateau,
        &[
            "monitor",
            "mode",
            "factor",
            "patience",
            "threshold",
            "threshold_mode",
            "cooldown",
            "min_lr",
        ],
    ),
    ("sequence", Sched::Sequence, &["schedules", "milestones"]),
];

/// The losses.
#[derive(Clone, Copy)]
pub(super) enum LossName {
    CrossEntropy,
    Mse,
    L1,
    Huber,
    SmoothL1,
    BceWithLogits,
    Nll,
}

/// Losses and their parameters in positional order.
pub(super) const LOSSES: &[Choice<LossName>] = &[
    (
        "cross_entropy",
        LossName::CrossEntropy,
        &["label_smoothing", "weight", "ignore_index"],
    ),
    ("mse", LossName::Mse, &[]),
    ("l1", LossName::L1, &[]),
    ("huber", LossName::Huber, &["delta"]),
    ("smooth_l1", LossName::SmoothL1, &["beta"]),
    ("bce_with_logits", LossName::BceWithLogits, &["pos_weight"]),
    ("nll", LossName::Nll, &["weight", "ignore_index"]),
];

/// The parallel strategies.
#[derive(Clone, Copy)]
pub(super) enum Strategy {
    None,
    Data,
    Model,
    Pipeline,
    Ddp,
    Fsdp,
    Mesh,
}

/// Parallel strategies and their parameters.
pub(super) const STRATEGIES: &[Choice<Strategy>] = &[
    ("none", Strategy::None, &[]),
    ("data", Strategy::Data, &["devices", "replicas"]),
    ("model", Strategy::Model, &[]),
    (
        "pipeline",
        Strategy::Pipeline,
        &["stages", "micro_batches", "schedule"],
    ),
    ("ddp", Strategy::Ddp, &["backend", "world_size", "timeout"]),
    (
        "fsdp",
        Strategy::Fsdp,
        &["backend", "world_size", "reshard_after_forward", "timeout"],
    ),
    (
        "mesh",
        Strategy::Mesh,
        &[
            "data",
            "fsdp",
            "tensor",
            "backend",
            "reshard_after_forward",
            "timeout",
        ],
    ),
];

/// Optimizer names with their parameters in positional order (completion, hover).
pub fn optimizer_names() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    OPTIMIZERS.iter().map(|(n, _, p)| (*n, *p))
}

/// Schedule names with their parameters in positional order (completion, hover).
pub fn schedule_names() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    SCHEDULES.iter().map(|(n, _, p)| (*n, *p))
}

/// Loss names with their parameters in positional order (completion, hover).
pub fn loss_names() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    LOSSES.iter().map(|(n, _, p)| (*n, *p))
}

/// The settings written as a call, with each choice and its parameters: `optimizer sgd(lr, ...)`,
/// `schedule`, `loss` and `parallel`.
pub fn calls() -> impl Iterator<Item = (&'static str, &'static str, &'static [&'static str])> {
    fn of<T>(
        setting: &'static str,
        table: &'static [Choice<T>],
    ) -> impl Iterator<Item = (&'static str, &'static str, &'static [&'static str])> {
        table
            .iter()
            .map(move |(word, _, params)| (setting, *word, *params))
    }
    of("optimizer", OPTIMIZERS)
        .chain(of("schedule", SCHEDULES))
        .chain(of("loss", LOSSES))
        .chain(of("parallel", STRATEGIES))
}

/// The codes of every warning, the words `allow` accepts.
pub fn warning_codes() -> Vec<&'static str> {
    Code::ALL
        .iter()
        .filter(|c| c.severity() == Severity::Warning)
        .map(|c| c.code())
        .collect()
}
