//! The model on its own devices: one device, or model parallel by placement (each layer on the
//! device it is placed on, activations moved between them). Forward and backward of each
//! micro-batch in turn; the step's update covers the whole model.

use super::super::failure::At;
use super::super::step::{micro_batches, Backprop, Batch, Model, Objective, Pass};
use super::strategy::Strategy;
use kiln::diagnostic::Diagnostic;

/// The batch on the model's own devices.
pub struct Local;

impl Backprop for Local {
    fn backprop(
        &mut self,
        model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        micro_batches(batch, |xm, ym, pass| {
            let out = model.forward(xm, true)?;
            let ym = ym.f_to_device(out.device()).at(batch.span)?;
            let part = objective.part(&out, &ym, &batch.whole, pass, 1.0)?;
            part.f_mul_scalar(batch.scale)
                .at(batch.span)?
                .f_backward()
                .at(batch.span)
        })
    }

    /// The backward pass alone writes the gradients.
    fn unset_gradients(&self) -> bool {
        true
    }
}

/// Every process holds the whole model: the whole-model layout.
impl Strategy for Local {}
