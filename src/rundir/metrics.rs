//! `metrics.jsonl` and `steps.jsonl`: one JSON object a line.
//!
//! JSON has no NaN or infinity: serde_json writes a non-finite number as `null`, and the float
//! fields here read `null` back as NaN, so a diverged run's records still read.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::TopK;

/// Reads a float that may be `null` (a non-finite value written to JSON) as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// One line of `metrics.jsonl`, told apart by its `split` field.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "split", rename_all = "lowercase")]
pub enum MetricLine {
    /// The end of a training epoch.
    Train(EpochRecord),
    /// An evaluation on the validation split.
    Val(EvalRecord),
}

impl MetricLine {
    /// The epoch the line belongs to (1-based for training lines, as written).
    pub fn epoch(&self) -> u64 {
        match self {
            MetricLine::Train(r) => r.epoch,
            MetricLine::Val(r) => r.epoch,
        }
    }

    /// The optimizer steps taken when it was written.
    pub fn step(&self) -> u64 {
        match self {
            MetricLine::Train(r) => r.step,
            MetricLine::Val(r) => r.step,
        }
    }
}

/// One line of training metrics, written at the end of each epoch.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EpochRecord {
    /// Epoch number (1-based).
    pub epoch: u64,
    /// Optimizer steps so far.
    pub step: u64,
    /// Learning rate of the last step.
    #[serde(deserialize_with = "nan_if_null")]
    pub lr: f64,
    /// Mean training loss over the epoch.
    #[serde(deserialize_with = "nan_if_null")]
    pub train_loss: f64,
    /// Training accuracy over the epoch, for class targets.
    pub train_accuracy: Option<f64>,
    /// Wall seconds of the epoch (evaluations within it included), over every part of a run
    /// that was interrupted and resumed in it (the steps taken again after the resume counted
    /// once).
    #[serde(deserialize_with = "nan_if_null")]
    pub seconds: f64,
    /// Training samples of the epoch per second of `seconds`: both cover the same steps.
    #[serde(deserialize_with = "nan_if_null")]
    pub samples_per_s: f64,
    /// The phase the epoch belongs to, outside the written training (absent there, and in
    /// records written before phases were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PhaseTag>,
}

/// A phase of a run: the written training, fine-tuning after pruning, or a round of iterative
/// pruning.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    /// The training as written.
    Train,
    /// Fine-tuning after pruning (`after(finetune: D)`).
    Finetune,
    /// A round of iterative pruning (`iterative(rounds: R, ...)`).
    Round,
}

impl PhaseKind {
    /// The phase's name, as records and reports write it.
    pub fn word(self) -> &'static str {
        match self {
            PhaseKind::Train => "train",
            PhaseKind::Finetune => "finetune",
            PhaseKind::Round => "round",
        }
    }
}

/// Where a record stands in a phase other than the written training: written as
/// `"phase": {"name": "finetune", "epoch": 1, "epochs": 3}`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseTag {
    /// The phase.
    pub name: PhaseKind,
    /// The round's number (1-based), for a round of iterative pruning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// The epoch within the phase (1-based).
    pub epoch: u64,
    /// The phase's length in epochs, when it is a whole number of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
}

impl std::fmt::Display for PhaseTag {
    /// `finetune 1/3`, `round 2 epoch 4/9`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let of = self.epochs.map_or(String::new(), |n| format!("/{n}"));
        match self.round {
            Some(r) => write!(f, "{} {r} epoch {}{of}", self.name.word(), self.epoch),
            None => write!(f, "{} {}{of}", self.name.word(), self.epoch),
        }
    }
}

/// One evaluation on the validation split. Written with its top-k accuracy under the key
/// `top_<k>_accuracy`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(from = "EvalLine", into = "EvalLine")]
pub struct EvalRecord {
    /// The epoch it was taken in (1-based): the epoch in progress, or the one just finished
    /// for an evaluation between epochs.
    pub epoch: u64,
    /// The optimizer steps taken when it was computed: the weights it evaluated.
    pub step: u64,
    /// Mean loss.
    pub loss: f64,
    /// Top-1 accuracy, for class targets.
    pub accuracy: Option<f64>,
    /// The top-k accuracy, when asked for.
    pub top_k: Option<TopK>,
    /// Mean absolute error, when asked for.
    pub mae: Option<f64>,
    /// Root mean squared error, when asked for.
    pub rmse: Option<f64>,
    /// The coefficient of determination, when asked for.
    pub r2: Option<f64>,
    /// The phase it belongs to, outside the written training.
    pub phase: Option<PhaseTag>,
}

impl EvalRecord {
    /// The evaluation's metrics, without its epoch and step.
    pub fn eval(&self) -> super::Eval {
        super::Eval {
            loss: self.loss,
            accuracy: self.accuracy,
            top_k: self.top_k,
            mae: self.mae,
            rmse: self.rmse,
            r2: self.r2,
        }
    }
}

/// Reads a float that is there but may be `null` (a non-finite value written to JSON) as
/// `Some(NaN)`; a field that is not there stays `None` (its `default`).
fn some_nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    nan_if_null(d).map(Some)
}

/// [`EvalRecord`] as it is written.
#[derive(Serialize, Deserialize)]
struct EvalLine {
    epoch: u64,
    step: u64,
    #[serde(deserialize_with = "nan_if_null")]
    loss: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    accuracy: Option<f64>,
    #[serde(
        default,
        deserialize_with = "some_nan_if_null",
        skip_serializing_if = "Option::is_none"
    )]
    mae: Option<f64>,
    #[serde(
        default,
        deserialize_with = "some_nan_if_null",
        skip_serializing_if = "Option::is_none"
    )]
    rmse: Option<f64>,
    #[serde(
        default,
        deserialize_with = "some_nan_if_null",
        skip_serializing_if = "Option::is_none"
    )]
    r2: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    phase: Option<PhaseTag>,
    /// `top_<k>_accuracy`.
    #[serde(flatten)]
    top: BTreeMap<String, Option<f64>>,
}

impl From<EvalLine> for EvalRecord {
    fn from(l: EvalLine) -> EvalRecord {
        let top_k = l.top.iter().find_map(|(key, value)| {
            let k = key
                .strip_prefix("top_")?
                .strip_suffix("_accuracy")?
                .parse()
                .ok()?;
            Some(TopK {
                k,
                accuracy: value.unwrap_or(f64::NAN),
            })
        });
        EvalRecord {
            epoch: l.epoch,
            step: l.step,
            loss: l.loss,
            accuracy: l.accuracy,
            top_k,
            mae: l.mae,
            rmse: l.rmse,
            r2: l.r2,
            phase: l.phase,
        }
    }
}

impl From<EvalRecord> for EvalLine {
    fn from(r: EvalRecord) -> EvalLine {
        EvalLine {
            epoch: r.epoch,
            step: r.step,
            loss: r.loss,
            accuracy: r.accuracy,
            mae: r.mae,
            rmse: r.rmse,
            r2: r.r2,
            phase: r.phase,
            top: r
                .top_k
                .map(|t| (format!("top_{}_accuracy", t.k), Some(t.accuracy)))
                .into_iter()
                .collect(),
        }
    }
}

/// One line of `steps.jsonl`: an optimizer step's loss and learning rate.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct StepRecord {
    /// The step (1-based).
    pub step: u64,
    /// Its loss (`null` in the file when not finite).
    #[serde(deserialize_with = "nan_if_null")]
    pub loss: f64,
    /// Its learning rate.
    #[serde(deserialize_with = "nan_if_null")]
    pub lr: f64,
}
