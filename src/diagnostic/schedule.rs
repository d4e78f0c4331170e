//! Learning-rate schedules that cannot run as written (K0415, K0416): their facts and their
//! wording.

use super::problem::Problem;
use super::Diagnostic;
use crate::diagnostic::problem::Warnings;
use crate::span::Span;

/// What is wrong with a `sequence` schedule (K0416).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sequence {
    /// Not one milestone between each two schedules.
    Count {
        /// Schedules given.
        schedules: usize,
        /// Milestones given.
        milestones: usize,
        /// The list of schedules.
        list: Span,
    },
    /// A milestone at or before the one before it.
    NotIncreasing {
        /// The milestone before it.
        previous: Span,
    },
    /// `reduce_on_plateau` inside a sequence.
    Plateau,
    /// `schedules` or `milestones` given as something other than a list.
    NotAList {
        /// The argument.
        what: &'static str,
    },
}

/// K0415 and K0416 in words.
pub(super) fn words(p: Problem) -> Diagnostic {
    let code = p.code();
    match p {
        Problem::Warnings(Warnings::PlateauWithoutValidation {
            span,
            source,
            accuracy,
        }) => {
            if accuracy {
                Diagnostic::new(
                    code,
                    span,
                    "`reduce_on_plateau` watches `val_accuracy`, but the targets are real values"
                        .to_string(),
                )
                .label("no accuracy to watch")
                .with(source, "these targets have no classes")
                .help("watch `monitor: val_loss`")
            } else {
                Diagnostic::new(
                    code,
                    span,
                    "`reduce_on_plateau` watches validation evaluations, but the data has no validation split"
                        .to_string(),
                )
                .label("nothing to watch")
                .with(source, "all samples go to training")
                .help("add `split(train: 0.8, val: 0.2)` to the data, or choose another schedule")
            }
        }
        Problem::Warnings(Warnings::BadSequence { span, situation }) => match situation {
            Sequence::Count {
                schedules,
                milestones,
                list,
            } => Diagnostic::new(
                code,
                span,
                format!(
                    "a `sequence` of {schedules} schedule{} needs {} milestone{}, one where each next schedule starts, but {milestones} {} given",
                    plural(schedules),
                    schedules.saturating_sub(1),
                    plural(schedules.saturating_sub(1)),
                    if milestones == 1 { "is" } else { "are" }
                ),
            )
            .label(format!("{milestones} milestone{}", plural(milestones)))
            .with(list, format!("{schedules} schedule{}", plural(schedules)))
            .help("give one milestone fewer than schedules, as in `sequence([warmup(5), cosine], milestones: [5])`"),
            Sequence::NotIncreasing { previous } => Diagnostic::new(
                code,
                span,
                "the milestones of a `sequence` schedule must increase".to_string(),
            )
            .label("not after the milestone before it")
            .with(previous, "the milestone before")
            .help("order the milestones from first to last, each later than the one before"),
            Sequence::Plateau => Diagnostic::new(
                code,
                span,
                "`reduce_on_plateau` cannot be part of a `sequence`".to_string(),
            )
            .label("follows evaluations, not steps")
            .help("use `reduce_on_plateau` as the whole schedule"),
            Sequence::NotAList { what } => Diagnostic::new(
                code,
                span,
                format!("the `{what}` of a `sequence` schedule are a list"),
            )
            .label("not a list")
            .help("write them in brackets, as in `sequence([warmup(5), cosine], milestones: [5])`"),
        },
        _ => unreachable!("only schedule problems are worded here"),
    }
}

/// `s` for counts other than one.
fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
