//! The data pipeline: sources, generators, splits, normalisation and the targets.

use serde::Serialize;

use super::{Layout, Shape};
use crate::span::Span;

/// The data pipeline.
#[derive(Clone, Debug)]
pub struct Data {
    /// Where samples come from.
    pub source: Source,
    /// The `source` statement, for runtime data errors.
    pub source_span: Span,
    /// Fractions of the samples for each split.
    pub split: Split,
    /// Input scaling of `source` (see [`HeldOut::scale`]).
    pub scale: Option<f64>,
    /// How `source`'s samples are laid out (`layout: channels_last`).
    pub layout: Layout,
    /// The validation split's own source, when `split` names one instead of a fraction.
    pub val: Option<HeldOut>,
    /// The test split's own source, when `split` names one instead of a fraction.
    pub test: Option<HeldOut>,
    /// Global batch size.
    pub batch: u64,
    /// The `batch` statement, for out-of-memory reports.
    pub batch_span: Span,
    /// Whether an epoch leaves out its last, partial training batch (`drop_last`, false by
    /// default as in PyTorch's `DataLoader`).
    pub drop_last: bool,
    /// Where the loaded splits live while training (`placement`).
    pub placement: DataPlacement,
    /// Samples per evaluation batch (`eval_batch`, the training `batch` by default).
    pub eval_batch: u64,
    /// Whether to reshuffle the training split every epoch.
    pub shuffle: bool,
    /// Per-channel (or scalar) normalisation of inputs.
    pub normalize: Option<Normalize>,
    /// What a target is.
    pub targets: Targets,
    /// The class label the loss ignores (its `ignore_index`), which the data may hold besides
    /// the classes.
    pub ignore_label: Option<i64>,
    /// The vocabulary of the model's first layer, an `embedding`, when a file source feeds it
    /// token ids: the runtime refuses ids outside `[0, vocab)`.
    pub token_vocab: Option<u64>,
    /// What `kiln check` read from the data files' headers; `None` for synthetic data and for
    /// files it could not read (absent here, or a loader that reads no data files).
    pub read: Option<ReadData>,
}

impl Data {
    /// The number of samples, when known: a synthetic source's `count`, or the count `kiln
    /// check` read from the files' headers (`None` when the files were not read, or when a CSV
    /// file is too large to count its rows).
    pub fn samples(&self) -> Option<u64> {
        match &self.source {
            Source::Synthetic { count, .. } => Some(*count),
            _ => self.read.as_ref().and_then(|r| r.samples),
        }
    }

    /// Optimizer steps in one epoch of `train` training samples: see [`steps_per_epoch`].
    pub fn steps_per_epoch(&self, train: u64) -> u64 {
        steps_per_epoch(train, self.batch, self.drop_last)
    }

    /// Bytes of every sample as the runtime holds it once loaded (inputs as float32, int64
    /// token ids when `ids`, or an image folder's bytes, of the model's input shape `input`;
    /// class targets as int64, values as float32), when the sample count and the targets are
    /// known.
    pub fn bytes(&self, input: &[i64], ids: bool) -> Option<u64> {
        let values = |n: i64, size: u64| (n.max(0) as u64).saturating_mul(size);
        // A stream is held once, one int64 per token: the windows' ids and their targets.
        if let Some(block) = self.source.block() {
            return Some(self.samples()?.saturating_add(block).saturating_mul(8));
        }
        let width = match (&self.source, ids) {
            (_, true) => 8,
            (Source::Images { .. }, false) => 1,
            _ => 4,
        };
        let per_input = values(crate::ir::numel(input), width);
        let per_target = match &self.targets {
            Targets::Classes(_) => 8,
            Targets::Values(shape) => values(shape.numel(), 4),
            Targets::Tokens { shape, .. } => values(shape.numel(), 8),
            Targets::Unknown => return None,
        };
        Some(
            self.samples()?
                .saturating_mul(per_input.saturating_add(per_target)),
        )
    }

    /// Whether an epoch of `train` training samples has a batch to train on: with `drop_last`,
    /// a training split smaller than the batch leaves out every (partial) batch.
    pub fn trains_on(&self, train: u64) -> bool {
        !self.drop_last || train >= self.batch
    }

    /// Whether there is a validation split: a fraction of `source`, or its own source.
    pub fn has_val(&self) -> bool {
        self.split.val > 0.0 || self.val.is_some()
    }
}

/// Where the loaded splits live while training: on the device that trains, so that a batch is
/// an `index_select` there with no host work and no copy per step, or in host memory, gathered
/// and copied per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataPlacement {
    /// On the device when it holds the data beside the model's peak (`fits`), else in host
    /// memory.
    Auto,
    /// On the device.
    Device,
    /// In host memory.
    Host,
}

impl DataPlacement {
    /// The words of the language, in the order `kiln check` suggests them.
    pub const WORDS: [&'static str; 3] = ["auto", "device", "host"];

    /// The placement a word names.
    pub fn from_word(word: &str) -> Option<DataPlacement> {
        match word {
            "auto" => Some(DataPlacement::Auto),
            "device" => Some(DataPlacement::Device),
            "host" => Some(DataPlacement::Host),
            _ => None,
        }
    }

    /// Whether the data is kept on a CUDA device: always with `device`, never with `host`;
    /// with `auto`, when the device is known to hold the data beside the model's peak (`fits`:
    /// the plan's figures against the device's capacity, `None` when the capacity is not
    /// known). On the CPU, host memory is the device's: batches are gathered where the data was
    /// loaded either way.
    pub fn on_device(self, fits: Option<bool>) -> bool {
        match self {
            DataPlacement::Device => true,
            DataPlacement::Host => false,
            DataPlacement::Auto => fits == Some(true),
        }
    }
}

/// Batches in one epoch of `samples` samples in batches of `batch`: the last one partial, or
/// left out with `drop_last` (as PyTorch's `DataLoader`). The one count of an epoch's steps:
/// `kiln check`, `kiln run`, `kiln eval`, `kiln export` and the loader all read it.
pub fn steps_per_epoch(samples: u64, batch: u64, drop_last: bool) -> u64 {
    match batch {
        0 => 0,
        _ if drop_last => samples / batch,
        _ => samples.div_ceil(batch),
    }
}

/// A split's own source (`split(val: npy(...))`): all of its samples go to that split, in file
/// order.
#[derive(Clone, Debug)]
pub struct HeldOut {
    /// Where the samples come from.
    pub source: Source,
    /// The source's call, for runtime data errors.
    pub span: Span,
    /// What uint8 inputs are divided by as they are read (`scale: 255`); `None` keeps them
    /// (`scale: none`). By default 255 for IDX files and `None` for every other format.
    pub scale: Option<f64>,
    /// How its samples are laid out (`layout: channels_last`).
    pub layout: Layout,
}

/// What the checker read from the headers of a source's files.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadData {
    /// The number of samples; `None` when it is not known from a bounded read (a large CSV).
    pub samples: Option<u64>,
    /// The per-sample input shape as the file stores it (`[28, 28]` for MNIST).
    pub sample: Vec<u64>,
}

/// Fractions of the data given to each split (they sum to at most 1).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Split {
    /// Training fraction.
    pub train: f64,
    /// Validation fraction.
    pub val: f64,
    /// Test fraction.
    pub test: f64,
}

impl Split {
    /// Samples of `n` in each split, in order train, val, test: `floor(fraction x n)` each, no
    /// more than those left. The checker counts steps and the runtime splits with it.
    ///
    /// A relative tolerance of 1e-12 keeps `0.29 x 100` at 29 despite its rounding in binary.
    pub fn counts(&self, n: u64) -> (u64, u64, u64) {
        let count = |f: f64, left: u64| -> u64 {
            let c = (f.max(0.0) * n as f64 * (1.0 + 1e-12)).floor();
            (c as u64).min(left)
        };
        let train = count(self.train, n);
        let val = count(self.val, n - train);
        let test = count(self.test, n - train - val);
        (train, val, test)
    }
}

/// `(x - mean) / std`, per channel when lists are given.
#[derive(Clone, Debug, Serialize)]
pub struct Normalize {
    /// Means.
    pub mean: Vec<f64>,
    /// Standard deviations.
    pub std: Vec<f64>,
}

/// What the training targets are.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Targets {
    /// Class indices; the number of classes when known.
    Classes(Option<u64>),
    /// Real values of this per-sample shape.
    Values(Shape),
    /// Not known statically (a file source without `classes` or `shape`).
    Unknown,
    /// A class index per token: targets of per-sample shape `shape` (the inputs' shape), each
    /// one of `classes` classes when known; the model gives a score per class for each token,
    /// `[..shape, classes]`.
    Tokens {
        /// The number of classes, when known.
        classes: Option<u64>,
        /// The per-sample shape of the targets.
        shape: Shape,
    },
}

/// Where the samples come from.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Generated samples, as `torch.randn(count, *shape)`.
    Synthetic {
        /// Input generator.
        inputs: Generator,
        /// Target generator.
        targets: Generator,
        /// Number of samples.
        count: u64,
    },
    /// MNIST-format IDX files, optionally gzipped.
    Idx {
        /// Images file.
        images: String,
        /// Labels file.
        labels: String,
    },
    /// Two `.npy` arrays.
    Npy {
        /// Inputs array.
        inputs: String,
        /// Targets array.
        targets: String,
    },
    /// An `.npz` archive with two named arrays.
    Npz {
        /// The archive.
        path: String,
        /// Key of the inputs.
        inputs: String,
        /// Key of the targets.
        targets: String,
    },
    /// A CSV file with one target column.
    Csv {
        /// The file.
        path: String,
        /// The target column's name.
        target: String,
        /// Whether the first row is a header.
        header: bool,
    },
    /// A safetensors file with two named tensors.
    Safetensors {
        /// The file.
        path: String,
        /// Name of the inputs tensor.
        inputs: String,
        /// Name of the targets tensor.
        targets: String,
    },
    /// A Parquet file, or a directory of shards read in name order.
    Parquet {
        /// The file or directory.
        path: String,
        /// The input columns: several of one value each, or one (a list column's values).
        inputs: Vec<String>,
        /// The target column.
        target: String,
    },
    /// A flat stream of token ids in a binary file (nanoGPT's `train.bin`): sample `i` is the
    /// window of `block` ids from offset `i`, its targets the `block` ids after each.
    Tokens {
        /// The file.
        path: String,
        /// Bits per id, unsigned, little-endian: 16 or 32.
        bits: u8,
        /// Tokens per window.
        block: u64,
        /// The vocabulary size, when declared: ids must lie below it.
        vocab: Option<u64>,
    },
    /// Raw text (a file, or every regular file of a directory in name order, concatenated)
    /// read as characters: ids index the sorted set of its characters; windows as for
    /// [`Source::Tokens`].
    Text {
        /// The file or directory.
        path: String,
        /// Characters per window.
        block: u64,
    },
    /// An image folder in `ImageFolder`'s layout: one folder per class (sorted names), its PNG
    /// and JPEG images the class's samples, decoded to `size`.
    Images {
        /// The folder.
        path: String,
        /// `[channels, height, width]`: 1 channel (PIL's `convert("L")`) or 3 (`"RGB"`).
        size: Shape,
        /// Whether an image of another height and width is resized to `size` (else refused).
        resize: bool,
        /// The training split's augmentation, drawn anew every epoch.
        augment: Augment,
    },
}

/// Random augmentation of training images, drawn per sample and epoch from the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Augment {
    /// `crop: P`: pad each side by `P` pixels of value 0 and crop a random window of the image's
    /// size (torchvision's `RandomCrop(size, padding=P)`); 0 for none.
    pub crop: u64,
    /// `flip: true`: mirror left to right with probability 1/2 (`RandomHorizontalFlip()`).
    pub flip: bool,
}

impl Augment {
    /// Whether any augmentation is declared.
    pub fn any(self) -> bool {
        self.crop > 0 || self.flip
    }
}

impl Source {
    /// Tokens per window of a token stream (`tokens`, `text`); `None` for sources of samples.
    pub fn block(&self) -> Option<u64> {
        match self {
            Source::Tokens { block, .. } | Source::Text { block, .. } => Some(*block),
            _ => None,
        }
    }

    /// The source's word in the language and the files it names as the experiment writes
    /// them (none for synthetic data).
    pub fn kind_and_files(&self) -> (&'static str, Vec<String>) {
        match self {
            Source::Synthetic { .. } => ("synthetic", vec![]),
            Source::Idx { images, labels } => ("idx", vec![images.clone(), labels.clone()]),
            Source::Npy { inputs, targets } => ("npy", vec![inputs.clone(), targets.clone()]),
            Source::Npz { path, .. } => ("npz", vec![path.clone()]),
            Source::Csv { path, .. } => ("csv", vec![path.clone()]),
            Source::Safetensors { path, .. } => ("safetensors", vec![path.clone()]),
            Source::Parquet { path, .. } => ("parquet", vec![path.clone()]),
            Source::Tokens { path, .. } => ("tokens", vec![path.clone()]),
            Source::Text { path, .. } => ("text", vec![path.clone()]),
            Source::Images { path, .. } => ("images", vec![path.clone()]),
        }
    }
}

/// A random generator of per-sample tensors.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Generator {
    /// Normal distribution.
    Normal {
        /// Per-sample shape.
        shape: Shape,
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
    /// Uniform distribution on `[low, high)`.
    Uniform {
        /// Per-sample shape.
        shape: Shape,
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// Uniform integers on `[0, high)`.
    Randint {
        /// Per-sample shape.
        shape: Shape,
        /// Exclusive upper bound.
        high: u64,
    },
    /// Classes computed from a sequence of `randint` inputs: one per sequence, or one per
    /// token for the per-token tasks.
    Task(SequenceTask),
}

/// Classes computed from a sequence of token ids `x[0..S)` in `[0, V)`: one per sequence, or
/// one per token (`copy`, `reverse`, `sort`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SequenceTask {
    /// The most frequent id, the smallest on ties (`V` classes; order-blind).
    Majority,
    /// The first id, `x[0]` (`V` classes; depends on order).
    First,
    /// The position of the largest id, the first on ties (`S` classes; depends on order).
    Argmax,
    /// Per token: the ids themselves, `y[i] = x[i]` (`V` classes per token).
    Copy,
    /// Per token: the ids in reverse order, `y[i] = x[S-1-i]` (`V` classes per token).
    Reverse,
    /// Per token: the ids sorted ascending, `y = sorted(x)` (`V` classes per token).
    Sort,
}

impl SequenceTask {
    /// Every task.
    pub const ALL: &'static [SequenceTask] = &[
        SequenceTask::Majority,
        SequenceTask::First,
        SequenceTask::Argmax,
        SequenceTask::Copy,
        SequenceTask::Reverse,
        SequenceTask::Sort,
    ];

    /// The task's word in the language, written as a call: `majority()`.
    pub fn name(self) -> &'static str {
        match self {
            SequenceTask::Majority => "majority",
            SequenceTask::First => "first",
            SequenceTask::Argmax => "argmax",
            SequenceTask::Copy => "copy",
            SequenceTask::Reverse => "reverse",
            SequenceTask::Sort => "sort",
        }
    }

    /// Whether the task gives a class per token (targets of the inputs' shape `[S]`) rather
    /// than one per sequence.
    pub fn per_token(self) -> bool {
        matches!(
            self,
            SequenceTask::Copy | SequenceTask::Reverse | SequenceTask::Sort
        )
    }

    /// The number of classes over sequences of `length` ids below `vocab`.
    pub fn classes(self, vocab: u64, length: u64) -> u64 {
        match self {
            SequenceTask::Majority
            | SequenceTask::First
            | SequenceTask::Copy
            | SequenceTask::Reverse
            | SequenceTask::Sort => vocab,
            SequenceTask::Argmax => length,
        }
    }
}

/// The per-sample shape of a class: a scalar.
static SCALAR: Shape = Shape(Vec::new());

impl Generator {
    /// The per-sample shape it generates; for a sequence task, a scalar (a per-token task's
    /// targets take the inputs' shape, which the task alone does not know).
    pub fn shape(&self) -> &Shape {
        match self {
            Generator::Normal { shape, .. }
            | Generator::Uniform { shape, .. }
            | Generator::Randint { shape, .. } => shape,
            Generator::Task(_) => &SCALAR,
        }
    }
}
