//! Settings that disagree with other settings of the file (K0218, K0227, K0412): their facts and
//! their wording.

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::{Strategies, Warnings};
use crate::ir::Duration;
use crate::span::Span;

/// How long the training is, as written and in optimizer steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainingLength {
    /// The length as the file writes it.
    pub written: Duration,
    /// Its optimizer steps, when the file tells (a length in epochs needs the sample count).
    pub steps: Option<u64>,
    /// The `epochs` or `steps` value.
    pub span: Span,
}

/// A duration as written, with its optimizer steps when they are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The duration as the file writes it.
    pub written: Duration,
    /// Its optimizer steps, when known.
    pub steps: Option<u64>,
}

/// What lasts longer than the training (K0412).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outlasts {
    /// A `step` schedule whose first decay comes at or after the end.
    FirstDecay {
        /// The interval.
        every: Interval,
    },
    /// An `exponential` schedule whose first epoch does not end within the training.
    FirstEpoch {
        /// Steps in one epoch, when known.
        per_epoch: Option<u64>,
    },
    /// A warmup (of `cosine` or `warmup`) that takes the whole training or more.
    Warmup {
        /// The schedule's name.
        schedule: &'static str,
        /// The warmup.
        length: Interval,
    },
    /// A `sequence` milestone at or after the end: the schedules from it on never run.
    Milestone {
        /// The milestone.
        at: Interval,
    },
    /// A gradual pruning schedule that reaches its amount after the end.
    GradualEnd {
        /// Its first pruning step.
        start: u64,
        /// The step at which it reaches the amount.
        end: u64,
    },
    /// An evaluation interval longer than the training.
    EvalEvery {
        /// The interval.
        every: Interval,
    },
    /// Early stopping that cannot stop: fewer evaluations than its patience needs.
    Patience {
        /// Evaluations without improvement before stopping.
        patience: u64,
        /// Evaluations during the training.
        evaluations: u64,
    },
}

fn s(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A duration in words: `3 epochs`, `1 step`.
fn duration(d: Duration) -> String {
    match d {
        Duration::Steps(n) => format!("{n} step{}", s(n)),
        Duration::Epochs(n) => format!("{n} epoch{}", s(n)),
    }
}

/// A duration in words, with its steps when it is written in epochs: `5 epochs (80 steps)`,
/// `5 epochs` or `300 steps`.
fn interval(i: Interval) -> String {
    match (i.written, i.steps) {
        (Duration::Epochs(_), Some(n)) => format!("{} ({n} step{})", duration(i.written), s(n)),
        _ => duration(i.written),
    }
}

/// K0218 and K0412 in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Strategies(Strategies::NormalizeChannels {
            span,
            values,
            channels,
            input,
            input_span,
        }) => new(
            span,
            format!(
                "`normalize` gives {values} values, one per channel, but the input {input} has {channels} channel{}",
                s(channels.unsigned_abs())
            ),
            )
        .label(format!("{values} values"))
        .with(
            input_span,
            format!("input {input}: channels are its first dimension"),
        )
        .help(if channels == 1 {
            "give a single mean and std for the one channel".to_string()
        } else {
            format!("give {channels} means and stds, one per channel, or a single value for all")
        }),
        Problem::Strategies(Strategies::BatchNormOneValue {
            span,
            layer,
            cause,
            evaluation,
        }) => {
            let message =
                format!("batch norm `{layer}` would normalise one value per channel with batch statistics");
            let why = if evaluation {
                "the variance of one value is undefined: every output would be the bias"
            } else {
                "the variance of one value is undefined: the running variance would become NaN"
            };
            // Where the passes of one sample come from is what the user edits.
            let d = match cause {
                Some((at, how)) => new(at, message).label(how).with(span, why),
                None => new(span, message).label(why),
            };
            let pytorch = "PyTorch refuses such a batch too (\"Expected more than 1 value per channel when training\")";
            d.help(if evaluation {
                format!("choose an `eval_batch` that leaves no last batch of one sample, or keep running statistics; {pytorch}")
            } else {
                format!("set `drop_last true` to leave out a last batch of one sample, or choose `batch`, `accumulate` and the replicas so that every pass holds at least 2 samples; {pytorch}")
            })
        }
        Problem::Warnings(Warnings::OutlastsTraining {
            span,
            situation,
            length,
        }) => {
            let lasts = interval(Interval {
                written: length.written,
                steps: length.steps,
            });
            let (message, label) = match situation {
                Outlasts::FirstDecay { every } => (
                    format!(
                        "the `step` schedule first decays after {}, but training lasts {lasts}",
                        interval(every)
                    ),
                    "the learning rate never decays".to_string(),
                ),
                Outlasts::FirstEpoch { per_epoch } => (
                    format!(
                        "the `exponential` schedule decays after each epoch{}, but training lasts {lasts}",
                        per_epoch.map_or(String::new(), |n| format!(" ({n} step{})", s(n)))
                    ),
                    "the learning rate never decays".to_string(),
                ),
                Outlasts::Warmup { schedule, length } => (
                    format!(
                        "the {} lasts {}, but training lasts {lasts}",
                        match schedule {
                            "cosine" => "`cosine` schedule's warmup",
                            "linear" => "`linear` schedule's change",
                            _ => "`warmup` schedule",
                        },
                        interval(length)
                    ),
                    if schedule == "cosine" {
                        "the cosine decay never starts".to_string()
                    } else if schedule == "linear" {
                        "the end factor is never reached".to_string()
                    } else {
                        "the full learning rate is never reached".to_string()
                    },
                ),
                Outlasts::Milestone { at } => (
                    format!(
                        "the `sequence` schedule's milestone comes after {}, but training lasts {lasts}",
                        interval(at)
                    ),
                    "the schedules from here on never run".to_string(),
                ),
                Outlasts::GradualEnd { start, end } => (
                    format!("gradual pruning reaches its amount at step {end}, but training lasts {lasts}"),
                    if length.steps.is_some_and(|total| start >= total) {
                        "no weight is ever pruned".to_string()
                    } else {
                        "the pruning amount is never reached".to_string()
                    },
                ),
                Outlasts::EvalEvery { every } => (
                    format!("evaluation every {} never comes in a training of {lasts}", interval(every)),
                    "only the final evaluation runs".to_string(),
                ),
                Outlasts::Patience {
                    patience,
                    evaluations,
                } => (
                    format!("early stopping with patience {patience} cannot stop a training that evaluates {evaluations} time{}", s(evaluations)),
                    format!("needs {} evaluations to stop", patience + 1),
                ),
            };
            let help = match situation {
                Outlasts::GradualEnd { .. } => {
                    "end the gradual schedule within the training, or train longer"
                }
                Outlasts::Patience { .. } => "lower the patience, evaluate more often, or train longer",
                _ => "shorten the setting to fit the training, or train longer",
            };
            new(span, message)
                .label(label)
                .with(length.span, format!("training lasts {lasts}"))
                .help(help)
        }
        _ => unreachable!("only consistency problems are worded here"),
    }
}
