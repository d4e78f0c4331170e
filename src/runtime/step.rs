//! One optimizer step, apart from policy and IO: the gradients of the batch ([`Backprop`]: on
//! one device, or spread by a parallel strategy), the fp16 unscale, clipping and the update. The
//! step talks to the model through [`Model`] and offers [`UpdateHook`] where a strategy works on
//! gradients or weights; it knows nothing of evaluation, checkpoints, records or progress.

use tch::{Kind, Tensor};

use super::failure::At;
use super::model::{dropout_draw, with_dropout_rows, Net};
pub use super::objective::{Objective, Pass, Whole};
use super::optim::{clip, LossScaler, Optim};
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;
use kiln::span::Span;

/// The model as the loop sees it. A parallel strategy wraps a model in another `Model` (a
/// data-parallel replica, a pipeline stage) without the loop changing.
pub trait Model {
    /// Runs a batch; `train` selects training behaviour (dropout, batch statistics).
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor, Diagnostic>;
    /// The trainable tensors with their `state_dict` names, in a fixed order.
    fn params(&self) -> Vec<(&str, &Tensor)>;
    /// The non-trainable tensors kept with the model (batch-norm statistics).
    fn buffers(&self) -> Vec<(&str, &Tensor)>;
}

impl Model for Net {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor, Diagnostic> {
        Net::forward(self, x, train)
    }

    fn params(&self) -> Vec<(&str, &Tensor)> {
        self.params
            .iter()
            .map(|p| (p.name.as_str(), &p.tensor))
            .collect()
    }

    fn buffers(&self) -> Vec<(&str, &Tensor)> {
        self.buffers
            .iter()
            .map(|b| (b.name.as_str(), &b.tensor))
            .collect()
    }
}

/// Work on the gradients and weights of every step, in the order a step meets it.
pub trait UpdateHook {
    /// The gradients of the global batch are accumulated, still scaled for fp16, before they
    /// are unscaled, clipped and applied: where a data-parallel strategy all-reduces them.
    fn gradients_ready(&mut self, params: &[Tensor], span: Span) -> Result<(), Diagnostic>;
    /// The optimizer has updated the weights: where pruning re-applies its masks.
    fn after_update(&mut self, params: &[Tensor], span: Span) -> Result<(), Diagnostic>;
}

/// One batch as a strategy sees it.
pub struct Batch<'a> {
    /// The inputs.
    pub x: &'a Tensor,
    /// The targets.
    pub y: &'a Tensor,
    /// Micro-batches the batch is split into (gradient accumulation), at least 1.
    pub accumulate: i64,
    /// The factor on the loss before backward (the fp16 loss scale; 1 otherwise).
    pub scale: f64,
    /// What the whole batch's mean loss divides by, known before any forward pass.
    pub whole: Whole,
    /// The step's dropout key: a forward pass on rows `r..` of the batch runs under
    /// `model::with_dropout_rows(dropout, r, ..)`, so its masks are the whole batch's.
    pub dropout: u64,
    /// Where a failure points (the optimizer statement).
    pub span: Span,
}

/// How the gradients of one batch come to be: on the model's own devices, over replicas, through
/// pipeline stages, or on this rank of a process group. A parallel strategy is a `Backprop` with
/// its state's layout (`parallel::strategy::Strategy`); the step around it (unsetting or zeroing,
/// unscaling, clipping, the update) is the same for all.
pub trait Backprop {
    /// Leaves in the `.grad` of `model`'s parameters (zero on entry, or unset where
    /// [`Backprop::unset_gradients`] says so) the gradient of the batch's mean loss times
    /// `batch.scale`.
    fn backprop(
        &mut self,
        model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic>;

    /// Whether the gradients may be unset on entry (`p.grad = None`, as PyTorch's
    /// `zero_grad()` leaves them) rather than zero: where the backward pass alone writes them,
    /// it then stores each as computed, with no fill before and no addition into it. Strategies
    /// that write into gradients they hold (replicas' sums, a reducer's buckets) need them
    /// zeroed.
    fn unset_gradients(&self) -> bool {
        false
    }

    /// This process's share of an evaluation, `(index, count)`: the `index`-th of `count` equal
    /// runs of a split's samples; the whole split, `(0, 1)`, unless processes share it.
    fn share(&self) -> (usize, usize) {
        (0, 1)
    }

    /// Sums `values` in place over the processes that share evaluations (nothing to do alone).
    fn reduce(&self, _values: &mut [f64]) -> Result<(), Diagnostic> {
        Ok(())
    }

    /// Sums `t` in place over the processes whose gradients are parts of one (the ranks of a
    /// sharded run, each holding a shard of every gradient): where the step needs a value of
    /// the whole gradient, its norm for clipping or whether it is finite. Nothing to do where
    /// every process holds whole gradients.
    fn all_sum(&self, _t: &Tensor) -> Result<(), Diagnostic> {
        Ok(())
    }

    /// Whether this process counts the gradient of the `i`-th parameter it updates in a value
    /// of the whole gradient that [`Backprop::all_sum`] sums (its norm): all, except a copy that
    /// another process of the sum counts (a replicated layer on a tensor rank after the first).
    fn counted(&self, _i: usize) -> bool {
        true
    }

    /// Runs `model` on a batch in eval mode, outside a step (an evaluation): as it is, where
    /// this process holds the model whole; a sharded run gathers each unit as it runs (on every
    /// rank at the same point).
    fn infer(&self, model: &dyn Model, x: &Tensor) -> Result<Tensor, Diagnostic> {
        model.forward(x, false)
    }
}

/// Calls `f(x, y, pass)` on each micro-batch of `batch` in order, its dropout masks placed at
/// the micro-batch's rows of the batch.
pub fn micro_batches(
    batch: &Batch,
    mut f: impl FnMut(&Tensor, &Tensor, &mut Pass) -> Result<(), Diagnostic>,
) -> Result<Pass, Diagnostic> {
    let xs = batch.x.f_chunk(batch.accumulate, 0).at(batch.span)?;
    let ys = batch.y.f_chunk(batch.accumulate, 0).at(batch.span)?;
    let mut pass = Pass::default();
    let mut first = 0u64;
    for (xm, ym) in xs.iter().zip(&ys) {
        with_dropout_rows(batch.dropout, first, || f(xm, ym, &mut pass))?;
        first += xm.size().first().copied().unwrap_or(0) as u64;
    }
    Ok(pass)
}

/// What one step computed, left on the device: the step reads nothing back.
#[derive(Debug)]
pub struct Stepped {
    /// Samples in the batch.
    pub samples: f64,
    /// `[loss sum, correct, counted, weight]` in f64: the batch's mean loss times its samples
    /// (non-finite when the loss was), the correct top-1 predictions for class targets among
    /// those accuracy counts, the class targets not ignored (what accuracy divides `correct`
    /// by), and what the batch's mean divides by (its class targets' weight: 0 when every
    /// target is ignored, K0420; the samples for other losses).
    pub tally: Tensor,
    /// Whether the ranks of a process group agreed on the values (then every rank reads them
    /// at once, so that all see a non-finite loss at the same step).
    pub agreed: bool,
}

/// Takes optimizer steps: the optimizer, the fp16 loss scaler and the settings of a step.
pub struct Stepper {
    /// The optimizer and its state.
    pub optim: Optim,
    /// The parameters, in the model's order (shallow clones: they share storage).
    params: Vec<Tensor>,
    scaler: LossScaler,
    accumulate: i64,
    clip_norm: Option<f64>,
    clip_value: Option<f64>,
    span: Span,
    /// Strategies' work on gradients and weights; none today.
    pub hooks: Vec<Box<dyn UpdateHook>>,
}

impl Stepper {
    /// A stepper updating `named`, the parameters this process owns (the strategy's
    /// `params_owned`), with the optimizer and step settings of `exp`.
    pub fn new(exp: &Experiment, named: Vec<(String, Tensor)>) -> Stepper {
        let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        let params: Vec<Tensor> = named.iter().map(|(_, t)| t.shallow_clone()).collect();
        let t = &exp.train;
        Stepper {
            optim: Optim::new(&exp.optimizer, &names),
            params,
            scaler: LossScaler::new(t.precision == kiln::ir::Precision::Fp16),
            accumulate: t.accumulate as i64,
            clip_norm: t.clip_norm,
            clip_value: t.clip_value,
            span: exp.optimizer.span,
            hooks: Vec::new(),
        }
    }

    /// One optimizer step on the batch `(x, y)` at learning rate `lr`: `backprop` computes
    /// the gradients of the batch's mean loss over `accumulate` micro-batches. Nothing is read
    /// back from the device (but for fp16's overflow check): a non-finite loss or a batch whose
    /// targets are all ignored is in the returned values, for the loop to find when it reads
    /// them.
    pub fn step(
        &mut self,
        backprop: &mut dyn Backprop,
        model: &dyn Model,
        objective: &Objective,
        x: &Tensor,
        y: &Tensor,
        lr: f64,
    ) -> Result<Stepped, Diagnostic> {
        let span = self.span;
        if backprop.unset_gradients() {
            super::optim::clear_grads(&self.params).at(span)?;
        } else {
            for p in &self.params {
                let mut g = p.grad();
                if g.defined() {
                    let _ = g.f_zero_().at(span)?;
                }
            }
        }
        let n = x.size().first().copied().unwrap_or(1);
        let whole = objective.whole(y)?;
        let weight = whole.weight.as_ref().map(Tensor::shallow_clone);
        let batch = Batch {
            x,
            y,
            accumulate: self.accumulate.min(n).max(1),
            scale: self.scaler.scale(),
            whole,
            dropout: dropout_draw().at(span)?,
            span,
        };
        let pass = backprop.backprop(model, objective, &batch)?;
        let agreed = pass.agreed();
        let counted = pass.tally().at(span)?;
        // The samples of a loss without class targets are made on the tally's device: a copy
        // from the host would wait for the device.
        let weight = match weight {
            Some(w) => w
                .f_reshape([1])
                .at(span)?
                .f_to_device(counted.device())
                .at(span)?,
            None => Tensor::f_full([1], n as f64, (Kind::Double, counted.device())).at(span)?,
        };
        let tally = Tensor::f_cat(&[counted, weight], 0).at(span)?;
        for h in &mut self.hooks {
            h.gradients_ready(&self.params, span)?;
        }
        // fp16: unscale, and skip the step when the scaled gradients overflowed.
        let sum = |t: &Tensor| backprop.all_sum(t);
        if self.scaler.unscale(&self.params, span, &sum)? {
            let counted = |i: usize| backprop.counted(i);
            clip(
                &self.params,
                self.clip_norm,
                self.clip_value,
                span,
                &sum,
                &counted,
            )?;
            self.optim.step(&self.params, lr)?;
            for h in &mut self.hooks {
                h.after_update(&self.params, span)?;
            }
        }
        Ok(Stepped {
            samples: n as f64,
            tally,
            agreed,
        })
    }
}
