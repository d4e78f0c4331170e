//! The run directory (`runs/<experiment>/<timestamp>/`): the experiment as run, `metrics.jsonl`,
//! `report.yaml` and checkpoints; and the progress shown while training.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::train::Eval;
use kiln::diagnostic::Code;
use kiln::diagnostic::Diagnostic;
use kiln::span::Span;

/// One line of training metrics, written at the end of each epoch.
#[derive(Serialize, Debug, Clone)]
pub struct EpochRecord {
    /// Epoch number (1-based).
    pub epoch: u64,
    /// Optimizer steps so far.
    pub step: u64,
    /// Learning rate of the last step.
    pub lr: f64,
    /// Mean training loss over the epoch.
    pub train_loss: f64,
    /// Training accuracy over the epoch, for class targets.
    pub train_accuracy: Option<f64>,
    /// Wall seconds of the epoch.
    pub seconds: f64,
    /// Training samples per second in the epoch.
    pub samples_per_s: f64,
}

/// Writes a run's files.
pub struct RunWriter {
    dir: PathBuf,
    lines: u64,
    steps: String,
    last_eval_step: Option<u64>,
    span: Span,
}

fn io(what: &str, path: &Path, e: impl std::fmt::Display, span: Span) -> Diagnostic {
    Diagnostic::new(
        Code::RunIo,
        span,
        format!("cannot {what} `{}`: {e}", path.display()),
    )
    .label("while recording this experiment's run")
    .help("check that the runs directory is writable and the disk has room")
}

impl RunWriter {
    /// Creates a new run directory, or reopens one to resume.
    pub fn open(dir: PathBuf, span: Span) -> Result<RunWriter, Diagnostic> {
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e, span))?;
        let metrics = dir.join("metrics.jsonl");
        let lines = std::fs::read_to_string(&metrics)
            .map(|t| t.lines().count() as u64)
            .unwrap_or(0);
        Ok(RunWriter {
            dir,
            lines,
            steps: String::new(),
            last_eval_step: None,
            span,
        })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where checkpoints go.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dir.join("checkpoints")
    }

    /// Writes a file into the run directory, atomically.
    pub fn write_file(&self, name: &str, contents: &[u8]) -> Result<(), Diagnostic> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, contents).map_err(|e| io("write", &tmp, e, self.span))?;
        std::fs::rename(&tmp, &path).map_err(|e| io("rename", &tmp, e, self.span))
    }

    fn append(&mut self, value: &serde_json::Value) -> Result<u64, Diagnostic> {
        let path = self.dir.join("metrics.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io("open", &path, e, self.span))?;
        writeln!(f, "{value}").map_err(|e| io("append to", &path, e, self.span))?;
        self.lines += 1;
        Ok(self.lines)
    }

    /// Appends one optimizer step's loss and learning rate to `steps.jsonl`.
    pub fn step_record(&mut self, step: u64, loss: f64, lr: f64) -> Result<(), Diagnostic> {
        use std::fmt::Write as _;
        // JSON has no NaN or infinity: a non-finite loss is written as null.
        let loss = if loss.is_finite() {
            format!("{loss:e}")
        } else {
            "null".to_string()
        };
        let _ = writeln!(
            self.steps,
            "{{\"step\":{step},\"loss\":{loss},\"lr\":{lr:e}}}"
        );
        if self.steps.len() > 1 << 16 {
            self.flush_steps()?;
        }
        Ok(())
    }

    /// Writes buffered step records to `steps.jsonl`.
    pub fn flush_steps(&mut self) -> Result<(), Diagnostic> {
        if self.steps.is_empty() {
            return Ok(());
        }
        let path = self.dir.join("steps.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io("open", &path, e, self.span))?;
        f.write_all(self.steps.as_bytes())
            .map_err(|e| io("append to", &path, e, self.span))?;
        self.steps.clear();
        Ok(())
    }

    /// Appends a training record; returns the number of lines written so far.
    pub fn train_record(&mut self, r: &EpochRecord) -> Result<u64, Diagnostic> {
        self.flush_steps()?;
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v["split"] = "train".into();
        self.append(&v)
    }

    /// Appends an evaluation record; returns the number of lines written so far.
    pub fn eval_record(&mut self, epoch: u64, step: u64, e: &Eval) -> Result<u64, Diagnostic> {
        self.last_eval_step = Some(step);
        let mut v =
            serde_json::json!({ "split": "val", "epoch": epoch, "step": step, "loss": e.loss });
        if let Some(a) = e.accuracy {
            v["accuracy"] = a.into();
        }
        if let Some((k, a)) = e.top_k {
            v[format!("top_{k}_accuracy")] = a.into();
        }
        self.append(&v)
    }

    /// The step of the last evaluation recorded by this process.
    pub fn last_eval_step(&self) -> Option<u64> {
        self.last_eval_step
    }

    /// Drops metric lines and step records written after a checkpoint taken at `step` (a
    /// resumed run writes them again).
    pub fn truncate_metrics(&mut self, keep: u64, step: u64) -> Result<(), Diagnostic> {
        let steps = std::fs::read_to_string(self.dir.join("steps.jsonl")).unwrap_or_default();
        let kept: String = steps
            .lines()
            .take(step as usize)
            .map(|l| format!("{l}\n"))
            .collect();
        self.write_file("steps.jsonl", kept.as_bytes())?;
        let path = self.dir.join("metrics.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let kept: Vec<&str> = text.lines().take(keep as usize).collect();
        let mut body = kept.join("\n");
        if !body.is_empty() {
            body.push('\n');
        }
        self.write_file("metrics.jsonl", body.as_bytes())?;
        self.lines = kept.len() as u64;
        Ok(())
    }
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
