//! The run directory (`runs/<experiment>/<timestamp>/`): the experiment as run, `metrics.jsonl`,
//! `report.yaml` and checkpoints; and the progress shown while training.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};

use kiln::diagnostic::problem::{RunStage, Running, Taken};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::rundir::{Eval, EvalRecord, MetricLine, OpenError, PhaseTag, Report, RunDir, StepRecord};
use kiln::span::Span;

pub use kiln::rundir::EpochRecord;

/// Writes a run's files (through [`RunDir`]), failing at the span of the statement being run.
pub struct RunWriter {
    run: RunDir,
    span: Span,
}

impl RunWriter {
    /// Creates a new run in `dir` (which must not hold files), holding its lock; failures point
    /// at `span`.
    pub fn create(dir: PathBuf, span: Span) -> Result<RunWriter, Diagnostic> {
        let run = RunDir::create(dir).map_err(|e| taken(e, span))?;
        Ok(RunWriter { run, span })
    }

    /// Reopens the run in `dir` to resume it, holding its lock. A stale lock (its holder died)
    /// is reported as a warning, as are the temporary files of interrupted writes it removed.
    pub fn resume(dir: PathBuf, span: Span) -> Result<(RunWriter, Vec<Diagnostic>), Diagnostic> {
        let run = RunDir::resume(dir).map_err(|e| taken(e, span))?;
        let mut warnings = Vec::new();
        if let Some(holder) = run.stale() {
            warnings.push(
                Problem::Running(Running::StaleLock {
                    span,
                    dir: run.path().to_path_buf(),
                    holder: holder.to_string(),
                })
                .diagnostic(),
            );
        }
        Ok((RunWriter { run, span }, warnings))
    }

    /// Temporary files of interrupted writes removed when the run was reopened.
    pub fn removed(&self) -> &[PathBuf] {
        self.run.removed()
    }

    /// Records the experiment's text as the version that runs from now on; returns its file
    /// name in the run directory.
    pub fn record_version(&self, text: &str) -> Result<String, Diagnostic> {
        self.run.record_version(text).map_err(|e| io(&e, self.span))
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        self.run.path()
    }

    /// Where checkpoints go.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.run.checkpoint_dir()
    }

    /// Writes a file into the run directory, atomically.
    pub fn write_file(&self, name: &str, contents: &[u8]) -> Result<(), Diagnostic> {
        self.run
            .write_file(name, contents)
            .map_err(|e| io(&e, self.span))
    }

    /// Writes `value` as YAML into the run directory, atomically.
    pub fn write_yaml<T: serde::Serialize>(&self, name: &str, value: &T) -> Result<(), Diagnostic> {
        kiln::rundir::write_yaml(self.run.path(), name, value).map_err(|e| io(&e, self.span))
    }

    /// Writes `report.yaml`.
    pub fn write_report(&self, report: &Report) -> Result<(), Diagnostic> {
        self.run.write_report(report).map_err(|e| io(&e, self.span))
    }

    /// Sets the report of a finished run aside (as `report-K.yaml`) before it is extended.
    pub fn set_aside_report(&self) -> Result<Option<String>, Diagnostic> {
        self.run.set_aside_report().map_err(|e| io(&e, self.span))
    }

    /// The metric lines written so far.
    pub fn metrics(&self) -> Result<Vec<MetricLine>, Diagnostic> {
        self.run.metrics().map_err(|e| io(&e, self.span))
    }

    /// Appends one optimizer step's loss and learning rate to `steps.jsonl` (buffered).
    pub fn step_record(&mut self, step: u64, loss: f64, lr: f64) -> Result<(), Diagnostic> {
        self.run
            .step(&StepRecord { step, loss, lr })
            .map_err(|e| io(&e, self.span))
    }

    /// Writes buffered step records to `steps.jsonl`.
    pub fn flush_steps(&mut self) -> Result<(), Diagnostic> {
        self.run.flush_steps().map_err(|e| io(&e, self.span))
    }

    /// Appends a training record; returns the number of lines written so far.
    pub fn train_record(&mut self, r: &EpochRecord) -> Result<u64, Diagnostic> {
        self.run
            .metric(&MetricLine::Train(r.clone()))
            .map_err(|e| io(&e, self.span))
    }

    /// Appends an evaluation record of `phase` (outside the written training); returns the
    /// number of lines written so far.
    pub fn eval_record(
        &mut self,
        epoch: u64,
        step: u64,
        e: &Eval,
        phase: Option<PhaseTag>,
    ) -> Result<u64, Diagnostic> {
        let line = MetricLine::Val(EvalRecord {
            epoch,
            step,
            loss: e.loss,
            accuracy: e.accuracy,
            top_k: e.top_k,
            mae: e.mae,
            rmse: e.rmse,
            r2: e.r2,
            phase,
        });
        self.run.metric(&line).map_err(|e| io(&e, self.span))
    }

    /// Drops metric lines and step records written after a checkpoint taken at `step` (a
    /// resumed run writes them again).
    pub fn truncate_metrics(&mut self, keep: u64, step: u64) -> Result<(), Diagnostic> {
        self.run.truncate(keep, step).map_err(|e| io(&e, self.span))
    }
}

/// A K0510 failure (the directory holds a run or is in use), or K0509 (it cannot be written).
fn taken(e: OpenError, span: Span) -> Diagnostic {
    let (dir, situation) = match e {
        OpenError::Io(e) => return io(&e, span),
        OpenError::Exists(dir) => (dir, Taken::Exists),
        OpenError::InUse(dir, holder) => (
            dir,
            Taken::InUse {
                holder: holder.map(|h| h.to_string()),
            },
        ),
        OpenError::NotARun(dir) => (dir, Taken::NotARun),
    };
    Problem::Running(Running::RunDirTaken {
        span,
        dir,
        situation,
    })
    .diagnostic()
}

/// A K0509 failure at `span` for a file of the run directory.
fn io(e: &kiln::rundir::Error, span: Span) -> Diagnostic {
    Problem::Running(Running::RunIo {
        span,
        action: e.op.verb().to_string(),
        path: Some(e.path.clone()),
        error: e.detail.clone(),
        stage: RunStage::Record,
    })
    .diagnostic()
}

/// Progress while training: bars on a terminal, one plain line per epoch elsewhere.
pub struct Progress {
    bar: Option<ProgressBar>,
    quiet: bool,
    epochs: String,
}

impl Progress {
    /// Progress for a run of `epochs` epochs (`None` when it is set in steps).
    pub fn new(quiet: bool, epochs: Option<u64>) -> Progress {
        Progress {
            bar: None,
            quiet,
            epochs: epochs.map_or(String::new(), |e| format!("/{e}")),
        }
    }

    /// What epoch `epoch` (1-based, counted over the run) is called: `epoch 3/10` in the
    /// written training, its phase's name and epoch in another (`finetune 1/3`).
    fn label(&self, epoch: u64, phase: Option<&PhaseTag>) -> String {
        match phase {
            Some(p) => p.to_string(),
            None => format!("epoch {epoch}{}", self.epochs),
        }
    }

    /// Epoch `epoch` (1-based) of `phase` begins: `batches` in it, `done` already (when
    /// resuming).
    pub fn start_epoch(&mut self, epoch: u64, phase: Option<&PhaseTag>, batches: u64, done: u64) {
        if self.quiet || !std::io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::new(batches);
        bar.set_style(
            ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(self.label(epoch, phase));
        bar.set_position(done);
        self.bar = Some(bar);
    }

    /// A step finished.
    pub fn step(&self, loss: f64, samples_per_s: f64) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
            bar.set_message(format!("loss {loss:.4}  {samples_per_s:.0} samples/s"));
        }
    }

    /// Where a figure was computed: `epoch 2/3  step 60` (the epoch 1-based), or the phase's
    /// epoch, `finetune 1/3  step 260`.
    fn at(&self, epoch: u64, phase: Option<&PhaseTag>, step: u64) -> String {
        format!("{}  step {step}", self.label(epoch, phase))
    }

    /// An evaluation of the weights of `step` finished, in `epoch` (1-based: the epoch in
    /// progress, or the one that just ended).
    pub fn eval(&self, epoch: u64, phase: Option<&PhaseTag>, step: u64, e: &Eval) {
        if self.quiet {
            return;
        }
        let mut line = format!(
            "{}  val loss {:.4}{}",
            self.at(epoch, phase, step),
            e.loss,
            e.accuracy
                .map_or(String::new(), |a| format!("  accuracy {:.2}%", 100.0 * a))
        );
        for (name, x) in e.regression() {
            line += &format!("  {name} {x:.4}");
        }
        match &self.bar {
            Some(bar) => bar.println(line),
            None => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    }

    /// An epoch ended.
    pub fn end_epoch(&mut self, r: &EpochRecord) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.quiet {
            return;
        }
        let acc = r
            .train_accuracy
            .map_or(String::new(), |a| format!("  accuracy {:.2}%", 100.0 * a));
        let _ = writeln!(
            std::io::stderr(),
            "{}  train loss {:.4}{acc}  {:.0} samples/s  {:.1}s",
            self.at(r.epoch, r.phase.as_ref(), r.step),
            r.train_loss,
            r.samples_per_s,
            r.seconds
        );
    }
}
