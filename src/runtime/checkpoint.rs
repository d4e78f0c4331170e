//! Checkpoints: weights, buffers and optimizer state in safetensors, with a YAML sidecar holding
//! the position in training, the plan's fingerprint and the tensors file's checksum
//! (`kiln::rundir::checkpoint`, which owns the index). Written atomically (temporary file, then
//! rename; the sidecar last, so a sidecar always names a complete checkpoint), keeping the last
//! K; read back from the newest one whose checksum still holds.

use std::path::{Path, PathBuf};

use tch::Tensor;

use kiln::diagnostic::problem::{RunStage, Running};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::rundir::checkpoint::{
    checksum, newest_first, prune, tensors_name, write_sidecar, Damaged,
};
use kiln::span::Span;

pub use kiln::rundir::{Fingerprint, Position, Sidecar};

/// A K0509 failure at `span`: `what` could not be done to `path`.
fn io_failure(what: &str, path: &Path, e: impl std::fmt::Display, span: Span) -> Diagnostic {
    Problem::Running(Running::RunIo {
        span,
        action: what.to_string(),
        path: Some(path.to_path_buf()),
        error: e.to_string(),
        stage: RunStage::Checkpoint,
    })
    .diagnostic()
}

/// A K0509 failure at `span` from the run directory's own code.
fn fail(e: kiln::rundir::Error, span: Span) -> Diagnostic {
    io_failure(e.op.verb(), &e.path, e.detail, span)
}

/// Writes a checkpoint into `dir` and removes all but the newest `keep`. A failed write leaves
/// no temporary file behind and the older checkpoints as they were.
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
    let written = write_tensors(&tmp, &data, tensors, span);
    let (tensors_bytes, tensors_crc32) = match written {
        Ok(sum) => sum,
        Err(d) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(d);
        }
    };
    std::fs::rename(&tmp, &data).map_err(|e| io_failure("rename", &tmp, e, span))?;
    let side = Sidecar {
        tensors_bytes,
        tensors_crc32,
        ..sidecar.clone()
    };
    let meta = write_sidecar(dir, &side).map_err(|e| fail(e, span))?;
    prune(dir, keep);
    Ok(meta)
}

/// Writes a run's final weights (`state_dict`, the model's parameters and buffers by their
/// PyTorch names) into the run directory `dir` as the next version of
/// [`kiln::rundir::weights`], with `sidecar` (the run's position and fingerprint) beside them;
/// nothing is overwritten, and a failed write leaves no temporary file behind.
pub fn write_final(
    dir: &Path,
    sidecar: &Sidecar,
    state_dict: &[(String, Tensor)],
    span: Span,
) -> Result<PathBuf, Diagnostic> {
    let name = kiln::rundir::weights::WEIGHTS;
    let data = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let published = write_tensors(&tmp, &data, state_dict, span).and_then(|_| {
        kiln::rundir::weights::publish(dir, &tmp, sidecar).map_err(|e| fail(e, span))
    });
    if published.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    published
}

/// Writes the tensors to `tmp` (on their way to `data`); returns the file's size and checksum.
fn write_tensors(
    tmp: &Path,
    data: &Path,
    tensors: &[(String, Tensor)],
    span: Span,
) -> Result<(u64, String), Diagnostic> {
    let cpu: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, t)| t.f_to_device(tch::Device::Cpu).map(|t| (n.clone(), t)))
        .collect::<Result<_, _>>()
        .map_err(|e| io_failure("copy tensors for", data, e, span))?;
    Tensor::write_safetensors(&cpu, tmp).map_err(|e| io_failure("write", tmp, e, span))?;
    checksum(tmp).map_err(|e| io_failure("read back", tmp, e, span))
}

/// A checkpoint read back: its sidecar and named tensors.
pub type Saved = (Sidecar, Vec<(String, Tensor)>);

/// The newest intact checkpoint in `dir`, and the newer ones found damaged (their checksum does
/// not hold, or they cannot be read).
pub fn latest(dir: &Path) -> (Option<Saved>, Vec<Damaged>) {
    let mut damaged = Vec::new();
    for found in newest_first(dir) {
        match found {
            Ok((side, data)) => match Tensor::read_safetensors(&data) {
                Ok(tensors) => return (Some((side, tensors)), damaged),
                Err(e) => damaged.push(Damaged {
                    sidecar: dir.join(format!(
                        "{}.yaml",
                        kiln::rundir::checkpoint::stem(side.position.step)
                    )),
                    reason: format!("`{}` cannot be read: {e}", side.tensors),
                }),
            },
            Err(d) => damaged.push(d),
        }
    }
    (None, damaged)
}
