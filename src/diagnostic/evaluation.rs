//! Wording of the problems of `kiln eval` (K0519 to K0522): weights it cannot read, weights that
//! do not fit the model, a split without samples, an export it cannot evaluate as asked; and of
//! `kiln generate` given a model that cannot generate (K0526).

use crate::diagnostic::problem::Running;
use std::path::PathBuf;

use super::problem::Problem;
use super::Diagnostic;

/// Why `kiln eval` has no weights to evaluate (K0519).
#[derive(Clone, Debug, PartialEq)]
pub enum NoWeights {
    /// An experiment file was given without `--weights` or `--checkpoint`.
    NotGiven {
        /// The experiment file.
        file: PathBuf,
    },
    /// The weights file or checkpoint named cannot be read.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, in a few words (`it does not exist`).
        detail: String,
    },
    /// The run directory holds neither intact final weights nor an intact checkpoint.
    EmptyRun {
        /// The run directory.
        dir: PathBuf,
        /// How many of its final weights and checkpoints are damaged.
        damaged: usize,
    },
}

/// One tensor of the model that the weights do not give as it is (K0520).
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// The tensor's `state_dict` name (`fc1.weight`).
    pub name: String,
    /// What the weights hold under that name (`[10, 64] float32`); `None` when nothing.
    pub found: Option<String>,
    /// What the model needs (`[4, 64] float32`).
    pub expected: String,
}

/// `kiln eval`'s problems in words. Only those variants are passed here.
pub(super) fn words(problem: Problem) -> Diagnostic {
    let code = problem.code();
    match problem {
        Problem::Running(Running::NoWeights { span, situation }) => match situation {
            NoWeights::NotGiven { file } => Diagnostic::new(
                code,
                span,
                format!("no weights to evaluate `{}` with", file.display()),
            )
            .label("the model to evaluate")
            .help(format!(
                "name them: `kiln eval {f} --weights W.safetensors` (PyTorch `state_dict` names) or `kiln eval {f} --checkpoint RUN_DIR/checkpoints/step-N.safetensors`; or evaluate a run directory",
                f = file.display()
            )),
            NoWeights::Unreadable { path, detail } => Diagnostic::new(
                code,
                span,
                format!("cannot read the weights `{}`: {detail}", path.display()),
            )
            .label("the model to evaluate")
            .help("name a safetensors file saved from this model (`state_dict` names such as `fc1.weight`), or a checkpoint of one of its runs"),
            NoWeights::EmptyRun { dir, damaged } => {
                let damaged = match damaged {
                    0 => String::new(),
                    1 => " (the weights it saved are damaged)".into(),
                    n => format!(" (the {n} weights files it saved are damaged)"),
                };
                Diagnostic::new(
                    code,
                    span,
                    format!("the run `{}` holds no weights to evaluate{damaged}", dir.display()),
                )
                .label("this run saved no weights")
                .help("a run saves its final weights (`weights.safetensors`) when it ends, and checkpoints when its train block has `checkpoint(every: ...)`; a run that has not ended yet can be resumed with `kiln run --resume`; or name weights with `--weights`")
            }
        },
        Problem::Running(Running::WeightsMismatch {
            span,
            path,
            mismatches,
            compresses,
            checkpoint,
        }) => {
            let each: Vec<String> = mismatches
                .iter()
                .map(|m| match &m.found {
                    None => format!("`{}` is missing (the model needs {})", m.name, m.expected),
                    Some(found) => format!("`{}` is {found}, the model needs {}", m.name, m.expected),
                })
                .collect();
            let help = if checkpoint {
                "this file is a checkpoint of a run (its tensors are named `param/...`): name it with `--checkpoint`"
            } else if compresses {
                "the experiment compresses, so its model also holds the pruning masks and observers a run saves: evaluate a checkpoint of its run (`--checkpoint`, or the run directory), or evaluate plain weights with `--uncompressed`"
            } else {
                "save the weights from the same model, with its layers' names (`fc1.weight`) and float32 tensors, e.g. `safetensors.torch.save_file(model.state_dict(), path)`"
            };
            Diagnostic::new(
                code,
                span,
                format!(
                    "the weights `{}` do not fit the model: {}",
                    path.display(),
                    each.join("; ")
                ),
            )
            .label("this layer's tensors do not fit")
            .help(help)
        }
        Problem::Running(Running::ExportNotEvaluable { span, path, tensor }) => match tensor {
            Some(tensor) => Diagnostic::new(
                code,
                span,
                format!(
                    "cannot evaluate the export `{}`: `{tensor}` is stored in a form that cannot be read back",
                    path.display()
                ),
            )
            .label("the model to evaluate")
            .help("int4 weights are packed for the kernel of the machine that packed them, and fp8 weights need a GPU: evaluate the run directory instead (`kiln eval RUN_DIR`), which makes the compressed model again"),
            None => Diagnostic::new(
                code,
                span,
                format!(
                    "`--uncompressed` with the export `{}`: an export holds the compressed model only",
                    path.display()
                ),
            )
            .label("the model to evaluate")
            .help("leave out `--uncompressed` to evaluate the exported model, or evaluate the run directory with `--uncompressed` (`kiln eval RUN_DIR --uncompressed`)"),
        },
        Problem::Running(Running::SplitEmpty {
            span,
            split,
            available,
        }) => {
            let other = if available.is_empty() {
                String::new()
            } else {
                format!(
                    ", or evaluate {}",
                    available
                        .iter()
                        .map(|s| format!("`--split {s}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            };
            Diagnostic::new(
                code,
                span,
                format!("the experiment's `{split}` split has no samples"),
            )
            .label(format!("no `{split}` samples from this data"))
            .help(format!(
                "give `{split}` a fraction in `split(...)`, large enough for one sample{other}"
            ))
        }
        Problem::Running(Running::NotGenerative { span, why, help }) => Diagnostic::new(
            code,
            span,
            format!("`kiln generate` needs a causal language model, but {why}"),
        )
        .label("cannot generate")
        .help(help),
        _ => unreachable!("only evaluation problems are passed to evaluation::words"),
    }
}
