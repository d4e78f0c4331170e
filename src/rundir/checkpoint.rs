//! The checkpoint index: `checkpoints/step-NNNNNNNNN.yaml`, a [`Sidecar`] holding the position in
//! training, the plan's fingerprint and the size and CRC-32 of its tensors file,
//! `step-NNNNNNNNN.safetensors` (written by the runtime). The sidecar is written last, so a
//! sidecar always names a complete checkpoint; the checksum tells whether it is still intact.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{write_yaml, Error, Eval};

/// What a checkpoint was made with, compared when a run resumes from it. Each entry is
/// `(what, value)`, in a fixed order, so differences can be named one by one; written as
/// mappings in that order (older versions wrote `[what, value]` lists, which still read).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Fingerprint {
    /// Each layer as `name kind [output shape] params`.
    pub layers: Vec<String>,
    /// What changes what the run computes (optimizer, loss, data, split, seed, batch, shuffle,
    /// precision, strategy, compression, ...): a resume that changes one is refused.
    #[serde(with = "super::report::pairs")]
    pub computes: Vec<(String, String)>,
    /// What a resume may change (learning rate and its schedule, length, evaluation,
    /// checkpoints, early stopping): changes are recorded in the run's history.
    #[serde(with = "super::report::pairs")]
    pub settings: Vec<(String, String)>,
}

/// Where training stood when the checkpoint was written.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
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
    /// The class targets not ignored so far this epoch, in samples (a sample of `S` tokens
    /// counts `1/S` per token): what the training accuracy divides by.
    pub epoch_counted: f64,
    /// Best watched metric for early stopping.
    pub best: Option<f64>,
    /// Evaluations since it improved.
    pub bad_evals: u64,
    /// Lines of `metrics.jsonl` written up to this point.
    pub metrics_lines: u64,
    /// The step of the last evaluation recorded.
    pub last_eval_step: Option<u64>,
    /// The mean training loss of the last epoch recorded (or of the epoch so far, when the run
    /// stopped within it).
    pub train_loss: f64,
    /// Seconds spent training so far, over every part of the run.
    pub seconds: f64,
    /// `seconds` when the epoch in progress began, so that an epoch's time and samples per
    /// second cover all its steps, those before an interruption included; `None` in checkpoints
    /// of older versions.
    pub epoch_began: Option<f64>,
    /// Training samples seen so far, over every part of the run.
    pub samples: f64,
    /// Seconds spent waiting for data so far.
    pub wait_seconds: f64,
    /// The state of a `reduce_on_plateau` schedule; `None` for other schedules.
    pub plateau: Option<PlateauState>,
    /// Where each phase begun so far started, the current one last; empty in checkpoints
    /// written before phases were recorded (the runtime infers them from the step).
    pub phases: Vec<PhaseMark>,
    /// The uncompressed model's metrics, taken just before pruning after training; `None`
    /// until then.
    pub uncompressed: Option<Measured>,
    /// The optimizer's own count of updates (Adam's bias correction counts them): fewer than
    /// `step` after fp16 steps skipped for overflow, or after an iterative round's rewind
    /// started the optimizer afresh; `None` in checkpoints written before it was recorded.
    pub optimizer_steps: Option<u64>,
}

/// The start of one phase of a run (the written training, fine-tuning, a round of iterative
/// pruning), and whether early stopping has ended it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(default)]
pub struct PhaseMark {
    /// The steps taken when it started.
    pub step: u64,
    /// The epochs completed when it started (every phase starts an epoch).
    pub epoch: u64,
    /// Early stopping ended it: it ends at the end of the current step's epoch.
    pub stopped: bool,
}

/// Validation and test metrics of one model.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct Measured {
    /// The step whose weights were evaluated (0 in checkpoints of older versions).
    pub step: u64,
    /// On the validation split, when there is one.
    pub val: Option<Eval>,
    /// On the test split, when there is one.
    pub test: Option<Eval>,
}

/// Where a `reduce_on_plateau` schedule stands, as `ReduceLROnPlateau`'s state holds it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct PlateauState {
    /// The current learning rate.
    pub lr: f64,
    /// The best metric so far; `None` before the first evaluation.
    pub best: Option<f64>,
    /// Evaluations since the metric last improved.
    pub bad: u64,
    /// Evaluations left in the cooldown after a reduction.
    pub cooldown: u64,
}

/// One part of a run: from its start or a resume to the next resume or the end.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Segment {
    /// The step it started from.
    pub from_step: u64,
    /// The version of the experiment it ran (`experiment.exp`, `experiment-2.exp`, ...).
    pub experiment: String,
    /// The settings it changed, as `what: was → now`.
    pub changes: Vec<String>,
    /// Whether it extended a run that had finished (a longer length given to `--resume`),
    /// rather than resuming an interrupted one.
    #[serde(skip_serializing_if = "is_false")]
    pub extended: bool,
}

/// Whether `b` is false: a segment that is not an extension says nothing about it.
fn is_false(b: &bool) -> bool {
    !*b
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
    /// The tensors file's size in bytes.
    #[serde(default)]
    pub tensors_bytes: u64,
    /// The CRC-32 of the tensors file, as 8 hex digits.
    #[serde(default)]
    pub tensors_crc32: String,
    /// The parts of the run up to this checkpoint, oldest first.
    #[serde(default)]
    pub history: Vec<Segment>,
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

/// The size and CRC-32 (8 hex digits) of the file at `path`, read in pieces.
pub fn checksum(path: &Path) -> std::io::Result<(u64, String)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((bytes, format!("{:08x}", hasher.finalize())))
}

/// A checkpoint found damaged, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Damaged {
    /// Its sidecar.
    pub sidecar: PathBuf,
    /// What is wrong, in a few words.
    pub reason: String,
}

/// Checks the checkpoint whose sidecar is `meta`; returns it with its tensors file's path.
pub fn verify(meta: &Path) -> Result<(Sidecar, PathBuf), Damaged> {
    let damaged = |reason: String| Damaged {
        sidecar: meta.to_path_buf(),
        reason,
    };
    let side: Sidecar = super::read_yaml(meta).map_err(|e| damaged(e.to_string()))?;
    let dir = meta.parent().unwrap_or(Path::new("."));
    let tensors = dir.join(&side.tensors);
    let (bytes, crc) = checksum(&tensors)
        .map_err(|e| damaged(format!("cannot read `{}`: {e}", tensors.display())))?;
    if side.tensors_crc32.is_empty() {
        return Ok((side, tensors));
    }
    if bytes != side.tensors_bytes {
        return Err(damaged(format!(
            "`{}` has {bytes} bytes, its sidecar says {}",
            side.tensors, side.tensors_bytes
        )));
    }
    if crc != side.tensors_crc32 {
        return Err(damaged(format!(
            "`{}` has CRC-32 {crc}, its sidecar says {}",
            side.tensors, side.tensors_crc32
        )));
    }
    Ok((side, tensors))
}

/// The checkpoints of `dir`, newest first, each verified: `Ok` for an intact one, `Err` for a
/// damaged one. A reader takes the first intact one and warns about the damaged ones before it.
pub fn newest_first(dir: &Path) -> impl Iterator<Item = Result<(Sidecar, PathBuf), Damaged>> {
    list(dir).into_iter().rev().map(|meta| verify(&meta))
}

/// The newest intact checkpoint in `dir`: its sidecar and the path of its tensors file, or
/// `None` when there is none.
pub fn latest(dir: &Path) -> Option<(Sidecar, PathBuf)> {
    newest_first(dir).find_map(Result::ok)
}
