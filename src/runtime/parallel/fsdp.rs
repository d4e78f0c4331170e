//! Fully sharded data parallel over processes on PyTorch's c10d (`parallel fsdp`), as FSDP2's
//! `fully_shard` does it: every rank holds 1/W of every parameter, of its gradient and of its
//! optimizer state, and gathers a unit's parameters only while it needs them.
//!
//! Units: each top-level block of the model is one unit; the remaining top-level layers are one
//! unit together (the root). A parameter of `n` values is cut into W shards of `ceil(n/W)`
//! values (the last padded with zeros); this rank keeps its shard of each, flat, and its
//! optimizer updates those shards (its state is as sharded). Between steps the model's
//! parameters hold no memory.
//!
//! A step: the model runs one top-level node at a time; before a node runs, its unit is
//! all-gathered (one `_allgather_base` of the unit's shards laid end to end). Once a backward
//! pass has accumulated every gradient of a unit, a hook reduce-scatters them
//! (`_reduce_scatter_base`, summed) into the shards' gradients and frees the unit. With
//! `reshard_after_forward: true` a block's parameters are also freed after its forward pass,
//! and a hook on its output gathers them again when backward reaches it; every micro-batch
//! gathers and reduces. With `false` the micro-batches before the last keep every unit gathered
//! and its gradients whole (DDP's `no_sync`), so a step gathers and reduces each unit once.
//!
//! The arithmetic is ddp's: every rank reads the same global batch and takes its micro-batches,
//! a rank's loss on a micro-batch of `m` rows is scaled by `m / n`, and the reduce-scatter sums
//! (as ddp's Reducer does), so the summed gradient is the gradient of the global batch's mean
//! loss, as one process on the whole batch computes it. Clipping by norm and the fp16 overflow
//! check sum their values over the ranks ([`Backprop::all_sum`]), so they see the whole gradient.
//!
//! Checkpoints hold the whole model and optimizer state, in the layout every strategy writes:
//! the ranks gather them a unit and a tensor at a time, and rank 0 keeps and writes them. A
//! restore takes this rank's slices of them, so a run resumes at another world size, or without
//! a strategy.
//!
//! Composed with tensor parallel (`mesh(fsdp: F, tensor: T)`), the model is split over each
//! tensor group first ([`Mesh`]) and each rank shards its pieces over its data group (the `F`
//! ranks holding the same pieces): units gather and reduce over that group, the rows of a batch
//! are the data rank's, the first rank of a tensor group counts the step's values, the norm for
//! clipping sums over every rank and counts a replicated layer once, and checkpoints gather a
//! unit over the data group, then the pieces over the tensor group.

use tch::Tensor;

use super::super::cancel::Cancel;
use super::super::dist::unit::{Pool, Unit};
use super::super::failure::At;
use super::super::model::{with_dropout_rows, Net};
use super::super::optim::Optim;
use super::super::step::{Backprop, Batch, Model, Objective, Pass};
use super::ranks::{Member, Ranks};
use super::strategy::{buffers_of, model_state_dict, restore_whole, whole_state, Strategy};
use super::tensor::Mesh;
use kiln::diagnostic::Diagnostic;
use kiln::ir::tensor::Cut;
use kiln::ir::{Experiment, Node, ParallelPlan};
use kiln::span::Span;

/// This rank of a fully sharded data-parallel run.
pub struct Fsdp {
    /// Field order is drop order: the units before the group they gather over.
    units: Vec<Sharded>,
    /// The tensor dimension, when the model is split over tensor ranks too; its data group is
    /// the units' group.
    mesh: Option<Mesh>,
    ranks: Ranks,
    /// The model's top-level nodes, each a view of the model, with the unit of its parameters
    /// (`None` for a node without any).
    nodes: Vec<(Net, Option<usize>)>,
    /// This rank's shard of each of the model's parameters, by its name, in the model's order.
    shards: Vec<(String, Tensor)>,
    buffers: Vec<Tensor>,
    /// `reshard_after_forward`: also whether every micro-batch reduces its gradients.
    resharding: bool,
    /// Whether the model stays whole once its final weights are taken (compression after
    /// training works on it, and evaluates it through the strategy), and whether it has.
    whole_at_end: bool,
    whole: std::cell::Cell<bool>,
}

/// A unit, the indices of its parameters in the model's, and whether they are freed after its
/// forward pass.
struct Sharded {
    unit: Unit,
    params: Vec<usize>,
    reshard: bool,
}

impl Fsdp {
    /// Meets the other ranks (as `ddp` does), makes every rank's parameters rank 0's, and
    /// shards them into units. Returns the strategy and the token the loop must watch for
    /// stopping.
    pub fn start(
        exp: &Experiment,
        plan: &ParallelPlan,
        net: &mut Net,
        member: Member,
        signals: Cancel,
        reshard_after_forward: bool,
        tensor: usize,
    ) -> Result<(Fsdp, Cancel), Diagnostic> {
        let (ranks, stop) = Ranks::start(exp, plan, net, member, signals)?;
        // Split over the tensor ranks first (which makes every rank's weights rank 0's).
        let mesh = match tensor {
            1 => None,
            t => Some(Mesh::split(exp, net, &ranks, t, true)?),
        };
        let net: &Net = net;
        let params: Vec<Tensor> = net
            .params
            .iter()
            .map(|p| p.tensor.shallow_clone())
            .collect();
        let buffers: Vec<Tensor> = net
            .buffers
            .iter()
            .map(|b| b.tensor.shallow_clone())
            .collect();
        if mesh.is_none() {
            ranks.broadcast(&params)?;
            ranks.broadcast(&buffers)?;
        }
        let index = |name: &str| net.params.iter().position(|p| p.name == name);
        // Each top-level block with parameters is a unit; every other parameter is the root's,
        // so that every parameter is in exactly one unit.
        let mut members: Vec<(Vec<usize>, bool)> = Vec::new();
        let mut views = Vec::new();
        for (i, node) in exp.model.nodes.iter().enumerate() {
            let view = net.stage(i..i + 1);
            let own: Vec<usize> = view.params.iter().filter_map(|p| index(&p.name)).collect();
            let block = match node {
                Node::Block { .. } if !own.is_empty() => {
                    members.push((own.clone(), reshard_after_forward));
                    Some(members.len() - 1)
                }
                Node::Block { .. } | Node::Layer(_) | Node::Residual { .. } => None,
            };
            views.push((view, block, !own.is_empty()));
        }
        let in_blocks: std::collections::HashSet<usize> = members
            .iter()
            .flat_map(|(own, _)| own.iter().copied())
            .collect();
        let root: Vec<usize> = (0..params.len())
            .filter(|i| !in_blocks.contains(i))
            .collect();
        let root_at = members.len();
        if !root.is_empty() {
            members.push((root, false));
        }
        let nodes = views
            .into_iter()
            .map(|(view, block, owns)| (view, block.or(owns.then_some(root_at))))
            .collect();
        // The units' buffers for gathers and reductions (each unit holds the pool).
        let pool = Pool::new().map_err(|e| ranks.lost(&e.0))?;
        let mut shards: Vec<(usize, Tensor)> = Vec::new();
        let mut units = Vec::new();
        for (own, reshard) in members {
            let tensors: Vec<Tensor> = own.iter().map(|&i| params[i].shallow_clone()).collect();
            let group = mesh
                .as_ref()
                .and_then(|m| m.data.as_ref())
                .unwrap_or(&ranks.group);
            let (unit, mine) = Unit::new(group, &pool, &tensors).map_err(|e| ranks.lost(&e.0))?;
            shards.extend(own.iter().copied().zip(mine));
            unit.release().map_err(|e| ranks.lost(&e.0))?;
            units.push(Sharded {
                unit,
                params: own,
                reshard,
            });
        }
        // Every parameter has exactly one shard: in the model's order.
        shards.sort_by_key(|(i, _)| *i);
        let shards = shards
            .into_iter()
            .map(|(i, t)| (net.params[i].name.clone(), t))
            .collect();
        Ok((
            Fsdp {
                units,
                mesh,
                ranks,
                nodes,
                shards,
                buffers,
                resharding: reshard_after_forward,
                whole_at_end: !exp.compression.is_empty(),
                whole: std::cell::Cell::new(false),
            },
            stop,
        ))
    }

    /// Runs the model on `x` one top-level node at a time (in training mode when `train`),
    /// gathering each unit before it runs and freeing those that reshard after it; in training,
    /// a hook on a freed block's output gathers it again for its backward pass and starts
    /// gathering the block before it.
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor, Diagnostic> {
        let lost = |e: super::super::dist::c10d::CommError| self.ranks.lost(&e.0);
        let mut x = x.shallow_clone();
        let mut keep = None;
        // The last block freed after its forward pass: backward needs it after the next one.
        let mut before: Option<&Sharded> = None;
        for (i, (view, unit)) in self.nodes.iter().enumerate() {
            // The next unit's gather runs while this node computes.
            if let Some(next) = self.nodes[i + 1..].iter().find_map(|(_, u)| *u) {
                self.units[next].unit.prefetch().map_err(lost)?;
            }
            let unit = unit.map(|u| &self.units[u]);
            if let Some(u) = unit {
                u.unit.gather().map_err(lost)?;
            }
            let (y, k) = view.forward_masked(&x, train, keep)?;
            if let Some(u) = unit.filter(|u| u.reshard && !self.whole.get()) {
                u.unit.release().map_err(lost)?;
                if y.requires_grad() {
                    let before = before.map(|b: &Sharded| &b.unit);
                    u.unit.gather_on_grad(&y, before).map_err(lost)?;
                }
                before = Some(u);
            }
            (x, keep) = (y, k);
        }
        Ok(x)
    }

    /// Gathers every unit (those gathered already are current: the shards change only in the
    /// optimizer step, after a backward pass that frees every unit).
    fn unshard(&self) -> Result<(), Diagnostic> {
        for u in &self.units {
            u.unit.gather().map_err(|e| self.ranks.lost(&e.0))?;
        }
        Ok(())
    }

    /// Frees every unit's gathered parameters (none once the model stays whole).
    fn release(&self) -> Result<(), Diagnostic> {
        for u in &self.units {
            self.free(u)?;
        }
        Ok(())
    }

    /// Frees the unit's gathered parameters, unless the model stays whole.
    fn free(&self, u: &Sharded) -> Result<(), Diagnostic> {
        if self.whole.get() {
            return Ok(());
        }
        u.unit.release().map_err(|e| self.ranks.lost(&e.0))
    }

    /// Copies of the model's parameters, gathered one unit at a time (each freed again after),
    /// by the model's order: on rank 0; the other ranks take part in the gathers and keep none.
    fn params_whole(&self, model: &dyn Model) -> Result<Vec<Option<Tensor>>, Diagnostic> {
        let span = self.ranks.span;
        let named = model.params();
        let mut out: Vec<Option<Tensor>> = named.iter().map(|_| None).collect();
        for u in &self.units {
            u.unit.gather().map_err(|e| self.ranks.lost(&e.0))?;
            for &i in &u.params {
                let keep = self.ranks.me.rank == 0;
                let whole = match self.mesh.as_ref().filter(|m| m.cut(i) != Cut::Whole) {
                    // Every rank takes part in gathering the pieces over its tensor group (into
                    // a new tensor).
                    Some(m) => m.gathered(named[i].1, m.cut(i), &self.ranks, span)?,
                    // A copy: the unit's storage is freed below.
                    None if keep => named[i].1.f_detach_copy().at(span)?,
                    None => continue,
                };
                if keep {
                    out[i] = Some(whole);
                }
            }
            self.free(u)?;
        }
        Ok(out)
    }

    /// This rank's place among the ranks that shard the same tensors, and their group: every
    /// rank, or under tensor parallel its data group.
    fn sharding(&self) -> (usize, usize, &super::super::dist::c10d::Group) {
        match &self.mesh {
            Some(m) => {
                let (d, n) = m.data_rank;
                (d, n, m.data.as_ref().unwrap_or(&self.ranks.group))
            }
            None => (self.ranks.me.rank, self.ranks.world(), &self.ranks.group),
        }
    }

    /// This rank's slice of a whole tensor shaped like a parameter: flat, padded with zeros to
    /// W equal shards, shard `rank`.
    fn slice(&self, whole: &Tensor, span: Span) -> Result<Tensor, Diagnostic> {
        let (r, w, _) = self.sharding();
        let (r, w) = (r as i64, w as i64);
        let n = whole.numel() as i64;
        let len = (n + w - 1) / w;
        whole
            .f_reshape([-1])
            .and_then(|t| t.f_constant_pad_nd([0, w * len - n]))
            .and_then(|t| t.f_narrow(0, r * len, len))
            .and_then(|t| t.f_contiguous())
            .at(span)
    }

    /// The whole tensor shaped like `like` from every rank's shard of it.
    fn whole(&self, shard: &Tensor, like: &Tensor) -> Result<Tensor, Diagnostic> {
        let span = self.ranks.span;
        let (_, w, group) = self.sharding();
        let w = w as i64;
        let out =
            Tensor::f_empty([w * shard.numel() as i64], (shard.kind(), shard.device())).at(span)?;
        if w == 1 {
            out.shallow_clone().f_copy_(shard).at(span)?;
        } else {
            group
                .all_gather(&out, &shard.f_contiguous().at(span)?)
                .map_err(|e| self.ranks.lost(&e.0))?;
        }
        out.f_narrow(0, 0, like.numel() as i64)
            .and_then(|t| t.f_reshape(like.size()))
            .at(span)
    }
}

impl Backprop for Fsdp {
    fn backprop(
        &mut self,
        _model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        let span = batch.span;
        let rows = match &self.mesh {
            Some(m) => self.ranks.rows_of(batch, m.data_rank.0, m.data_rank.1)?,
            None => self.ranks.rows(batch)?,
        };
        let mut pass = Pass::default();
        let last = rows.xs.len() - 1;
        for (i, ((xm, ym), weight)) in rows.xs.iter().zip(&rows.ys).zip(&rows.weights).enumerate() {
            // Without resharding, the micro-batches before the last keep every unit gathered
            // and its gradients whole (DDP's `no_sync`): one all-gather and one reduce-scatter
            // of each unit a step.
            for u in &self.units {
                u.unit
                    .set_sync(self.resharding || i == last)
                    .map_err(|e| self.ranks.lost(&e.0))?;
            }
            let out = with_dropout_rows(batch.dropout, rows.starts[i], || self.forward(xm, true))?;
            let ym = ym.f_to_device(out.device()).at(span)?;
            let part = objective.part(&out, &ym, &batch.whole, &mut pass, *weight)?;
            let scaled = part.f_mul_scalar(batch.scale * weight).at(span)?;
            scaled
                .f_backward()
                .map_err(|e| self.ranks.lost(&e.to_string()))?;
        }
        // A non-finite loss fails every rank with K0504 as the loop reads it.
        let counted = self.mesh.as_ref().is_none_or(Mesh::first);
        let (pass, _) = self.ranks.agree_counting(pass, span, counted)?;
        for u in &self.units {
            u.unit.reduce().map_err(|e| self.ranks.lost(&e.0))?;
        }
        self.release()?;
        if !self.buffers.is_empty() {
            self.ranks.broadcast(&self.buffers)?;
        }
        Ok(pass)
    }

    /// Each data rank evaluates its run of a split's samples (its tensor ranks the same run).
    fn share(&self) -> (usize, usize) {
        match &self.mesh {
            Some(m) => m.data_rank,
            None => self.ranks.share(),
        }
    }

    /// The ranks' evaluation sums add up (the first rank of each tensor group's).
    fn reduce(&self, values: &mut [f64]) -> Result<(), Diagnostic> {
        if !self.mesh.as_ref().is_none_or(Mesh::first) {
            values.fill(0.0);
        }
        self.ranks.reduce(values)
    }

    /// Shards (and tensor pieces) add up over every rank.
    fn all_sum(&self, t: &Tensor) -> Result<(), Diagnostic> {
        self.ranks.all_sum(t)
    }

    /// Under tensor parallel a replicated layer's shards are counted by the first tensor rank.
    fn counted(&self, i: usize) -> bool {
        self.mesh.as_ref().is_none_or(|m| m.counted(i))
    }

    /// Evaluation gathers and frees the units as training's forward pass does; once the model
    /// stays whole (compression after training), it runs the model it is given, which may be
    /// the compressed one.
    fn infer(&self, model: &dyn Model, x: &Tensor) -> Result<Tensor, Diagnostic> {
        if self.whole.get() {
            return model.forward(x, false);
        }
        self.forward(x, false)
    }
}

impl Strategy for Fsdp {
    /// This rank's shards, under their parameters' names.
    fn params_owned(&self, _model: &dyn Model) -> Vec<(String, Tensor)> {
        self.shards
            .iter()
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect()
    }

    /// The whole model and optimizer state, gathered a unit and a tensor at a time: rank 0 keeps
    /// them (it writes the checkpoint), the other ranks only take part.
    fn state_for_save(
        &self,
        model: &dyn Model,
        optim: &Optim,
    ) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        let mut params = self.params_whole(model)?;
        let named = model.params();
        let mut whole = Vec::new();
        for (i, ((_, p), state)) in named.iter().zip(&optim.state).enumerate() {
            let mut own = Vec::new();
            for (key, shard) in state {
                let mut t = self.whole(shard, p)?;
                if let Some(m) = &self.mesh {
                    t = m.gathered_state(i, &t, p, &self.ranks, self.ranks.span)?;
                }
                own.push((*key, t));
            }
            whole.push(own);
        }
        if self.ranks.me.rank != 0 {
            return Ok(Vec::new());
        }
        let mut out: Vec<(String, Tensor)> = named
            .iter()
            .zip(params.iter_mut())
            .filter_map(|((name, _), t)| Some((format!("param/{name}"), t.take()?)))
            .collect();
        // The buffers, and the optimizer's state in the whole-model layout.
        out.extend(
            whole_state(model, &whole)
                .into_iter()
                .filter(|(name, _)| !name.starts_with("param/")),
        );
        Ok(out)
    }

    /// Loads a whole checkpoint (written at any world size, or without a strategy) into the
    /// model, then takes this rank's slices of its parameters and optimizer state, and frees
    /// the model again.
    fn restore(
        &self,
        model: &dyn Model,
        optim: &mut Optim,
        tensors: &[(String, Tensor)],
        span: Span,
    ) -> Result<(), Diagnostic> {
        self.unshard()?;
        match &self.mesh {
            Some(m) => restore_whole(
                model,
                optim,
                &m.pieces(&model.params(), tensors, span)?,
                span,
            )?,
            None => restore_whole(model, optim, tensors, span)?,
        }
        let params = model.params();
        tch::no_grad(|| -> Result<(), Diagnostic> {
            for (((_, p), (_, shard)), state) in
                params.iter().zip(&self.shards).zip(optim.state.iter_mut())
            {
                shard
                    .shallow_clone()
                    .f_copy_(&self.slice(p, span)?)
                    .at(span)?;
                for (_, t) in state.iter_mut() {
                    *t = self.slice(t, span)?;
                }
            }
            Ok(())
        })?;
        self.release()
    }

    /// The model's parameters and buffers, gathered a unit at a time, on rank 0 (which writes
    /// them); with compression after training, the model stays whole on every rank.
    fn state_dict(&self, model: &dyn Model) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        if self.whole_at_end {
            self.unshard()?;
            self.whole.set(true);
            return Ok(model_state_dict(model));
        }
        let mut params = self.params_whole(model)?;
        if self.ranks.me.rank != 0 {
            return Ok(Vec::new());
        }
        let named = model.params();
        let mut out: Vec<(String, Tensor)> = named
            .iter()
            .zip(params.iter_mut())
            .filter_map(|((name, _), t)| Some((name.to_string(), t.take()?)))
            .collect();
        out.extend(buffers_of(model));
        Ok(out)
    }
}
