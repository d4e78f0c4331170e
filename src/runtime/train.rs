//! The training loop: batches, forward and backward, accumulation, clipping, the optimizer step,
//! evaluation, early stopping and checkpoints. It reads like tch's MNIST example with the knobs
//! of the experiment wired in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tch::{Device, Kind, Reduction, Tensor};

use super::checkpoint::{self, Fingerprint, Position, Sidecar};
use super::data::{Dataset, Loader, Splits};
use super::failure::At;
use super::model::Net;
use super::optim::{clip, LossScaler, Lr, Optim};
use super::report::{EpochRecord, Progress, RunWriter};
use kiln::diagnostic::Code;
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Duration, Experiment, Loss, Metric};
use kiln::span::Span;

/// Set by Ctrl-C; the loop stops after the step in progress and writes a checkpoint.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// What a finished run reports (the figures of `report.yaml`).
#[derive(Debug, Clone, Default, serde::Serialize)]
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
    /// Whether early stopping ended the run.
    pub stopped_early: bool,
}

/// Metrics of an evaluation.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Eval {
    /// Mean loss.
    pub loss: f64,
    /// Top-1 accuracy, for class targets.
    pub accuracy: Option<f64>,
    /// Top-k accuracy, when asked for.
    pub top_k: Option<(u64, f64)>,
}

/// The plan's fingerprint, compared on resume.
pub fn fingerprint(e: &Experiment) -> Fingerprint {
    Fingerprint {
        layers: kiln::ir::layers(&e.model.nodes)
            .iter()
            .map(|l| {
                format!(
                    "{} {} {} {}",
                    l.name,
                    kiln::plan::kind_name(&l.kind),
                    l.output.to_string(),
                    l.params
                )
            })
            .collect(),
        optimizer: e.optimizer.name().to_string(),
        world_size: e.parallel.data_parallel_size(),
    }
}

/// Everything one run needs.
pub struct Trainer<'a> {
    /// The experiment.
    pub exp: &'a Experiment,
    /// The lowered model.
    pub net: Net,
    /// The data.
    pub splits: Splits,
    /// Where batches go.
    pub device: Device,
    /// Where results are written.
    pub writer: &'a mut RunWriter,
    /// Progress display.
    pub progress: Progress,
    /// Stop after this many optimizer steps (`--max-steps`).
    pub max_steps: Option<u64>,
}

impl Trainer<'_> {
    fn loss(&self, out: &Tensor, y: &Tensor) -> Result<Tensor, Diagnostic> {
        let span = self.exp.train.loss_span;
        let out = if out.kind() == Kind::Float {
            out.shallow_clone()
        } else {
            out.f_to_kind(Kind::Float).at(span)?
        };
        match &self.exp.train.loss {
            Loss::CrossEntropy { label_smoothing } => out
                .f_cross_entropy_loss(y, None::<Tensor>, Reduction::Mean, -100, *label_smoothing)
                .at(span),
            Loss::Nll => out
                .f_nll_loss(y, None::<Tensor>, Reduction::Mean, -100)
                .at(span),
            Loss::Mse => out.f_mse_loss(y, Reduction::Mean).at(span),
            Loss::L1 => out.f_l1_loss(y, Reduction::Mean).at(span),
            Loss::BceWithLogits => {
                let y = y.f_to_kind(Kind::Float).at(span)?;
                let out = out.f_reshape(y.size()).at(span)?;
                out.f_binary_cross_entropy_with_logits(
                    &y,
                    None::<Tensor>,
                    None::<Tensor>,
                    Reduction::Mean,
                )
                .at(span)
            }
        }
    }

    fn classes(&self) -> bool {
        matches!(self.exp.train.loss, Loss::CrossEntropy { .. } | Loss::Nll)
    }

    /// Correct top-1 predictions in a batch.
    fn correct(&self, out: &Tensor, y: &Tensor) -> Result<f64, Diagnostic> {
        let span = self.exp.train.loss_span;
        let pred = out.f_argmax(-1, false).at(span)?;
        pred.f_eq_tensor(y)
            .at(span)?
            .f_sum(Kind::Float)
            .at(span)?
            .f_double_value(&[])
            .at(span)
    }

    /// Evaluates a dataset without gradients, in eval mode.
    pub fn evaluate(&self, data: &Dataset) -> Result<Eval, Diagnostic> {
        let span = self.exp.train.loss_span;
        let top_k = self.exp.train.metrics.iter().find_map(|m| {
            if let Metric::TopK(k) = m {
                Some(*k)
            } else {
                None
            }
        });
        tch::no_grad(|| {
            let (mut loss, mut correct, mut in_top, mut seen) = (0.0, 0.0, 0.0, 0.0);
            let loader = Loader::new(
                data,
                self.exp.data.batch as i64,
                false,
                0,
                0,
                0,
                self.device,
            )?
            .at(self.exp.data.batch_span);
            for batch in loader {
                let (x, y) = batch?;
                let out = self.net.forward(&x, false)?;
                let y = y.f_to_device(out.device()).at(span)?;
                let n = x.size().first().copied().unwrap_or(0) as f64;
                loss += self.loss(&out, &y)?.f_double_value(&[]).at(span)? * n;
                if self.classes() {
                    correct += self.correct(&out, &y)?;
                    if let Some(k) = top_k {
                        let (_, idx) = out.f_topk(k as i64, -1, true, true).at(span)?;
                        let hit = idx
                            .f_eq_tensor(&y.f_unsqueeze(-1).at(span)?)
                            .at(span)?
                            .f_any_dim(-1, false)
                            .at(span)?;
                        in_top += hit
                            .f_sum(Kind::Float)
                            .at(span)?
                            .f_double_value(&[])
                            .at(span)?;
                    }
                }
                seen += n;
            }
            let seen = seen.max(1.0);
            Ok(Eval {
                loss: loss / seen,
                accuracy: self.classes().then_some(correct / seen),
                top_k: top_k.filter(|_| self.classes()).map(|k| (k, in_top / seen)),
            })
        })
    }

    fn state_tensors(&self, optim: &Optim) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = self
            .net
            .params
            .iter()
            .map(|p| (format!("param/{}", p.name), p.tensor.detach()))
            .collect();
        out.extend(
            self.net
                .buffers
                .iter()
                .map(|b| (format!("buffer/{}", b.name), b.tensor.shallow_clone())),
        );
        for (i, state) in optim.state.iter().enumerate() {
            for (name, t) in state {
                out.push((
                    format!("optim/{}/{name}", self.net.params[i].name),
                    t.shallow_clone(),
                ));
            }
        }
        out
    }

    fn restore(
        &mut self,
        optim: &mut Optim,
        tensors: &[(String, Tensor)],
        span: Span,
    ) -> Result<(), Diagnostic> {
        let find = |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
        let missing = |name: &str| {
            Diagnostic::new(
                Code::ResumeIncompatible,
                span,
                format!("the checkpoint has no tensor `{name}`"),
            )
            .label("the checkpoint does not fit this model")
            .help("resume with the experiment that made the checkpoint")
        };
        tch::no_grad(|| -> Result<(), Diagnostic> {
            for p in &self.net.params {
                let t = find(&format!("param/{}", p.name)).ok_or_else(|| missing(&p.name))?;
                p.tensor.shallow_clone().f_copy_(t).at(span)?;
            }
            for b in &self.net.buffers {
                let t = find(&format!("buffer/{}", b.name)).ok_or_else(|| missing(&b.name))?;
                b.tensor.shallow_clone().f_copy_(t).at(span)?;
            }
            Ok(())
        })?;
        for (i, p) in self.net.params.iter().enumerate() {
            let prefix = format!("optim/{}/", p.name);
            for (name, t) in tensors.iter().filter(|(n, _)| n.starts_with(&prefix)) {
                let key: &'static str = match &name[prefix.len()..] {
                    "exp_avg" => "exp_avg",
                    "exp_avg_sq" => "exp_avg_sq",
                    "max_exp_avg_sq" => "max_exp_avg_sq",
                    "momentum_buffer" => "momentum_buffer",
                    "square_avg" => "square_avg",
                    "grad_avg" => "grad_avg",
                    other => return Err(missing(other)),
                };
                optim.state[i].push((key, t.f_to_device(p.tensor.device()).at(span)?));
            }
        }
        Ok(())
    }

    /// Trains from the start, or from a checkpoint's position.
    pub fn run(&mut self, resume: Option<checkpoint::Saved>) -> Result<Outcome, Diagnostic> {
        let exp = self.exp;
        let t = &exp.train;
        let span = exp.optimizer.span;
        let batch = exp.data.batch as i64;
        let per_epoch = Loader::batches_per_epoch(self.splits.train.len(), batch) as u64;
        let total = match t.length {
            Duration::Steps(n) => n,
            Duration::Epochs(n) => n * per_epoch,
        };
        let lr = Lr::new(exp.optimizer.lr, &exp.schedule, total, per_epoch);
        // `--max-steps` stops early; the schedule keeps the experiment's full length.
        let total = self.max_steps.map_or(total, |m| m.min(total));
        let mut optim = Optim::new(&exp.optimizer, self.net.params.len());
        let mut scaler = LossScaler::new(t.precision == kiln::ir::Precision::Fp16);
        let mut pos = Position::default();
        if let Some((side, tensors)) = resume {
            self.restore(&mut optim, &tensors, span)?;
            optim.steps = side.position.step;
            pos = side.position;
            self.writer.truncate_metrics(pos.metrics_lines, pos.step)?;
        }
        let params: Vec<Tensor> = self
            .net
            .params
            .iter()
            .map(|p| p.tensor.shallow_clone())
            .collect();
        let every = |d: Duration| match d {
            Duration::Steps(n) => n,
            Duration::Epochs(n) => n * per_epoch,
        };
        let eval_every = every(t.eval_every);
        let ckpt_every = t.checkpoint.as_ref().map(|c| every(c.every));
        let ckpt_keep = t.checkpoint.as_ref().map_or(3, |c| c.keep);
        let started = Instant::now();
        let (mut wait, mut trained) = (0.0, 0.0);
        let mut outcome = Outcome::default();
        let mut last_val: Option<Eval> = None;
        let write_checkpoint =
            |this: &mut Self, optim: &Optim, pos: &Position| -> Result<(), Diagnostic> {
                this.writer.flush_steps()?;
                let side = Sidecar {
                    kiln: env!("CARGO_PKG_VERSION").into(),
                    fingerprint: fingerprint(exp),
                    position: pos.clone(),
                    tensors: String::new(),
                };
                checkpoint::write(
                    &this.writer.checkpoint_dir(),
                    &side,
                    &this.state_tensors(optim),
                    ckpt_keep,
                    span,
                )
                .map(|_| ())
            };
        'epochs: while pos.step < total {
            let epoch = pos.epoch;
            let loader = Loader::new(
                &self.splits.train,
                batch,
                exp.data.shuffle,
                exp.seed,
                epoch,
                pos.batch_in_epoch as usize,
                self.device,
            )?
            .at(exp.data.batch_span);
            self.progress.start_epoch(
                epoch,
                per_epoch.min(total - pos.step + pos.batch_in_epoch),
                pos.batch_in_epoch,
            );
            let mut loader = loader;
            let epoch_start = Instant::now();
            while pos.step < total {
                let Some(next) = loader.next() else { break };
                let (x, y) = next?;
                let step_lr = lr.at(pos.step);
                // Seeding each step makes dropout depend only on (seed, step): a resumed run
                // draws the same masks as an uninterrupted one.
                tch::manual_seed((exp.seed.wrapping_mul(1_000_003).wrapping_add(pos.step)) as i64);
                for p in &params {
                    let mut g = p.grad();
                    if g.defined() {
                        let _ = g.f_zero_().at(span)?;
                    }
                }
                let n = x.size().first().copied().unwrap_or(1);
                let chunks = (t.accumulate as i64).min(n).max(1);
                let xs = x.f_chunk(chunks, 0).at(span)?;
                let ys = y.f_chunk(chunks, 0).at(span)?;
                let mut step_loss = 0.0;
                for (xm, ym) in xs.iter().zip(&ys) {
                    let out = self.net.forward(xm, true)?;
                    let ym = ym.f_to_device(out.device()).at(span)?;
                    let l = self.loss(&out, &ym)?;
                    let m = xm.size().first().copied().unwrap_or(1);
                    let value = l.f_double_value(&[]).at(span)?;
                    if !value.is_finite() {
                        self.writer.step_record(pos.step + 1, value, step_lr)?;
                        self.writer.flush_steps()?;
                        return Err(Diagnostic::new(
                            Code::NonFiniteLoss,
                            exp.optimizer.lr_span,
                            format!("the loss became {} at step {} (epoch {})", if value.is_nan() { "NaN" } else { "infinite" }, pos.step + 1, epoch + 1),
                        )
                        .label(format!("learning rate {step_lr} at that step"))
                        .help("lower the learning rate, clip gradients with `clip_norm 1.0`, or check the data for NaN and infinite values; the last checkpoint on disk is intact"));
                    }
                    step_loss += value * m as f64;
                    if self.classes() {
                        pos.epoch_correct += self.correct(&out, &ym)?;
                    }
                    l.f_mul_scalar(m as f64 / n as f64 * scaler.scale())
                        .at(span)?
                        .f_backward()
                        .at(span)?;
                }
                // fp16: unscale, and skip the step when the scaled gradients overflowed.
                if scaler.unscale(&params, span)? {
                    clip(&params, t.clip_norm, t.clip_value, span)?;
                    optim.step(&params, step_lr)?;
                }
                self.writer
                    .step_record(pos.step + 1, step_loss / n as f64, step_lr)?;
                pos.step += 1;
                pos.batch_in_epoch += 1;
                pos.epoch_loss_sum += step_loss;
                pos.epoch_seen += n as f64;
                trained += n as f64;
                self.progress.step(
                    pos.epoch_loss_sum / pos.epoch_seen.max(1.0),
                    trained / started.elapsed().as_secs_f64().max(1e-9),
                );
                let step_eval =
                    matches!(t.eval_every, Duration::Steps(_)) && pos.step % eval_every == 0;
                if step_eval {
                    if let Some(stop) = self.validate(&mut pos, &mut last_val)? {
                        outcome.stopped_early = stop;
                        if stop {
                            break 'epochs;
                        }
                    }
                }
                if ckpt_every.is_some_and(|c| pos.step % c == 0) {
                    write_checkpoint(self, &optim, &pos)?;
                }
                if INTERRUPTED.load(Ordering::SeqCst) {
                    write_checkpoint(self, &optim, &pos)?;
                    return Err(Diagnostic::new(
                        Code::Interrupted,
                        t.loss_span,
                        format!("interrupted at step {} (epoch {})", pos.step, epoch + 1),
                    )
                    .label("training stopped here")
                    .help(format!(
                        "resume with `kiln run --resume {}`",
                        self.writer.dir().display()
                    )));
                }
            }
            wait += loader.wait_seconds();
            let epoch_done = pos.batch_in_epoch >= per_epoch;
            let record = EpochRecord {
                epoch: epoch + 1,
                step: pos.step,
                lr: lr.at(pos.step.saturating_sub(1)),
                train_loss: pos.epoch_loss_sum / pos.epoch_seen.max(1.0),
                train_accuracy: self
                    .classes()
                    .then_some(pos.epoch_correct / pos.epoch_seen.max(1.0)),
                seconds: epoch_start.elapsed().as_secs_f64(),
                samples_per_s: pos.epoch_seen / epoch_start.elapsed().as_secs_f64().max(1e-9),
            };
            outcome.train_loss = record.train_loss;
            pos.metrics_lines = self.writer.train_record(&record)?;
            self.progress.end_epoch(&record);
            outcome.epochs = epoch + 1;
            if epoch_done {
                pos.epoch += 1;
                pos.batch_in_epoch = 0;
                pos.epoch_loss_sum = 0.0;
                pos.epoch_correct = 0.0;
                pos.epoch_seen = 0.0;
                let epoch_eval = matches!(t.eval_every, Duration::Epochs(_))
                    && pos.epoch % eval_every.div_euclid(per_epoch).max(1) == 0;
                if epoch_eval {
                    if let Some(stop) = self.validate(&mut pos, &mut last_val)? {
                        outcome.stopped_early = stop;
                        if stop {
                            break 'epochs;
                        }
                    }
                }
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        outcome.steps = pos.step;
        outcome.samples_per_s = trained / elapsed.max(1e-9);
        outcome.data_wait = (wait / elapsed.max(1e-9)).min(1.0);
        outcome.val = match (&self.splits.val, last_val) {
            (Some(_), Some(v)) if !outcome.stopped_early => {
                // Evaluate the final weights unless the last evaluation already saw them.
                Some(if self.writer.last_eval_step() == Some(pos.step) {
                    v
                } else {
                    self.final_eval(&mut pos)?
                })
            }
            (Some(_), _) => Some(self.final_eval(&mut pos)?),
            (None, _) => None,
        };
        if let Some(test) = &self.splits.test {
            outcome.test = Some(self.evaluate(test)?);
        }
        if t.checkpoint.is_some() {
            write_checkpoint(self, &optim, &pos)?;
        }
        self.writer.flush_steps()?;
        Ok(outcome)
    }

    fn final_eval(&mut self, pos: &mut Position) -> Result<Eval, Diagnostic> {
        let Some(val) = &self.splits.val else {
            return Ok(Eval::default());
        };
        let e = self.evaluate(val)?;
        pos.metrics_lines = self.writer.eval_record(pos.epoch, pos.step, &e)?;
        Ok(e)
    }

    /// Evaluates on the validation split, records it, and applies early stopping: `Some(true)`
    /// when training should stop, `None` without a validation split.
    fn validate(
        &mut self,
        pos: &mut Position,
        last: &mut Option<Eval>,
    ) -> Result<Option<bool>, Diagnostic> {
        let Some(val) = &self.splits.val else {
            return Ok(None);
        };
        let e = self.evaluate(val)?;
        pos.metrics_lines = self.writer.eval_record(pos.epoch, pos.step, &e)?;
        self.progress.eval(&e);
        *last = Some(e);
        let Some(es) = &self.exp.train.early_stop else {
            return Ok(Some(false));
        };
        let value = match es.metric.as_str() {
            "val_accuracy" => e.accuracy.unwrap_or(0.0),
            "train_loss" => pos.epoch_loss_sum / pos.epoch_seen.max(1.0),
            _ => e.loss,
        };
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
        Ok(Some(pos.bad_evals >= es.patience))
    }
}
