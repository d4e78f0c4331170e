//! Checkpoints: weights, buffers and optimizer state in safetensors, with a YAML sidecar holding
//! the position in training and the plan's fingerprint (`kiln::rundir::checkpoint`, which owns
//! the index). Written atomically (temporary file, then rename; the sidecar last, so a sidecar
//! always names a complete checkpoint), keeping the last K.

use std::path::{Path, PathBuf};

use tch::Tensor;

use kiln::diagnostic::problem::RunStage;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::rundir::checkpoint::{latest as latest_sidecar, prune, tensors_name, write_sidecar};
use kiln::span::Span;

pub use kiln::rundir::{Fingerprint, Position, Sidecar};

/// A K0509 failure at `span`: `what` could not be done to `path`.
fn io_failure(what: &str, path: &Path, e: impl std::fmt::Display, span: Span) -> Diagnostic {
    Problem::RunIo {
        span,
        action: what.to_string(),
        path: Some(path.to_path_buf()),
        error: e.to_string(),
        stage: RunStage::Checkpoint,
    }
    .diagnostic()
}

/// A K0509 failure at `span` from the run directory's own code.
fn fail(e: kiln::rundir::Error, span: Span) -> Diagnostic {
    io_failure(e.op.verb(), &e.path, e.detail, span)
}

/// Writes a checkpoint into `dir` and removes all but the newest `keep`.
pub fn write(
    dir: &Path,
    sidecar: &Sidecar,
    tensors: &[(String, Tensor)],
    keep: u64,
    span: Span,
) -> Result<PathBuf, Diagnostic> {
    std::fs::create_dir_all(dir).map_err(|e| io_failure("create", dir, e, span))?;
    let name = tensors_name(sidecar.position.step);
    let data = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let cpu: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, t)| t.f_to_device(tch::Device::Cpu).map(|t| (n.clone(), t)))
        .collect::<Result<_, _>>()
        .map_err(|e| io_failure("copy tensors for", &data, e, span))?;
    Tensor::write_safetensors(&cpu, &tmp).map_err(|e| io_failure("write", &tmp, e, span))?;
    std::fs::rename(&tmp, &data).map_err(|e| io_failure("rename", &tmp, e, span))?;
    let meta = write_sidecar(dir, sidecar).map_err(|e| fail(e, span))?;
    prune(dir, keep);
    Ok(meta)
}

/// A checkpoint read back: its sidecar and named tensors.
pub type Saved = (Sidecar, Vec<(String, Tensor)>);

/// The newest complete checkpoint in `dir`.
pub fn latest(dir: &Path, span: Span) -> Result<Option<Saved>, Diagnostic> {
    let Some((side, data)) = latest_sidecar(dir).map_err(|e| fail(e, span))? else {
        return Ok(None);
    };
    let tensors =
        Tensor::read_safetensors(&data).map_err(|e| io_failure("read", &data, e, span))?;
    Ok(Some((side, tensors)))
}
