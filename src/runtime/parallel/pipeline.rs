//! Pipeline parallel: the model cut into consecutive stages, each run by its own thread on its own
//! device, each batch cut into micro-batches that flow through the stages.
//!
//! A stage is a view of its layers of the model (`Net::stage`): its parameters are shallow clones
//! of the model's, so the gradients every stage accumulates are the model's own and the
//! optimizer's single update covers them all. Stage `k` receives the activations of stage `k-1`
//! over a channel (detached, as leaves that require gradients), runs its layers, keeps its output
//! for the backward pass and sends a detached copy on, moved to the next stage's device; the last
//! stage computes the loss. A backward pass receives the gradient of the stage's output, runs it
//! through the stage and sends the gradient of the stage's input back. The schedule ([`order`])
//! says in which order each stage runs its forwards and backwards: GPipe all forwards then all
//! backwards, 1F1B a warm-up of `p-1-k` forwards on stage `k`, then one forward and one backward
//! in turn, then the remaining backwards. The stages run concurrently; a stage that fails or meets
//! a non-finite loss ends, and the others end when its channels close.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};

use tch::{Device, Tensor};

use super::strategy::Strategy;
use crate::runtime::failure::{torch_failure, At};
use crate::runtime::model::{dropout_draw, dropout_seed, tch_device, with_dropout_keys, Net};
use crate::runtime::step::{micro_batches, Backprop, Batch, Model, Objective, Pass, Whole};
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Experiment, Node, ParallelPlan, Parallelism, PipelineSchedule};
use kiln::span::Span;

/// One unit of a stage's work on a micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The forward pass of micro-batch `j`.
    Forward(usize),
    /// The backward pass of micro-batch `j`.
    Backward(usize),
}

/// The order in which stage `k` of `p` runs the forward and backward passes of `m` micro-batches.
/// Every stage meets the micro-batches in the same order in each direction, so the channels
/// between stages deliver them in the order they are awaited.
pub fn order(schedule: PipelineSchedule, k: usize, p: usize, m: usize) -> Vec<Op> {
    match schedule {
        PipelineSchedule::GPipe => (0..m)
            .map(Op::Forward)
            .chain((0..m).map(Op::Backward))
            .collect(),
        PipelineSchedule::OneFOneB => {
            let warm = (p - 1 - k).min(m);
            let mut ops: Vec<Op> = (0..warm).map(Op::Forward).collect();
            for i in 0..m - warm {
                ops.push(Op::Forward(warm + i));
                ops.push(Op::Backward(i));
            }
            ops.extend((m - warm..m).map(Op::Backward));
            ops
        }
    }
}

/// The model's nodes with every layer of a pipeline's stage on the stage's device, as the plan
/// places them: the placement of the stage's first layer when it differs from the experiment's
/// device, else the CPU for a CPU experiment, else `cuda:k` for stage `k`. Other strategies keep
/// the nodes as written.
pub fn placed<'e>(exp: &'e Experiment, plan: &ParallelPlan) -> Cow<'e, [Node]> {
    let Parallelism::Pipeline { boundaries, .. } = &plan.strategy else {
        return Cow::Borrowed(&exp.model.nodes);
    };
    let mut nodes = exp.model.nodes.clone();
    let ends = boundaries.iter().skip(1).copied().chain([nodes.len()]);
    for (k, (start, end)) in boundaries.iter().copied().zip(ends).enumerate() {
        let stage = &mut nodes[start.min(end)..end];
        let first = kiln::ir::layers(stage).first().map(|l| l.device);
        let device = match first {
            Some(d) if d != exp.device => d,
            _ if tch_device(exp.device) == Device::Cpu => kiln::ir::Device::Cpu,
            _ => kiln::ir::Device::Cuda(k as u32),
        };
        place(stage, device);
    }
    Cow::Owned(nodes)
}

fn place(nodes: &mut [Node], device: kiln::ir::Device) {
    for n in nodes {
        match n {
            Node::Layer(l) => l.device = device,
            Node::Block { nodes, .. } | Node::Residual { nodes, .. } => place(nodes, device),
        }
    }
}

/// The stages of a pipeline and its schedule.
pub struct Pipeline {
    stages: Vec<Net>,
    micro_batches: i64,
    schedule: PipelineSchedule,
}

impl Pipeline {
    /// The pipeline over `net` cut before each top-level node in `boundaries`.
    pub fn new(
        net: &Net,
        boundaries: &[usize],
        micro_batches: u64,
        schedule: PipelineSchedule,
    ) -> Pipeline {
        let ends = boundaries.iter().skip(1).copied().chain([usize::MAX]);
        Pipeline {
            stages: boundaries
                .iter()
                .zip(ends)
                .map(|(start, end)| net.stage(*start..end))
                .collect(),
            micro_batches: micro_batches.max(1) as i64,
            schedule,
        }
    }

    /// Runs `(x, y)` through the stages as micro-batches, each stage in its own thread, leaving
    /// the gradient of their parts of the `whole` batch's mean loss times `scale` in the model's
    /// parameters. `observe` sees
    /// every operation as a stage starts it.
    pub fn pass(
        &mut self,
        objective: &Objective,
        (x, y): (&Tensor, &Tensor),
        (whole, scale): (&Whole, f64),
        span: Span,
        observe: &(dyn Fn(usize, Op) + Sync),
    ) -> Result<Pass, Diagnostic> {
        let xs = x.f_chunk(self.micro_batches, 0).at(span)?;
        let ys = y.f_chunk(self.micro_batches, 0).at(span)?;
        let (p, m) = (self.stages.len(), xs.len());
        let devices: Vec<Device> = self.stages.iter().map(Net::input_device).collect();
        let mut links = links(p, &devices);
        if let Some(first) = links.first_mut() {
            first.xs = xs;
        }
        let end = End {
            objective,
            ys,
            whole: whole.clone(),
            scale,
        };
        let mut end = Some(end);
        let schedule = self.schedule;
        // The stages draw dropout keys concurrently: each (stage, micro-batch) from a stream of
        // its own, seeded from one draw of libtorch's generator here, in order.
        let draw = dropout_draw().at(span)?;
        for (k, io) in links.iter_mut().enumerate() {
            io.keys = dropout_seed(draw, k as u64);
        }
        std::thread::scope(|s| {
            let mut handles = Vec::new();
            for (k, (stage, io)) in self.stages.iter_mut().zip(links).enumerate() {
                let end = if k + 1 == p { end.take() } else { None };
                let ops = order(schedule, k, p, m);
                let work = move || run_stage(stage, k, &ops, io, end, span, observe);
                let handle = std::thread::Builder::new()
                    .name(format!("pipeline stage {k}"))
                    .spawn_scoped(s, work)
                    .map_err(|e| {
                        torch_failure(&format!("cannot start pipeline stage {k}: {e}"), span)
                            .diagnostic()
                    })?;
                handles.push(handle);
            }
            let mut pass = Pass::default();
            let mut failure = None;
            for h in handles {
                match h.join() {
                    Ok(Ok(got)) => {
                        if let Err(e) = pass.add(got) {
                            failure =
                                failure.or(Some(torch_failure(&e.to_string(), span).diagnostic()));
                        }
                    }
                    Ok(Err(d)) => failure = failure.or(Some(d)),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            failure.map_or(Ok(pass), Err)
        })
    }
}

/// The stages are views of the one model the loop trains: the whole-model layout.
impl Strategy for Pipeline {}

impl Backprop for Pipeline {
    fn backprop(
        &mut self,
        _model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        micro_batches(batch, |xm, ym, pass| {
            let got = self.pass(
                objective,
                (xm, ym),
                (&batch.whole, batch.scale),
                batch.span,
                &|_, _| {},
            )?;
            pass.add(got).at(batch.span)
        })
    }
}

/// What one stage hands the next for a micro-batch: its output, and the padding mask of the
/// sequence (`[batch, sequence]`, true for tokens) while one flows (see `Net::forward_masked`).
type Acts = (Tensor, Option<Tensor>);

/// A stage's ends of the channels, stage 0's micro-batches, and the seed of the stage's dropout
/// keys (micro-batch `j` draws from the stream `dropout_seed(keys, j)`).
struct Io {
    xs: Vec<Tensor>,
    keys: u64,
    acts_in: Option<Receiver<Acts>>,
    acts_out: Option<(Sender<Acts>, Device)>,
    grads_in: Option<Receiver<Option<Tensor>>>,
    grads_out: Option<Sender<Option<Tensor>>>,
}

/// What the last stage needs to compute the loss.
struct End<'a> {
    objective: &'a Objective,
    ys: Vec<Tensor>,
    whole: Whole,
    scale: f64,
}

/// The channels between `p` stages whose inputs live on `devices`.
fn links(p: usize, devices: &[Device]) -> Vec<Io> {
    let mut io: Vec<Io> = (0..p)
        .map(|_| Io {
            xs: Vec::new(),
            keys: 0,
            acts_in: None,
            acts_out: None,
            grads_in: None,
            grads_out: None,
        })
        .collect();
    for k in 1..p {
        let (tx, rx) = channel();
        io[k - 1].acts_out = Some((tx, devices[k]));
        io[k].acts_in = Some(rx);
        let (tx, rx) = channel();
        io[k].grads_out = Some(tx);
        io[k - 1].grads_in = Some(rx);
    }
    io
}

/// Runs stage `k`'s operations in order. A closed channel means another stage ended (a failure
/// or a non-finite loss): this stage ends too, and the pass reports why.
fn run_stage(
    stage: &Net,
    k: usize,
    ops: &[Op],
    io: Io,
    end: Option<End>,
    span: Span,
    observe: &(dyn Fn(usize, Op) + Sync),
) -> Result<Pass, Diagnostic> {
    // Makes the stage's device context current on this thread, as cuBLAS expects.
    if let tch::Device::Cuda(i) = stage.input_device() {
        tch::Cuda::synchronize(i as i64);
    }
    // Per micro-batch in flight: the stage's input and its output (the scaled loss on the last).
    let mut held: HashMap<usize, (Tensor, Tensor)> = HashMap::new();
    let mut pass = Pass::default();
    for op in ops {
        observe(k, *op);
        match *op {
            Op::Forward(j) => {
                let (input, keep) = match &io.acts_in {
                    None => match io.xs.get(j) {
                        Some(x) => (x.shallow_clone(), None),
                        None => return Ok(pass),
                    },
                    Some(rx) => match rx.recv() {
                        Ok((t, keep)) if t.is_floating_point() => {
                            (t.f_set_requires_grad(true).at(span)?, keep)
                        }
                        Ok(acts) => acts,
                        Err(_) => return Ok(pass),
                    },
                };
                let (out, keep) = with_dropout_keys(dropout_seed(io.keys, j as u64), || {
                    stage.forward_masked(&input, true, keep)
                })?;
                let kept = match (&end, &io.acts_out) {
                    (Some(end), _) => {
                        let Some(loss) = loss(end, j, &out, &mut pass, span)? else {
                            return Ok(pass);
                        };
                        loss
                    }
                    (None, Some((tx, device))) => {
                        let sent = out.f_detach().at(span)?.f_to_device(*device).at(span)?;
                        let keep = keep.map(|k| k.f_to_device(*device)).transpose().at(span)?;
                        if tx.send((sent, keep)).is_err() {
                            return Ok(pass);
                        }
                        out
                    }
                    (None, None) => out,
                };
                held.insert(j, (input, kept));
            }
            Op::Backward(j) => {
                let Some((input, out)) = held.remove(&j) else {
                    return Ok(pass);
                };
                if end.is_some() {
                    out.f_backward().at(span)?;
                } else if let Some(rx) = &io.grads_in {
                    let Ok(grad) = rx.recv() else {
                        return Ok(pass);
                    };
                    if let Some(g) = grad.filter(|_| out.requires_grad()) {
                        let g = g.f_to_device(out.device()).at(span)?;
                        out.f_mul(&g)
                            .at(span)?
                            .f_sum(None)
                            .at(span)?
                            .f_backward()
                            .at(span)?;
                    }
                }
                if let Some(tx) = &io.grads_out {
                    let g = input.grad();
                    if tx.send(g.defined().then_some(g)).is_err() {
                        return Ok(pass);
                    }
                }
            }
        }
    }
    Ok(pass)
}

/// The loss of micro-batch `j` on the last stage as its part of the whole batch's mean loss,
/// scaled for backward, counted into `pass`; `None` when the micro-batch has no targets.
fn loss(
    end: &End,
    j: usize,
    out: &Tensor,
    pass: &mut Pass,
    span: Span,
) -> Result<Option<Tensor>, Diagnostic> {
    let Some(y) = end.ys.get(j) else {
        return Ok(None);
    };
    let y = y.f_to_device(out.device()).at(span)?;
    let part = end.objective.part(out, &y, &end.whole, pass, 1.0)?;
    part.f_mul_scalar(end.scale).at(span).map(Some)
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
