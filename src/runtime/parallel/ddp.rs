//! Distributed data parallel over processes on PyTorch's c10d: each rank holds a replica of the
//! model, computes the gradients of its shard of every global batch, and c10d's `Reducer` sums
//! them over the ranks in buckets while backward still runs.
//!
//! The arithmetic: every rank reads the same global batch of `n` samples (the same seeded order)
//! and takes its `A` micro-batches of the batch cut into `W·A` (`Ranks::rows`: what one process
//! accumulating over `W·A` micro-batches runs; every rank runs `A` of them, a stand-in row of
//! weight 0 for one the cut leaves out). Its loss on a micro-batch of `m` rows is scaled by
//! `m / n`, so the rank's gradient is `1/n · Σ` over its rows; the Reducer sums them over the
//! ranks (a communication hook that does not divide by `W`, `shim/c10d.cpp`), which leaves
//! `1/n · Σ` over the whole batch: the gradient of the global batch's mean loss, as one process
//! on the full batch computes it, and in bf16 as one process accumulating over the ranks'
//! micro-batches computes it (no factor of `W` for bf16 to round). With class weights or
//! ignored targets the mean divides by the global batch's target weight instead of `n`: every
//! rank reads it from the global batch's targets, which it holds, so it costs no collective. Gradient accumulation runs
//! the first micro-batches without synchronising (DDP's `no_sync`), the last one with.
//!
//! Before the last backward the ranks agree on the step in one small all-reduce: the batch's
//! loss and accuracy counts (a non-finite loss on any rank makes the sum non-finite: then no
//! rank reduces, and every rank fails with K0504 as the loop reads the step's values, which it
//! does at once since they are on the host), and whether any rank was asked to stop (then every
//! rank stops after this step). Buffers (batch-norm statistics) are broadcast from rank 0 after
//! each step's forward passes, as PyTorch's DDP does before each forward by default: a batch is
//! normalised with its rank's own statistics, the running statistics are rank 0's. Evaluation is
//! shared as well: each rank evaluates its run of a split, and the sums are added up.
//!
//! At world size 1 every one of these collectives is the identity (a sum over one rank, a
//! broadcast from a rank to itself, gradients summed over one rank), so none is run: no Reducer
//! is built, and a step does the work of a run without a strategy, its values left on the
//! device as there. A stop signal still stops the run after the step.

use std::time::Instant;

use tch::Tensor;

use super::super::cancel::Cancel;
pub use super::super::dist::c10d::Backend;
use super::super::dist::c10d::{Group, Reducer};
use super::super::failure::At;
use super::super::model::with_dropout_rows;
use super::super::step::{Backprop, Batch, Model, Objective, Pass};
pub use super::ranks::Member;
use super::ranks::{settings, Ranks};
use super::strategy::Strategy;
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Experiment, ParallelPlan, Parallelism};

/// The Reducer's bucket size, as PyTorch's `bucket_cap_mb` default.
const BUCKET_BYTES: usize = 25 << 20;

/// This rank of a distributed data-parallel run.
pub struct Ddp {
    /// Field order is drop order: the Reducer before its group.
    /// None at world size 1, where summing each gradient over one rank leaves it as it is.
    reducer: Option<Reducer>,
    ranks: Ranks,
    params: Vec<Tensor>,
    buffers: Vec<Tensor>,
    /// Whether the weights were broadcast from rank 0 (at the first step, after any restore).
    synced: bool,
    /// Timings for `bench/ddp.sh`, when `KILN_DDP_PROFILE` is set.
    profile: Option<Profile>,
}

/// Where the time of the gradient reduction goes: backward passes with and without the
/// Reducer's all-reduce (the synchronised last micro-batch and the others, from the third step
/// on, once the buckets are settled), and one all-reduce of every gradient alone. Rank 0 prints
/// it when the run ends.
#[derive(Debug, Default)]
struct Profile {
    /// Seconds of one all-reduce of all the gradients at once, not overlapped with anything.
    alone: f64,
    /// Synchronised backward passes: seconds and count.
    synced: (f64, u64),
    /// Backward passes without communication: seconds and count.
    local: (f64, u64),
    /// Steps taken.
    steps: u64,
}

impl Ddp {
    /// Meets the other ranks (K0515 when one never arrives, K0516 when one runs something
    /// else), creates the process group and the Reducer. Returns the strategy and the token the
    /// loop must watch for stopping.
    pub fn start(
        exp: &Experiment,
        plan: &ParallelPlan,
        model: &dyn Model,
        member: Member,
        signals: Cancel,
    ) -> Result<(Ddp, Cancel), Diagnostic> {
        let (ranks, stop) = Ranks::start(exp, plan, model, member, signals)?;
        let params: Vec<Tensor> = model
            .params()
            .into_iter()
            .map(|(_, t)| t.shallow_clone())
            .collect();
        let buffers = model
            .buffers()
            .into_iter()
            .map(|(_, t)| t.shallow_clone())
            .collect();
        let profiled = std::env::var_os("KILN_DDP_PROFILE").is_some();
        let reducer = match ranks.world() {
            1 => None,
            _ => Some(
                Reducer::new(&ranks.group, &params, BUCKET_BYTES, profiled)
                    .map_err(|e| ranks.lost(&e.0))?,
            ),
        };
        let profile = match profiled {
            true => Some(Profile {
                alone: reduce_alone(&ranks.group, &params).map_err(|e| ranks.lost(&e.0))?,
                ..Profile::default()
            }),
            false => None,
        };
        Ok((
            Ddp {
                reducer,
                ranks,
                params,
                buffers,
                synced: false,
                profile,
            },
            stop,
        ))
    }

    /// Counts a backward pass that started at `t` in the profile, when there is one.
    fn timed(&mut self, t: Instant, synced: bool) {
        if let Some(p) = &mut self.profile {
            if p.steps >= 2 {
                let slot = if synced { &mut p.synced } else { &mut p.local };
                slot.0 += t.elapsed().as_secs_f64();
                slot.1 += 1;
            }
        }
    }
}

impl Backprop for Ddp {
    fn backprop(
        &mut self,
        model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        let span = batch.span;
        if !self.synced {
            self.ranks.broadcast(&self.params)?;
            self.ranks.broadcast(&self.buffers)?;
            self.synced = true;
        }
        let rows = self.ranks.rows(batch)?;
        let mut pass = Pass::default();
        let mut last = None;
        for (i, ((xm, ym), weight)) in rows.xs.iter().zip(&rows.ys).zip(&rows.weights).enumerate() {
            if let Some(reducer) = &mut self.reducer {
                reducer
                    .prepare_forward()
                    .map_err(|e| self.ranks.lost(&e.0))?;
            }
            let out = with_dropout_rows(batch.dropout, rows.starts[i], || model.forward(xm, true))?;
            let ym = ym.f_to_device(out.device()).at(span)?;
            let part = objective.part(&out, &ym, &batch.whole, &mut pass, *weight)?;
            let scaled = part.f_mul_scalar(batch.scale * weight).at(span)?;
            if i + 1 < rows.xs.len() {
                let t = Instant::now();
                scaled.f_backward().at(span)?;
                self.timed(t, false);
            } else {
                last = Some(scaled);
            }
        }
        // No rank reduces a non-finite loss: every rank fails with K0504 as the loop reads it.
        let (pass, finite) = self.ranks.agree(pass, span)?;
        if !finite {
            return Ok(pass);
        }
        if let Some(l) = last {
            if let Some(reducer) = &mut self.reducer {
                reducer
                    .prepare_backward()
                    .map_err(|e| self.ranks.lost(&e.0))?;
            }
            let t = Instant::now();
            l.f_backward()
                .map_err(|e| self.ranks.lost(&e.to_string()))?;
            self.timed(t, true);
        }
        if let Some(p) = &mut self.profile {
            p.steps += 1;
        }
        if !self.buffers.is_empty() {
            self.ranks.broadcast(&self.buffers)?;
        }
        Ok(pass)
    }

    /// Each rank evaluates its run of a split's samples.
    fn share(&self) -> (usize, usize) {
        self.ranks.share()
    }

    /// The ranks' evaluation sums add up.
    fn reduce(&self, values: &mut [f64]) -> Result<(), Diagnostic> {
        self.ranks.reduce(values)
    }
}

/// Every rank holds the whole model and the whole optimizer state; rank 0 writes checkpoints.
impl Strategy for Ddp {}

/// Checks, before anything is built, that this rank (the plan's) was started as the experiment
/// says (its world size, K0516) and that its backend can run here (K0517). `over` is the device
/// `--device` puts every layer on. Returns the backend and, under NCCL without `--device`, the
/// device of this rank's model, `cuda:LOCAL_RANK`. NCCL with `--device cpu` falls back to Gloo.
pub fn check_rank(
    exp: &Experiment,
    plan: &ParallelPlan,
    over: Option<tch::Device>,
) -> Result<(Backend, Option<tch::Device>), Diagnostic> {
    let (_, span) = settings(exp, plan);
    let me = plan.ranks;
    let world = match &plan.strategy {
        Parallelism::Ddp { world_size, .. } => *world_size,
        Parallelism::Local | Parallelism::Replicas { .. } | Parallelism::Pipeline { .. } => 1,
    };
    if world != me.world as u64 {
        return Err(Problem::Running(Running::RanksDiffer {
            span,
            rank: me.rank,
            other: None,
            differences: vec![format!(
                "the experiment's world size is {world}, and {} ranks were started",
                me.world
            )],
        })
        .diagnostic());
    }
    let Parallelism::Ddp { backend, .. } = &plan.strategy else {
        return Ok((Backend::Gloo, None));
    };
    let device = match (backend, over) {
        (kiln::ir::Backend::Gloo, _) | (_, Some(tch::Device::Cpu)) => {
            return Ok((Backend::Gloo, None))
        }
        (kiln::ir::Backend::Nccl, Some(tch::Device::Cuda(i))) => i,
        (kiln::ir::Backend::Nccl, _) => me.local_rank,
    };
    let count = if tch::Cuda::is_available() {
        usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
    } else {
        0
    };
    if device >= count {
        return Err(Problem::Running(Running::BackendUnavailable {
            span,
            backend: "nccl".into(),
            detail: format!(
                "local rank {} needs cuda:{device}, and this machine has {count} CUDA device(s)",
                me.local_rank
            ),
        })
        .diagnostic());
    }
    Ok((
        Backend::Nccl { device },
        over.is_none().then_some(tch::Device::Cuda(device)),
    ))
}

/// Seconds of one all-reduce of as many values as the gradients hold, not overlapped with
/// anything (the median of 9, after one to warm up).
fn reduce_alone(
    group: &Group,
    params: &[Tensor],
) -> Result<f64, super::super::dist::c10d::CommError> {
    let numel: usize = params.iter().map(Tensor::numel).sum();
    let device = params.first().map_or(tch::Device::Cpu, Tensor::device);
    let flat = Tensor::zeros([numel as i64], (tch::Kind::Float, device));
    group.all_reduce_sum(&flat)?;
    let mut times = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        group.all_reduce_sum(&flat)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

impl Drop for Ddp {
    fn drop(&mut self) {
        let Some(p) = &self.profile else { return };
        if self.ranks.me.rank != 0 || p.synced.1 == 0 || p.local.1 == 0 {
            return;
        }
        let ms = |(s, n): (f64, u64)| 1e3 * s / n as f64;
        let (synced, local, alone) = (ms(p.synced), ms(p.local), 1e3 * p.alone);
        let exposed = (synced - local).max(0.0);
        eprintln!(
            "ddp profile: world {}, all-reduce of the gradients alone {alone:.3} ms; backward {synced:.3} ms with the reduction, {local:.3} ms without; exposed {exposed:.3} ms, hidden {:.0}%",
            self.ranks.world(),
            100.0 * (1.0 - exposed / alone.max(1e-9)).clamp(0.0, 1.0)
        );
        // PyTorch's own measure, from the Reducer's timestamps: how much of the span from the
        // first bucket's all-reduce to the last one's end fell before backward finished.
        if let Some(Ok(o)) = self.reducer.as_ref().map(Reducer::stats) {
            eprintln!(
                "ddp overlap (PyTorch's DDP timers): backward compute {:.3} ms, communication {:.3} ms, overlapped with compute {:.3} ms, hidden {:.0}%",
                1e3 * o.compute,
                1e3 * o.comm,
                1e3 * o.overlapped,
                100.0 * (o.overlapped / o.comm.max(1e-12)).clamp(0.0, 1.0)
            );
        }
    }
}
