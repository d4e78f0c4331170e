//! `report.yaml`: what a finished run did, for `kiln report`, `kiln compare` and people.

use serde::{Deserialize, Serialize};

use super::{MetricLine, PhaseKind, Segment};

/// The report of one run. Every field has a default when read, so reports written by older or
/// newer versions of Kiln still read.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Report {
    /// Experiment name.
    pub experiment: String,
    /// Sweep values of the trial, as `(name, value)`; written as a mapping in sweep order (left
    /// out without a sweep), read from a mapping or from the `[name, value]` pairs older
    /// versions wrote.
    #[serde(with = "pairs", skip_serializing_if = "Vec::is_empty")]
    pub trial: Vec<(String, String)>,
    /// Kiln's version.
    pub kiln: String,
    /// libtorch's version.
    pub torch: String,
    /// Devices the model ran on.
    pub devices: Vec<String>,
    /// FNV-1a hash of the experiment's source files, to tell configurations apart.
    pub config_hash: String,
    /// Parameters.
    pub params: u64,
    /// Steps, epochs, final losses and metrics, throughput, data wait, early stopping.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Wall seconds of the run.
    pub wall_seconds: f64,
    /// Parts of the experiment this version does not apply yet.
    pub notes: Vec<String>,
    /// Each time the run was resumed: from which step, with which version of the experiment
    /// and which changed settings. Empty for a run that ran in one go.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resumed: Vec<Segment>,
    /// Per-epoch metrics (the lines of `metrics.jsonl`).
    pub metrics: Vec<MetricLine>,
    /// What compression did, when the experiment compresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compressed>,
    /// Every setting of the experiment as it ran, `extends` resolved and sweeps substituted:
    /// a mapping of paths to values (`data.batch: '64'`) in the experiment's order, which
    /// `kiln compare` compares. Left out by older versions.
    #[serde(with = "pairs", skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<(String, String)>,
}

/// The compressed model against the uncompressed one: the uncompressed model is the trained
/// one in fp32 before the compression applied after training (pruning after training,
/// quantization, the shrinking of structured pruning); masks applied during training are in
/// both.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Compressed {
    /// Each compressed layer.
    pub layers: Vec<CompressedLayer>,
    /// Bytes of every weight and bias of the model, uncompressed.
    pub bytes_before: u64,
    /// Bytes of every weight and bias of the compressed model, as exported.
    pub bytes_after: u64,
    /// Validation metrics before and after.
    pub val: Option<BeforeAfter<Eval>>,
    /// Test metrics before and after.
    pub test: Option<BeforeAfter<Eval>>,
    /// The steps whose weights `val` and `test` evaluated: before, the end of training (where
    /// the compression applied after it starts); after, the end of the run, after any
    /// fine-tuning. Left out by older versions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<BeforeAfter<u64>>,
    /// Inference latency of the whole model at each batch size measured.
    pub latency: Vec<Latency>,
}

/// One value before and after compression.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
pub struct BeforeAfter<T> {
    /// Uncompressed.
    pub before: T,
    /// Compressed.
    pub after: T,
}

/// One compressed layer.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct CompressedLayer {
    /// The layer's qualified name.
    pub name: String,
    /// What was done to it, as the language says it (`int8 per_channel`, `pruned 50%`).
    pub method: String,
    /// Fraction of its weight entries that are zero or removed.
    pub sparsity: f64,
    /// Its weight shape before.
    pub shape_before: Vec<i64>,
    /// Its weight shape after (smaller when structured pruning removed units).
    pub shape_after: Vec<i64>,
    /// Bytes of its weights and bias before.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
}

/// Forward latency of the model in evaluation mode.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct Latency {
    /// Samples per forward.
    pub batch: u64,
    /// Median milliseconds per forward, uncompressed.
    pub before_ms: f64,
    /// Median milliseconds per forward, compressed.
    pub after_ms: f64,
}

impl Latency {
    /// How many times faster the compressed model is (below 1: slower).
    pub fn speedup(&self) -> f64 {
        self.before_ms / self.after_ms.max(1e-12)
    }
}

impl Report {
    /// The trial's sweep values as `name=value`, separated by `sep`.
    pub fn trial_label(&self, sep: &str) -> String {
        self.trial
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(sep)
    }
}

/// What a finished run did: the figures of `report.yaml`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Outcome {
    /// Optimizer steps taken.
    pub steps: u64,
    /// Epochs completed (a partial last epoch counts).
    pub epochs: u64,
    /// Final training loss (mean over the last epoch).
    pub train_loss: f64,
    /// Final validation metrics, when there is a validation split.
    pub val: Option<Eval>,
    /// Final test metrics, when there is a test split.
    pub test: Option<Eval>,
    /// Training samples per second over the run.
    pub samples_per_s: f64,
    /// Fraction of step time spent waiting for data.
    #[serde(rename = "data_wait_fraction")]
    pub data_wait: f64,
    /// Whether early stopping ended the run or one of its phases (`phases` says which).
    pub stopped_early: bool,
    /// `--max-steps N` stopped the run at step `N`, before its length: resumed, it goes on to
    /// its length from the checkpoint of that step.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub max_steps_reached: bool,
    /// The phases of a run that has more than one (training, then fine-tuning or rounds of
    /// iterative pruning), as they ran; empty for a run of one phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseRun>,
    /// What the training achieved of its device: FLOP/s against the plan's FLOPs, and on CUDA
    /// the GPU's busy fraction and peak memory beside the plan's estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Compute>,
}

/// What a run achieved of its device (`report.yaml`'s `compute`).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct Compute {
    /// The device the batches went to (`cpu`, `cuda:0`).
    pub device: String,
    /// The plan's FLOPs of one optimizer step: three times the forward FLOPs of the batch.
    pub step_flops: u64,
    /// The plan's FLOPs per training sample times the samples per second, in TFLOP/s.
    pub tflop_per_s: f64,
    /// CUDA: the mean fraction of time a kernel ran on the GPU, sampled through NVML every
    /// 100 ms from the sixth step to the end of training.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy: Option<f64>,
    /// The NVML samples `gpu_busy` is the mean of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_busy_samples: Option<u64>,
    /// CUDA: the most bytes allocated at once on the device during training (the caching
    /// allocator's peak, as `torch.cuda.max_memory_allocated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The plan's memory estimate for the device (`kiln plan`'s "memory per device").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_memory_bytes: Option<u64>,
    /// Why a CUDA figure is missing (no NVML on the machine, a run too short to sample).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One phase as it ran.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseRun {
    /// The phase.
    pub name: PhaseKind,
    /// The round's number (1-based), for a round of iterative pruning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
    /// The steps taken when it started.
    pub from_step: u64,
    /// The steps taken when it ended (or when the run stopped, for one that did not end).
    pub to_step: u64,
    /// Whether early stopping ended it.
    pub stopped_early: bool,
}

/// Metrics of an evaluation.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[serde(default)]
pub struct Eval {
    /// Mean loss.
    pub loss: f64,
    /// Top-1 accuracy, for class targets.
    pub accuracy: Option<f64>,
    /// The top-k accuracy, when asked for.
    pub top_k: Option<TopK>,
    /// Mean absolute error over the split, when asked for with a regression loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mae: Option<f64>,
    /// Root mean squared error over the split (the mean over outputs), when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rmse: Option<f64>,
    /// The coefficient of determination over the split (the mean over outputs), when asked
    /// for; NaN for fewer than 2 samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r2: Option<f64>,
}

impl Eval {
    /// The regression metrics measured, by name, in the order `mae`, `rmse`, `r2`.
    pub fn regression(&self) -> Vec<(&'static str, f64)> {
        [("mae", self.mae), ("rmse", self.rmse), ("r2", self.r2)]
            .into_iter()
            .filter_map(|(name, v)| v.map(|v| (name, v)))
            .collect()
    }
}

/// A top-k accuracy: the fraction of targets among the `k` highest scores. Written as
/// `{k: 3, accuracy: 0.9}`; the `[3, 0.9]` of older versions still reads.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
#[serde(from = "TopKRead")]
pub struct TopK {
    /// How many of the highest scores count.
    pub k: u64,
    /// The fraction of targets among them.
    pub accuracy: f64,
}

/// The forms a [`TopK`] is read from.
#[derive(Deserialize)]
#[serde(untagged)]
enum TopKRead {
    Named { k: u64, accuracy: f64 },
    Pair(u64, f64),
}

impl From<TopKRead> for TopK {
    fn from(r: TopKRead) -> TopK {
        match r {
            TopKRead::Named { k, accuracy } | TopKRead::Pair(k, accuracy) => TopK { k, accuracy },
        }
    }
}

/// `(name, value)` pairs written as a mapping, in order, and read from a mapping or from the
/// `[name, value]` lists older versions wrote.
pub(super) mod pairs {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::ser::{SerializeMap, Serializer};

    pub fn serialize<S: Serializer>(pairs: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(pairs.len()))?;
        for (k, v) in pairs {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = Vec<(String, String)>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping of names to values, or a list of [name, value] pairs")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(out)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = seq.next_element()? {
                    out.push(pair);
                }
                Ok(out)
            }

            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Vec::new())
            }
        }
        d.deserialize_any(Pairs)
    }
}
