//! What every rank of a distributed run does whatever it shards: meeting the other ranks
//! (K0515 when one never arrives, K0516 when one runs something else), the process group, the
//! rank's rows of a global batch, the one small all-reduce a step agrees in (its loss, accuracy
//! counts and whether any rank was asked to stop), broadcasts from rank 0, and a failed
//! collective told as K0514 naming the rank that stopped. [`super::ddp`] and [`super::fsdp`]
//! are built on it.

use std::time::{Duration, Instant};

use tch::Tensor;

use super::super::cancel::Cancel;
use super::super::dist::c10d::{Backend, Bind, Group, Store};
use super::super::dist::preflight::{compare, rendezvous, Announce};
use super::super::dist::rank::Rank;
use super::super::failure::At;
use super::super::step::{Batch, Model, Pass};
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{rank_micro_batches, Experiment, ParallelPlan, Parallelism};
use kiln::rundir::Fingerprint;
use kiln::span::Span;

/// A rank of a distributed run, as it joins the others.
pub struct Member<'a> {
    /// Where this process stands.
    pub rank: &'a Rank,
    /// The backend, as [`super::ddp::check_rank`] chose it.
    pub backend: Backend,
    /// The experiment file's name, as given on the command line.
    pub file: String,
    /// What its experiment computes (as a resume compares it).
    pub fingerprint: &'a Fingerprint,
    /// The step it resumes from, when it resumes.
    pub resume_step: Option<u64>,
}

/// This rank among the others: its process group and what it knows of its peers.
pub struct Ranks {
    /// Field order is drop order: the group before the store.
    pub group: Group,
    store: Store,
    /// Where this process stands.
    pub me: Rank,
    peers: Vec<Announce>,
    /// The device of the parameters, where the small all-reduces run (NCCL reduces CUDA
    /// tensors only).
    device: tch::Device,
    /// Set by this process's stop signals.
    signals: Cancel,
    /// The loop's token: set only when the ranks agree to stop, so all stop at the same step.
    stop: Cancel,
    /// The `parallel` statement, where failures point.
    pub span: Span,
    /// The backend of the run's groups.
    backend: Backend,
    /// How long a collective may wait.
    timeout: Duration,
}

/// The timeout and the `parallel` statement of a distributed plan (`exp`'s own statement
/// otherwise).
pub fn settings(exp: &Experiment, plan: &ParallelPlan) -> (Duration, Span) {
    match &plan.strategy {
        Parallelism::Ddp {
            timeout_s, span, ..
        } => (Duration::from_secs(*timeout_s), *span),
        Parallelism::Local | Parallelism::Replicas { .. } | Parallelism::Pipeline { .. } => {
            (Duration::from_secs(60), exp.span)
        }
    }
}

/// A rank's rows of a global batch: its micro-batches' inputs and targets, and the weight of each
/// one's loss (0 for a micro-batch the batch left without rows, which runs one row so as to take
/// part in the collectives).
pub struct Rows {
    /// The micro-batches' inputs.
    pub xs: Vec<Tensor>,
    /// Their targets.
    pub ys: Vec<Tensor>,
    /// Each micro-batch's weight: 1, or 0 for a stand-in row.
    pub weights: Vec<f64>,
    /// Each micro-batch's first row in the global batch (where its dropout masks are placed).
    pub starts: Vec<u64>,
}

impl Ranks {
    /// Meets the other ranks and creates the process group. Returns the ranks and the token the
    /// loop must watch for stopping.
    pub fn start(
        exp: &Experiment,
        plan: &ParallelPlan,
        model: &dyn Model,
        member: Member,
        signals: Cancel,
    ) -> Result<(Ranks, Cancel), Diagnostic> {
        let (timeout, span) = settings(exp, plan);
        let started = Instant::now();
        let me = member.rank.clone();
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
        let unreachable = |e: super::super::dist::c10d::CommError| {
            Problem::Running(Running::RendezvousFailed {
                span,
                rank: me.rank,
                missing: vec![],
                address: me.address(),
                timeout_s: timeout.as_secs(),
                detail: Some(first_line(&e.0)),
            })
            .diagnostic()
        };
        let store = Store::connect(&me.addr, me.port, me.serves_store(), me.world, timeout)
            .map_err(unreachable)?;
        let peers = rendezvous(&store, &me, &announce, started + timeout, timeout, span)?;
        compare(exp, &peers, span)?;
        let backend = member.backend;
        let group = Group::new(
            &store,
            Group::WORLD,
            me.rank,
            me.world,
            backend,
            &bind(&me),
            timeout,
        )
        .map_err(unreachable)?;
        let device = model
            .params()
            .first()
            .map_or(tch::Device::Cpu, |(_, t)| t.device());
        let stop = Cancel::default();
        Ok((
            Ranks {
                group,
                store,
                me,
                peers,
                device,
                signals,
                stop: stop.clone(),
                span,
                backend,
                timeout,
            },
            stop,
        ))
    }

    /// The group `name` of the ranks `members` (this rank among them), one slice of a mesh
    /// dimension: every rank of the slice makes it under the same name.
    pub fn subgroup(&self, name: &str, members: &[usize]) -> Result<Group, Diagnostic> {
        let rank = members
            .iter()
            .position(|&r| r == self.me.rank)
            .unwrap_or_default();
        Group::new(
            &self.store,
            name,
            rank,
            members.len(),
            self.backend,
            &bind(&self.me),
            self.timeout,
        )
        .map_err(|e| self.lost(&e.0))
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.me.world
    }

    /// A failed collective as K0514, naming the rank that stopped when it can be told (a rank on
    /// this machine whose process is gone).
    pub fn lost(&self, detail: &str) -> Diagnostic {
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

    /// Broadcasts the tensors from rank 0 into every rank's (nothing to do at world size 1).
    pub fn broadcast(&self, tensors: &[Tensor]) -> Result<(), Diagnostic> {
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

    /// Sums `t` in place over the ranks (nothing to do at world size 1).
    pub fn all_sum(&self, t: &Tensor) -> Result<(), Diagnostic> {
        if self.me.world == 1 {
            return Ok(());
        }
        self.group.all_reduce_sum(t).map_err(|e| self.lost(&e.0))
    }

    /// This rank's share of an evaluation: the `rank`-th of `world` runs of a split's samples.
    pub fn share(&self) -> (usize, usize) {
        (self.me.rank, self.me.world)
    }

    /// Sums an evaluation's `values` in place over the ranks (every rank then sees the same
    /// metrics and makes the same early-stopping decision).
    pub fn reduce(&self, values: &mut [f64]) -> Result<(), Diagnostic> {
        let sums = self.sum(values)?;
        values.copy_from_slice(&sums);
        Ok(())
    }

    /// The ranks' sums of `values` (one small all-reduce, on the parameters' device). At world
    /// size 1 they are `values`: no all-reduce, which would cost a round trip through Gloo's
    /// worker thread and a device read every step.
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, Diagnostic> {
        if self.me.world == 1 {
            return Ok(values.to_vec());
        }
        let t = Tensor::f_from_slice(values)
            .and_then(|t| t.f_to_device(self.device))
            .at(self.span)?;
        self.all_sum(&t)?;
        Vec::<f64>::try_from(&t.f_to_device(tch::Device::Cpu).at(self.span)?).at(self.span)
    }

    /// This rank's rows of `batch`: every rank reads the same global batch and takes its `A`
    /// micro-batches of it, cut as one process accumulating over `W·A` cuts it
    /// ([`rank_micro_batches`]), a stand-in row of weight 0 for one the cut leaves out. So every
    /// rank runs `A` micro-batches, gathering and reducing as often as the others whatever the
    /// batch's size, and each is a micro-batch of one process's: in bf16, where what a
    /// micro-batch computes depends on which rows it holds, the ranks compute what that process
    /// does, a short last batch included.
    pub fn rows(&self, batch: &Batch) -> Result<Rows, Diagnostic> {
        self.rows_of(batch, self.me.rank, self.me.world)
    }

    /// The rows of `batch` of the `r`-th of `world` data-parallel ranks (as [`Ranks::rows`]),
    /// where ranks of another dimension (tensor parallel) share a data rank's rows.
    pub fn rows_of(&self, batch: &Batch, r: usize, world: usize) -> Result<Rows, Diagnostic> {
        let span = batch.span;
        let a = batch.accumulate.max(1) as usize;
        let n = batch.x.size().first().copied().unwrap_or(1) as u64;
        let slots = rank_micro_batches(n, world as u64, a as u64);
        let mut rows = Rows {
            xs: Vec::new(),
            ys: Vec::new(),
            weights: Vec::new(),
            starts: Vec::new(),
        };
        for slot in slots.iter().skip(r * a).take(a) {
            let ((start, len), weight) = match slot {
                Some((start, len)) => ((*start as i64, *len as i64), 1.0),
                None => ((0, 1), 0.0),
            };
            rows.xs.push(batch.x.f_narrow(0, start, len).at(span)?);
            rows.ys.push(batch.y.f_narrow(0, start, len).at(span)?);
            rows.weights.push(weight);
            rows.starts.push(start as u64);
        }
        Ok(rows)
    }

    /// The step's values agreed over the ranks: their sums, and the stop token set when any
    /// rank was asked to stop (then every rank stops after this step). Returns the agreed pass
    /// and whether its loss is finite: a non-finite loss on any rank makes the sum non-finite,
    /// and every rank then fails with K0504 as the loop reads the values, at once. At world
    /// size 1 there is nothing to agree on: the values stay on the device.
    pub fn agree(&self, pass: Pass, span: Span) -> Result<(Pass, bool), Diagnostic> {
        self.agree_counting(pass, span, true)
    }

    /// [`Ranks::agree`], this rank's values counted in the sums only when `counted` (a rank
    /// whose values another rank holds too, a tensor rank after the first, adds zeros).
    pub fn agree_counting(
        &self,
        pass: Pass,
        span: Span,
        counted: bool,
    ) -> Result<(Pass, bool), Diagnostic> {
        if self.me.world == 1 {
            if self.signals.is_cancelled() {
                self.stop
                    .cancel(self.signals.signal().unwrap_or(libc::SIGTERM));
            }
            return Ok((pass, true));
        }
        let flag = |b: bool| f64::from(u8::from(b));
        let [loss_sum, correct, tallied] = match counted {
            true => pass.values().at(span)?,
            // Its loss still decides whether the step is finite.
            false => pass
                .values()
                .at(span)?
                .map(|v| if v.is_finite() { 0.0 } else { v }),
        };
        let agreed = self.sum(&[
            loss_sum,
            correct,
            tallied,
            flag(self.signals.is_cancelled()),
        ])?;
        let pass = Pass::known([agreed[0], agreed[1], agreed[2]]).at(span)?;
        if !agreed[0].is_finite() {
            return Ok((pass, false));
        }
        if agreed[3] > 0.0 {
            self.stop
                .cancel(self.signals.signal().unwrap_or(libc::SIGTERM));
        }
        Ok((pass, true))
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
