//! What a run writes, behind one trait: the run directory's records and checkpoints and the
//! progress display. With data parallelism only rank 0 writes; another rank's loop gets an
//! [`Output`] whose methods do nothing ([`Silent`]), and the loop does not change.

use tch::Tensor;

use super::checkpoint::{self, Sidecar};
use super::report::{EpochRecord, Progress, RunWriter};
use kiln::diagnostic::Diagnostic;
use kiln::rundir::Eval;
use kiln::rundir::PhaseTag;
use kiln::span::Span;

/// Where a run's records, checkpoints and progress go.
pub trait Output {
    /// Records one optimizer step's loss and learning rate.
    fn step_record(&mut self, step: u64, loss: f64, lr: f64) -> Result<(), Diagnostic>;
    /// Writes buffered step records out.
    fn flush_steps(&mut self) -> Result<(), Diagnostic>;
    /// Records an epoch; returns the metric lines written so far.
    fn train_record(&mut self, r: &EpochRecord) -> Result<u64, Diagnostic>;
    /// Records an evaluation in `phase` (outside the written training); returns the metric
    /// lines written so far.
    fn eval_record(
        &mut self,
        epoch: u64,
        step: u64,
        e: &Eval,
        phase: Option<PhaseTag>,
    ) -> Result<u64, Diagnostic>;
    /// Drops records written after a checkpoint at `step` that kept `lines` metric lines.
    fn truncate_metrics(&mut self, lines: u64, step: u64) -> Result<(), Diagnostic>;
    /// Writes a checkpoint, keeping the newest `keep`.
    fn checkpoint(
        &mut self,
        side: &Sidecar,
        tensors: &[(String, Tensor)],
        keep: u64,
        span: Span,
    ) -> Result<(), Diagnostic>;
    /// Writes the final weights of a run that ended (its `state_dict`), with their sidecar.
    fn final_weights(
        &mut self,
        side: &Sidecar,
        state_dict: &[(String, Tensor)],
        span: Span,
    ) -> Result<(), Diagnostic>;
    /// The command that resumes the run, when this process writes its directory.
    fn resume_command(&self) -> Option<String>;
    /// The progress display (a quiet one shows nothing).
    fn progress(&mut self) -> &mut Progress;
}

/// The output of the process that owns the run directory.
pub struct RunOutput<'a> {
    /// The run directory's writer.
    pub writer: &'a mut RunWriter,
    /// The progress display.
    pub progress: Progress,
    /// The command that resumes the run.
    pub resume: String,
}

impl Output for RunOutput<'_> {
    fn step_record(&mut self, step: u64, loss: f64, lr: f64) -> Result<(), Diagnostic> {
        self.writer.step_record(step, loss, lr)
    }

    fn flush_steps(&mut self) -> Result<(), Diagnostic> {
        self.writer.flush_steps()
    }

    fn train_record(&mut self, r: &EpochRecord) -> Result<u64, Diagnostic> {
        self.writer.train_record(r)
    }

    fn eval_record(
        &mut self,
        epoch: u64,
        step: u64,
        e: &Eval,
        phase: Option<PhaseTag>,
    ) -> Result<u64, Diagnostic> {
        self.writer.eval_record(epoch, step, e, phase)
    }

    fn truncate_metrics(&mut self, lines: u64, step: u64) -> Result<(), Diagnostic> {
        self.writer.truncate_metrics(lines, step)
    }

    fn checkpoint(
        &mut self,
        side: &Sidecar,
        tensors: &[(String, Tensor)],
        keep: u64,
        span: Span,
    ) -> Result<(), Diagnostic> {
        self.writer.flush_steps()?;
        checkpoint::write(&self.writer.checkpoint_dir(), side, tensors, keep, span).map(drop)
    }

    fn final_weights(
        &mut self,
        side: &Sidecar,
        state_dict: &[(String, Tensor)],
        span: Span,
    ) -> Result<(), Diagnostic> {
        self.writer.flush_steps()?;
        checkpoint::write_final(self.writer.dir(), side, state_dict, span).map(drop)
    }

    fn resume_command(&self) -> Option<String> {
        Some(self.resume.clone())
    }

    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }
}

/// The output of a rank other than 0 in a distributed run: rank 0 writes the run directory and
/// shows progress, so this one writes nothing and shows nothing.
pub struct Silent {
    /// A quiet progress display.
    pub progress: Progress,
}

impl Output for Silent {
    fn step_record(&mut self, _step: u64, _loss: f64, _lr: f64) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn flush_steps(&mut self) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn train_record(&mut self, _r: &EpochRecord) -> Result<u64, Diagnostic> {
        Ok(0)
    }

    fn eval_record(
        &mut self,
        _epoch: u64,
        _step: u64,
        _e: &Eval,
        _phase: Option<PhaseTag>,
    ) -> Result<u64, Diagnostic> {
        Ok(0)
    }

    fn truncate_metrics(&mut self, _lines: u64, _step: u64) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn checkpoint(
        &mut self,
        _side: &Sidecar,
        _tensors: &[(String, Tensor)],
        _keep: u64,
        _span: Span,
    ) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn final_weights(
        &mut self,
        _side: &Sidecar,
        _state_dict: &[(String, Tensor)],
        _span: Span,
    ) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn resume_command(&self) -> Option<String> {
        None
    }

    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }
}
