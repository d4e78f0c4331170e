//! Wording of the problems of lengthening a run (K0523 to K0525): a resume whose length ends
//! before the steps the run has taken, a finished run that cannot be continued from its end, and
//! a finished run resumed at the length it already has.

use crate::diagnostic::problem::Running;
use std::path::PathBuf;

use super::problem::Problem;
use super::Diagnostic;

/// Where a resumed run stands and the length a resume asks for (K0523).
#[derive(Clone, Debug, PartialEq)]
pub struct Lengths {
    /// The run directory.
    pub dir: PathBuf,
    /// The steps the run has taken.
    pub trained: u64,
    /// The length as the experiment writes it (`3 epochs`).
    pub length: String,
    /// That length in steps.
    pub total: u64,
    /// `--max-steps`, when it stops the run before its length.
    pub max_steps: Option<u64>,
    /// Whether the run had finished, so that it is being extended and needs more steps than
    /// it took (an interrupted run may resume at the step it stopped at).
    pub finished: bool,
}

/// Why a finished run cannot be extended (K0524).
#[derive(Clone, Debug, PartialEq)]
pub enum Extension {
    /// It has no intact checkpoint of its last step (it kept none, or that one is damaged), and
    /// its final weights hold no optimizer state.
    NoFinalCheckpoint {
        /// The step of its newest intact checkpoint, when it has one.
        newest: Option<u64>,
    },
    /// Early stopping ended it, not its length.
    StoppedEarly,
    /// It pruned after its training.
    PrunedAfterTraining {
        /// The pruning schedule, as the language writes it (`after(finetune: 3 epochs)`).
        schedule: String,
    },
}

/// The problems of lengthening a run in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    match problem {
        Problem::Running(Running::ShorterThanTrained { span, lengths: l }) => {
            let (dir, trained) = (l.dir.display(), l.trained);
            let (message, label) = match l.max_steps {
                Some(m) => (
                    format!("`--max-steps {m}` stops the run at step {m}, but the run in `{dir}` has already taken {trained} steps"),
                    format!("{} steps; `--max-steps` stops at {m}", l.total),
                ),
                None => {
                    let steps = format!("{} steps", l.total);
                    let written = if l.length == steps {
                        format!("`{steps}`")
                    } else {
                        format!("`{}` ({steps})", l.length)
                    };
                    let than = if l.total == trained { "as many as" } else { "fewer than" };
                    (
                        format!("this length, {written}, is {than} the {trained} steps the run in `{dir}` has already taken"),
                        format!("ends at step {}", l.total),
                    )
                }
            };
            let help = match (l.max_steps, l.finished) {
                (Some(_), _) => format!(
                    "give `--max-steps` more than {trained}, or leave it out to train to this length"
                ),
                (None, true) => format!(
                    "a finished run goes on only to a longer length: give it more than {trained} steps and resume it again; for a shorter run, start a new one without `--resume`"
                ),
                (None, false) => format!(
                    "the run goes on from step {trained}: give it a length of at least {trained} steps, or start a new run without `--resume` for a shorter one"
                ),
            };
            Diagnostic::new(code, span, message).label(label).help(help)
        }
        Problem::Running(Running::NotExtendable {
            span,
            dir,
            weights,
            trained,
            situation,
        }) => {
            let init = format!(
                "start a new run from its final weights with `--init {}` (a fresh optimizer state, the schedule from its first step)",
                weights.display()
            );
            let dir = dir.display();
            match situation {
                Extension::NoFinalCheckpoint { newest } => {
                    let message = match newest {
                        None => format!("the run in `{dir}` kept no checkpoint, so the optimizer state of its end (step {trained}) is gone: it cannot be continued from there"),
                        Some(k) => format!("the run in `{dir}` has no intact checkpoint of its end (step {trained}), only of step {k}: it cannot be continued from its end"),
                    };
                    Diagnostic::new(code, span, message)
                        .label(format!("longer than the run's {trained} steps"))
                        .help(format!("{init}; a run whose train block has `checkpoint(every: ...)` keeps a checkpoint of its end and can be extended"))
                }
                Extension::StoppedEarly => Diagnostic::new(
                    code,
                    span,
                    format!("early stopping ended the run in `{dir}` at step {trained}, not its length: a longer length does not continue it"),
                )
                .label(format!("longer than the run's {trained} steps"))
                .help(format!("{init}, with more patience or without `early_stop`")),
                Extension::PrunedAfterTraining { schedule } => Diagnostic::new(
                    code,
                    span,
                    format!("the run in `{dir}` pruned after its training (`{schedule}`): a longer training would have to come before that pruning, which has happened"),
                )
                .label("prunes after the training")
                .help("start a new run with the longer length; a run that prunes `before` its training or `gradual`ly during it can be extended"),
            }
        }
        Problem::Running(Running::RunComplete { span, dir, detail }) => {
            let dir = dir.display();
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(" {detail}")
            };
            Diagnostic::new(
                code,
                span,
                format!("the run in `{dir}` is complete{detail}; nothing to resume, nothing changed"),
            )
            .label("the length it was trained to")
            .help(format!("`kiln report {dir}` shows it; to train it further, lengthen it here (`steps` or `epochs`) and resume it again: it goes on from its end, with the schedule recomputed for the new length"))
        }
        _ => unreachable!("only the problems of lengthening a run are worded here"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Code;
    use crate::span::{FileId, Span};

    fn at() -> Span {
        Span {
            file: FileId(0),
            start: 0,
            end: 1,
        }
    }

    fn lengths(length: &str, total: u64, max_steps: Option<u64>, finished: bool) -> Lengths {
        Lengths {
            dir: "runs/x".into(),
            trained: 160,
            length: length.into(),
            total,
            max_steps,
            finished,
        }
    }

    #[test]
    fn a_length_is_said_as_written_and_in_steps_with_help_for_each_case() {
        let said = |l: Lengths| {
            let d = Problem::Running(Running::ShorterThanTrained {
                span: at(),
                lengths: l,
            })
            .diagnostic();
            assert_eq!(d.code, Code::ShorterThanTrained);
            (d.message, d.help.unwrap_or_default())
        };
        let (m, h) = said(lengths("3 epochs", 120, None, true));
        assert!(
            m.contains("`3 epochs` (120 steps), is fewer than the 160 steps"),
            "{m}"
        );
        assert!(h.contains("give it more than 160 steps"), "{h}");
        let (m, _) = said(lengths("160 steps", 160, None, true));
        assert!(
            m.contains("this length, `160 steps`, is as many as the 160 steps"),
            "{m}"
        );
        let (_, h) = said(lengths("100 steps", 100, None, false));
        assert!(h.contains("at least 160 steps"), "{h}");
        let (m, h) = said(lengths("400 steps", 400, Some(100), true));
        assert!(
            m.contains("`--max-steps 100` stops the run at step 100"),
            "{m}"
        );
        assert!(h.contains("more than 160"), "{h}");
    }

    #[test]
    fn a_run_that_cannot_be_extended_says_why_and_offers_its_weights() {
        let why = |situation| {
            let d = Problem::Running(Running::NotExtendable {
                span: at(),
                dir: "runs/x".into(),
                weights: "runs/x/weights.safetensors".into(),
                trained: 160,
                situation,
            })
            .diagnostic();
            assert_eq!(d.code, Code::NotExtendable);
            let help = d.help.unwrap_or_default();
            assert!(help.contains("--init runs/x/weights.safetensors"), "{help}");
            d.message
        };
        let m = why(Extension::NoFinalCheckpoint { newest: None });
        assert!(m.contains("kept no checkpoint"), "{m}");
        let m = why(Extension::NoFinalCheckpoint { newest: Some(120) });
        assert!(m.contains("(step 160), only of step 120"), "{m}");
        let m = why(Extension::StoppedEarly);
        assert!(m.contains("early stopping ended the run"), "{m}");
        let d = Problem::Running(Running::NotExtendable {
            span: at(),
            dir: "runs/x".into(),
            weights: "runs/x/weights.safetensors".into(),
            trained: 160,
            situation: Extension::PrunedAfterTraining {
                schedule: "after(finetune: 3 epochs)".into(),
            },
        })
        .diagnostic();
        assert!(
            d.message.contains("(`after(finetune: 3 epochs)`)"),
            "{}",
            d.message
        );
        let d = Problem::Running(Running::RunComplete {
            span: at(),
            dir: "runs/x".into(),
            detail: "after 40 steps".into(),
        })
        .diagnostic();
        assert_eq!(d.code, Code::RunComplete);
        assert!(
            d.message.contains("is complete after 40 steps; nothing"),
            "{}",
            d.message
        );
    }
}
