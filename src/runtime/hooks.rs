//! What observes the loop: records and progress, the NaN check, early stopping. Each is a
//! [`Hook`] that the loop calls at fixed points and that answers whether to go on; the loop
//! itself only steps, evaluates when the schedule says so, and checkpoints at safe points.

use super::checkpoint::Position;
use super::compress::timeline::Timeline;
use super::output::Output;
use super::report::EpochRecord;
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{EarlyStop, Experiment};
use kiln::rundir::Eval;
use kiln::span::Span;

/// Whether the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep training.
    Continue,
    /// Early stopping ends the phase in progress: the run finishes normally after its last
    /// phase, and goes on to the next one otherwise.
    Stop,
}

impl Flow {
    /// `Stop` when either says stop.
    pub fn and(self, other: Flow) -> Flow {
        if self == Flow::Stop || other == Flow::Stop {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// What the loop lends a hook: where training stands and where records go.
pub struct Cx<'a> {
    /// The position (step, epoch, sums of the epoch so far, early stopping state).
    pub pos: &'a mut Position,
    /// Records, checkpoints and progress.
    pub out: &'a mut dyn Output,
}

/// One optimizer step, as hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct StepReport {
    /// The step's number (1-based).
    pub step: u64,
    /// The mean loss of the batch; non-finite when the step was not taken.
    pub loss: f64,
    /// The learning rate of the step.
    pub lr: f64,
    /// Training samples per second since the run (or its resumption) started.
    pub samples_per_s: f64,
}

/// An evaluation on the validation split, as hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct Evaluated {
    /// Its metrics.
    pub eval: Eval,
    /// The mean training loss of the epoch it follows (or of the epoch so far).
    pub train_loss: f64,
    /// Whether it is the evaluation of the final weights, after training ended.
    pub last: bool,
}

/// An observer of the loop. Every method has a default that does nothing and goes on.
pub trait Hook {
    /// An epoch begins with `batches` steps, `done` of them already taken (when resuming).
    fn start_epoch(&mut self, _cx: &mut Cx, _batches: u64, _done: u64) {}
    /// An optimizer step finished and the position counts it.
    fn after_step(&mut self, _cx: &mut Cx, _s: &StepReport) -> Result<Flow, Diagnostic> {
        Ok(Flow::Continue)
    }
    /// The validation split was evaluated.
    fn after_eval(&mut self, _cx: &mut Cx, _e: &Evaluated) -> Result<Flow, Diagnostic> {
        Ok(Flow::Continue)
    }
    /// An epoch ended (a run that stops within an epoch ends it too).
    fn after_epoch(&mut self, _cx: &mut Cx, _r: &EpochRecord) -> Result<Flow, Diagnostic> {
        Ok(Flow::Continue)
    }
}

/// Calls `f` on every hook in order, stopping at the first error; `Stop` when any says stop.
pub fn each(
    hooks: &mut [Box<dyn Hook>],
    cx: &mut Cx,
    mut f: impl FnMut(&mut dyn Hook, &mut Cx) -> Result<Flow, Diagnostic>,
) -> Result<Flow, Diagnostic> {
    let mut flow = Flow::Continue;
    for h in hooks {
        flow = flow.and(f(h.as_mut(), cx)?);
    }
    Ok(flow)
}

/// Writes step, epoch and evaluation records and shows progress, each naming its phase.
pub struct Records {
    /// The run's phases.
    pub timeline: Timeline,
}

impl Hook for Records {
    fn start_epoch(&mut self, cx: &mut Cx, batches: u64, done: u64) {
        let epoch = cx.pos.epoch + 1;
        let phase = self.timeline.tag(cx.pos, epoch);
        cx.out
            .progress()
            .start_epoch(epoch, phase.as_ref(), batches, done);
    }

    fn after_step(&mut self, cx: &mut Cx, s: &StepReport) -> Result<Flow, Diagnostic> {
        cx.out.step_record(s.step, s.loss, s.lr)?;
        let loss = cx.pos.epoch_loss_sum / cx.pos.epoch_seen.max(1.0);
        cx.out.progress().step(loss, s.samples_per_s);
        Ok(Flow::Continue)
    }

    fn after_eval(&mut self, cx: &mut Cx, e: &Evaluated) -> Result<Flow, Diagnostic> {
        // Epochs are numbered from 1 in every record: an evaluation within an epoch belongs to
        // the epoch in progress, one between epochs to the epoch just finished.
        let epoch = cx.pos.epoch + u64::from(cx.pos.batch_in_epoch > 0);
        let phase = self.timeline.tag(cx.pos, epoch);
        if !e.last {
            cx.out
                .progress()
                .eval(epoch, phase.as_ref(), cx.pos.step, &e.eval);
        }
        cx.pos.metrics_lines = cx.out.eval_record(epoch, cx.pos.step, &e.eval, phase)?;
        cx.pos.last_eval_step = Some(cx.pos.step);
        Ok(Flow::Continue)
    }

    fn after_epoch(&mut self, cx: &mut Cx, r: &EpochRecord) -> Result<Flow, Diagnostic> {
        cx.pos.metrics_lines = cx.out.train_record(r)?;
        cx.out.progress().end_epoch(r);
        Ok(Flow::Continue)
    }
}

/// Fails the run when the loss becomes NaN or infinite, after its step record is written; the
/// last checkpoint on disk stays as it was.
pub struct NanGuard {
    /// The learning rate's value in the file, where the failure points.
    pub lr_span: Span,
}

impl Hook for NanGuard {
    fn after_step(&mut self, cx: &mut Cx, s: &StepReport) -> Result<Flow, Diagnostic> {
        if s.loss.is_finite() {
            return Ok(Flow::Continue);
        }
        cx.out.flush_steps()?;
        Err(Problem::Running(Running::NonFiniteLoss {
            span: self.lr_span,
            nan: s.loss.is_nan(),
            step: s.step,
            epoch: cx.pos.epoch + 1,
            lr: s.lr,
        })
        .diagnostic())
    }
}

/// Ends the phase in progress (the run, in its last phase) when the watched metric has not
/// improved for `patience` evaluations of that phase. Its state (the best value, evaluations
/// since) lives in the position, so checkpoints keep it; a new phase starts it afresh
/// ([`Timeline::advance`]).
pub struct EarlyStopping {
    /// The experiment's setting.
    pub rule: EarlyStop,
    /// The run's phases: which evaluations count.
    pub timeline: Timeline,
}

impl EarlyStopping {
    /// The early stopping of `exp`, when it has one.
    pub fn of(exp: &Experiment, timeline: Timeline) -> Option<EarlyStopping> {
        exp.train
            .early_stop
            .clone()
            .map(|rule| EarlyStopping { rule, timeline })
    }
}

impl Hook for EarlyStopping {
    fn after_eval(&mut self, cx: &mut Cx, e: &Evaluated) -> Result<Flow, Diagnostic> {
        if e.last || !self.timeline.watched(cx.pos) {
            return Ok(Flow::Continue);
        }
        let es = &self.rule;
        let value = match es.metric.as_str() {
            "val_accuracy" => e.eval.accuracy.unwrap_or(0.0),
            "train_loss" => e.train_loss,
            _ => e.eval.loss,
        };
        let pos = &mut *cx.pos;
        let improved = match pos.best {
            None => true,
            Some(best) if es.maximize => value > best + es.min_delta,
            Some(best) => value < best - es.min_delta,
        };
        if improved {
            pos.best = Some(value);
            pos.bad_evals = 0;
        } else {
            pos.bad_evals += 1;
        }
        Ok(if pos.bad_evals >= es.patience {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
}
