//! Parallel strategies at run time. Each is a [`Backprop`]: how the gradients of one batch come
//! to be (over replicas, through pipeline stages, on this rank of a process group); the step
//! around it and the training loop are the same for every strategy.

pub mod ddp;
pub mod pipeline;

use super::model::Net;
use super::step::{Backprop, Local};
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Experiment, Parallel};

pub use pipeline::placed;

/// The strategy of `exp` for the lowered model `net`. A distributed run's strategy needs the
/// process's rank and meets the other ranks first: `run.rs` starts it with [`ddp::Ddp::start`].
pub fn backprop(exp: &Experiment, net: &Net) -> Result<Box<dyn Backprop>, Diagnostic> {
    Ok(match &exp.parallel {
        Parallel::Pipeline {
            micro_batches,
            schedule,
            boundaries,
            ..
        } => Box::new(pipeline::Pipeline::new(
            net,
            boundaries,
            *micro_batches,
            *schedule,
        )),
        Parallel::None | Parallel::Model | Parallel::Data { .. } | Parallel::Distributed { .. } => {
            Box::new(Local)
        }
    })
}
