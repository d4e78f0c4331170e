//! Distributed data parallel over processes on PyTorch's c10d: each rank holds a replica of the
//! model, computes the gradients of its shard of every global batch, and c10d's `Reducer`
//! averages them over the ranks in buckets while backward still runs.
//!
//! The arithmetic: every rank reads the same global batch of `n` samples (the same seeded order)
//! and takes rows `[r·n/W, (r+1)·n/W)`. Its loss on a micro-batch of `m` rows is scaled by
//! `m / n · W`, so the rank's gradient is `W/n · Σ` over its rows; the Reducer divides the sum
//! over ranks by `W`, which leaves `1/n · Σ` over the whole batch: the gradient of the global
//! batch's mean loss, as one process on the full batch computes it. With class weights or
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
//! broadcast from a rank to itself, gradients averaged over one rank), so none is run: no Reducer
//! is built, and a step does the work of a run without a strategy, its values left on the
//! device as there. A stop signal still stops the run after the step.

use std::time::{Duration, Instant};

use tch::Tensor;

use super::super::cancel::Cancel;
pub use super::super::dist::c10d::Backend;
use super::super::dist::c10d::{Bind, Group, Reducer, Store};
use super::super::dist::preflight::{compare, rendezvous, Announce};
use super::super::dist::rank::Rank;
use super::super::failure::At;
use super::super::step::{Backprop, Batch, Model, Objective, Pass};
use super::strategy::Strategy;
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Experiment, ParallelPlan, Parallelism};
use kiln::rundir::Fingerprint;
use kiln::span::Span;

/// The Reducer's bucket size, as PyTorch's `bucket_cap_mb` default.
const BUCKET_BYTES: usize = 25 << 20;

/// This rank of a distributed data-parallel run.
pub struct Ddp {
    /// Field order is drop order: the Reducer before its group, the group before the store.
    /// None at world size 1, where averaging each gradient over one rank leaves it as it is.
    reducer: Option<Reducer>,
    group: Group,
    _store: Store,
    me: Rank,
    peers: Vec<Announce>,
    params: Vec<Tensor>,
    buffers: Vec<Tensor>,
    /// Whether the weights were broadcast from rank 0 (at the first step, after any restore).
    synced: bool,
    /// Set by this process's stop signals.
    signals: Cancel,
    /// The loop's token: set only when the ranks agree to stop, so all stop at the same step.
    stop: Cancel,
    span: Span,
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

/// A rank of a distributed run, as it joins the others.
pub struct Member<'a> {
    /// Where this process stands.
    pub rank: &'a Rank,
    /// The backend, as [`check_rank`] chose it.
    pub backend: Backend,
    /// The experiment file's name, as given on the command line.
    pub file: String,
    /// What its experiment computes (as a resume compares it).
    pub fingerprint: &'a Fingerprint,
    /// The step it resumes from, when it resumes.
    pub resume_step: Option<u64>,
}

/// The timeout and the `parallel` statement of a distributed plan (`exp`'s own statement
/// otherwise).
fn settings(exp: &Experiment, plan: &ParallelPlan) -> (Duration, Span) {
    match &plan.strategy {
        Parallelism::Ddp {
            timeout_s, span, ..
        } => (Duration::from_secs(*timeout_s), *span),
        Parallelism::Local | Parallelism::Replicas { .. } | Parallelism::Pipeline { .. } => {
            (Duration::from_secs(60), exp.span)
        }
    }
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
        let (timeout, span) = settings(exp, plan);
        let started = Instant::now();
        let me = member.rank.clone();
        let backend = member.backend;
        let announce = Announce {
            file: member.file,
            world: me.world,
            fingerprint: member.fingerprint.clone(),
            shapes: model
                .params()
                .into_iter()
                .map(|(name, t)| (name.to_string(), t.size()))
                .collect(),
            resume_step: member.resume_step,
            host: Announce::hostname(),
            pid: std::process::id(),
        };
        let unreachable = |detail: String| {
            Problem::Running(Running::RendezvousFailed {
                span,
                rank: me.rank,
                missing: vec![],
                address: me.address(),
                timeout_s: timeout.as_secs(),
                detail: Some(first_line(&detail)),
            })
            .diagnostic()
        };
        let store = Store::connect(&me.addr, me.port, me.serves_store(), me.world, timeout)
            .map_err(|e| unreachable(e.0))?;
        let peers = rendezvous(&store, &me, &announce, started + timeout, timeout, span)?;
        compare(exp, &peers, span)?;
        let group = Group::new(&store, me.rank, me.world, backend, &bind(&me), timeout)
            .map_err(|e| unreachable(e.0))?;
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
        let reducer = match me.world {
            1 => None,
            _ => Some(
                Reducer::new(&group, &params, BUCKET_BYTES, profiled)
                    .map_err(|e| unreachable(e.0))?,
            ),
        };
        let profile = match std::env::var_os("KILN_DDP_PROFILE") {
            Some(_) => Some(Profile {
                alone: reduce_alone(&group, &params).map_err(|e| unreachable(e.0))?,
                ..Profile::default()
            }),
            None => None,
        };
        let stop = Cancel::default();
        Ok((
            Ddp {
                reducer,
                group,
                _store: store,
                me,
                peers,
                params,
                buffers,
                synced: false,
                signals,
                stop: stop.clone(),
                span,
                profile,
            },
            stop,
        ))
    }

    /// A failed collective as K0514, naming the rank that stopped when it can be told (a rank on
    /// this machine whose process is gone).
    fn lost(&self, detail: &str) -> Diagnostic {
        // A peer killed a moment ago may not be reaped yet: give it a little time to go.
        let mut stopped = None;
        for _ in 0..10 {
            stopped = self
                .peers
                .iter()
                .enumerate()
                .find(|(r, a)| *r != self.me.rank && a.gone())
                .map(|(r, _)| r);
            if stopped.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Problem::Running(Running::RankFailed {
            span: self.span,
            rank: Some(self.me.rank),
            stopped,
            detail: first_line(detail),
        })
        .diagnostic()
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

    /// Broadcasts the tensors from rank 0 into every rank's (nothing to do at world size 1).
    fn broadcast(&self, tensors: &[Tensor]) -> Result<(), Diagnostic> {
        if self.me.world == 1 {
            return Ok(());
        }
        tch::no_grad(|| {
            for t in tensors {
                self.group.broadcast(t, 0).map_err(|e| self.lost(&e.0))?;
            }
            Ok(())
        })
    }

    /// The ranks' sums of `values` (one small all-reduce, on the parameters' device: NCCL
    /// reduces CUDA tensors only). At world size 1 they are `values`: no all-reduce, which would
    /// cost a round trip through Gloo's worker thread and a device read every step.
    fn sum(&self, values: &[f64]) -> Result<Vec<f64>, Diagnostic> {
        if self.me.world == 1 {
            return Ok(values.to_vec());
        }
        let device = self.params.first().map_or(tch::Device::Cpu, Tensor::device);
        let t = Tensor::f_from_slice(values)
            .and_then(|t| t.f_to_device(device))
            .at(self.span)?;
        self.group.all_reduce_sum(&t).map_err(|e| self.lost(&e.0))?;
        Vec::<f64>::try_from(&t.f_to_device(tch::Device::Cpu).at(self.span)?).at(self.span)
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
            self.broadcast(&self.params)?;
            self.broadcast(&self.buffers)?;
            self.synced = true;
        }
        let (r, w) = (self.me.rank as i64, self.me.world as i64);
        let n = batch.x.size().first().copied().unwrap_or(1);
        let (lo, hi) = (r * n / w, (r + 1) * n / w);
        // A batch smaller than the world leaves some ranks without rows: such a rank runs one row
        // with weight 0, so that it still takes part in the reduction.
        let (start, len, weight) = if hi > lo {
            (lo, hi - lo, 1.0)
        } else {
            (0, 1, 0.0)
        };
        let (x, y) = if (start, len) == (0, n) {
            (batch.x.shallow_clone(), batch.y.shallow_clone())
        } else {
            (
                batch.x.f_narrow(0, start, len).at(span)?,
                batch.y.f_narrow(0, start, len).at(span)?,
            )
        };
        let xs = x.f_chunk(batch.accumulate, 0).at(span)?;
        let ys = y.f_chunk(batch.accumulate, 0).at(span)?;
        let mut pass = Pass::default();
        let mut last = None;
        for (i, (xm, ym)) in xs.iter().zip(&ys).enumerate() {
            if let Some(reducer) = &mut self.reducer {
                reducer.prepare_forward().map_err(|e| self.lost(&e.0))?;
            }
            let out = model.forward(xm, true)?;
            let ym = ym.f_to_device(out.device()).at(span)?;
            let part = objective.part(&out, &ym, &batch.whole, &mut pass, weight)?;
            let scaled = part
                .f_mul_scalar(w as f64 * batch.scale * weight)
                .at(span)?;
            if i + 1 < xs.len() {
                let t = Instant::now();
                scaled.f_backward().at(span)?;
                self.timed(t, false);
            } else {
                last = Some(scaled);
            }
        }
        let pass = if self.me.world == 1 {
            // Alone there is nothing to agree on: the values stay on the device.
            if self.signals.is_cancelled() {
                self.stop
                    .cancel(self.signals.signal().unwrap_or(libc::SIGTERM));
            }
            pass
        } else {
            let flag = |b: bool| f64::from(u8::from(b));
            let [loss_sum, correct, counted] = pass.values().at(span)?;
            let agreed = self.sum(&[
                loss_sum,
                correct,
                counted,
                flag(self.signals.is_cancelled()),
            ])?;
            let pass = Pass::known([agreed[0], agreed[1], agreed[2]]).at(span)?;
            // A non-finite loss on any rank makes the agreed sum non-finite: no rank reduces,
            // and every rank fails with K0504 as the loop reads this step's values, at once.
            if !agreed[0].is_finite() {
                return Ok(pass);
            }
            if agreed[3] > 0.0 {
                self.stop
                    .cancel(self.signals.signal().unwrap_or(libc::SIGTERM));
            }
            pass
        };
        if let Some(l) = last {
            if let Some(reducer) = &mut self.reducer {
                reducer.prepare_backward().map_err(|e| self.lost(&e.0))?;
            }
            let t = Instant::now();
            l.f_backward().map_err(|e| self.lost(&e.to_string()))?;
            self.timed(t, true);
        }
        if let Some(p) = &mut self.profile {
            p.steps += 1;
        }
        if !self.buffers.is_empty() {
            self.broadcast(&self.buffers)?;
        }
        Ok(pass)
    }

    /// Each rank evaluates its run of a split's samples.
    fn share(&self) -> (usize, usize) {
        (self.me.rank, self.me.world)
    }

    /// The ranks' evaluation sums add up (every rank then sees the same metrics and makes the
    /// same early-stopping decision).
    fn reduce(&self, values: &mut [f64]) -> Result<(), Diagnostic> {
        let sums = self.sum(values)?;
        values.copy_from_slice(&sums);
        Ok(())
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
        if self.me.rank != 0 || p.synced.1 == 0 || p.local.1 == 0 {
            return;
        }
        let ms = |(s, n): (f64, u64)| 1e3 * s / n as f64;
        let (synced, local, alone) = (ms(p.synced), ms(p.local), 1e3 * p.alone);
        let exposed = (synced - local).max(0.0);
        eprintln!(
            "ddp profile: world {}, all-reduce of the gradients alone {alone:.3} ms; backward {synced:.3} ms with the reduction, {local:.3} ms without; exposed {exposed:.3} ms, hidden {:.0}%",
            self.me.world,
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

/// Where Gloo listens. When every rank is on this machine (the store is on a loopback address),
/// on the loopback address, whatever `GLOO_SOCKET_IFNAME` says: no other machine has any
/// business with the run. Otherwise on the interface `GLOO_SOCKET_IFNAME` names, else on the
/// address this machine's name resolves to (Gloo's default: one address, never every interface).
fn bind(me: &Rank) -> Bind {
    if me.on_this_machine() {
        return Bind {
            interface: None,
            host: Some("127.0.0.1".to_string()),
        };
    }
    Bind {
        interface: std::env::var("GLOO_SOCKET_IFNAME")
            .ok()
            .filter(|i| !i.is_empty()),
        host: None,
    }
}

/// The first line of a c10d message (the rest is often a C++ stack trace), without tch's prefix
/// and the source location Gloo puts first (`[.../pair.cc:538] Read error ...`).
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text).trim();
    let line = line.strip_prefix("Internal torch error: ").unwrap_or(line);
    match line
        .strip_prefix('[')
        .and_then(|rest| rest.split_once("] "))
    {
        Some((place, rest)) if place.contains(".cc:") || place.contains(".cpp:") => {
            rest.to_string()
        }
        _ => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::first_line;

    #[test]
    fn c10d_messages_keep_their_first_line_without_the_source_location() {
        assert_eq!(
            first_line("Internal torch error: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Read error [127.0.0.1]:15798: Connection reset by peer\nframe #0"),
            "Read error [127.0.0.1]:15798: Connection reset by peer"
        );
        assert_eq!(
            first_line("Timed out after 3 seconds"),
            "Timed out after 3 seconds"
        );
    }
}
