//! Checkpoints: weights, buffers and optimizer state in safetensors, with a YAML sidecar holding
//! the position in training and the plan's fingerprint. Written atomically (temporary file, then
//! rename; the sidecar last, so a sidecar always names a complete checkpoint), keeping the last K.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tch::Tensor;

use kiln::diagnostic::Code;
use kiln::diagnostic::Diagnostic;
use kiln::span::Span;

/// What must match between a checkpoint and the experiment resuming from it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Fingerprint {
    /// Each layer as `name kind [output shape] params`.
    pub layers: Vec<String>,
    /// The optimizer's name.
    pub optimizer: String,
    /// Processes taking part.
    pub world_size: u64,
}

/// Where training stood when the checkpoint was written.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Position {
    /// Optimizer steps taken.
    pub step: u64,
    /// The epoch in progress (0-based).
    pub epoch: u64,
    /// Batches of that epoch already consumed.
    pub batch_in_epoch: u64,
    /// Sum of training losses so far this epoch (times batch size).
    pub epoch_loss_sum: f64,
    /// Correct training predictions so far this epoch.
    pub epoch_correct: f64,
    /// Training samples seen so far this epoch.
    pub epoch_seen: f64,
    /// Best watched metric for early stopping.
    pub best: Option<f64>,
    /// Evaluations since it improved.
    pub bad_evals: u64,
    /// Lines of `metrics.jsonl` written up to this point.
    pub metrics_lines: u64,
}

/// The sidecar of one checkpoint.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Sidecar {
    /// The Kiln version that wrote it.
    pub kiln: String,
    /// The plan's fingerprint.
    pub fingerprint: Fingerprint,
    /// Where training stood.
    pub position: Position,
    /// The tensors file, beside the sidecar.
    pub tensors: String,
}

fn io_failure(what: &str, path: &Path, e: impl std::fmt::Display, span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::RunIo,
        span,
        format!("cannot {what} `{}`: {e}", path.display()),
    )
    .label("while checkpointing this experiment")
    .help("check that the run directory is writable and the disk has room")
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
    let stem = format!("step-{:09}", sidecar.position.step);
    let data = dir.join(format!("{stem}.safetensors"));
    let tmp = dir.join(format!(".{stem}.safetensors.tmp"));
    let cpu: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, t)| t.f_to_device(tch::Device::Cpu).map(|t| (n.clone(), t)))
        .collect::<Result<_, _>>()
        .map_err(|e| io_failure("copy tensors for", &data, e, span))?;
    Tensor::write_safetensors(&cpu, &tmp).map_err(|e| io_failure("write", &tmp, e, span))?;
    std::fs::rename(&tmp, &data).map_err(|e| io_failure("rename", &tmp, e, span))?;
    let mut side = sidecar.clone();
    side.tensors = format!("{stem}.safetensors");
    let yaml = serde_yaml::to_string(&side).map_err(|e| io_failure("encode", &data, e, span))?;
    let meta = dir.join(format!("{stem}.yaml"));
    let tmp = dir.join(format!(".{stem}.yaml.tmp"));
    std::fs::write(&tmp, yaml).map_err(|e| io_failure("write", &tmp, e, span))?;
    std::fs::rename(&tmp, &meta).map_err(|e| io_failure("rename", &tmp, e, span))?;
    let all = list(dir);
    for old in all
        .iter()
        .take(all.len().saturating_sub(keep.max(1) as usize))
    {
        let _ = std::fs::remove_file(old.with_extension("safetensors"));
        let _ = std::fs::remove_file(old);
    }
    Ok(meta)
}

/// The sidecars in `dir`, oldest first.
fn list(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "yaml")
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A checkpoint read back: its sidecar and named tensors.
pub type Saved = (Sidecar, Vec<(String, Tensor)>);

/// The newest complete checkpoint in `dir`.
pub fn latest(dir: &Path, span: Span) -> Result<Option<Saved>, Diagnostic> {
    let Some(meta) = list(dir).pop() else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&meta).map_err(|e| io_failure("read", &meta, e, span))?;
    let side: Sidecar =
        serde_yaml::from_str(&text).map_err(|e| io_failure("parse", &meta, e, span))?;
    let data = dir.join(&side.tensors);
    let tensors =
        Tensor::read_safetensors(&data).map_err(|e| io_failure("read", &data, e, span))?;
    Ok(Some((side, tensors)))
}
