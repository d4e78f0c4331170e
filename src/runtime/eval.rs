//! `kiln eval`: the loss and metrics of given weights on a split of an experiment's data, with
//! no training. The weights are a run directory's final weights (`weights.safetensors`, which
//! every run writes when it ends; its newest checkpoint when it has none) or a checkpoint named
//! with `--checkpoint`, compressed as the experiment says (deterministically, so it is the model
//! the run measured); or a safetensors file (`--weights`) with PyTorch `state_dict` names
//! (parameters pruned by `torch.nn.utils.prune` included), or the compressed model `kiln export`
//! wrote, evaluated as it is stored. The evaluation is the training loop's own ([`evaluate`]),
//! so a run's final weights give its final validation metrics bit for bit.

use std::io::Write as _;
use std::path::PathBuf;

use super::checkpoint::Saved;
use super::compress::finalize::{finalize, plain_copy};
use super::data::{self, Dataset};
use super::model::Net;
use super::parallel::Local;
use super::session::{run_experiment, Session};
use super::step::Objective;
use super::train::{evaluate, Eval};
use super::weights::{load_strict, read_checkpoint, read_tensors};
use kiln::check::{check_path, Checked, FsLoader, Options};
use kiln::diagnostic::problem::{NoWeights, Running};
use kiln::diagnostic::render::{to_json, to_text, Style};
use kiln::diagnostic::{Code, Diagnostic, Problem};
use kiln::ir::Experiment;

/// Options of `kiln eval`.
#[derive(clap::Args, Debug, Clone)]
pub struct EvalOptions {
    /// A run directory, or an experiment file (with `--weights` or `--checkpoint`).
    #[arg(value_name = "FILE|RUN_DIR")]
    pub target: PathBuf,
    /// Weights to evaluate: a safetensors file with PyTorch `state_dict` names (`fc1.weight`;
    /// `fc1.weight_orig` and `fc1.weight_mask` of `torch.nn.utils.prune` too), or a
    /// `model.safetensors` written by `kiln export`, evaluated as the compressed model it is.
    #[arg(long, value_name = "SAFETENSORS", conflicts_with = "checkpoint")]
    pub weights: Option<PathBuf>,
    /// A checkpoint of a run of the experiment: `RUN_DIR/checkpoints/step-N.safetensors` (or
    /// its `.yaml` sidecar).
    #[arg(long, value_name = "CHECKPOINT")]
    pub checkpoint: Option<PathBuf>,
    /// The split to evaluate; by default the test split when the experiment has one, else the
    /// validation split.
    #[arg(long, value_enum)]
    pub split: Option<SplitName>,
    /// Evaluate the weights unquantized and unshrunk too, side by side; with `--weights`, only
    /// so (plain weights hold no pruning masks or observers to compress with).
    #[arg(long)]
    pub uncompressed: bool,
    /// The experiment file to use instead of the run's own copy (a run directory only).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The trial of an experiment file with sweeps (1-based).
    #[arg(
        long,
        value_name = "K",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..),
    )]
    pub trial: Option<usize>,
    /// Put every layer on this device (`cpu`, `cuda`, `cuda:N`) instead of the experiment's
    /// placements.
    #[arg(long, value_parser = parse_device)]
    pub device: Option<kiln::ir::Device>,
    /// libtorch's intra-op threads, 1 to 1024; on the run's machine, a CPU evaluation equals the
    /// run's bit for bit with the run's thread count (README, "Reproducibility").
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024),
    )]
    pub threads: Option<usize>,
    /// Output format: lines for people, or one JSON object (diagnostics as a JSON array).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// A split of the data.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitName {
    /// The training split.
    Train,
    /// The validation split.
    Val,
    /// The test split.
    Test,
}

impl SplitName {
    fn word(self) -> &'static str {
        match self {
            SplitName::Train => "train",
            SplitName::Val => "val",
            SplitName::Test => "test",
        }
    }
}

/// How `kiln eval` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Lines for people.
    Human,
    /// One JSON object.
    Json,
}

fn parse_device(text: &str) -> Result<kiln::ir::Device, String> {
    text.parse()
}

/// What `kiln eval` found: the metrics in the format of `report.yaml`'s evaluations (`loss`,
/// `accuracy`, `top_k`, `mae`, `rmse`, `r2`), with what was evaluated.
#[derive(serde::Serialize)]
struct EvalReport {
    experiment: String,
    split: &'static str,
    samples: i64,
    #[serde(serialize_with = "kiln::rundir::path_text::serialize")]
    weights: PathBuf,
    /// The checkpoint's step, for a checkpoint.
    step: Option<u64>,
    /// `model` (no compression), `compressed` or `uncompressed`.
    model: &'static str,
    #[serde(flatten)]
    eval: Eval,
    /// The same weights unquantized and unshrunk, with `--uncompressed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    uncompressed: Option<Eval>,
    /// The step the run was to end at, when the checkpoint is older.
    #[serde(skip_serializing_if = "Option::is_none")]
    run_end: Option<u64>,
}

/// Where the weights come from.
enum Weights {
    /// A safetensors file with `state_dict` names.
    File(PathBuf),
    /// A checkpoint named on the command line.
    Checkpoint(PathBuf),
    /// A run directory's newest intact final weights, or else its newest intact checkpoint.
    Run(PathBuf),
}

/// Runs `kiln eval`; returns the exit status.
pub fn eval_main(opts: &EvalOptions) -> i32 {
    if let Some(n) = opts.threads {
        tch::set_num_threads(n as i32);
    }
    let run_dir = opts.target.is_dir().then(|| opts.target.clone());
    let checked = match &run_dir {
        Some(dir) => match run_experiment(dir, opts.file.as_deref()) {
            Ok(c) => c,
            Err(message) => return usage(&message),
        },
        None => (
            check_path(&opts.target, &FsLoader, &Options::default()),
            opts.trial,
        ),
    };
    let (checked, trial) = checked;
    let json = opts.format == Format::Json;
    if checked.has_errors() {
        let io = checked.diagnostics.iter().any(|d| d.code == Code::Io);
        return show(&checked, &checked.diagnostics, json, if io { 2 } else { 1 });
    }
    let count = checked.trials.len();
    let index = trial.unwrap_or(1);
    let Some(exp) = checked.trials.get(index.saturating_sub(1)) else {
        return usage(&format!(
            "`--trial {index}`: the experiment has {count} trial(s)"
        ));
    };
    if trial.is_none() && count > 1 {
        return usage(&format!(
            "the experiment has {count} trials; pick one with `--trial K`"
        ));
    }
    let weights = match (&opts.weights, &opts.checkpoint, run_dir) {
        (Some(w), _, _) => Weights::File(w.clone()),
        (None, Some(c), _) => Weights::Checkpoint(c.clone()),
        (None, None, Some(dir)) => Weights::Run(dir),
        (None, None, None) => {
            let d = Problem::Running(Running::NoWeights {
                span: exp.span,
                situation: NoWeights::NotGiven {
                    file: opts.target.clone(),
                },
            })
            .diagnostic();
            return show(&checked, &[d], json, 2);
        }
    };
    match run(exp, &checked, &weights, opts) {
        Ok(report) => {
            let text = if json {
                serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
            } else {
                human(&report)
            };
            let _ = write!(std::io::stdout(), "{text}");
            0
        }
        Err(d) => {
            let status = if d.code == Code::NoWeights { 2 } else { 1 };
            show(&checked, &[d], json, status)
        }
    }
}

/// Prints a usage error; returns 2.
pub(super) fn usage(message: &str) -> i32 {
    let _ = writeln!(std::io::stderr(), "error: {message}");
    2
}

/// Prints diagnostics (text on standard error, or a JSON array on standard output); returns
/// `status`.
pub(super) fn show(checked: &Checked, diagnostics: &[Diagnostic], json: bool, status: i32) -> i32 {
    if json {
        let all: Vec<_> = diagnostics
            .iter()
            .map(|d| to_json(d, &checked.sources))
            .collect();
        let text = serde_json::to_string_pretty(&all).unwrap_or_default();
        let _ = writeln!(std::io::stdout(), "{text}");
    } else {
        let style = Style {
            color: false,
            width: 100,
        };
        for d in diagnostics {
            let _ = write!(std::io::stderr(), "{}", to_text(d, &checked.sources, style));
        }
    }
    status
}

/// Evaluates `weights` on the chosen split of `exp`.
fn run(
    exp: &Experiment,
    checked: &Checked,
    weights: &Weights,
    opts: &EvalOptions,
) -> Result<EvalReport, Diagnostic> {
    let session = Session::new(exp, &checked.sources, opts.device, None)?;
    let over = session.model_device();
    let nodes = &session.nodes;
    let splits = session.data()?;
    let name = opts.split.unwrap_or(if splits.test.is_some() {
        SplitName::Test
    } else {
        SplitName::Val
    });
    let data: &Dataset = match name {
        SplitName::Train => Some(&splits.train),
        SplitName::Val => splits.val.as_ref(),
        SplitName::Test => splits.test.as_ref(),
    }
    .filter(|d| d.len() > 0)
    .ok_or_else(|| {
        let available = [
            ("train", splits.train.len() > 0),
            ("val", splits.val.is_some()),
            ("test", splits.test.is_some()),
        ];
        Problem::Running(Running::SplitEmpty {
            span: exp.data.source_span,
            split: name.word().into(),
            available: available
                .iter()
                .filter(|(_, has)| *has)
                .map(|(s, _)| s.to_string())
                .collect(),
        })
        .diagnostic()
    })?;
    let compresses = !exp.compression.is_empty();
    // Plain weights evaluated as they are: the model without masks and observers.
    let plain = compresses && opts.uncompressed && matches!(weights, Weights::File(_));
    let mut trained = session.build()?;
    let (_, timeline) = session.length(&splits, None)?;
    if compresses && !plain {
        session.compress(&mut trained, timeline)?;
    }
    let mut exported = None;
    let (path, step) = match weights {
        Weights::File(path) => {
            let tensors = read_tensors(path, exp)?;
            if super::exported::is_export(&trained, &tensors) {
                if opts.uncompressed {
                    return Err(Problem::Running(Running::ExportNotEvaluable {
                        span: exp.span,
                        path: path.clone(),
                        tensor: None,
                    })
                    .diagnostic());
                }
                let mut net = session.build()?;
                super::exported::load(&mut net, path, &tensors, exp)?;
                exported = Some(net);
            } else {
                load_strict(&trained, path, &tensors, exp, compresses && !plain)?;
            }
            (path.clone(), None)
        }
        Weights::Checkpoint(path) => {
            let saved = read_checkpoint(path, exp)?;
            (
                path.clone(),
                Some(restore_saved(&session, &splits, &trained, saved)?),
            )
        }
        Weights::Run(dir) => from_run(&session, &splits, &trained, dir, exp, compresses)?,
    };
    let objective = Objective::new(exp);
    let at = |net: &Net| evaluate(exp, net, &Local, net.input_device(), &objective, data);
    let (label, eval, uncompressed) = if let Some(net) = &exported {
        ("compressed", at(net)?, None)
    } else if !compresses {
        ("model", at(&trained)?, None)
    } else if plain {
        ("uncompressed", at(&trained)?, None)
    } else {
        let compressed = finalize(exp, nodes, &trained, over)?;
        let before = if opts.uncompressed {
            Some(at(&plain_copy(exp, nodes, &trained, over)?)?)
        } else {
            None
        };
        ("compressed", at(&compressed.net)?, before)
    };
    Ok(EvalReport {
        experiment: exp.name.clone(),
        split: name.word(),
        samples: data.len(),
        weights: path,
        step,
        model: label,
        eval,
        uncompressed,
        run_end: step.filter(|s| *s < timeline.end()).map(|_| timeline.end()),
    })
}

/// Loads a run directory's newest intact final weights into `trained`, or else its newest
/// intact checkpoint; refused (K0507) when the experiment now computes something else than the
/// run did. Returns the weights' path and step.
pub(super) fn from_run(
    session: &Session,
    splits: &data::Splits,
    trained: &Net,
    dir: &std::path::Path,
    exp: &Experiment,
    compresses: bool,
) -> Result<(PathBuf, Option<u64>), Diagnostic> {
    let (last, damaged) = kiln::rundir::weights::newest(dir);
    if let Some((side, path)) = last {
        let tensors = read_tensors(&path, exp)?;
        session.same_computation(splits, &side.fingerprint)?;
        load_strict(trained, &path, &tensors, exp, compresses)?;
        return Ok((path, Some(side.position.step)));
    }
    let found = super::checkpoint::latest(&dir.join(kiln::rundir::CHECKPOINTS));
    let Some(saved) = found.0 else {
        return Err(Problem::Running(Running::NoWeights {
            span: exp.span,
            situation: NoWeights::EmptyRun {
                dir: dir.to_path_buf(),
                damaged: damaged.len() + found.1.len(),
            },
        })
        .diagnostic());
    };
    let path = dir.join(kiln::rundir::CHECKPOINTS).join(&saved.0.tensors);
    Ok((path, Some(restore_saved(session, splits, trained, saved)?)))
}

/// Loads a checkpoint into `trained`, refused (K0507) when the experiment now computes something
/// else than the run that wrote it; returns the checkpoint's step.
fn restore_saved(
    session: &Session,
    splits: &data::Splits,
    trained: &Net,
    (side, tensors): Saved,
) -> Result<u64, Diagnostic> {
    session.same_computation(splits, &side.fingerprint)?;
    session.restore(trained, &tensors)?;
    Ok(side.position.step)
}

/// The report as lines: what was evaluated, then `val (model): loss 0.212300, accuracy 94.8000%`.
fn human(r: &EvalReport) -> String {
    let mut out = match r.step {
        Some(step) => format!("weights: {} (step {step})\n", r.weights.display()),
        None => format!("weights: {}\n", r.weights.display()),
    };
    if let (Some(step), Some(end)) = (r.step, r.run_end) {
        out += &format!("note: the checkpoint is from step {step} of the run's {end}\n");
    }
    out += &format!("{} ({}): {}\n", r.split, r.model, line(&r.eval));
    if let Some(u) = &r.uncompressed {
        out += &format!("{} (uncompressed): {}\n", r.split, line(u));
    }
    out
}

/// An evaluation as one line: `loss 0.212300, accuracy 94.8000%`.
fn line(e: &Eval) -> String {
    let mut s = format!("loss {:.6}", e.loss);
    if let Some(a) = e.accuracy {
        s += &format!(", accuracy {:.4}%", 100.0 * a);
    }
    if let Some(t) = e.top_k {
        s += &format!(", top-{} {:.4}%", t.k, 100.0 * t.accuracy);
    }
    for (name, x) in e.regression() {
        s += &format!(", {name} {x:.6}");
    }
    s
}
