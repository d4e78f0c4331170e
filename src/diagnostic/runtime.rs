//! Wording of runtime problems (K0420, K0501 to K0509, K0511).

use crate::diagnostic::problem::{Running, Warnings};
use std::path::{Path, PathBuf};

use super::problem::Problem;
use super::Diagnostic;
use crate::present::fmt_bytes;
use crate::span::Span;

/// Runtime problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    let new = |span: Span, message: String| Diagnostic::new(code, span, message);
    match problem {
        Problem::Running(Running::DeviceUnavailable {
            span,
            situation: Unavailable::Fp16OnCpu,
        }) => new(
            span,
            "fp16 training needs a CUDA device, and this run is on the CPU".into(),
        )
        .label("runs on the CPU")
        .help("use `precision bf16` on the CPU, or run on a CUDA device"),
        Problem::Running(Running::DeviceUnavailable {
            span,
            situation:
                Unavailable::Missing {
                    named,
                    index,
                    count,
                },
        }) => {
            let found = if count == 0 {
                "this machine has no CUDA device".to_string()
            } else {
                format!("this machine has {count} CUDA device(s)")
            };
            new(span, format!("`{named}` is not available: {found}"))
                .label(format!("needs cuda:{index}"))
                .help("run with `--device cpu` to put every layer on the CPU")
        }
        Problem::Running(Running::DataMissing {
            span,
            detail,
            label,
            help,
        }) => new(span, detail).label(label).help(help.unwrap_or_else(|| {
            "paths are relative to the directory of the .exp file that declares the source".into()
        })),
        Problem::Running(Running::DataInvalid {
            span,
            detail,
            label,
            help,
            weights: true,
        }) => new(span, detail)
            .label(label.unwrap_or_else(|| "while loading initial weights for this experiment".into()))
            .help(help.unwrap_or_else(|| "give a safetensors file saved from the same model, keyed by `state_dict` names such as `fc1.weight`".into())),
        Problem::Running(Running::DataInvalid {
            span,
            detail,
            label,
            help,
            weights: false,
        }) => new(span, detail)
            .label(label.unwrap_or_else(|| "while loading this data".into()))
            .help(help.unwrap_or_else(|| {
                "check the file's format and the shapes the experiment declares".into()
            })),
        Problem::Running(Running::NonFiniteLoss {
            span,
            nan,
            step,
            epoch,
            lr,
        }) => new(
            span,
            format!(
                "the loss became {} at step {step} (epoch {epoch})",
                if nan { "NaN" } else { "infinite" }
            ),
        )
        .label(format!("learning rate {lr} at that step"))
        .help("lower the learning rate, clip gradients with `clip_norm 1.0`, or check the data for NaN and infinite values; the last checkpoint on disk is intact"),
        Problem::Warnings(Warnings::WeightlessBatch { span, ignore_index }) => new(
            span,
            format!("every target of a training batch is ignored (`ignore_index` {ignore_index}) or of a class weighted 0: its mean loss is undefined"),
        )
        .label("the batch's mean loss divides by its targets' weights, which add up to 0")
        .help("use larger batches, give the batch's classes a weight above 0, or check the data's labels against `ignore_index`; the last checkpoint on disk is intact"),
        Problem::Running(Running::OutOfMemory {
            span,
            detail,
            plan,
            ran_out,
        }) => {
            let d = new(span, format!("a device ran out of memory: {detail}"));
            let help =
                "lower the batch size, use `precision bf16`, or spread the model over more devices";
            let d = match plan {
                Some((batch, estimate)) => d
                    .label(format!("batch {batch} does not fit"))
                    .help(format!("the plan estimates {estimate}; {help}")),
                None => d.label("while running this").help(help),
            };
            match ran_out {
                Some(at) => d.with(at, "memory ran out while running this"),
                None => d,
            }
        }
        Problem::Running(Running::Interrupted {
            span,
            step,
            epoch,
            signal,
            resume,
        }) => {
            let by = signal.map_or_else(String::new, |s| format!(" by {s}"));
            new(span, format!("interrupted{by} at step {step} (epoch {epoch})"))
                .label("training stopped here")
                .help(match resume {
                    Some(command) => format!("a checkpoint was written; resume with `{command}`"),
                    None => "resume from the run directory of the first process".to_string(),
                })
        }
        Problem::Running(Running::TorchError { span, situation }) => {
            let check =
                "this should have been caught by `kiln check`; please report it with the file";
            match situation {
                Torch::Libtorch { detail } => new(span, format!("libtorch failed: {detail}"))
                    .label("while running this")
                    .help(check),
                Torch::Layer { detail } => new(span, detail)
                    .label("while running this layer")
                    .help(check),
                Torch::Lowering { layer, what, name } => {
                    new(span, format!("layer `{layer}` has no {what} `{name}`"))
                        .label("while running this layer")
                        .help("this is a bug in Kiln's lowering; please report it with the file")
                }
                Torch::LossShapes {
                    loss,
                    output,
                    targets,
                    needs,
                } => new(
                    span,
                    format!(
                        "the model's output {} does not fit the targets {} of `{loss}`: {needs}",
                        batch_shape(&output),
                        batch_shape(&targets)
                    ),
                )
                .label("while computing this loss")
                .help(format!("nothing was broadcast; {check}")),
                Torch::LoaderStopped => new(
                    span,
                    "the thread preparing batches stopped before the end of the epoch".into(),
                )
                .label("while loading this batch")
                .help("this is a bug in Kiln; please report it with the experiment file"),
            }
        }
        Problem::Running(Running::RunIo {
            span,
            action,
            path,
            error,
            stage,
        }) => {
            let label = match stage {
                RunStage::Checkpoint => "while checkpointing this experiment",
                RunStage::Record => "while recording this experiment's run",
                RunStage::Plot => "while plotting this experiment's training curves",
            };
            let message = match path {
                Some(path) => format!("cannot {action} `{}`: {error}", path.display()),
                None => format!("cannot {action}: {error}"),
            };
            new(span, message).label(label).help(io_help(&error))
        }
        Problem::Running(Running::RuntimeKilled {
            span,
            signal,
            cause,
            file,
            runs,
        }) => new(span, format!("`kiln-runtime` was killed by {signal}"))
            .label("while training this experiment")
            .help(format!("{}; {}", death(&cause), kept(&file, &runs))),
        _ => unreachable!("only runtime problems are worded here"),
    }
}

/// A shape with its batch dimension, as PyTorch prints it: `[32, 1]`.
fn batch_shape(dims: &[i64]) -> String {
    let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// The help of a failed write: the file-size limit or the full disk when the system says so.
fn io_help(error: &str) -> &'static str {
    if ["os error 27", "FileTooLarge", "File too large"]
        .iter()
        .any(|e| error.contains(e))
    {
        "a file reached the file-size limit (`ulimit -f`): raise the limit or put the run directory (`--runs-dir`) where none applies; the last checkpoint on disk is intact"
    } else if ["os error 28", "StorageFull", "No space left on device"]
        .iter()
        .any(|e| error.contains(e))
    {
        "the disk is full: free space or put the run directory (`--runs-dir`) on another disk; the last checkpoint on disk is intact"
    } else {
        "check that the run directory is writable and the disk has room"
    }
}

/// Why the runtime died, in words.
fn death(cause: &Death) -> String {
    match cause {
        Death::OutOfMemory { peak, limit } => {
            let of = limit.map_or_else(String::new, |l| format!(" of {}", fmt_bytes(l)));
            format!(
                "most likely the kernel's out-of-memory killer: its memory peaked at {}{of}; use less (a smaller batch, model or data set) or give it more",
                fmt_bytes(*peak)
            )
        }
        Death::Killed => "another process killed it (memory was not short)".into(),
        Death::FileSize => "a file grew past the file-size limit (`ulimit -f`); raise it".into(),
        Death::Crash => {
            "it crashed, in libtorch or in Kiln: a bug; please report it with the experiment file"
                .into()
        }
        Death::Other => "another process sent the signal".into(),
    }
}

/// What the killed runtime leaves to resume from.
fn kept(file: &Path, runs: &[KilledRun]) -> String {
    if runs.is_empty() {
        return "it had created no run directory yet: start the run again".into();
    }
    let each: Vec<String> = runs
        .iter()
        .map(|r| match &r.checkpoint {
            Some((step, sidecar)) => {
                let trial = r.trial.map_or_else(String::new, |k| format!(" --trial {k}"));
                format!(
                    "the last checkpoint, `{}` (step {step}), is kept: resume with `kiln run {}{trial} --resume {}`",
                    sidecar.display(),
                    file.display(),
                    r.dir.display()
                )
            }
            None => format!(
                "`{}` holds no checkpoint: start the run again",
                r.dir.display()
            ),
        })
        .collect();
    each.join("; ")
}

/// Why a signal killed the runtime, as far as `kiln` can tell.
#[derive(Clone, Debug, PartialEq)]
pub enum Death {
    /// SIGKILL while memory was short: the kernel's out-of-memory killer.
    OutOfMemory {
        /// The runtime's peak resident memory, in bytes.
        peak: u64,
        /// The memory it could use (the cgroup's limit or the machine's), when known.
        limit: Option<u64>,
    },
    /// SIGKILL with memory to spare: another process (`kill -9`).
    Killed,
    /// SIGXFSZ: a file grew past the file-size limit.
    FileSize,
    /// SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT: a crash.
    Crash,
    /// Any other signal, sent by another process.
    Other,
}

/// A run directory of a killed runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct KilledRun {
    /// The run directory, as the runtime named it.
    pub dir: PathBuf,
    /// The sweep trial (1-based) it holds, for a sweep's run.
    pub trial: Option<usize>,
    /// Its newest checkpoint: the step and the tensors file.
    pub checkpoint: Option<(u64, PathBuf)>,
}

/// The situations of K0501.
#[derive(Clone, Debug, PartialEq)]
pub enum Unavailable {
    /// fp16 training on the CPU.
    Fp16OnCpu,
    /// A CUDA device this machine lacks.
    Missing {
        /// The device as the experiment or the command line names it (`cuda:1`, `--device`).
        named: String,
        /// The CUDA index needed.
        index: usize,
        /// How many CUDA devices the machine has.
        count: usize,
    },
}

/// The situations of K0508.
#[derive(Clone, Debug, PartialEq)]
pub enum Torch {
    /// libtorch returned an error.
    Libtorch {
        /// Its first line.
        detail: String,
    },
    /// A layer met an input the checks should have excluded.
    Layer {
        /// What it met (`attention expects [batch, sequence, width], got [2, 3]`).
        detail: String,
    },
    /// A layer lacks a tensor that lowering should have created.
    Lowering {
        /// The layer's name.
        layer: String,
        /// What kind of tensor (`parameter`).
        what: String,
        /// Its local name (`weight`).
        name: String,
    },
    /// The thread preparing batches stopped before the end of the epoch.
    LoaderStopped,
    /// The model's output does not fit the targets as the loss needs them (after a one-unit
    /// output is squeezed against one target per sample).
    LossShapes {
        /// The loss's name.
        loss: &'static str,
        /// The output's shape, batch included.
        output: Vec<i64>,
        /// The targets' shape, batch included.
        targets: Vec<i64>,
        /// What the loss needs, in words.
        needs: &'static str,
    },
}

/// What the run was doing when a file of its run directory failed (K0509).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStage {
    /// Writing or reading a checkpoint.
    Checkpoint,
    /// Recording the run (progress, report).
    Record,
    /// Plotting curves.
    Plot,
}
