//! `kiln export`: a run's model made again from its newest intact checkpoint, compressed as the
//! experiment says (deterministically, so it is the model the run measured), then written out
//! as safetensors with a manifest.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use super::compress::finalize::{finalize, Final};
use super::session::{run_experiment, Session};
use kiln::check::Checked;
use kiln::diagnostic::problem::{Resume, Running};
use kiln::diagnostic::render::{to_text, Style};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::Experiment;
use kiln::span::Span;

/// Options of `kiln export`.
#[derive(clap::Args, Debug, Clone)]
pub struct ExportOptions {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The directory to write (`RUN_DIR/export` when not given); it must not exist yet.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The experiment file, when it has moved since the run (the run records its path).
    #[arg(long)]
    pub file: Option<PathBuf>,
}

/// The run's model, restored and compressed.
struct Restored {
    exp: Experiment,
    compressed: Final,
    step: u64,
}

/// Runs `kiln export`; returns the exit status.
pub fn export_main(opts: &ExportOptions) -> i32 {
    finish(export(opts))
}

/// What went wrong: a diagnostic about the experiment (rendered), or a usage problem.
enum Failure {
    Diagnostic(String),
    Usage(String),
}

impl Failure {
    /// A diagnostic, rendered against the experiment's sources.
    fn of(d: &Diagnostic, checked: &Checked) -> Failure {
        let style = Style {
            color: false,
            width: 100,
        };
        Failure::Diagnostic(to_text(d, &checked.sources, style))
    }
}

fn finish(result: Result<(), Failure>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(Failure::Usage(message)) => {
            let _ = writeln!(std::io::stderr(), "error: {message}");
            2
        }
        Err(Failure::Diagnostic(text)) => {
            let _ = write!(std::io::stderr(), "{text}");
            1
        }
    }
}

fn export(opts: &ExportOptions) -> Result<(), Failure> {
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| opts.run_dir.join("export"));
    if out.exists() {
        return Err(Failure::Usage(format!(
            "`{}` exists; an export never overwrites one: name another with `--out`",
            out.display()
        )));
    }
    let (checked, trial) = experiment(&opts.run_dir, opts.file.as_deref())?;
    let r = restore_run(&checked, trial, &opts.run_dir, tch::Device::Cpu)
        .map_err(|d| Failure::of(&d, &checked))?;
    write_export(&out, &r).map_err(Failure::Usage)?;
    let _ = writeln!(
        std::io::stdout(),
        "wrote {} ({} of weights, {} before compression) and its manifest",
        out.join("model.safetensors").display(),
        kiln::present::fmt_bytes(r.compressed.bytes_after),
        kiln::present::fmt_bytes(r.compressed.bytes_before)
    );
    Ok(())
}

/// Writes `model.safetensors` and `manifest.yaml` into a new directory `out`, each through a
/// temporary file renamed into place, the directory itself last (so a half-written export is
/// never found under its name).
fn write_export(out: &Path, r: &Restored) -> Result<(), String> {
    let parent = out.parent().unwrap_or(Path::new("."));
    let name = out
        .file_name()
        .map_or("export".into(), |n| n.to_string_lossy().to_string());
    let tmp = parent.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    let io = |what: &str, p: &Path, e: &dyn std::fmt::Display| {
        format!("cannot {what} `{}`: {e}", p.display())
    };
    std::fs::create_dir_all(&tmp).map_err(|e| io("create", &tmp, &e))?;
    let written = (|| {
        let tensors: Vec<(String, Tensor)> = r
            .compressed
            .tensors
            .iter()
            .map(|(n, t)| {
                t.f_to_device(tch::Device::Cpu)
                    .and_then(|t| t.f_contiguous())
                    .map(|t| (n.clone(), t))
            })
            .collect::<Result<_, _>>()
            .map_err(|e| io("copy tensors for", out, &e))?;
        let model = tmp.join("model.safetensors");
        Tensor::write_safetensors(&tensors, &model).map_err(|e| io("write", &model, &e))?;
        let manifest = manifest(r, &tensors);
        let text = serde_yaml::to_string(&manifest).map_err(|e| io("write", out, &e))?;
        let path = tmp.join("manifest.yaml");
        std::fs::write(&path, text).map_err(|e| io("write", &path, &e))?;
        std::fs::rename(&tmp, out).map_err(|e| io("rename", &tmp, &e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

/// The export's manifest: what each tensor is and how to use it.
#[derive(serde::Serialize)]
struct Manifest {
    experiment: String,
    kiln: String,
    torch: String,
    step: u64,
    input: Vec<i64>,
    bytes_before: u64,
    bytes_after: u64,
    layers: Vec<kiln::rundir::CompressedLayer>,
    quantized: Vec<QuantizedEntry>,
    tensors: Vec<TensorEntry>,
    formats: Vec<String>,
}

#[derive(serde::Serialize)]
struct QuantizedEntry {
    layer: String,
    scheme: String,
}

#[derive(serde::Serialize)]
struct TensorEntry {
    name: String,
    dtype: String,
    shape: Vec<i64>,
}

fn manifest(r: &Restored, tensors: &[(String, Tensor)]) -> Manifest {
    let kind = |k: Kind| format!("{k:?}").to_lowercase();
    Manifest {
        experiment: r.exp.name.clone(),
        kiln: env!("CARGO_PKG_VERSION").into(),
        torch: env!("KILN_LIBTORCH_VERSION").into(),
        step: r.step,
        input: r.exp.model.input.0.clone(),
        bytes_before: r.compressed.bytes_before,
        bytes_after: r.compressed.bytes_after,
        layers: r.compressed.layers.clone(),
        quantized: r
            .compressed
            .quantized
            .iter()
            .map(|(layer, scheme)| QuantizedEntry {
                layer: layer.clone(),
                scheme: scheme.clone(),
            })
            .collect(),
        tensors: tensors
            .iter()
            .map(|(n, t)| TensorEntry {
                name: n.clone(),
                dtype: kind(t.kind()),
                shape: t.size(),
            })
            .collect(),
        formats: FORMATS.iter().map(|s| s.to_string()).collect(),
    }
}

/// How the stored pieces make a layer's output, for readers of the manifest.
const FORMATS: &[&str] = &[
    "weight_int8 [N, Kp] int8, weight_scale [N]: y = x @ (weight_int8 * weight_scale[:, None])[:, :K].T + bias; with weight_zero_point: (weight_int8 - weight_zero_point[:, None]) * weight_scale[:, None]",
    "weight_int8_t [Kp, Np] int8 (transposed), weight_scale [N]: W = (weight_int8_t[:K, :N].T) * weight_scale[:, None]; with activation_scale, inputs are rounded to int8 steps of that scale first",
    "weight_int4_packed, weight_scales_and_zeros [Kp/group, Np, 2]: libtorch's _convert_weight_to_int4pack_for_cpu layout, for _weight_int4pack_mm_for_cpu; W = (q - 8) * scale + zero per group",
    "weight_fp8 [Np, Kp] float8_e4m3fn, weight_scale (one, or [Np, 1] per row): W = weight_fp8 * weight_scale",
    "weight in bf16 or fp16: W cast to fp32",
    "Kp, Np: K and N rounded up to the multiple a kernel needs (zero padding); every other tensor is a plain fp32 parameter or buffer under its PyTorch state_dict name",
];

/// The checked experiment a run directory was made from (see [`run_experiment`]), and its trial
/// number.
fn experiment(dir: &Path, file: Option<&Path>) -> Result<(Checked, Option<usize>), Failure> {
    let (checked, trial) = run_experiment(dir, file).map_err(Failure::Usage)?;
    if checked.has_errors() {
        let path = checked.sources.get(kiln::span::FileId(0)).path.clone();
        return Err(Failure::Usage(format!(
            "`{}` has errors now; `kiln check {}` lists them",
            path.display(),
            path.display()
        )));
    }
    Ok((checked, trial))
}

/// The run's model at its newest intact checkpoint and its compressed form; refused when the
/// experiment now computes something else than the run did.
fn restore_run(
    checked: &Checked,
    trial: Option<usize>,
    dir: &Path,
    over: tch::Device,
) -> Result<Restored, Diagnostic> {
    let index = trial.unwrap_or(1).saturating_sub(1);
    let Some(exp) = checked.trials.get(index).cloned() else {
        return Err(Problem::Running(Running::ResumeIncompatible {
            span: checked.trials.first().map_or(Span::default(), |e| e.span),
            situation: Resume::NoCheckpoint {
                dir: dir.to_path_buf(),
            },
        })
        .diagnostic());
    };
    let session = Session::on(&exp, &checked.sources, over);
    let mut trained = session.build()?;
    let splits = session.data()?;
    let (_, timeline) = session.length(&splits, None)?;
    session.compress(&mut trained, timeline)?;
    let print = session.fingerprint(&splits)?;
    let (side, tensors) = super::resume::intact_checkpoint(&exp, dir, &print)?;
    session.restore(&trained, &tensors)?;
    let compressed = finalize(&exp, &session.nodes, &trained, session.model_device())?;
    drop(session);
    Ok(Restored {
        step: side.position.step,
        exp,
        compressed,
    })
}
