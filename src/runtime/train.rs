//! The training loop. It takes steps ([`Stepper`]), evaluates when the experiment says so,
//! writes checkpoints at step boundaries and stops when it is cancelled; records, progress,
//! the NaN check and early stopping observe it as [`Hook`]s, and everything it writes goes
//! through an [`Output`].

use std::time::Instant;

use tch::{Device, Tensor};

use super::budget::Budget;
use super::cancel::Cancel;
use super::checkpoint::{Fingerprint, Position, Saved};
use super::compress::pruner::{Boundary, Pruner};
use super::compress::timeline::Timeline;
use super::compute::Watch;
use super::data::{Dataset, Loader, Splits};
use super::failure::At;
use super::hooks::{each, Cx, EarlyStopping, Evaluated, Flow, Hook, NanGuard, Records, StepReport};
use super::output::Output;
use super::parallel::strategy::Strategy;
use super::regression::{Regression, Scores};
use super::report::EpochRecord;
use super::schedule::Lr;
use super::state::Checkpoints;
use super::step::{Backprop, Model, Objective, Stepper};
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Duration, Experiment, Metric};
use kiln::rundir::{Measured, Segment, TopK};

pub use kiln::rundir::{Eval, Outcome};

/// Everything one run needs.
pub struct Trainer<'a> {
    /// The experiment.
    pub exp: &'a Experiment,
    /// The model, as the loop sees it.
    pub model: &'a dyn Model,
    /// The parallel strategy: how the gradients of a batch are computed, and what checkpoints
    /// and the final weights hold.
    pub strategy: Box<dyn Strategy>,
    /// The data.
    pub splits: Splits,
    /// Where batches go.
    pub device: Device,
    /// The run's length in steps.
    pub budget: Budget,
    /// Where records, checkpoints and progress go.
    pub out: &'a mut dyn Output,
    /// Stops the run after the step in progress, with a checkpoint.
    pub cancel: Cancel,
    /// The observers, called in order.
    pub hooks: Vec<Box<dyn Hook>>,
    /// What the experiment computes, written into every checkpoint.
    pub fingerprint: Fingerprint,
    /// The parts of the run so far, this one last, written into every checkpoint.
    pub history: Vec<Segment>,
    /// Pruning during the run, when the experiment prunes.
    pub pruner: Option<Pruner>,
    /// The run's phases: the training, then compression's fine-tuning or rounds.
    pub timeline: Timeline,
    /// The uncompressed model's evaluations (the step whose weights they evaluated, validation,
    /// test), taken just before pruning after training; `None` until then.
    pub uncompressed: Option<(u64, Option<Eval>, Option<Eval>)>,
}

/// The observers of every run: records and progress, the NaN check, early stopping; records
/// and early stopping follow the run's phases.
pub fn standard_hooks(exp: &Experiment, timeline: Timeline) -> Vec<Box<dyn Hook>> {
    let mut hooks: Vec<Box<dyn Hook>> = vec![
        Box::new(Records { timeline }),
        Box::new(NanGuard {
            lr_span: exp.optimizer.lr_span,
        }),
    ];
    if let Some(es) = EarlyStopping::of(exp, timeline) {
        hooks.push(Box::new(es));
    }
    hooks
}

/// Evaluates `model` on a dataset without gradients, in eval mode, with the batch size of
/// `exp`. Processes that share evaluations (the ranks of a distributed run, as `backprop` says)
/// each evaluate their share and sum the results. The loss, accuracies and regression metrics
/// are those of the whole dataset, from sums over its batches.
pub fn evaluate(
    exp: &Experiment,
    model: &dyn Model,
    backprop: &dyn Backprop,
    device: Device,
    objective: &Objective,
    data: &Dataset,
) -> Result<Eval, Diagnostic> {
    let span = exp.train.loss_span;
    let (index, count) = backprop.share();
    let (index, count) = (index as i64, count.max(1) as i64);
    let n = data.len();
    let (lo, hi) = (index * n / count, (index + 1) * n / count);
    let part = data.part(lo, hi).at(span)?;
    let top_k = exp.train.metrics.iter().find_map(|m| {
        if let Metric::TopK(k) = m {
            Some(*k)
        } else {
            None
        }
    });
    let classes = objective.classes();
    let wants = |m: Metric| objective.regression() && exp.train.metrics.contains(&m);
    tch::no_grad(|| {
        // `[loss, weight, correct, in top k, counted]` summed over the batches on the device,
        // read once at the end; `counted`: the class targets accuracy counts (those not
        // ignored), in samples.
        let mut totals: Option<Tensor> = None;
        // The regression metrics' sums, over the whole split's targets.
        let mut regression = if [Metric::Mae, Metric::Rmse, Metric::R2]
            .into_iter()
            .any(wants)
        {
            Some(Regression::new(&data.targets, span)?)
        } else {
            None
        };
        let loader = Loader::new(&part, exp.data.eval_batch as i64, false, 0, 0, 0, device)?
            .at(exp.data.batch_span);
        for batch in loader {
            let (x, y) = batch?;
            let out = backprop.infer(model, &x)?;
            let y = y.f_to_device(out.device()).at(span)?;
            let sums = objective.sums(&out, &y)?;
            let zero = || Tensor::f_zeros([1], (tch::Kind::Double, out.device())).at(span);
            let accuracy = if classes {
                // Accuracy counts the targets not ignored (every token of a class per token).
                let in_top = match top_k {
                    Some(k) => objective.in_top(&out, &y, k as i64)?,
                    None => zero()?.f_reshape([]).at(span)?,
                };
                Tensor::f_stack(
                    &[objective.correct(&out, &y)?, in_top, objective.counted(&y)?],
                    0,
                )
                .at(span)?
            } else {
                zero()?.f_expand([3], false).at(span)?
            };
            let row = Tensor::f_cat(&[sums, accuracy], 0).at(span)?;
            totals = Some(match totals.take() {
                None => row,
                Some(t) => t.f_add(&row).at(span)?,
            });
            if let Some(r) = &mut regression {
                let (p, y) = objective.fit(&out, &y)?;
                r.add(&p, &y)?;
            }
        }
        let mut sums = match &totals {
            Some(t) => Vec::<f64>::try_from(&t.f_to_device(Device::Cpu).at(span)?).at(span)?,
            None => vec![0.0; 5],
        };
        if let Some(r) = &regression {
            sums.extend(r.sums()?);
        }
        backprop.reduce(&mut sums)?;
        let (loss, weight, correct, in_top, counted) =
            (sums[0], sums[1], sums[2], sums[3], sums[4]);
        let scores = regression.map(|r| r.scores(&sums[5..]));
        let score = |m: Metric, f: fn(&Scores) -> f64| scores.as_ref().filter(|_| wants(m)).map(f);
        // A split whose class targets are all ignored has no mean; it reports 0.
        let mean = |sum: f64, over: f64| if over > 0.0 { sum / over } else { 0.0 };
        Ok(Eval {
            loss: mean(loss, weight),
            accuracy: classes.then_some(mean(correct, counted)),
            top_k: top_k.filter(|_| classes).map(|k| TopK {
                k,
                accuracy: mean(in_top, counted),
            }),
            mae: score(Metric::Mae, |s| s.mae),
            rmse: score(Metric::Rmse, |s| s.rmse),
            r2: score(Metric::R2, |s| s.r2),
        })
    })
}

/// A step whose values are still on the device.
struct Due {
    step: u64,
    lr: f64,
    samples: f64,
    samples_per_s: f64,
    /// The step's `[loss sum, correct, counted, weight]` ([`super::step::Stepped`]).
    tally: Tensor,
    /// Whether the ranks of a process group agreed on them: then they are read at once.
    agreed: bool,
}

/// The steps whose values have not been read yet. Reading a value from a CUDA device waits for
/// every kernel queued before it, so the loop reads them together when they are due, on every
/// device alike: when an evaluation, a checkpoint or a stop needs the sums, at the end of an
/// epoch, once [`Pending::STEPS`] steps or [`Pending::SECONDS`] have passed since the last
/// read, and at once where the ranks of a process group agreed on them (every rank then fails
/// at the same step). The NaN guard sees every step in order and names the first non-finite
/// one; the steps taken after it are never checkpointed.
struct Pending {
    steps: Vec<Due>,
    /// When the values were last read.
    read: Instant,
}

impl Pending {
    /// Steps between reads at most.
    const STEPS: usize = 16;
    /// Seconds between reads at most (the progress display's refresh).
    const SECONDS: f64 = 0.5;

    fn new() -> Pending {
        Pending {
            steps: Vec::new(),
            read: Instant::now(),
        }
    }

    /// Whether the values are due now.
    fn due(&self) -> bool {
        self.steps.len() >= Self::STEPS
            || self.read.elapsed().as_secs_f64() >= Self::SECONDS
            || self.steps.last().is_some_and(|d| d.agreed)
    }
}

impl Trainer<'_> {
    /// Evaluates a dataset without gradients, in eval mode. Processes that share evaluations
    /// (the ranks of a distributed run) each evaluate their share and sum the results.
    pub fn evaluate(&self, objective: &Objective, data: &Dataset) -> Result<Eval, Diagnostic> {
        evaluate(
            self.exp,
            self.model,
            self.strategy.as_ref(),
            self.device,
            objective,
            data,
        )
    }

    /// Evaluates the validation split, when there is one, and tells the hooks.
    fn validate(
        &mut self,
        objective: &Objective,
        pos: &mut Position,
        train_loss: f64,
        last: bool,
    ) -> Result<Option<(Eval, Flow)>, Diagnostic> {
        let Some(val) = &self.splits.val else {
            return Ok(None);
        };
        let eval = self.evaluate(objective, val)?;
        let e = Evaluated {
            eval,
            train_loss,
            last,
        };
        let mut cx = Cx {
            pos,
            out: &mut *self.out,
        };
        let flow = each(&mut self.hooks, &mut cx, |h, cx| h.after_eval(cx, &e))?;
        Ok(Some((eval, flow)))
    }

    /// A validation that `eval_every` asks for during training: the hooks see it, and so does
    /// the schedule (`reduce_on_plateau`) where the phase feeds it.
    fn validate_due(
        &mut self,
        objective: &Objective,
        pos: &mut Position,
        train_loss: f64,
        lr: &mut Lr,
        last_val: &mut Option<Eval>,
    ) -> Result<Flow, Diagnostic> {
        let Some((e, flow)) = self.validate(objective, pos, train_loss, false)? else {
            return Ok(Flow::Continue);
        };
        if self.timeline.feeds_schedule(pos) {
            lr.observe(&e)?;
            pos.plateau = lr.plateau();
        }
        *last_val = Some(e);
        Ok(flow)
    }

    /// Trains from the start, or from a checkpoint's position.
    ///
    /// The run goes through its phases ([`Timeline`]): each one ends when its steps are taken
    /// or when early stopping ends it, at the end of an epoch; the boundary where it ends is
    /// processed once (pruning, rewinding), then the next phase starts with a new epoch.
    ///
    /// Steps leave their values on the device; the loop reads them when they are due
    /// ([`Pending`]). A run that fails reads those of the steps it took first, so that their
    /// records are kept and a non-finite loss among them is the failure it reports.
    pub fn run(&mut self, resume: Option<Saved>) -> Result<Outcome, Diagnostic> {
        let objective = Objective::new(self.exp);
        let mut pos = Position::default();
        let mut pending = Pending::new();
        match self.train(resume, &objective, &mut pos, &mut pending) {
            Ok(outcome) => Ok(outcome),
            Err(failure) => {
                self.settle(&mut pending, &objective, &mut pos)?;
                Err(failure)
            }
        }
    }

    /// Reads the values of the steps taken since the last read, in order: each step's record
    /// and the epoch's sums, then the hooks' `after_step` (the NaN guard among them, naming the
    /// step whose loss was not finite). A batch whose class targets were all ignored is K0420.
    fn settle(
        &mut self,
        pending: &mut Pending,
        objective: &Objective,
        pos: &mut Position,
    ) -> Result<Flow, Diagnostic> {
        pending.read = Instant::now();
        let steps = std::mem::take(&mut pending.steps);
        let Some(first) = steps.first() else {
            return Ok(Flow::Continue);
        };
        let span = self.exp.optimizer.span;
        let on = first.tally.device();
        let tallies: Vec<Tensor> = if steps.iter().all(|d| d.tally.device() == on) {
            vec![Tensor::f_cat(&steps.iter().map(|d| &d.tally).collect::<Vec<_>>(), 0).at(span)?]
        } else {
            steps.iter().map(|d| d.tally.shallow_clone()).collect()
        };
        let mut values = Vec::with_capacity(4 * steps.len());
        for t in tallies {
            values.extend(Vec::<f64>::try_from(&t.f_to_device(Device::Cpu).at(span)?).at(span)?);
        }
        let mut flow = Flow::Continue;
        for (d, v) in steps.iter().zip(values.chunks_exact(4)) {
            if objective.classes() && v[3] == 0.0 {
                return Err(objective.weightless());
            }
            pos.epoch_loss_sum += v[0];
            pos.epoch_correct += v[1];
            pos.epoch_counted += v[2];
            pos.epoch_seen += d.samples;
            let report = StepReport {
                step: d.step,
                loss: v[0] / d.samples,
                lr: d.lr,
                samples_per_s: d.samples_per_s,
            };
            let mut cx = Cx {
                pos: &mut *pos,
                out: &mut *self.out,
            };
            flow = flow.and(each(&mut self.hooks, &mut cx, |h, cx| {
                h.after_step(cx, &report)
            })?);
        }
        Ok(flow)
    }

    /// The training loop of [`Trainer::run`], from `pos` (the start, or the checkpoint's).
    fn train(
        &mut self,
        resume: Option<Saved>,
        objective: &Objective,
        pos: &mut Position,
        pending: &mut Pending,
    ) -> Result<Outcome, Diagnostic> {
        let exp = self.exp;
        let t = &exp.train;
        let span = exp.optimizer.span;
        let budget = self.budget;
        let timeline = self.timeline;
        let batch = exp.data.batch as i64;
        let mut lr = Lr::new(
            exp.optimizer.lr,
            &exp.schedule,
            &budget,
            exp.data.source_span,
        );
        let mut stepper = Stepper::new(exp, self.strategy.params_owned(self.model));
        if let Some(p) = &self.pruner {
            stepper.hooks.push(Box::new(p.keeper()));
        }
        let mut checkpoints =
            Checkpoints::new(exp, &budget, self.fingerprint.clone(), self.history.clone());
        if let Some((side, tensors)) = resume {
            self.strategy
                .restore(self.model, &mut stepper.optim, &tensors, span)?;
            stepper.optim.steps = side.position.optimizer_steps.unwrap_or(side.position.step);
            *pos = side.position;
            lr.resume(pos.plateau);
            self.out.truncate_metrics(pos.metrics_lines, pos.step)?;
        }
        if pos.phases.is_empty() {
            pos.phases = timeline.marks_at(pos.step);
        }
        // Time, samples and data wait count over every part of the run.
        let started = Instant::now();
        let (base_seconds, base_wait, base_samples) = (pos.seconds, pos.wait_seconds, pos.samples);
        let mut wait = 0.0;
        let mut watch = Watch::new(self.device, pos.step);
        let mut outcome = Outcome::default();
        let mut last_val: Option<Eval> = None;
        // Whether a boundary changed the weights since the last step.
        let mut changed = false;
        loop {
            // A phase that is over ends between epochs, once its last epoch is recorded; its
            // boundary is processed when the run goes on from there or ends there.
            if pos.batch_in_epoch == 0 && timeline.over(&*pos) {
                let last = timeline.is_last(&*pos);
                if !last && pos.step >= budget.stop {
                    break;
                }
                changed = self.boundary(objective, &mut stepper, &mut *pos, true)?;
                if last {
                    break;
                }
                timeline.advance(&mut *pos);
            }
            if pos.step >= budget.stop {
                break;
            }
            let epoch = pos.epoch;
            let until = timeline.due(&*pos).min(budget.stop);
            let mut loader = Loader::training(
                &self.splits.train,
                batch,
                exp.data.drop_last,
                exp.data.shuffle,
                exp.seed,
                epoch,
                pos.batch_in_epoch as usize,
                self.device,
            )?
            .at(exp.data.batch_span);
            let batches = budget
                .per_epoch
                .min(until.saturating_sub(pos.step) + pos.batch_in_epoch);
            let done = pos.batch_in_epoch;
            // An epoch's time and samples per second cover the same steps: all of the epoch,
            // those before an interruption included (its start is kept in the position), or,
            // resuming a checkpoint of an older version, the steps this process takes.
            let now = base_seconds + started.elapsed().as_secs_f64();
            if done == 0 {
                pos.epoch_began = Some(now);
            }
            let (began, seen_before) = match pos.epoch_began {
                Some(t) => (t, 0.0),
                None => (now, pos.epoch_seen),
            };
            let mut cx = Cx {
                pos: &mut *pos,
                out: &mut *self.out,
            };
            for h in &mut self.hooks {
                h.start_epoch(&mut cx, batches, done);
            }
            while pos.step < until && !timeline.over(&*pos) {
                let Some(next) = loader.next() else { break };
                let (x, y) = next?;
                self.boundary(objective, &mut stepper, &mut *pos, false)?;
                let at = timeline.lr_step(&*pos, pos.step);
                let step_lr = lr.at(at);
                stepper.optim.momentum = lr.momentum(at);
                // Seeding each step makes dropout depend only on (seed, step): a resumed run
                // draws the same masks as an uninterrupted one.
                tch::manual_seed((exp.seed.wrapping_mul(1_000_003).wrapping_add(pos.step)) as i64);
                let s = stepper.step(
                    self.strategy.as_mut(),
                    self.model,
                    objective,
                    &x,
                    &y,
                    step_lr,
                )?;
                pos.step += 1;
                pos.batch_in_epoch += 1;
                changed = false;
                pos.samples += s.samples;
                watch.stepped(pos.step);
                let elapsed = started.elapsed().as_secs_f64();
                pos.seconds = base_seconds + elapsed;
                pos.wait_seconds = base_wait + wait + loader.wait_seconds();
                pending.steps.push(Due {
                    step: pos.step,
                    lr: step_lr,
                    samples: s.samples,
                    samples_per_s: (pos.samples - base_samples) / elapsed.max(1e-9),
                    tally: s.tally,
                    agreed: s.agreed,
                });
                let eval_due = matches!(t.eval_every, Duration::Steps(_))
                    && timeline.eval_due(&*pos, t.eval_every, false);
                let save_due = checkpoints.due(pos.step);
                let cancelled = self.cancel.is_cancelled();
                let mut flow = Flow::Continue;
                if pending.due() || eval_due || save_due || cancelled {
                    flow = self.settle(pending, objective, pos)?;
                }
                if eval_due {
                    let train_loss = pos.epoch_loss_sum / pos.epoch_seen.max(1.0);
                    let f = self.validate_due(
                        objective,
                        &mut *pos,
                        train_loss,
                        &mut lr,
                        &mut last_val,
                    )?;
                    flow = flow.and(f);
                }
                if flow == Flow::Stop {
                    timeline.stop(&mut *pos);
                }
                if save_due {
                    checkpoints.save(
                        self.strategy.as_ref(),
                        self.model,
                        &stepper.optim,
                        &*pos,
                        &mut *self.out,
                    )?;
                }
                if cancelled {
                    checkpoints.save(
                        self.strategy.as_ref(),
                        self.model,
                        &stepper.optim,
                        &*pos,
                        &mut *self.out,
                    )?;
                    return Err(self.interrupted(&*pos));
                }
            }
            wait += loader.wait_seconds();
            let flow = self.settle(pending, objective, pos)?;
            // A phase that is over closes its last epoch, however many of its batches it took.
            let epoch_done = pos.batch_in_epoch >= budget.per_epoch || timeline.over(&*pos);
            // Except the run's one phase, ending within an epoch at its length: its line is
            // written, but the position keeps the epoch open, so that an extension of the run
            // goes on within it as the longer run in one go does (a later phase starts an epoch
            // of its own, and early stopping ends the run).
            let open = pos.batch_in_epoch < budget.per_epoch
                && timeline.count() == 1
                && self.pruner.is_none()
                && !pos.phases.iter().any(|m| m.stopped);
            let seconds = base_seconds + started.elapsed().as_secs_f64() - began;
            let record = EpochRecord {
                epoch: epoch + 1,
                step: pos.step,
                lr: lr.at(timeline.lr_step(&*pos, pos.step.saturating_sub(1))),
                train_loss: pos.epoch_loss_sum / pos.epoch_seen.max(1.0),
                train_accuracy: objective
                    .classes()
                    .then_some(pos.epoch_correct / pos.epoch_counted.max(f64::MIN_POSITIVE)),
                seconds,
                samples_per_s: (pos.epoch_seen - seen_before) / seconds.max(1e-9),
                phase: timeline.tag(&*pos, epoch + 1),
            };
            pos.train_loss = record.train_loss;
            let mut cx = Cx {
                pos: &mut *pos,
                out: &mut *self.out,
            };
            let mut flow = flow.and(each(&mut self.hooks, &mut cx, |h, cx| {
                h.after_epoch(cx, &record)
            })?);
            if epoch_done && !open {
                pos.epoch += 1;
                pos.batch_in_epoch = 0;
                pos.epoch_loss_sum = 0.0;
                pos.epoch_correct = 0.0;
                pos.epoch_counted = 0.0;
                pos.epoch_seen = 0.0;
                if matches!(t.eval_every, Duration::Epochs(_))
                    && timeline.eval_due(&*pos, t.eval_every, true)
                {
                    let train_loss = record.train_loss;
                    let f = self.validate_due(
                        objective,
                        &mut *pos,
                        train_loss,
                        &mut lr,
                        &mut last_val,
                    )?;
                    flow = flow.and(f);
                }
            }
            if flow == Flow::Stop {
                timeline.stop(&mut *pos);
            }
        }
        pos.seconds = base_seconds + started.elapsed().as_secs_f64();
        pos.wait_seconds = base_wait + wait;
        outcome.steps = pos.step;
        outcome.epochs = pos.epoch + u64::from(pos.batch_in_epoch > 0);
        outcome.train_loss = pos.train_loss;
        outcome.samples_per_s = pos.samples / pos.seconds.max(1e-9);
        outcome.data_wait = (pos.wait_seconds / pos.seconds.max(1e-9)).min(1.0);
        outcome.compute = Some(watch.finish(exp, outcome.samples_per_s));
        outcome.stopped_early = pos.phases.iter().any(|m| m.stopped);
        outcome.max_steps_reached =
            !outcome.stopped_early && budget.stop < timeline.end() && pos.step >= budget.stop;
        outcome.phases = timeline.ran(&*pos);
        self.uncompressed = pos.uncompressed.map(|m| (m.step, m.val, m.test));
        // Evaluate the final weights unless the last evaluation already saw them.
        let seen = match last_val {
            Some(v) if !changed && pos.last_eval_step == Some(pos.step) => Some(v),
            _ => None,
        };
        outcome.val = match seen {
            Some(v) => Some(v),
            None => self
                .validate(objective, &mut *pos, outcome.train_loss, true)?
                .map(|(e, _)| e),
        };
        if let Some(test) = &self.splits.test {
            outcome.test = Some(self.evaluate(objective, test)?);
        }
        // A compressing run always keeps its final weights: `kiln eval` and `kiln export`
        // make the compressed model from them; a run `--max-steps` stopped goes on from here.
        if checkpoints.enabled() || !exp.compression.is_empty() || outcome.max_steps_reached {
            checkpoints.save(
                self.strategy.as_ref(),
                self.model,
                &stepper.optim,
                &*pos,
                &mut *self.out,
            )?;
        }
        // Every run that ends keeps its final weights, for `kiln eval RUN_DIR`.
        let side = checkpoints.sidecar(&*pos);
        let weights = self.strategy.state_dict(self.model)?;
        self.out
            .final_weights(&side, &weights, exp.optimizer.span)?;
        self.out.flush_steps()?;
        Ok(outcome)
    }

    /// The boundary after the steps taken so far, processed once (`ends`: the phase in
    /// progress ends there): the uncompressed model is measured first where the training ends
    /// and pruning after training follows, and an iterative round's rewind gives the optimizer
    /// a fresh state. Returns whether the weights changed.
    fn boundary(
        &mut self,
        objective: &Objective,
        stepper: &mut Stepper,
        pos: &mut Position,
        ends: bool,
    ) -> Result<bool, Diagnostic> {
        let Some(pruner) = &self.pruner else {
            return Ok(false);
        };
        let (phase, _) = self.timeline.current(pos);
        if ends && phase == 0 && pruner.prunes_after_training() {
            let val = match &self.splits.val {
                Some(v) => Some(self.evaluate(objective, v)?),
                None => None,
            };
            let test = match &self.splits.test {
                Some(t) => Some(self.evaluate(objective, t)?),
                None => None,
            };
            pos.uncompressed = Some(Measured {
                step: pos.step,
                val,
                test,
            });
        }
        let fired = match &mut self.pruner {
            Some(p) => p.fire(Boundary {
                step: pos.step,
                phase,
                ends,
            })?,
            None => return Ok(false),
        };
        if fired.rewound {
            stepper.optim.reset();
        }
        Ok(fired.pruned || fired.rewound)
    }

    /// The failure of a cancelled run, which has just written its checkpoint.
    fn interrupted(&self, pos: &Position) -> Diagnostic {
        Problem::Running(Running::Interrupted {
            span: self.exp.train.loss_span,
            step: pos.step,
            epoch: pos.epoch + 1,
            signal: self.cancel.signal().map(kiln::supervise::signal_name),
            resume: self.out.resume_command(),
        })
        .diagnostic()
    }
}
