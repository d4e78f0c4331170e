//! Wording of the problems of run directories and resuming (K0507, K0510, K0512, K0513).

use crate::diagnostic::problem::Running;
use std::path::PathBuf;

use super::problem::Problem;
use super::Diagnostic;
use crate::span::Span;

/// Run-directory problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    match problem {
        Problem::Running(Running::ResumeIncompatible { span, situation }) => match situation {
            Resume::NoCheckpoint { dir } => Diagnostic::new(
                code,
                span,
                format!("`{}` holds no intact checkpoint", dir.display()),
            )
            .label("nothing to resume")
            .help("resume a run directory that has `checkpoints/`; add `checkpoint(every: ...)` to the train block"),
            Resume::Changed { changes } => changed(code, span, &changes),
            Resume::MissingTensor { name } => Diagnostic::new(
                code,
                span,
                format!("the checkpoint has no tensor `{name}`"),
            )
            .label("the checkpoint does not fit this model")
            .help("resume with the experiment that made the checkpoint"),
        },
        Problem::Running(Running::RunDirTaken {
            span,
            dir,
            situation,
        }) => {
            let dir = dir.display();
            match situation {
                Taken::Exists => Diagnostic::new(
                    code,
                    span,
                    format!("`{dir}` already holds files; a new run never writes over them"),
                )
                .label("a new run of this experiment")
                .help(format!(
                    "continue that run with `--resume {dir}`, or name a new or empty directory"
                )),
                Taken::InUse { holder } => {
                    let who = holder.unwrap_or_else(|| "another process".to_string());
                    Diagnostic::new(code, span, format!("`{dir}` is being written by {who}"))
                        .label("this experiment's run")
                        .help("wait for that run to end (or stop it), then resume it")
                }
                Taken::NotARun => Diagnostic::new(
                    code,
                    span,
                    format!("`{dir}` holds no run of Kiln (it has no `experiment.exp`)"),
                )
                .label("to be resumed")
                .help("pass `--resume` the run directory that `kiln run` printed"),
            }
        }
        Problem::Running(Running::CheckpointDamaged {
            span,
            sidecar,
            reason,
            using,
        }) => {
            let instead = using.map_or_else(
                || "no intact checkpoint is left".to_string(),
                |step| format!("resuming from the checkpoint of step {step} instead"),
            );
            Diagnostic::new(
                code,
                span,
                format!(
                    "checkpoint `{}` is damaged ({reason}); {instead}",
                    sidecar.display()
                ),
            )
            .label("this experiment's run")
            .help("the damaged checkpoint is left as it is; delete it once you no longer need it")
        }
        Problem::Running(Running::StaleLock { span, dir, holder }) => Diagnostic::new(
            code,
            span,
            format!(
                "`{}` was left locked by {holder}, which is no longer running",
                dir.display()
            ),
        )
        .label("this experiment's run")
        .help("the process died while writing the run (killed, or its machine stopped); resuming from its last intact checkpoint"),
        _ => unreachable!("only run-directory problems are worded here"),
    }
}

/// A resume refused because the experiment changes what the run computes: every difference,
/// each at its place in the file when it has one.
fn changed(code: super::Code, span: crate::span::Span, changes: &[Change]) -> Diagnostic {
    let value = |v: &Option<String>| {
        v.as_deref()
            .map_or("none".to_string(), |v| format!("`{v}`"))
    };
    let lines: Vec<String> = changes
        .iter()
        .map(|c| {
            format!(
                "{}: was {}, is now {}",
                c.what,
                value(&c.was),
                value(&c.now)
            )
        })
        .collect();
    let names: Vec<&str> = changes.iter().map(|c| c.what.as_str()).collect();
    let message = if changes.len() == 1 {
        format!("the experiment changed since the checkpoint: {}", lines[0])
    } else {
        format!(
            "the experiment changed since the checkpoint in {} ways: {}",
            changes.len(),
            names.join(", ")
        )
    };
    let mut spans = changes.iter().filter_map(|c| c.span.map(|s| (s, c)));
    let first = spans.next();
    let mut d = Diagnostic::new(code, first.map_or(span, |(s, _)| s), message).label(
        first.map_or("differs from the checkpoint".to_string(), |(_, c)| {
            format!("{} differs from the checkpoint", c.what)
        }),
    );
    for (s, c) in spans {
        d = d.with(s, format!("{} differs from the checkpoint", c.what));
    }
    if changes.len() > 1 {
        d.note = Some(lines.join("\n"));
    }
    d.help("these change what the run computes: resume with the experiment the checkpoint was made with, or start a new run; a resume may change the learning rate, the length, and the evaluation, checkpoint and early-stopping settings")
}

/// The situations of K0507.
#[derive(Clone, Debug, PartialEq)]
pub enum Resume {
    /// The run directory holds no checkpoint.
    NoCheckpoint {
        /// The run directory.
        dir: PathBuf,
    },
    /// The experiment changed, since the checkpoint, in what the run computes.
    Changed {
        /// Each difference.
        changes: Vec<Change>,
    },
    /// The checkpoint lacks a tensor the model has.
    MissingTensor {
        /// The tensor's `state_dict` name.
        name: String,
    },
}

/// One difference between a checkpoint's experiment and the one resuming from it.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// What differs (`seed`, `layer 3`, `optimizer`).
    pub what: String,
    /// The checkpoint's value; `None` when it had none.
    pub was: Option<String>,
    /// The experiment's value; `None` when it has none.
    pub now: Option<String>,
    /// Where the experiment says it, when it is written in one place.
    pub span: Option<Span>,
}

/// Why a run directory cannot be used (K0510).
#[derive(Clone, Debug, PartialEq)]
pub enum Taken {
    /// A new run was asked for in a directory that holds files.
    Exists,
    /// Another process is writing the run (named when known).
    InUse {
        /// The holder, as `process 42 on host (since ...)`.
        holder: Option<String>,
    },
    /// `--resume` names a directory that holds no run.
    NotARun,
}
