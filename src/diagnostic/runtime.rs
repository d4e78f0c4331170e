//! Wording of runtime problems (K0501 to K0509).

use super::problem::{Problem, Resume, RunStage, Unavailable};
use super::Diagnostic;
use crate::span::Span;

/// Runtime problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::DeviceUnavailable {
            span,
            situation: Unavailable::Fp16OnCpu,
        } => new(
            span,
            "fp16 training needs a CUDA device, and this run is on the CPU".into(),
        )
        .label("runs on the CPU")
        .help("use `precision bf16` on the CPU, or run on a CUDA device"),
        Problem::DeviceUnavailable {
            span,
            situation: Unavailable::Missing { device, found },
        } => new(span, format!("`{device}` is not available: {found}"))
            .label(format!("needs {device}"))
            .help("run with `--device cpu` to put every layer on the CPU"),
        Problem::DataMissing {
            span,
            file,
            resolved,
            reason,
            not_found,
            base,
        } => new(
            span,
            format!(
                "cannot read the data file {file}: {reason} (looked for {})",
                resolved.display()
            ),
        )
        .label(if not_found {
            "file not found"
        } else {
            "file cannot be read"
        })
        .help(format!(
            "paths are relative to the directory of the .exp file that declares the source ({})",
            base.display()
        )),
        Problem::DataInvalid { span, file, detail } => {
            let message = match file {
                Some(f) => format!("{f}: {detail}"),
                None => detail,
            };
            new(span, message)
                .label("while loading this data")
                .help("check the file's format and the shapes the experiment declares")
        }
        Problem::NonFiniteLoss {
            span,
            nan,
            step,
            epoch,
            lr,
        } => new(
            span,
            format!(
                "the loss became {} at step {step} (epoch {epoch})",
                if nan { "NaN" } else { "infinite" }
            ),
        )
        .label(format!("learning rate {lr} at that step"))
        .help("lower the learning rate, clip gradients with `clip_norm 1.0`, or check the data for NaN and infinite values; the last checkpoint on disk is intact"),
        Problem::OutOfMemory { span, detail, plan } => {
            let d = new(span, format!("a device ran out of memory: {detail}"));
            let help = "lower the batch size, use `precision bf16`, or spread the model over more devices";
            match plan {
                Some((batch, estimate)) => d
                    .label(format!("batch {batch} does not fit"))
                    .help(format!("the plan estimates {estimate}; {help}")),
                None => d.label("while running this").help(help),
            }
        }
        Problem::Interrupted {
            span,
            step,
            epoch,
            run_dir,
        } => new(span, format!("interrupted at step {step} (epoch {epoch})"))
            .label("training stopped here")
            .help(format!("resume with `kiln run --resume {}`", run_dir.display())),
        Problem::ResumeIncompatible { span, situation } => {
            let (message, label, help) = match situation {
                Resume::NoCheckpoint { dir } => (
                    format!("`{}` holds no checkpoint", dir.display()),
                    "nothing to resume",
                    "resume a run directory that has `checkpoints/`; add `checkpoint(every: ...)` to the train block",
                ),
                Resume::Layer { index, was, now } => (
                    format!(
                        "the model changed since the checkpoint: layer {} was {was}, is now {now}",
                        index + 1
                    ),
                    "the checkpoint does not fit this model",
                    "resume with the experiment that made the checkpoint",
                ),
                Resume::Optimizer { was, now } => (
                    format!("the optimizer changed since the checkpoint: was `{was}`, is now `{now}`"),
                    "the checkpoint does not fit this optimizer",
                    "resume with the experiment that made the checkpoint",
                ),
                Resume::WorldSize { was, now } => (
                    format!("the world size changed since the checkpoint: was {was}, is now {now}"),
                    "the checkpoint does not fit this world size",
                    "resume with the experiment that made the checkpoint",
                ),
                Resume::MissingTensor { name } => (
                    format!("the checkpoint has no tensor `{name}`"),
                    "the checkpoint does not fit this model",
                    "resume with the experiment that made the checkpoint",
                ),
            };
            new(span, message).label(label).help(help)
        }
        Problem::TorchError { span, detail } => new(span, format!("libtorch failed: {detail}"))
            .label("while running this")
            .help("this should have been caught by `kiln check`; please report it with the file"),
        Problem::RunIo {
            span,
            action,
            path,
            error,
            stage,
        } => {
            let label = match stage {
                RunStage::Checkpoint => "while checkpointing this experiment",
                RunStage::Record => "while recording this experiment's run",
                RunStage::Plot => "while plotting this experiment's training curves",
            };
            new(span, format!("cannot {action} `{}`: {error}", path.display()))
                .label(label)
                .help("check that the run directory is writable and the disk has room")
        }
        _ => unreachable!("only runtime problems are worded here"),
    }
}
