//! Parallel strategies at run time. Each is a [`Backprop`]: how the gradients of one batch come
//! to be (over replicas, through pipeline stages, on this rank of a process group); the step
//! around it and the training loop are the same for every strategy.

mod data;
pub mod ddp;
pub mod pipeline;

use super::model::Net;
use super::step::{Backprop, Local};
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Experiment, Parallel};

pub use pipeline::placed;

/// Where the model the loop trains is built: under data parallel, on the first replica's
/// device; otherwise `over` (`--device`), or the placement when it is `None`.
pub fn model_device(exp: &Experiment, over: Option<tch::Device>) -> Option<tch::Device> {
    match &exp.parallel {
        Parallel::Data { devices, .. } => data::devices(devices, over).first().copied(),
        _ => over,
    }
}

/// The devices the model runs on, in order of first use: under data parallel, the replicas'.
pub fn devices(exp: &Experiment, net: &Net, over: Option<tch::Device>) -> Vec<tch::Device> {
    match &exp.parallel {
        Parallel::Data { devices, .. } => {
            let mut out = Vec::new();
            for d in data::devices(devices, over) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
            out
        }
        _ => net.devices(),
    }
}

/// The strategy of `exp` for the lowered model `net`; `over` is `--device`, which puts every
/// data-parallel replica on that device. A distributed run's strategy needs the process's rank
/// and meets the other ranks first: `run.rs` starts it with [`ddp::Ddp::start`].
pub fn backprop(
    exp: &Experiment,
    net: &Net,
    over: Option<tch::Device>,
) -> Result<Box<dyn Backprop>, Diagnostic> {
    Ok(match &exp.parallel {
        Parallel::Data { devices, .. } => {
            Box::new(data::DataParallel::new(exp, &data::devices(devices, over))?)
        }
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
        Parallel::None | Parallel::Model | Parallel::Distributed { .. } => Box::new(Local),
    })
}
