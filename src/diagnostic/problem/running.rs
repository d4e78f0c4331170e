//! Running: what only a run finds (K05xx).

use crate::diagnostic::evaluation::{Mismatch, NoWeights};
use crate::diagnostic::extend::{Extension, Lengths};
use crate::diagnostic::runs::{Resume, Taken};
use crate::diagnostic::runtime::{Death, KilledRun, RunStage, Torch, Unavailable};
use crate::span::Span;
use std::path::PathBuf;

/// Running: what only a run finds (K05xx).
#[derive(Clone, Debug, PartialEq)]
pub enum Running {
    /// K0501.
    DeviceUnavailable {
        /// The device setting.
        span: Span,
        /// Which situation.
        situation: Unavailable,
    },
    /// K0502: a data file that cannot be read.
    DataMissing {
        /// The source.
        span: Span,
        /// What cannot be read and why, as the loader found it (`cannot read the data file
        /// ...: it does not exist (looked for ...)`).
        detail: String,
        /// What the loader says under the span (`file not found`).
        label: String,
        /// How to fix it, when the loader knows better than the general advice (the directory
        /// relative paths start from).
        help: Option<String>,
    },
    /// K0503: malformed data or initial weights.
    DataInvalid {
        /// The source, or the statement loading initial weights.
        span: Span,
        /// What is wrong, as found while reading (`truncated after 2 bytes`).
        detail: String,
        /// What the loader says under the span, when it says more than the general label.
        label: Option<String>,
        /// How to fix it, when the loader knows better than the general advice.
        help: Option<String>,
        /// Whether the initial weights (`--init`) are at fault rather than the data.
        weights: bool,
    },
    /// K0504: NaN or infinite loss.
    NonFiniteLoss {
        /// The learning rate.
        span: Span,
        /// NaN (true) or infinite.
        nan: bool,
        /// 1-based step.
        step: u64,
        /// 1-based epoch.
        epoch: u64,
        /// The learning rate at that step.
        lr: f64,
    },
    /// K0505: out of memory.
    OutOfMemory {
        /// The statement running, or the batch size once the run knows the failure came from
        /// its step.
        span: Span,
        /// libtorch's first line.
        detail: String,
        /// The batch and the plan's estimate per device (`cuda:0 3.2 GiB (activations 1.1
        /// GiB)`), once the run knows the failure came from its step.
        plan: Option<(u64, String)>,
        /// Where memory ran out, when the span points elsewhere (at the batch size).
        ran_out: Option<Span>,
    },
    /// K0506: a stop signal (SIGINT, SIGTERM, SIGHUP).
    Interrupted {
        /// The loss.
        span: Span,
        /// Steps done.
        step: u64,
        /// 1-based epoch.
        epoch: u64,
        /// The signal's name (`SIGTERM`); `None` when stopped otherwise.
        signal: Option<String>,
        /// The command that resumes the run (`kiln run small.exp --resume runs/small/...`);
        /// `None` in a process that does not write the run directory.
        resume: Option<String>,
    },
    /// K0507.
    ResumeIncompatible {
        /// What changed.
        span: Span,
        /// Which situation.
        situation: Resume,
    },
    /// K0508: libtorch failed, or the runtime met what the checks should have excluded.
    TorchError {
        /// The statement running.
        span: Span,
        /// Which situation.
        situation: Torch,
    },
    /// K0510: the run directory holds another run or is being written.
    RunDirTaken {
        /// The experiment.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// Why it cannot be used.
        situation: Taken,
    },
    /// K0512: a checkpoint is damaged; an older intact one is used.
    CheckpointDamaged {
        /// The experiment.
        span: Span,
        /// Its sidecar.
        sidecar: PathBuf,
        /// What is wrong.
        reason: String,
        /// The step of the checkpoint used instead; `None` when no intact one is left.
        using: Option<u64>,
    },
    /// K0513: the run directory's lock was left by a process that died.
    StaleLock {
        /// The experiment.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// The process that held it, as `process 42 on host (since ...)`.
        holder: String,
    },
    /// K0509: the run directory failed.
    RunIo {
        /// The experiment.
        span: Span,
        /// What was done (`write`, `read`).
        action: String,
        /// The file, when one is at fault.
        path: Option<PathBuf>,
        /// The system's reason.
        error: String,
        /// What the run was doing.
        stage: RunStage,
    },
    /// K0511: a signal killed `kiln-runtime`.
    RuntimeKilled {
        /// The experiment's loss statement, in its training block.
        span: Span,
        /// The signal's name (`SIGKILL`).
        signal: String,
        /// Why, as far as can be told.
        cause: Death,
        /// The experiment file, as given to `kiln run`.
        file: PathBuf,
        /// The run directories the runtime had opened, in order.
        runs: Vec<KilledRun>,
    },
    /// K0514: another rank stopped mid-run, or a collective failed.
    RankFailed {
        /// The `parallel` statement.
        span: Span,
        /// The rank that saw the failure (`None` for the launcher of local ranks).
        rank: Option<usize>,
        /// The rank that stopped, when it can be told.
        stopped: Option<usize>,
        /// How it ended or what failed (`killed by SIGKILL`, c10d's message).
        detail: String,
    },
    /// K0515: the ranks did not all meet within the timeout.
    RendezvousFailed {
        /// The `parallel` statement.
        span: Span,
        /// The rank that waited.
        rank: usize,
        /// The ranks that never arrived (empty when the store itself could not be reached).
        missing: Vec<usize>,
        /// The store's address, `host:port`.
        address: String,
        /// The timeout in seconds.
        timeout_s: u64,
        /// c10d's message, when the store failed.
        detail: Option<String>,
    },
    /// K0516: two ranks run different experiments, or disagree on the world size.
    RanksDiffer {
        /// The `parallel` statement.
        span: Span,
        /// This rank.
        rank: usize,
        /// The rank that differs from it (`None`: this rank differs from how it was started).
        other: Option<usize>,
        /// Each difference, `what: this rank's → the other's`.
        differences: Vec<String>,
    },
    /// K0517: the backend cannot run here.
    BackendUnavailable {
        /// The `parallel` statement.
        span: Span,
        /// `gloo` or `nccl`.
        backend: String,
        /// Why.
        detail: String,
    },
    /// K0519: `kiln eval` has no weights it can read.
    NoWeights {
        /// The experiment.
        span: Span,
        /// Why there are none.
        situation: NoWeights,
    },
    /// K0520: the weights given to `kiln eval` do not fit the experiment's model.
    WeightsMismatch {
        /// The first layer whose tensors do not fit (the experiment when none is known).
        span: Span,
        /// The weights file.
        path: PathBuf,
        /// Every tensor that does not fit.
        mismatches: Vec<Mismatch>,
        /// Whether the experiment compresses, so its model also holds masks and observers.
        compresses: bool,
        /// Whether the file is a run's checkpoint (its tensors are named `param/fc1.weight`).
        checkpoint: bool,
    },
    /// K0522: `kiln eval` cannot evaluate an exported model as asked: a layer is stored in a
    /// form that cannot be read back, or its uncompressed form was asked for.
    ExportNotEvaluable {
        /// The experiment.
        span: Span,
        /// The exported weights file.
        path: PathBuf,
        /// The tensor stored in a form that cannot be read back; `None` when `--uncompressed`
        /// was asked for.
        tensor: Option<String>,
    },
    /// K0521: the split `kiln eval` was asked for has no samples.
    SplitEmpty {
        /// The data source.
        span: Span,
        /// `train`, `val` or `test`.
        split: String,
        /// The splits that have samples.
        available: Vec<String>,
    },
    /// K0523: a resume whose length, or `--max-steps`, ends before the steps the run has taken
    /// (or, for a finished run, does not go past them).
    ShorterThanTrained {
        /// The length in the experiment.
        span: Span,
        /// Where the run stands and what was asked.
        lengths: Lengths,
    },
    /// K0524: a finished run that cannot be continued from its end.
    NotExtendable {
        /// The length in the experiment, or the statement that keeps the run from being
        /// extended.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// Its final weights (`weights.safetensors`, or the newest version).
        weights: PathBuf,
        /// The steps the run took.
        trained: u64,
        /// Why it cannot be extended.
        situation: Extension,
    },
    /// K0525: a finished run resumed with the length it already has.
    RunComplete {
        /// The length in the experiment.
        span: Span,
        /// The run directory.
        dir: PathBuf,
        /// How it ended, as `after 40 steps, train loss 0.1234, ...`; empty when its report
        /// cannot be read.
        detail: String,
    },
    /// K0526: `kiln generate` was given a run whose model is not a causal language model.
    NotGenerative {
        /// What makes it one that cannot generate: the model's input, a layer, the data source.
        span: Span,
        /// Why, a clause: `its attention is not causal`.
        why: String,
        /// How to fix it.
        help: String,
    },
}
