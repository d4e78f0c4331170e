//! The training objective: the experiment's loss on a micro-batch (scaled to its share of the
//! batch's mean, whatever divides it: samples, or class targets' weight, [`Whole`]), and for
//! class targets the accuracy tally the step and evaluation count ([`Pass`]). The step ([`super::step`]) calls it on every
//! micro-batch; evaluation on every batch of a split.

use tch::{Kind, Reduction, Tensor};

use super::failure::At;
use kiln::diagnostic::problem::{Running, Torch, Warnings};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Experiment, Loss};
use kiln::span::Span;

/// What the mean loss of a whole batch divides by, so that every micro-batch, replica slice or
/// rank's shard contributes its exact part of it: `Σ part = F.<loss>(batch, reduction="mean")`.
#[derive(Debug)]
pub struct Whole {
    /// The batch's samples.
    pub samples: f64,
    /// For class targets, the weights of the batch's targets not ignored (class weights, or 1
    /// each, over the targets not equal to `ignore_index`), a scalar on the targets' device,
    /// never read by the step; `None` for other losses.
    pub weight: Option<Tensor>,
}

impl Clone for Whole {
    fn clone(&self) -> Whole {
        Whole {
            samples: self.samples,
            weight: self.weight.as_ref().map(Tensor::shallow_clone),
        }
    }
}

/// What the forward passes of one batch computed, kept where it was computed: the step reads
/// nothing back from the device (the loop reads every step's values when they are due).
#[derive(Debug, Default)]
pub struct Pass {
    /// `[loss sum, correct, counted]` in f64 on the loss's device: the batch's mean loss times
    /// its samples (the sum over them without class weights or ignored targets), the correct
    /// top-1 predictions for class targets, and the class targets accuracy counts (those not
    /// equal to `ignore_index`); `None` before anything is counted.
    tally: Option<Tensor>,
    /// Whether the values were agreed among the ranks of a process group, on the host.
    agreed: bool,
}

impl Pass {
    /// A micro-batch's tally, left on the device.
    pub fn tallied(tally: Tensor) -> Pass {
        Pass {
            tally: Some(tally),
            agreed: false,
        }
    }

    /// Whether the values were agreed among the ranks of a process group, on the host.
    pub fn agreed(&self) -> bool {
        self.agreed
    }

    /// A pass whose values are known on the host (agreed over the ranks of a process group).
    pub fn known(values: [f64; 3]) -> Result<Pass, tch::TchError> {
        Ok(Pass {
            tally: Some(Tensor::f_from_slice(&values)?),
            agreed: true,
        })
    }

    /// Adds `other`'s counts to this pass's, on this pass's device.
    pub fn add(&mut self, other: Pass) -> Result<(), tch::TchError> {
        self.agreed |= other.agreed;
        let Some(t) = other.tally else {
            return Ok(());
        };
        self.tally = Some(match self.tally.take() {
            None => t,
            Some(mine) => {
                let t = t.f_to_device(mine.device())?;
                mine.f_add(&t)?
            }
        });
        Ok(())
    }

    /// `[loss sum, correct, counted]` read to the host (a device read: only where the values
    /// are needed at once, as the ranks of a process group agreeing on a step).
    pub fn values(&self) -> Result<[f64; 3], tch::TchError> {
        let Some(t) = &self.tally else {
            return Ok([0.0; 3]);
        };
        let v = Vec::<f64>::try_from(&t.f_to_device(tch::Device::Cpu)?)?;
        Ok([v[0], v[1], v[2]])
    }

    /// The tally as a tensor (zeros when nothing was counted), on its device.
    pub fn tally(self) -> Result<Tensor, tch::TchError> {
        match self.tally {
            Some(t) => Ok(t),
            None => Tensor::f_zeros([3], (Kind::Double, tch::Device::Cpu)),
        }
    }
}

/// The training objective: the loss of the experiment and, for class targets, accuracy.
pub struct Objective {
    loss: Loss,
    span: Span,
}

/// A list of loss option values as an fp32 tensor on `device`.
fn weights(
    values: &Option<Vec<f64>>,
    device: tch::Device,
) -> Result<Option<Tensor>, tch::TchError> {
    values
        .as_ref()
        .map(|v| {
            let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            Tensor::f_from_slice(&v)?.f_to_device(device)
        })
        .transpose()
}

impl Objective {
    /// The objective of `exp`; its failures point at the `loss` statement.
    pub fn new(exp: &Experiment) -> Objective {
        Objective {
            loss: exp.train.loss.clone(),
            span: exp.train.loss_span,
        }
    }

    /// Whether targets are class indices (accuracy is defined).
    pub fn classes(&self) -> bool {
        matches!(self.loss, Loss::CrossEntropy { .. } | Loss::Nll { .. })
    }

    /// Whether the loss is a regression loss (the regression metrics are defined).
    pub fn regression(&self) -> bool {
        self.loss.regression()
    }

    /// The mean loss of a batch, in fp32, as the `torch.nn.functional` loss of the same name
    /// with `reduction="mean"` computes it: with class weights or ignored targets, the sum over
    /// the batch divided by the weights of the targets not ignored.
    pub fn loss(&self, out: &Tensor, y: &Tensor) -> Result<Tensor, Diagnostic> {
        self.reduced(out, y, Reduction::Mean)
    }

    /// K0420: a training batch whose targets are all ignored or of classes weighted 0, whose
    /// mean loss is undefined (PyTorch's is NaN, and so would every weight be after the step).
    pub fn weightless(&self) -> Diagnostic {
        let ignore_index = self.loss.ignore_index().unwrap_or(-100);
        Problem::Warnings(Warnings::WeightlessBatch {
            span: self.span,
            ignore_index,
        })
        .diagnostic()
    }

    /// What the mean loss of the batch with targets `y` divides by (see [`Whole`]).
    pub fn whole(&self, y: &Tensor) -> Result<Whole, Diagnostic> {
        let samples = y.size().first().copied().unwrap_or(0) as f64;
        let weight = match &self.loss {
            Loss::CrossEntropy {
                weight,
                ignore_index,
                ..
            }
            | Loss::Nll {
                weight,
                ignore_index,
            } => Some(self.target_weight(y, weight, *ignore_index)?),
            _ => None,
        };
        Ok(Whole { samples, weight })
    }

    /// The micro-batch `(out, y)`'s part of its whole batch's mean loss, as a tensor to
    /// backward, counted into `pass` (loss and accuracy) `times` times (0 for a rank's stand-in
    /// row). Nothing is read back: a non-finite loss is counted like any other, and the loop
    /// finds it when it reads the step's values.
    ///
    /// Without per-target weights the part is the micro-batch's mean times its share of the
    /// samples; with them, its summed loss over the whole batch's weight, so that the parts
    /// add up to the whole batch's weighted mean however the batch is cut.
    pub fn part(
        &self,
        out: &Tensor,
        y: &Tensor,
        whole: &Whole,
        pass: &mut Pass,
        times: f64,
    ) -> Result<Tensor, Diagnostic> {
        let span = self.span;
        let part = match &whole.weight {
            Some(total) => {
                let sum = self.reduced(out, y, Reduction::Sum)?;
                // In the loss's own dtype, as dividing by a number would compute it.
                let total = total
                    .f_to_device(sum.device())
                    .at(span)?
                    .f_to_kind(sum.kind())
                    .at(span)?;
                sum.f_div(&total).at(span)?
            }
            None => {
                let m = y.size().first().copied().unwrap_or(0) as f64;
                self.loss(out, y)?
                    .f_mul_scalar(m / whole.samples.max(1.0))
                    .at(span)?
            }
        };
        let counted = tch::no_grad(|| -> Result<Tensor, Diagnostic> {
            let loss = part
                .f_detach()
                .at(span)?
                .f_to_kind(Kind::Double)
                .at(span)?
                .f_mul_scalar(whole.samples)
                .at(span)?
                .f_mul_scalar(times)
                .at(span)?
                .f_reshape([1])
                .at(span)?;
            let (correct, counted) = if self.classes() {
                (self.correct(out, y)?, self.counted(y)?)
            } else {
                let zero = Tensor::f_zeros([], (Kind::Double, loss.device())).at(span)?;
                (zero.shallow_clone(), zero)
            };
            let accuracy = Tensor::f_stack(&[correct, counted], 0)
                .at(span)?
                .f_mul_scalar(times)
                .at(span)?;
            Tensor::f_cat(&[loss, accuracy], 0).at(span)
        })?;
        pass.add(Pass::tallied(counted)).at(span)?;
        Ok(part)
    }

    /// The weights of the class targets `y` not equal to `ignore_index`: `weight[y_i]` each, or
    /// 1 without class weights; an f64 scalar on the targets' device.
    fn target_weight(
        &self,
        y: &Tensor,
        weight: &Option<Vec<f64>>,
        ignore_index: i64,
    ) -> Result<Tensor, Diagnostic> {
        let span = self.span;
        let kept = y.f_ne(ignore_index).at(span)?;
        match weights(weight, y.device()).at(span)? {
            Some(w) => {
                let safe = y.f_where_scalarother(&kept, 0).at(span)?;
                w.f_index_select(0, &safe.f_reshape([-1]).at(span)?)
                    .at(span)?
                    .f_mul(&kept.f_reshape([-1]).at(span)?)
                    .at(span)?
                    .f_sum(Kind::Double)
                    .at(span)
            }
            None => kept.f_sum(Kind::Double).at(span),
        }
    }

    /// `[sum, weight]` of a batch, in f64 on the device: the loss summed over its samples and
    /// what the mean divides it by (the weights of the class targets not ignored; the samples
    /// otherwise), so that a split's mean loss is `sum of sums / sum of weights` whatever its
    /// batches.
    pub fn sums(&self, out: &Tensor, y: &Tensor) -> Result<Tensor, Diagnostic> {
        let span = self.span;
        let n = out.size().first().copied().unwrap_or(0) as f64;
        let (sum, weight) = match &self.loss {
            Loss::CrossEntropy {
                weight,
                ignore_index,
                ..
            }
            | Loss::Nll {
                weight,
                ignore_index,
            } => (
                self.reduced(out, y, Reduction::Sum)?
                    .f_to_kind(Kind::Double)
                    .at(span)?,
                self.target_weight(y, weight, *ignore_index)?,
            ),
            _ => (
                self.loss(out, y)?
                    .f_to_kind(Kind::Double)
                    .at(span)?
                    .f_mul_scalar(n)
                    .at(span)?,
                Tensor::f_full([], n, (Kind::Double, out.device())).at(span)?,
            ),
        };
        Tensor::f_stack(&[sum, weight], 0).at(span)
    }

    /// The loss of a batch with `reduction`.
    fn reduced(
        &self,
        out: &Tensor,
        y: &Tensor,
        reduction: Reduction,
    ) -> Result<Tensor, Diagnostic> {
        let span = self.span;
        let out = if out.kind() == Kind::Float {
            out.shallow_clone()
        } else {
            out.f_to_kind(Kind::Float).at(span)?
        };
        let device = out.device();
        let (out, y) = self.fit(&out, y)?;
        // A class per token: scores `[B, S, C]` against targets `[B, S]` are `B * S` samples,
        // as `F.cross_entropy(out.reshape(-1, C), y.reshape(-1))`.
        let (out, y) = match (&self.loss, out.size().as_slice()) {
            (Loss::CrossEntropy { .. } | Loss::Nll { .. }, [_, _, .., c]) => (
                out.f_reshape([-1, *c]).at(span)?,
                y.f_reshape([-1]).at(span)?,
            ),
            _ => (out, y),
        };
        let y = &y;
        match &self.loss {
            Loss::CrossEntropy {
                label_smoothing,
                weight,
                ignore_index,
            } => out
                .f_cross_entropy_loss(
                    y,
                    weights(weight, device).at(span)?,
                    reduction,
                    *ignore_index,
                    *label_smoothing,
                )
                .at(span),
            Loss::Nll {
                weight,
                ignore_index,
            } => out
                .f_nll_loss(
                    y,
                    weights(weight, device).at(span)?,
                    reduction,
                    *ignore_index,
                )
                .at(span),
            Loss::Mse => out.f_mse_loss(y, reduction).at(span),
            Loss::L1 => out.f_l1_loss(y, reduction).at(span),
            Loss::Huber { delta } => out.f_huber_loss(y, reduction, *delta).at(span),
            Loss::SmoothL1 { beta } => out.f_smooth_l1_loss(y, reduction, *beta).at(span),
            Loss::BceWithLogits { pos_weight } => out
                .f_binary_cross_entropy_with_logits(
                    y,
                    None::<Tensor>,
                    weights(pos_weight, device).at(span)?,
                    reduction,
                )
                .at(span),
        }
    }

    /// The output and targets of a batch as the loss compares them, once their shapes are
    /// those `kiln check` promised: for `cross_entropy` and `nll`, scores `[B, .., C]` against
    /// class indices `[B, ..]`; for the other losses an output of the targets' shape, a one-unit
    /// output `[B, 1]` squeezed to `[B]` against one target per sample, and the targets as
    /// fp32 values. Any other pair is K0508 naming both shapes: nothing is ever broadcast.
    pub fn fit(&self, out: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor), Diagnostic> {
        let span = self.span;
        let (o, t) = (out.size(), y.size());
        if self.classes() {
            if o.len() != t.len() + 1 || o[..t.len()] != t[..] {
                let needs = "it needs class scores [batch, .., classes] against class indices \
                             [batch, ..]";
                return Err(self.misfit(o, t, needs));
            }
            return Ok((out.shallow_clone(), y.shallow_clone()));
        }
        let out = match (o.as_slice(), t.as_slice()) {
            ([b, 1], [n]) if b == n => out.f_reshape([*n]).at(span)?,
            _ if o == t => out.shallow_clone(),
            _ => {
                let needs = "it needs an output of the targets' shape ([batch, 1] against one \
                             target per sample)";
                return Err(self.misfit(o, t, needs));
            }
        };
        let y = if y.kind() == Kind::Float {
            y.shallow_clone()
        } else {
            y.f_to_kind(Kind::Float).at(span)?
        };
        Ok((out, y))
    }

    /// K0508: the output of shape `output` does not fit the targets of shape `targets`.
    fn misfit(&self, output: Vec<i64>, targets: Vec<i64>, needs: &'static str) -> Diagnostic {
        Problem::Running(Running::TorchError {
            span: self.span,
            situation: Torch::LossShapes {
                loss: self.loss.name(),
                output,
                targets,
                needs,
            },
        })
        .diagnostic()
    }

    /// Correct top-1 predictions in a batch, in samples: with a class per token, the correct
    /// tokens over the tokens of a sample, so that a sum over batches divided by their samples
    /// is the fraction of correct tokens. Targets equal to `ignore_index` are never correct.
    /// An f64 scalar on the device.
    pub fn correct(&self, out: &Tensor, y: &Tensor) -> Result<Tensor, Diagnostic> {
        let pred = out.f_argmax(-1, false).at(self.span)?;
        self.tally(&pred.f_eq_tensor(y).at(self.span)?, y)
    }

    /// Targets in the top `k` scores of a batch, in samples as [`Objective::correct`] counts
    /// them.
    pub fn in_top(&self, out: &Tensor, y: &Tensor, k: i64) -> Result<Tensor, Diagnostic> {
        let span = self.span;
        let (_, idx) = out.f_topk(k, -1, true, true).at(span)?;
        let hit = idx
            .f_eq_tensor(&y.f_unsqueeze(-1).at(span)?)
            .at(span)?
            .f_any_dim(-1, false)
            .at(span)?;
        self.tally(&hit, y)
    }

    /// The targets of a batch not ignored, in samples as [`Objective::correct`] counts them:
    /// what accuracy divides by.
    pub fn counted(&self, y: &Tensor) -> Result<Tensor, Diagnostic> {
        let all = y
            .f_ones_like()
            .at(self.span)?
            .f_to_kind(Kind::Bool)
            .at(self.span)?;
        self.tally(&all, y)
    }

    /// The targets of `y` where `hit` holds and that are not ignored, divided by the targets
    /// per sample, as an f64 scalar on the device.
    fn tally(&self, hit: &Tensor, y: &Tensor) -> Result<Tensor, Diagnostic> {
        let span = self.span;
        let hit = match &self.loss {
            Loss::CrossEntropy { ignore_index, .. } | Loss::Nll { ignore_index, .. } => hit
                .f_logical_and(&y.f_ne(*ignore_index).at(span)?)
                .at(span)?,
            _ => hit.shallow_clone(),
        };
        let samples = y.size().first().copied().unwrap_or(1).max(1);
        let per_sample = (y.numel() as i64 / samples).max(1) as f64;
        hit.f_sum(Kind::Double)
            .at(span)?
            .f_div_scalar(per_sample)
            .at(span)
    }
}

#[cfg(test)]
#[path = "objective_tests.rs"]
mod tests;
