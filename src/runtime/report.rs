//! The run directory (`runs/<experiment>/<timestamp>/`): the experiment as run, `metrics.jsonl`,
//! `report.yaml` and checkpoints; and the progress shown while training.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};

use kiln::diagnostic::problem::RunStage;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::rundir::{Eval, EvalRecord, MetricLine, Report, RunDir, StepRecord};
use kiln::span::Span;

pub use kiln::rundir::EpochRecord;

/// Writes a run's files (through [`RunDir`]), failing at the span of the statement being run.
pub struct RunWriter {
    run: RunDir,
    span: Span,
}

impl RunWriter {
    /// Creates a new run directory, or reopens one to resume.
    pub fn open(dir: PathBuf, span: Span) -> Result<RunWriter, Diagnostic> {
        let run = RunDir::open(dir).map_err(|e| io(&e, span))?;
        Ok(RunWriter { run, span })
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

    /// Appends an evaluation record; returns the number of lines written so far.
    pub fn eval_record(&mut self, epoch: u64, step: u64, e: &Eval) -> Result<u64, Diagnostic> {
        let line = MetricLine::Val(EvalRecord {
            epoch,
            step,
            loss: e.loss,
            accuracy: e.accuracy,
            top_k: e.top_k,
        });
        self.run.metric(&line).map_err(|e| io(&e, self.span))
    }

    /// The step of the last evaluation recorded by this process.
    pub fn last_eval_step(&self) -> Option<u64> {
        self.run.last_eval_step()
    }

    /// Drops metric lines and step records written after a checkpoint taken at `step` (a
    /// resumed run writes them again).
    pub fn truncate_metrics(&mut self, keep: u64, step: u64) -> Result<(), Diagnostic> {
        self.run.truncate(keep, step).map_err(|e| io(&e, self.span))
    }
}

/// A K0509 failure at `span` for a file of the run directory.
fn io(e: &kiln::rundir::Error, span: Span) -> Diagnostic {
    Problem::RunIo {
        span,
        action: e.op.verb().to_string(),
        path: Some(e.path.clone()),
        error: e.detail.clone(),
        stage: RunStage::Record,
    }
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

    /// An epoch begins: `batches` in it, `done` already (when resuming).
    pub fn start_epoch(&mut self, epoch: u64, batches: u64, done: u64) {
        if self.quiet || !std::io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::new(batches);
        bar.set_style(
            ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("{}{}", epoch + 1, self.epochs));
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

    /// An evaluation finished.
    pub fn eval(&self, e: &Eval) {
        if self.quiet {
            return;
        }
        let line = format!(
            "  val loss {:.4}{}",
            e.loss,
            e.accuracy
                .map_or(String::new(), |a| format!("  accuracy {:.2}%", 100.0 * a))
        );
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
            "epoch {}{}  step {}  train loss {:.4}{acc}  {:.0} samples/s  {:.1}s",
            r.epoch,
            self.epochs,
            r.step,
            r.train_loss,
            r.samples_per_s,
            r.seconds
        );
    }
}
