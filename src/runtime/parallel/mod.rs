//! Parallel strategies at run time, one file each behind one interface ([`Strategy`]): the model
//! on its own devices ([`local`]: one device, or model parallel by placement), data parallel in
//! one process ([`data`]), pipeline parallel ([`pipeline`]), distributed data parallel
//! ([`ddp`]), fully sharded data parallel ([`fsdp`]) and tensor parallel with data replication
//! ([`tensor`]), the last three on [`ranks`]. [`apply`] starts the one the [`ParallelPlan`] names; the step, the training loop and
//! the checkpoint code are the same for every strategy and never ask which one runs.

mod data;
pub mod ddp;
mod fsdp;
mod local;
pub mod pipeline;
mod ranks;
pub mod strategy;
mod tensor;

use super::cancel::Cancel;
use super::model::Net;
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Experiment, ParallelPlan, Parallelism};
use strategy::Strategy;

pub use local::Local;
pub use pipeline::placed;

/// Where the model the loop trains is built: under data parallel, on the first replica's
/// device; otherwise `over` (`--device`), or the placement when it is `None`.
pub fn model_device(plan: &ParallelPlan, over: Option<tch::Device>) -> Option<tch::Device> {
    match &plan.strategy {
        Parallelism::Replicas { devices, .. } => data::devices(devices, over).first().copied(),
        Parallelism::Local | Parallelism::Pipeline { .. } | Parallelism::Ddp { .. } => over,
    }
}

/// The devices the model runs on, in order of first use: under data parallel, the replicas'.
pub fn devices(plan: &ParallelPlan, net: &Net, over: Option<tch::Device>) -> Vec<tch::Device> {
    match &plan.strategy {
        Parallelism::Replicas { devices, .. } => {
            let mut out = Vec::new();
            for d in data::devices(devices, over) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
            out
        }
        Parallelism::Local | Parallelism::Pipeline { .. } | Parallelism::Ddp { .. } => {
            net.devices()
        }
    }
}

/// Starts the strategy of `plan` for the lowered model `net`; `over` is `--device`, which puts
/// every data-parallel replica on that device. A rank of a distributed run (`member`) first
/// meets the other ranks; under tensor parallel it then keeps its pieces of `net`'s split layers. Returns the strategy and the token the loop watches for stopping:
/// `cancel` itself, or under DDP the one set when the ranks agree to stop.
pub fn apply(
    exp: &Experiment,
    plan: &ParallelPlan,
    net: &mut Net,
    over: Option<tch::Device>,
    member: Option<ddp::Member<'_>>,
    cancel: &Cancel,
) -> Result<(Box<dyn Strategy>, Cancel), Diagnostic> {
    let strategy: Box<dyn Strategy> = match &plan.strategy {
        Parallelism::Ddp {
            sharding: Some(sharding),
            tensor,
            ..
        } => match member {
            Some(m) => {
                let (strategy, stop) = fsdp::Fsdp::start(
                    exp,
                    plan,
                    net,
                    m,
                    cancel.clone(),
                    sharding.reshard_after_forward,
                    *tensor as usize,
                )?;
                return Ok((Box::new(strategy), stop));
            }
            None => Box::new(Local),
        },
        Parallelism::Ddp { tensor, .. } if *tensor > 1 => match member {
            Some(m) => {
                let (strategy, stop) = tensor::TensorParallel::start(
                    exp,
                    plan,
                    net,
                    m,
                    cancel.clone(),
                    *tensor as usize,
                )?;
                return Ok((Box::new(strategy), stop));
            }
            None => Box::new(Local),
        },
        Parallelism::Ddp { .. } => match member {
            Some(m) => {
                let (strategy, stop) = ddp::Ddp::start(exp, plan, net, m, cancel.clone())?;
                return Ok((Box::new(strategy), stop));
            }
            None => Box::new(Local),
        },
        Parallelism::Replicas { devices, .. } => {
            Box::new(data::DataParallel::new(exp, &data::devices(devices, over))?)
        }
        Parallelism::Pipeline {
            boundaries,
            micro_batches,
            schedule,
        } => Box::new(pipeline::Pipeline::new(
            net,
            boundaries,
            *micro_batches,
            *schedule,
        )),
        Parallelism::Local => Box::new(Local),
    };
    Ok((strategy, cancel.clone()))
}
