//! `kiln predict`: the predictions of a run's model for samples in a file, written as CSV or
//! `.npy`. The model is the one `kiln eval RUN_DIR` evaluates (the run's final weights, or its
//! newest checkpoint, compressed as the experiment says), run in eval mode; the inputs are read
//! and prepared as the run prepared its training inputs ([`read_inputs`]).
//!
//! What a prediction is follows the loss: with `cross_entropy` or `nll`, the class with the
//! highest score and every class's probability (the softmax of the scores); with
//! `bce_with_logits`, each output's probability (its sigmoid); with a regression loss, the values.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use super::data::read_inputs;
use super::eval::{show, usage};
use super::failure::At;
use super::trained;
use kiln::check::Checked;
use kiln::diagnostic::problem::{RunStage, Running};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Experiment, Loss};

/// Options of `kiln predict`.
#[derive(clap::Args, Debug, Clone)]
pub struct PredictOptions {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The samples: `.npy`, `.npz` (array `inputs`), `.safetensors` (tensor `inputs`), `.csv` (a
    /// row of features per sample) or IDX images.
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// Where to write: a `.csv` or `.npy` file, which must not exist yet; CSV on standard output
    /// when not given.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The experiment file to use instead of the run's own copy.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The trial of an experiment with sweeps (1-based).
    #[arg(long, value_name = "K", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub trial: Option<usize>,
    /// libtorch's intra-op threads.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
}

/// Runs `kiln predict`; returns the exit status.
pub fn predict_main(opts: &PredictOptions) -> i32 {
    if let Some(n) = opts.threads {
        tch::set_num_threads(n as i32);
    }
    let out = match &opts.out {
        Some(path) if path.exists() => {
            return usage(&format!(
                "`{}` exists already: predictions never overwrite a file",
                path.display()
            ))
        }
        Some(path) => match Output::of(path) {
            Some(o) => Some(o),
            None => {
                return usage(&format!(
                    "`{}`: predictions are written as `.csv` or `.npy`",
                    path.display()
                ))
            }
        },
        None => None,
    };
    let (checked, index) = match trained::open(&opts.run_dir, opts.file.as_deref(), opts.trial) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let exp = &checked.trials[index];
    match predict(exp, &checked, opts, out) {
        Ok(()) => 0,
        Err(d) => show(&checked, &[d], false, 1),
    }
}

/// Where predictions go.
enum Output {
    Csv(PathBuf),
    Npy(PathBuf),
}

impl Output {
    /// The output a file name asks for.
    fn of(path: &Path) -> Option<Output> {
        let name = path.to_string_lossy().to_lowercase();
        if name.ends_with(".csv") {
            Some(Output::Csv(path.to_path_buf()))
        } else if name.ends_with(".npy") {
            Some(Output::Npy(path.to_path_buf()))
        } else {
            None
        }
    }
}

/// What the model's outputs are turned into.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prediction {
    /// Class probabilities (softmax over the last dimension).
    Classes,
    /// Independent probabilities (sigmoid).
    Binary,
    /// Values as they are.
    Values,
}

/// Loads the run's model, predicts every sample and writes the predictions.
fn predict(
    exp: &Experiment,
    checked: &Checked,
    opts: &PredictOptions,
    out: Option<Output>,
) -> Result<(), Diagnostic> {
    let model = trained::model(exp, checked, &opts.run_dir)?;
    let span = exp.data.source_span;
    let (x, files) = read_inputs(
        &exp.data,
        &exp.model.input,
        exp.model.input_dtype,
        &opts.input,
        span,
    )?;
    let kind = match exp.train.loss {
        Loss::CrossEntropy { .. } | Loss::Nll { .. } => Prediction::Classes,
        Loss::BceWithLogits { .. } => Prediction::Binary,
        _ => Prediction::Values,
    };
    let n = x.size()[0];
    let batch = exp.data.eval_batch.max(1) as i64;
    let device = model.input_device();
    let at = exp.train.loss_span;
    let predictions = tch::no_grad(|| -> Result<Tensor, Diagnostic> {
        let mut parts = Vec::new();
        let mut lo = 0;
        while lo < n {
            let len = batch.min(n - lo);
            let xb = x
                .f_narrow(0, lo, len)
                .and_then(|t| t.f_to_device(device))
                .at(at)?;
            let scores = model.forward(&xb, false)?.f_to_kind(Kind::Float).at(at)?;
            let p = match kind {
                Prediction::Classes => scores.f_softmax(-1, Kind::Float),
                Prediction::Binary => scores.f_sigmoid(),
                Prediction::Values => Ok(scores),
            }
            .and_then(|p| p.f_to_device(tch::Device::Cpu))
            .at(at)?;
            parts.push(p);
            lo += len;
        }
        if parts.is_empty() {
            return Tensor::f_zeros([0], (Kind::Float, tch::Device::Cpu)).at(at);
        }
        Tensor::f_cat(&parts, 0).at(at)
    })?;
    match out {
        Some(Output::Npy(path)) => {
            // Written beside, then renamed: never a half-written file under the name.
            let name = path
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
            let tmp = path.with_file_name(format!(".{name}.tmp"));
            predictions
                .write_npy(&tmp)
                .map_err(|e| write_failed(&tmp, e, exp))?;
            std::fs::rename(&tmp, &path).map_err(|e| write_failed(&path, e, exp))?;
            eprintln!("wrote {} predictions to {}", n, path.display());
        }
        Some(Output::Csv(path)) => {
            let text = csv(&predictions, kind, files.as_deref()).at(at)?;
            kiln::rundir::write_atomic(
                path.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new(".")),
                &path
                    .file_name()
                    .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
                text.as_bytes(),
            )
            .map_err(|e| write_failed(&path, e, exp))?;
            eprintln!("wrote {} predictions to {}", n, path.display());
        }
        None => {
            let text = csv(&predictions, kind, files.as_deref()).at(at)?;
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
    }
    Ok(())
}

/// K0509 for an output that cannot be written.
fn write_failed(path: &Path, e: impl std::fmt::Display, exp: &Experiment) -> Diagnostic {
    Problem::Running(Running::RunIo {
        span: exp.span,
        action: "write".into(),
        path: Some(path.to_path_buf()),
        error: e.to_string(),
        stage: RunStage::Record,
    })
    .diagnostic()
}

/// The predictions as CSV: a header, then a row per sample: `class,p0,p1,...` for classes,
/// `p0,p1,...` for independent probabilities, `v0,v1,...` for values (a sample's outputs
/// flattened); images' rows start with the image's file (`file,class,p0,...`).
fn csv(p: &Tensor, kind: Prediction, files: Option<&[String]>) -> Result<String, tch::TchError> {
    let n = p.size()[0];
    let flat = p.f_reshape([n, -1])?;
    let width = flat.size()[1];
    let values = Vec::<f32>::try_from(&flat.f_contiguous()?.f_reshape([-1])?)?;
    let mut out = String::new();
    let names: Vec<String> = (0..width)
        .map(|j| match kind {
            Prediction::Classes | Prediction::Binary => format!("p{j}"),
            Prediction::Values => format!("v{j}"),
        })
        .collect();
    if files.is_some() {
        out.push_str("file,");
    }
    if kind == Prediction::Classes {
        out.push_str("class,");
    }
    out.push_str(&names.join(","));
    out.push('\n');
    for (i, row) in values.chunks(width.max(1) as usize).enumerate() {
        if let Some(f) = files.and_then(|f| f.get(i)) {
            out.push_str(&csv_cell(f));
            out.push(',');
        }
        if kind == Prediction::Classes {
            let best = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (j, &v)| if v > b.1 { (j, v) } else { b },
                );
            out.push_str(&format!("{},", best.0));
        }
        let cells: Vec<String> = row.iter().map(|v| v.to_string()).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    Ok(out)
}

/// A CSV cell: quoted, its quotes doubled, when it holds a comma, a quote or a line break.
fn csv_cell(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}
