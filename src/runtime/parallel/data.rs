//! Data parallel in one process: a replica of the model per listed device, each taking its
//! slice of every micro-batch, forward and backward on all replicas at once (a thread per
//! replica), the replicas' gradients summed onto the model the loop trains, one optimizer step.
//!
//! Replica 0 is the model the loop trains (on the first listed device): it holds the optimizer's
//! state and is what evaluation and checkpoints see, so it costs no extra memory. Before every
//! step the other replicas copy its weights and buffers, so they agree with it after
//! initialisation, `--init`, a resume and every update. Each replica's loss is weighted by its
//! slice's share of the batch, so the summed gradient is that of the batch's mean loss.
//! Batch-norm layers normalise each slice with its own statistics; the running statistics kept
//! are replica 0's (those of its slices), as `nn.DataParallel` keeps the primary module's.

use tch::{Device, Tensor};

use super::super::failure::{torch_failure, At};
use super::super::model::{self, tch_device, Net};
use super::super::step::{micro_batches, Backprop, Batch, Model, Objective, Pass};
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;
use kiln::span::Span;

/// The devices of the replicas, replica 0 first: those listed, or all on `over` (`--device`).
pub fn devices(listed: &[kiln::ir::Device], over: Option<Device>) -> Vec<Device> {
    listed
        .iter()
        .map(|d| over.unwrap_or_else(|| tch_device(*d)))
        .collect()
}

/// Replicas of the model on their devices, the gradients of each batch summed onto replica 0.
pub struct DataParallel {
    /// Replicas 1 to N-1, each built on its device; replica 0 is the model the loop trains.
    replicas: Vec<Net>,
}

impl DataParallel {
    /// Builds a replica of `exp`'s model on each of `devices` after the first (the first is
    /// the model's own device).
    pub fn new(exp: &Experiment, devices: &[Device]) -> Result<DataParallel, Diagnostic> {
        let replicas = devices
            .iter()
            .skip(1)
            .map(|d| model::build(&exp.model.nodes, exp.train.precision, Some(*d)))
            .collect::<Result<_, _>>()?;
        Ok(DataParallel { replicas })
    }

    /// Copies the weights and buffers of `primary` into every replica and zeroes their
    /// gradients.
    fn sync(&mut self, primary: &dyn Model, span: Span) -> Result<(), Diagnostic> {
        let params = primary.params();
        let buffers = primary.buffers();
        tch::no_grad(|| {
            for r in &self.replicas {
                for (dst, (_, src)) in r.params.iter().zip(&params) {
                    dst.tensor.shallow_clone().f_copy_(src).at(span)?;
                    let mut g = dst.tensor.grad();
                    if g.defined() {
                        g.f_zero_().done_at(span)?;
                    }
                }
                for (dst, (_, src)) in r.buffers.iter().zip(&buffers) {
                    dst.tensor.shallow_clone().f_copy_(src).at(span)?;
                }
            }
            Ok(())
        })
    }

    /// Adds every replica's gradients to those of `primary`.
    fn reduce(&self, primary: &dyn Model, span: Span) -> Result<(), Diagnostic> {
        for (j, (_, p)) in primary.params().into_iter().enumerate() {
            let mut total = p.grad();
            for r in &self.replicas {
                let g = r.params[j].tensor.grad();
                if !g.defined() {
                    continue;
                }
                let g = g.f_to_device(p.device()).at(span)?;
                if total.defined() {
                    let _ = total.f_add_(&g).at(span)?;
                } else {
                    // A parameter without a gradient on replica 0 gets this one through
                    // autograd: the gradient of sum(p * g) with respect to p is g.
                    p.f_mul(&g)
                        .at(span)?
                        .f_sum(p.kind())
                        .at(span)?
                        .f_backward()
                        .at(span)?;
                    total = p.grad();
                }
            }
        }
        Ok(())
    }
}

impl Backprop for DataParallel {
    fn backprop(
        &mut self,
        model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        let span = batch.span;
        self.sync(model, span)?;
        let n = batch.x.size().first().copied().unwrap_or(1);
        let (parts, scale) = (1 + self.replicas.len() as i64, batch.scale);
        let replicas = &mut self.replicas;
        let pass = micro_batches(batch, |xm, ym, _, pass| {
            let xs = xm.f_tensor_split(parts, 0).at(span)?;
            let ys = ym.f_tensor_split(parts, 0).at(span)?;
            let mut slices = xs.into_iter().zip(ys);
            let Some((x0, y0)) = slices.next() else {
                return Ok(());
            };
            let weight = |x: &Tensor| x.size().first().copied().unwrap_or(0) as f64 / n as f64;
            let results = std::thread::scope(|s| {
                let handles: Vec<_> = replicas
                    .iter_mut()
                    .zip(slices)
                    .map(|(net, (x, y))| {
                        s.spawn(move || {
                            let device = net.input_device();
                            let x = x.f_to_device(device).at(span)?;
                            let w = weight(&x);
                            slice(&*net, objective, &x, &y, w * scale, span)
                        })
                    })
                    .collect();
                let first = slice(model, objective, &x0, &y0, weight(&x0) * scale, span);
                std::iter::once(first)
                    .chain(handles.into_iter().map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(torch_failure("a replica's thread panicked", span).diagnostic())
                        })
                    }))
                    .collect::<Vec<_>>()
            });
            for r in results {
                let r = r?;
                pass.loss_sum += r.loss_sum;
                pass.correct += r.correct;
                if pass.nonfinite.is_none() {
                    pass.nonfinite = r.nonfinite;
                }
            }
            Ok(())
        })?;
        if pass.nonfinite.is_none() {
            self.reduce(model, span)?;
        }
        Ok(pass)
    }
}

/// Forward, loss and backward of one replica's slice `(x, y)`, the loss multiplied by `factor`
/// (the slice's share of the batch times the loss scale) before backward. An empty slice (a
/// batch smaller than the replicas) computes nothing.
fn slice(
    model: &dyn Model,
    objective: &Objective,
    x: &Tensor,
    y: &Tensor,
    factor: f64,
    span: Span,
) -> Result<Pass, Diagnostic> {
    let m = x.size().first().copied().unwrap_or(0);
    let mut pass = Pass::default();
    if m == 0 {
        return Ok(pass);
    }
    let out = model.forward(x, true)?;
    let y = y.f_to_device(out.device()).at(span)?;
    let l = objective.loss(&out, &y)?;
    let value = l.f_double_value(&[]).at(span)?;
    if !value.is_finite() {
        pass.nonfinite = Some(value);
        return Ok(pass);
    }
    pass.loss_sum = value * m as f64;
    if objective.classes() {
        pass.correct = objective.correct(&out, &y)?;
    }
    l.f_mul_scalar(factor).at(span)?.f_backward().at(span)?;
    Ok(pass)
}
