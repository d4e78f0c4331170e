//! Data parallel in one process: a replica of the model per listed device, each taking its
//! slice of every micro-batch, forward and backward on all replicas at once (a thread per
//! replica), the replicas' gradients summed onto the model the loop trains, one optimizer step.
//!
//! Replica 0 is the model the loop trains (on the first listed device), run on the loop's own
//! thread: it holds the optimizer's state and is what evaluation and checkpoints see, so it costs
//! no extra memory. Every other replica lives for the whole run on a thread of its own, which
//! owns it (a thread that lived for one step only would take libtorch's intra-op thread pool,
//! which belongs to the thread that uses it, down with it). At every step those replicas copy
//! replica 0's weights (on their own threads, before their first slice) and buffers (from the
//! loop's thread, while they wait), so they agree with it after initialisation, `--init`, a
//! resume and every update. Each replica's loss is its slice's part of the batch's mean loss (its
//! share of the samples, or its summed loss over the whole batch's class-target weight), so the
//! summed gradient is that of the batch's mean loss. Batch-norm layers normalise each slice
//! with its own statistics; the running statistics kept are replica 0's (those of its slices), as
//! `nn.DataParallel` keeps the primary module's.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use tch::{Device, Tensor};

use super::super::failure::{torch_failure, At};
use super::super::model::{self, dropout_draw, dropout_seed, tch_device, with_dropout_keys, Net};
use super::super::step::{micro_batches, Backprop, Batch, Model, Objective, Pass, Whole};
use super::strategy::Strategy;
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
    /// Replicas 1 to N-1, each on its own thread; replica 0 is the model the loop trains.
    workers: Vec<Worker>,
    /// libtorch's intra-op thread count before the CPU replicas split it, restored at the end.
    threads: Option<i32>,
}

/// What a replica's thread is asked to do: forward and backward of the slice `(x, y)`, its part
/// of the `whole` batch's mean loss multiplied by `scale`; on a step's first micro-batch, after
/// copying replica 0's weights (in the model's order) and zeroing the gradients. Its dropout
/// keys come from the stream `keys` (the replicas run at once: libtorch's one CPU generator
/// would hand them keys in thread order).
struct Job {
    weights: Option<Vec<Tensor>>,
    x: Tensor,
    y: Tensor,
    whole: Whole,
    scale: f64,
    keys: u64,
}

/// A replica on its own thread.
struct Worker {
    jobs: Option<Sender<(Job, Span)>>,
    done: Receiver<Result<Pass, Diagnostic>>,
    /// The replica's parameters (shallow clones), whose gradients are read once it has answered.
    params: Vec<Tensor>,
    /// The replica's buffers (shallow clones), written while it waits for a job.
    buffers: Vec<Tensor>,
    thread: Option<JoinHandle<()>>,
}

impl DataParallel {
    /// Builds a replica of `exp`'s model on each of `devices` after the first (the first is
    /// the model's own device), each on a thread of its own.
    ///
    /// Replicas on the CPU split libtorch's intra-op threads between them (each thread's
    /// OpenMP team would otherwise take every core, and the teams would fight over them).
    pub fn new(exp: &Experiment, devices: &[Device]) -> Result<DataParallel, Diagnostic> {
        let on_cpu = devices.iter().filter(|d| **d == Device::Cpu).count() as i32;
        let total = tch::get_num_threads();
        // Only while replica 0 is on the CPU: then no loader thread runs libtorch's CPU
        // operations beside the replicas' (a thread whose OpenMP team is larger than the count
        // libtorch was told would overrun its per-thread buffers).
        let share =
            (on_cpu > 1 && devices.first() == Some(&Device::Cpu)).then(|| (total / on_cpu).max(1));
        if let Some(k) = share {
            tch::set_num_threads(k);
        }
        // Built first, so that a replica that fails to build restores the thread count and
        // ends the threads already started.
        let mut strategy = DataParallel {
            workers: Vec::new(),
            threads: share.map(|_| total),
        };
        for d in devices.iter().skip(1) {
            let net = model::build(&exp.model.nodes, exp.train.precision, Some(*d))?;
            let params = net
                .params
                .iter()
                .map(|p| p.tensor.shallow_clone())
                .collect();
            let buffers = net
                .buffers
                .iter()
                .map(|b| b.tensor.shallow_clone())
                .collect();
            let objective = Objective::new(exp);
            let (jobs, inbox) = channel();
            let (outbox, done) = channel();
            let thread = std::thread::spawn(move || {
                // Makes the device's context current on this thread, as cuBLAS expects.
                if let Device::Cuda(i) = net.input_device() {
                    tch::Cuda::synchronize(i as i64);
                }
                // This thread's OpenMP team: its share of the intra-op threads (on every
                // replica's thread, so that no team is larger than the count libtorch knows).
                if let Some(k) = share {
                    tch::set_num_threads(k);
                }
                if outbox.send(Ok(Pass::default())).is_ok() {
                    serve(&net, &objective, &inbox, &outbox);
                }
            });
            strategy.workers.push(Worker {
                jobs: Some(jobs),
                done,
                params,
                buffers,
                thread: Some(thread),
            });
        }
        // Each thread says it is ready, so none changes libtorch's settings once training runs.
        let gone = gone(exp.optimizer.span);
        for w in &strategy.workers {
            w.done.recv().map_err(|_| gone.clone())??;
        }
        Ok(strategy)
    }

    /// Hands each worker its job and waits for those that got one after `here` (replica 0's
    /// share) ran on this thread; the results come in replica order, replica 0's first.
    fn all(
        &self,
        jobs: impl Iterator<Item = Job>,
        span: Span,
        here: impl FnOnce() -> Result<Pass, Diagnostic>,
    ) -> Result<Vec<Pass>, Diagnostic> {
        let mut given = 0;
        for (w, job) in self.workers.iter().zip(jobs) {
            let sent = w.jobs.as_ref().map(|j| j.send((job, span)));
            if !matches!(sent, Some(Ok(()))) {
                return Err(gone(span));
            }
            given += 1;
        }
        let first = here();
        let mut out = Vec::with_capacity(given + 1);
        let rest: Vec<_> = self.workers[..given]
            .iter()
            .map(|w| w.done.recv().map_err(|_| gone(span)).and_then(|r| r))
            .collect();
        out.push(first?);
        for r in rest {
            out.push(r?);
        }
        Ok(out)
    }

    /// Adds every replica's gradients to those of `primary`. Replica 0 always has the largest
    /// slice, so a parameter without a gradient there (one the model does not use) has none on
    /// any replica.
    fn reduce(&self, primary: &dyn Model, span: Span) -> Result<(), Diagnostic> {
        for (j, (_, p)) in primary.params().into_iter().enumerate() {
            let mut total = p.grad();
            if !total.defined() {
                continue;
            }
            for w in &self.workers {
                let Some(g) = w.params.get(j).map(Tensor::grad) else {
                    continue;
                };
                if g.defined() {
                    let g = g.f_to_device(p.device()).at(span)?;
                    let _ = total.f_add_(&g).at(span)?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for DataParallel {
    fn drop(&mut self) {
        for w in &mut self.workers {
            // Closing the channel ends the thread's loop.
            w.jobs = None;
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
        if let Some(total) = self.threads {
            tch::set_num_threads(total);
        }
    }
}

/// Replica 0 is the model the loop trains and holds the optimizer: the whole-model layout.
impl Strategy for DataParallel {}

impl Backprop for DataParallel {
    fn backprop(
        &mut self,
        model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        let span = batch.span;
        let handles = |v: Vec<(&str, &Tensor)>| -> Vec<Tensor> {
            v.into_iter().map(|(_, t)| t.shallow_clone()).collect()
        };
        // Buffers are copied here, while the replicas wait: replica 0's forward pass updates
        // its batch-norm statistics in place while the replicas copy its weights.
        let buffers = model.buffers();
        tch::no_grad(|| {
            for w in &self.workers {
                for (dst, (_, src)) in w.buffers.iter().zip(&buffers) {
                    dst.shallow_clone().f_copy_(src).at(span)?;
                }
            }
            Ok::<(), Diagnostic>(())
        })?;
        let mut first = true;
        let parts = 1 + self.workers.len() as i64;
        let (whole, scale) = (&batch.whole, batch.scale);
        let pass = micro_batches(batch, |xm, ym, pass| {
            let xs = xm.f_tensor_split(parts, 0).at(span)?;
            let ys = ym.f_tensor_split(parts, 0).at(span)?;
            let mut slices = xs.into_iter().zip(ys);
            let Some((x0, y0)) = slices.next() else {
                return Ok(());
            };
            let sync = std::mem::take(&mut first);
            let draw = dropout_draw().at(span)?;
            let jobs = slices.enumerate().map(|(r, (x, y))| Job {
                weights: sync.then(|| handles(model.params())),
                x,
                y,
                whole: whole.clone(),
                scale,
                keys: dropout_seed(draw, r as u64 + 1),
            });
            let here = || {
                with_dropout_keys(dropout_seed(draw, 0), || {
                    slice(model, objective, (&x0, &y0), (whole, scale), span)
                })
            };
            for r in self.all(jobs, span, here)? {
                pass.add(r).at(span)?;
            }
            Ok(())
        })?;
        self.reduce(model, span)?;
        Ok(pass)
    }
}

/// The failure of a replica's thread that ended (it panicked).
fn gone(span: Span) -> Diagnostic {
    torch_failure("a data-parallel replica's thread ended", span).diagnostic()
}

/// A replica's thread: runs each job on `net` and answers it, until the jobs' channel closes.
fn serve(
    net: &Net,
    objective: &Objective,
    inbox: &Receiver<(Job, Span)>,
    outbox: &Sender<Result<Pass, Diagnostic>>,
) {
    while let Ok((job, span)) = inbox.recv() {
        let synced = match &job.weights {
            Some(weights) => sync(net, weights, span),
            None => Ok(()),
        };
        let answer = synced
            .and_then(|()| job.x.f_to_device(net.input_device()).at(span))
            .and_then(|x| {
                with_dropout_keys(job.keys, || {
                    slice(net, objective, (&x, &job.y), (&job.whole, job.scale), span)
                })
            });
        if outbox.send(answer).is_err() {
            return;
        }
    }
}

/// Copies replica 0's weights into `net` and zeroes its gradients.
fn sync(net: &Net, weights: &[Tensor], span: Span) -> Result<(), Diagnostic> {
    tch::no_grad(|| {
        for (dst, src) in net.params.iter().zip(weights) {
            dst.tensor.shallow_clone().f_copy_(src).at(span)?;
            let mut g = dst.tensor.grad();
            if g.defined() {
                g.f_zero_().done_at(span)?;
            }
        }
        Ok(())
    })
}

/// Forward, loss and backward of one replica's slice `(x, y)`: its part of the `whole` batch's
/// mean loss, multiplied by `scale` (the loss scale) before backward. An empty slice (a batch
/// smaller than the replicas) computes nothing.
fn slice(
    model: &dyn Model,
    objective: &Objective,
    (x, y): (&Tensor, &Tensor),
    (whole, scale): (&Whole, f64),
    span: Span,
) -> Result<Pass, Diagnostic> {
    let m = x.size().first().copied().unwrap_or(0);
    let mut pass = Pass::default();
    if m == 0 {
        return Ok(pass);
    }
    let out = model.forward(x, true)?;
    let y = y.f_to_device(out.device()).at(span)?;
    let part = objective.part(&out, &y, whole, &mut pass, 1.0)?;
    part.f_mul_scalar(scale).at(span)?.f_backward().at(span)?;
    Ok(pass)
}
