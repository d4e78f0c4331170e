//! The run directory (`runs/<experiment>/<timestamp>/`, one `trial-NNN/` per sweep trial): the one
//! definition of every file in it, used by `kiln-runtime` to write and by `kiln report` and
//! `kiln compare` to read, so a reader can never disagree with the writer.
//!
//! - `experiment.exp` and `plan.yaml`: the experiment as run and its plan ([`EXPERIMENT`],
//!   [`PLAN`]).
//! - `metrics.jsonl`: one [`MetricLine`] per epoch and evaluation; `steps.jsonl`: one
//!   [`StepRecord`] per optimizer step ([`RunDir`] appends them).
//! - `report.yaml`: the [`Report`] of a finished run; `report-1.yaml`, `report-2.yaml`, ...: the
//!   reports of its earlier ends, set aside when it was extended.
//! - `checkpoints/`: a [`Sidecar`] per checkpoint beside its tensors file ([`checkpoint`]); the
//!   tensors themselves are written by the runtime, which links libtorch.
//! - `weights.safetensors` and `weights.yaml`: the final weights of a run that ended, under
//!   PyTorch `state_dict` names ([`weights`]).
//!
//! A run directory is written by one process at a time: [`RunDir`] creates it exclusively (a new
//! run never reuses a directory that holds a run) and holds its [`Lock`] until it is dropped.
//!
//! Sweeps are ranked by [`rank`]. Whole files are written atomically (a temporary file, then a
//! rename); every failure, serialisation included, is an [`Error`] naming the file.
//! Nothing here uses libtorch.

pub mod checkpoint;
#[cfg(test)]
mod dir_tests;
mod events;
mod lock;
mod metrics;
pub mod path_text;
mod rank;
mod report;
#[cfg(test)]
mod tests;
pub mod weights;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use events::Events;

pub use checkpoint::{Fingerprint, Measured, PhaseMark, PlateauState, Position, Segment, Sidecar};
pub use lock::{Holder, Lock, LockError, LOCK};
pub use metrics::{EpochRecord, EvalRecord, MetricLine, PhaseKind, PhaseTag, StepRecord};
pub use rank::{rank, rank_key};
pub use report::{
    BeforeAfter, Compressed, CompressedLayer, Compute, Eval, Latency, Outcome, PhaseRun, Report,
    TopK,
};

/// The experiment file as run.
pub const EXPERIMENT: &str = "experiment.exp";
/// The experiment's plan (costs), as YAML.
pub const PLAN: &str = "plan.yaml";
/// Per-epoch training and evaluation metrics, one JSON object a line.
pub const METRICS: &str = "metrics.jsonl";
/// Per-step loss and learning rate, one JSON object a line.
pub const STEPS: &str = "steps.jsonl";
/// The report of a finished run.
pub const REPORT: &str = "report.yaml";
/// Where the run's experiment file is (`Source`).
pub const SOURCE: &str = "source.yaml";
/// The directory of checkpoints.
pub const CHECKPOINTS: &str = "checkpoints";
/// A text source's vocabulary: a JSON array of its characters in id order.
pub const VOCAB: &str = "vocab.json";

/// What was being done to a file when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Creating a directory.
    Create,
    /// Opening a file to append to it.
    Open,
    /// Reading a file.
    Read,
    /// Writing a file.
    Write,
    /// Appending to a file.
    Append,
    /// Renaming a temporary file into place.
    Rename,
    /// Serialising a record.
    Encode,
    /// Reading a record back from text.
    Parse,
}

impl Op {
    /// The operation as a verb in `cannot {verb} {file}` (`append to`).
    pub fn verb(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Append => "append to",
            Op::Rename => "rename",
            Op::Encode => "encode",
            Op::Parse => "parse",
        }
    }
}

/// A file of the run directory that could not be written or read.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// What was being done.
    pub op: Op,
    /// The file.
    pub path: PathBuf,
    /// The underlying error, as text.
    pub detail: String,
}

impl Error {
    /// An error of `op` on `path`.
    pub fn new(op: Op, path: &Path, detail: impl std::fmt::Display) -> Error {
        Error {
            op,
            path: path.to_path_buf(),
            detail: detail.to_string(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot {} `{}`: {}",
            self.op.verb(),
            self.path.display(),
            self.detail
        )
    }
}

impl std::error::Error for Error {}

/// Writes `contents` to `dir/name` atomically: a temporary file `.name.tmp`, then a rename.
pub fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents).map_err(|e| Error::new(Op::Write, &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::new(Op::Rename, &tmp, e))?;
    Ok(path)
}

/// `value` as YAML; a value serde cannot encode is an [`Op::Encode`] error for `path`.
pub fn to_yaml<T: serde::Serialize>(value: &T, path: &Path) -> Result<String, Error> {
    serde_yaml::to_string(value).map_err(|e| Error::new(Op::Encode, path, e))
}

/// Writes `value` as YAML to `dir/name`, atomically; nothing is written when it cannot be encoded.
pub fn write_yaml<T: serde::Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), Error> {
    let yaml = to_yaml(value, &dir.join(name))?;
    write_atomic(dir, name, yaml.as_bytes()).map(drop)
}

/// Reads `path` as YAML into a `T`.
pub fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::new(Op::Read, path, e))?;
    serde_yaml::from_str(&text).map_err(|e| Error::new(Op::Parse, path, e))
}

/// Appends `text` to `path`, creating the file.
fn append(path: &Path, text: &[u8]) -> Result<(), Error> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::new(Op::Open, path, e))?;
    f.write_all(text)
        .map_err(|e| Error::new(Op::Append, path, e))
}

/// A run directory being written: appends metrics and step records, writes whole files
/// atomically. One per run, held by the training loop; it holds the directory's lock.
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    /// Lines of `metrics.jsonl` so far.
    lines: u64,
    /// Step records not yet appended to `steps.jsonl`.
    steps: Vec<u8>,
    /// The lock, released when the run directory is dropped.
    _lock: Lock,
    /// The holder of a stale lock found when the directory was opened.
    stale: Option<Holder>,
    /// Temporary files of interrupted writes removed when the directory was opened.
    removed: Vec<PathBuf>,
    /// This process's TensorBoard event file, opened with the first record (or the resume's
    /// truncation).
    events: Option<Events>,
}

/// Step records are buffered up to this many bytes before they are appended.
const STEP_BUFFER: usize = 1 << 16;

/// Why a run directory could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// A new run was to be created in a directory that already holds files.
    Exists(PathBuf),
    /// Another process is writing the run.
    InUse(PathBuf, Option<Holder>),
    /// The directory to resume holds no run.
    NotARun(PathBuf),
    /// The directory or its lock could not be created, read or written.
    Io(Error),
}

/// Creates a new, empty directory under `parent` named `stem`, or `stem-2`, `stem-3`, ... when
/// that exists; the creation is atomic, so two processes (on one machine or on machines sharing
/// the file system) never get the same directory. Returns its path.
pub fn create_unique(parent: &Path, stem: &str) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(parent).map_err(|e| Error::new(Op::Create, parent, e))?;
    for n in 1..=10_000u32 {
        let name = if n == 1 {
            stem.to_string()
        } else {
            format!("{stem}-{n}")
        };
        let dir = parent.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::new(Op::Create, &dir, e)),
        }
    }
    Err(Error::new(
        Op::Create,
        &parent.join(stem),
        "10000 directories of that name exist already",
    ))
}

/// Whether the run in `dir` finished (it has its report).
pub fn is_finished(dir: &Path) -> bool {
    dir.join(REPORT).is_file()
}

impl RunDir {
    /// Opens a new run in `dir`: creates the directory (or takes an empty one) and its lock. A
    /// directory that already holds files is refused, so no run is ever overwritten.
    pub fn create(dir: PathBuf) -> Result<RunDir, OpenError> {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| OpenError::Io(Error::new(Op::Create, parent, e)))?;
        }
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let empty = std::fs::read_dir(&dir)
                    .map_err(|e| OpenError::Io(Error::new(Op::Read, &dir, e)))?
                    .next()
                    .is_none();
                if !empty {
                    return Err(OpenError::Exists(dir));
                }
            }
            Err(e) => return Err(OpenError::Io(Error::new(Op::Create, &dir, e))),
        }
        let (lock, _) = Lock::take(&dir).map_err(|e| locked(e, &dir))?;
        // Another process may have taken the empty directory first and let go.
        if dir.join(EXPERIMENT).exists() {
            return Err(OpenError::Exists(dir));
        }
        Ok(RunDir {
            dir,
            lines: 0,
            steps: Vec::new(),
            _lock: lock,
            stale: None,
            removed: Vec::new(),
            events: None,
        })
    }

    /// Reopens the run in `dir` to resume it: takes its lock (refused while another process
    /// holds it; a stale lock is noted), removes temporary files left by interrupted writes and
    /// counts its metric lines.
    pub fn resume(dir: PathBuf) -> Result<RunDir, OpenError> {
        if !dir.join(EXPERIMENT).is_file() {
            return Err(OpenError::NotARun(dir));
        }
        let (lock, stale) = Lock::take(&dir).map_err(|e| locked(e, &dir))?;
        let mut removed = remove_temporaries(&dir);
        removed.extend(remove_temporaries(&dir.join(CHECKPOINTS)));
        let lines = match std::fs::read_to_string(dir.join(METRICS)) {
            Ok(text) => text.lines().count() as u64,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(OpenError::Io(Error::new(Op::Read, &dir.join(METRICS), e))),
        };
        Ok(RunDir {
            dir,
            lines,
            steps: Vec::new(),
            _lock: lock,
            stale,
            removed,
            events: None,
        })
    }

    /// The holder of a stale lock found when the run was reopened: a process that died while
    /// writing it.
    pub fn stale(&self) -> Option<&Holder> {
        self.stale.as_ref()
    }

    /// Temporary files of interrupted writes removed when the run was reopened.
    pub fn removed(&self) -> &[PathBuf] {
        &self.removed
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Where checkpoints go.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dir.join(CHECKPOINTS)
    }

    /// Writes a file into the run directory, atomically.
    pub fn write_file(&self, name: &str, contents: &[u8]) -> Result<(), Error> {
        write_atomic(&self.dir, name, contents).map(drop)
    }

    /// Records the experiment `text` that runs from now on: the first version is
    /// `experiment.exp`; a resume with a different text writes `experiment-2.exp`, then
    /// `experiment-3.exp`, ..., so every version that ran is kept. Returns the version's file
    /// name (an existing one when the text is unchanged).
    pub fn record_version(&self, text: &str) -> Result<String, Error> {
        let versions = versions(&self.dir);
        if let Some(last) = versions.last() {
            let path = self.dir.join(last);
            let old = std::fs::read(&path).map_err(|e| Error::new(Op::Read, &path, e))?;
            if old == text.as_bytes() {
                return Ok(last.clone());
            }
        }
        let name = version_name(versions.len() + 1);
        write_atomic(&self.dir, &name, text.as_bytes())?;
        Ok(name)
    }

    /// Writes `report.yaml`.
    pub fn write_report(&self, report: &Report) -> Result<(), Error> {
        write_yaml(&self.dir, REPORT, report)
    }

    /// Sets the report of a finished run aside before the run is extended: `report.yaml` is
    /// renamed to the first free `report-K.yaml` (`report-1.yaml` for the report of the run's
    /// first end), so the run is unfinished again until the extension writes its own report and
    /// no report is lost. Returns the new name; `None` when there is no report.
    pub fn set_aside_report(&self) -> Result<Option<String>, Error> {
        let path = self.dir.join(REPORT);
        if !path.is_file() {
            return Ok(None);
        }
        // The lock is held, so no other process takes the free name before the rename.
        let name = (1..)
            .map(|k| format!("report-{k}.yaml"))
            .find(|n| !self.dir.join(n).exists())
            .unwrap_or_default();
        std::fs::rename(&path, self.dir.join(&name))
            .map_err(|e| Error::new(Op::Rename, &path, e))?;
        Ok(Some(name))
    }

    /// This process's event file, created on first use: for a resumed run, with a session start
    /// at `resumed_at` (the first step it takes), which makes TensorBoard drop the steps from
    /// there on that the interrupted process had written.
    fn events(&mut self, resumed_at: Option<u64>) -> Result<&mut Events, Error> {
        if self.events.is_none() {
            let created = Events::create(&self.dir, resumed_at)
                .map_err(|e| Error::new(Op::Create, &self.dir.join("events.out.tfevents.*"), e))?;
            self.events = Some(created);
        }
        Ok(self.events.as_mut().expect("created above"))
    }

    /// Appends a metric line (and its scalars to the event file); returns the number of lines
    /// written so far.
    pub fn metric(&mut self, line: &MetricLine) -> Result<u64, Error> {
        let (step, scalars) = scalars(line);
        let tags: Vec<(&str, f64)> = scalars.iter().map(|(t, v)| (t.as_str(), *v)).collect();
        self.events(None)?.scalars(step, &tags);
        let path = self.dir.join(METRICS);
        let mut text = serde_json::to_vec(line).map_err(|e| Error::new(Op::Encode, &path, e))?;
        text.push(b'\n');
        self.flush_steps()?;
        append(&path, &text)?;
        self.lines += 1;
        Ok(self.lines)
    }

    /// Buffers one optimizer step's record for `steps.jsonl` (and its loss and learning rate
    /// for the event file).
    pub fn step(&mut self, record: &StepRecord) -> Result<(), Error> {
        self.events(None)?.scalars(
            record.step,
            &[("train/loss", record.loss), ("train/lr", record.lr)],
        );
        serde_json::to_writer(&mut self.steps, record)
            .map_err(|e| Error::new(Op::Encode, &self.dir.join(STEPS), e))?;
        self.steps.push(b'\n');
        if self.steps.len() > STEP_BUFFER {
            self.flush_steps()?;
        }
        Ok(())
    }

    /// Appends buffered step records to `steps.jsonl` (and buffered events to the event file).
    pub fn flush_steps(&mut self) -> Result<(), Error> {
        if let Some(e) = &mut self.events {
            let path = e.path().to_path_buf();
            e.flush()
                .map_err(|err| Error::new(Op::Append, &path, err))?;
        }
        if self.steps.is_empty() {
            return Ok(());
        }
        append(&self.dir.join(STEPS), &self.steps)?;
        self.steps.clear();
        Ok(())
    }

    /// Keeps the first `keep` metric lines and the records of the first `step` steps, dropping
    /// what was written after a checkpoint taken at `step` (a resumed run writes them again).
    pub fn truncate(&mut self, keep: u64, step: u64) -> Result<(), Error> {
        self.steps.clear();
        match &mut self.events {
            Some(e) => e.discard(),
            None => {
                self.events(Some(step + 1))?;
            }
        }
        let kept = head(&self.dir.join(STEPS), step)?;
        self.write_file(STEPS, kept.0.as_bytes())?;
        let (body, lines) = head(&self.dir.join(METRICS), keep)?;
        self.write_file(METRICS, body.as_bytes())?;
        self.lines = lines;
        Ok(())
    }

    /// The metric lines written so far.
    pub fn metrics(&self) -> Result<Vec<MetricLine>, Error> {
        Ok(read_metrics(&self.dir)?.unwrap_or_default())
    }
}

/// The scalars of a metric line for the event file, at the step whose weights it measured:
/// `train/epoch_loss`, `train/accuracy` and `train/samples_per_s` for an epoch; `val/loss`,
/// `val/accuracy`, `val/top<k>_accuracy`, `val/mae`, `val/rmse`, `val/r2` for an evaluation (those
/// it has).
fn scalars(line: &MetricLine) -> (u64, Vec<(String, f64)>) {
    let mut out = Vec::new();
    match line {
        MetricLine::Train(r) => {
            out.push(("train/epoch_loss".to_string(), r.train_loss));
            if let Some(a) = r.train_accuracy {
                out.push(("train/accuracy".into(), a));
            }
            out.push(("train/samples_per_s".into(), r.samples_per_s));
            (r.step, out)
        }
        MetricLine::Val(e) => {
            out.push(("val/loss".to_string(), e.loss));
            if let Some(a) = e.accuracy {
                out.push(("val/accuracy".into(), a));
            }
            if let Some(t) = e.top_k {
                out.push((format!("val/top{}_accuracy", t.k), t.accuracy));
            }
            for (tag, v) in [("val/mae", e.mae), ("val/rmse", e.rmse), ("val/r2", e.r2)] {
                if let Some(v) = v {
                    out.push((tag.into(), v));
                }
            }
            (e.step, out)
        }
    }
}

/// The file name of the `n`th version of the experiment (1-based).
fn version_name(n: usize) -> String {
    if n == 1 {
        EXPERIMENT.to_string()
    } else {
        format!("experiment-{n}.exp")
    }
}

/// The versions of the experiment that ran in `dir`, oldest first: `experiment.exp`, then
/// `experiment-2.exp`, ... as far as they go.
pub fn versions(dir: &Path) -> Vec<String> {
    (1..)
        .map(version_name)
        .take_while(|name| dir.join(name).is_file())
        .collect()
}

/// The error of a lock that could not be taken on `dir`.
fn locked(e: LockError, dir: &Path) -> OpenError {
    match e {
        LockError::Held(holder) => OpenError::InUse(dir.to_path_buf(), holder),
        LockError::Io(e) => OpenError::Io(e),
    }
}

/// Removes the temporary files (`.NAME.tmp`) that an interrupted atomic write leaves in `dir`;
/// returns their paths.
fn remove_temporaries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with('.') && n.ends_with(".tmp")
            }) && p.is_file()
                && std::fs::remove_file(p).is_ok()
        })
        .collect()
}

/// The current UTC time as `YYYYmmdd-HHMMSS`, the name of a new run directory.
pub fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The first `n` lines of `path` (each ending in a newline) and how many there are; a missing
/// file has none.
fn head(path: &Path, n: u64) -> Result<(String, u64), Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::new(Op::Read, path, e)),
    };
    let mut out = String::new();
    let mut count = 0;
    for line in text.lines().take(usize::try_from(n).unwrap_or(usize::MAX)) {
        out += line;
        out.push('\n');
        count += 1;
    }
    Ok((out, count))
}

/// Where the experiment of a run came from: `kiln eval` and `kiln export` check it again.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Source {
    /// The experiment file, as an absolute path (any path: see [`path_text`]).
    #[serde(with = "path_text")]
    pub file: PathBuf,
    /// The sweep trial (1-based), for a sweep's run.
    pub trial: Option<usize>,
}

/// The `source.yaml` of the run in `dir`.
pub fn read_source(dir: &Path) -> Result<Source, Error> {
    read_yaml(&dir.join(SOURCE))
}

/// The `report.yaml` of the run in `dir`.
pub fn read_report(dir: &Path) -> Result<Report, Error> {
    read_yaml(&dir.join(REPORT))
}

/// The lines of `metrics.jsonl` in `dir`, or `None` when it has none. A line that is not a
/// metric record (the last line of a run killed while writing it) is skipped.
pub fn read_metrics(dir: &Path) -> Result<Option<Vec<MetricLine>>, Error> {
    let path = dir.join(METRICS);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::new(Op::Read, &path, e)),
    };
    Ok(Some(
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
    ))
}
