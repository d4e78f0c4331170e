//! The checkpoint index: `checkpoints/step-NNNNNNNNN.yaml`, a [`Sidecar`] holding the position in
//! training and the plan's fingerprint, beside `step-NNNNNNNNN.safetensors` (written by the
//! runtime). The sidecar is written last, so a sidecar always names a complete checkpoint.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{write_yaml, Error};

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
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
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

/// The file stem of the checkpoint taken at `step`: `step-000000042`.
pub fn stem(step: u64) -> String {
    format!("step-{step:09}")
}

/// The tensors file of the checkpoint taken at `step`.
pub fn tensors_name(step: u64) -> String {
    format!("{}.safetensors", stem(step))
}

/// Writes `sidecar` as the index entry of its checkpoint into `dir`, atomically, naming the
/// tensors file of its step; returns its path.
pub fn write_sidecar(dir: &Path, sidecar: &Sidecar) -> Result<PathBuf, Error> {
    let step = sidecar.position.step;
    let mut side = sidecar.clone();
    side.tensors = tensors_name(step);
    let name = format!("{}.yaml", stem(step));
    write_yaml(dir, &name, &side)?;
    Ok(dir.join(name))
}

/// The sidecars in `dir`, oldest first (none when `dir` does not exist).
pub fn list(dir: &Path) -> Vec<PathBuf> {
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

/// Removes all but the newest `keep` checkpoints (at least one), sidecar and tensors.
pub fn prune(dir: &Path, keep: u64) {
    let all = list(dir);
    let keep = usize::try_from(keep.max(1)).unwrap_or(usize::MAX);
    for old in all.iter().take(all.len().saturating_sub(keep)) {
        let _ = std::fs::remove_file(old.with_extension("safetensors"));
        let _ = std::fs::remove_file(old);
    }
}

/// The newest sidecar in `dir` and the path of its tensors file, or `None` when there is none.
pub fn latest(dir: &Path) -> Result<Option<(Sidecar, PathBuf)>, Error> {
    let Some(meta) = list(dir).pop() else {
        return Ok(None);
    };
    let side: Sidecar = super::read_yaml(&meta)?;
    let tensors = dir.join(&side.tensors);
    Ok(Some((side, tensors)))
}
