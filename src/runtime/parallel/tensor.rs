//! Tensor parallel over processes on c10d (`parallel mesh(tensor: T, data: D)`), Megatron-LM's
//! scheme: the `T` consecutive ranks of a tensor group split the layers `kiln::ir::tensor` splits
//! (a linear and its partner by columns then rows, attention by heads, a transformer block's
//! attention and MLP), each keeping its piece of their parameters, gradients and optimizer state,
//! and compute the other layers whole, on the same input. The `D` tensor groups replicate the
//! model: each takes its data rank's rows of every global batch, as `ddp` cuts it, and after the
//! step's backward passes every gradient is summed over the data group (the ranks holding the
//! same piece).
//!
//! Ranks are laid out tensor first: rank `d·T + t` is tensor rank `t` of data rank `d`, so a
//! tensor group is consecutive ranks, on one machine as torchrun numbers local ranks. Each
//! dimension's slice is a c10d group of its own (`tensor/<d>`, `data/<t>`), over the run's store.
//!
//! The arithmetic: every rank of a tensor group holds the same loss, which only its first rank
//! counts in the step's agreement and in evaluations; the norm for clipping sums the pieces over
//! the tensor group and counts a replicated layer's gradient once (on the first tensor rank).
//! Dropout on split activations draws the whole mask one process draws and keeps this rank's
//! part, so the ranks compute what one process computes, within the rounding of the sums.
//!
//! Checkpoints hold the whole model and optimizer state, in the layout every strategy writes:
//! each tensor group gathers its pieces, and rank 0 writes them; a restore keeps this rank's
//! piece of each, so a run resumes at another degree, or without a strategy.

use std::sync::Arc;

use tch::{TchError, Tensor};

use super::super::cancel::Cancel;
use super::super::dist::c10d::Group;
use super::super::dist::tensor::{enter, gather, leave};
use super::super::failure::At;
use super::super::model::{piece, whole, with_dropout_rows, Collective, Net};
use super::super::optim::Optim;
use super::super::step::{Backprop, Batch, Model, Objective, Pass};
use super::ranks::{Member, Ranks};
use super::strategy::{buffers_of, restore_whole, whole_state, Strategy};
use kiln::diagnostic::Diagnostic;
use kiln::ir::tensor::{splits, Cut};
use kiln::ir::{Experiment, ParallelPlan};
use kiln::span::Span;

/// A tensor group's c10d group, as the model's layers call it.
struct TensorGroup {
    group: Group,
    rank: usize,
    degree: usize,
}

// SAFETY: the training thread alone runs collectives on the group (forward and backward passes
// run on it); c10d's process groups may be used from any thread.
unsafe impl Sync for TensorGroup {}

impl Collective for TensorGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn degree(&self) -> usize {
        self.degree
    }

    fn enter(&self, x: &Tensor) -> Result<Tensor, TchError> {
        enter(&self.group, x).map_err(|e| TchError::Torch(e.0))
    }

    fn leave(&self, x: &Tensor) -> Result<Tensor, TchError> {
        leave(&self.group, x).map_err(|e| TchError::Torch(e.0))
    }

    fn gather(&self, x: &Tensor) -> Result<Tensor, TchError> {
        gather(&self.group, x, self.rank, self.degree).map_err(|e| TchError::Torch(e.0))
    }
}

/// The tensor dimension of this rank's mesh: its tensor group, the data group of the ranks that
/// hold the same pieces, where it stands, and each parameter's cut. `TensorParallel` replicates
/// over the data group; `fsdp` shards over it.
pub struct Mesh {
    /// Field order is drop order: the data group before the tensor group.
    /// The data group, when there are several data ranks or the data dimension shards.
    pub data: Option<Group>,
    tensor: Arc<TensorGroup>,
    /// This rank's data rank and the data degree.
    pub data_rank: (usize, usize),
    /// Each parameter's cut, in the model's order.
    cuts: Vec<Cut>,
}

impl Mesh {
    /// Makes the mesh's groups (the data group when there are several data ranks, or always
    /// when `sharded`), makes every rank's parameters and buffers rank 0's, and splits `net`
    /// over the tensor group.
    pub fn split(
        exp: &Experiment,
        net: &mut Net,
        ranks: &Ranks,
        degree: usize,
        sharded: bool,
    ) -> Result<Mesh, Diagnostic> {
        let (me, world) = (ranks.me.rank, ranks.world());
        let (d, t, data_degree) = (me / degree, me % degree, world / degree);
        let members: Vec<usize> = (d * degree..(d + 1) * degree).collect();
        let group = ranks.subgroup(&format!("tensor/{d}"), &members)?;
        let data = match data_degree > 1 || sharded {
            false => None,
            true => {
                let members: Vec<usize> = (0..data_degree).map(|k| k * degree + t).collect();
                Some(ranks.subgroup(&format!("data/{t}"), &members)?)
            }
        };
        let (params, buffers) = shallow(net);
        ranks.broadcast(&params)?;
        ranks.broadcast(&buffers)?;
        let tensor = Arc::new(TensorGroup {
            group,
            rank: t,
            degree,
        });
        let named: Vec<(String, _)> = splits(&exp.model.nodes, degree as u64)
            .into_iter()
            .map(|(l, s)| (l.name.clone(), s))
            .collect();
        net.split_tensors(&named, tensor.clone())?;
        Ok(Mesh {
            data,
            tensor,
            data_rank: (d, data_degree),
            cuts: net.cuts(),
        })
    }

    /// Whether this rank is the first of its tensor group (the one whose values count).
    pub fn first(&self) -> bool {
        self.tensor.rank == 0
    }

    /// The pieces of the gradient add up over the tensor group.
    pub fn sum(&self, t: &Tensor, ranks: &Ranks) -> Result<(), Diagnostic> {
        self.tensor
            .group
            .all_reduce_sum(t)
            .map_err(|e| ranks.lost(&e.0))
    }

    /// Whether this rank counts the gradient of the `i`-th parameter in the norm: a replicated
    /// layer's is counted by the first tensor rank alone.
    pub fn counted(&self, i: usize) -> bool {
        self.first() || self.cuts.get(i).is_some_and(|c| *c != Cut::Whole)
    }

    /// The cut of the `i`-th parameter.
    pub fn cut(&self, i: usize) -> Cut {
        self.cuts.get(i).copied().unwrap_or(Cut::Whole)
    }

    /// The whole tensor of which `t` is this rank's piece under `cut` (every rank of the tensor
    /// group takes part; `t` itself when not cut).
    pub fn gathered(
        &self,
        t: &Tensor,
        cut: Cut,
        ranks: &Ranks,
        span: Span,
    ) -> Result<Tensor, Diagnostic> {
        if cut == Cut::Whole {
            return Ok(t.detach());
        }
        let degree = self.tensor.degree;
        let mine = t.detach().f_contiguous().at(span)?;
        let out = Tensor::f_empty(
            [degree as i64 * mine.numel() as i64],
            (mine.kind(), mine.device()),
        )
        .at(span)?;
        let flat = mine.f_reshape([-1]).at(span)?;
        self.tensor
            .group
            .all_gather(&out, &flat)
            .map_err(|e| ranks.lost(&e.0))?;
        let pieces = out
            .f_reshape([degree as i64, -1])
            .and_then(|o| o.f_unbind(0))
            .and_then(|ps| {
                ps.iter()
                    .map(|p| p.f_reshape(mine.size()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .at(span)?;
        whole(&pieces, cut).at(span)
    }

    /// The whole of `state`, optimizer state of the `i`-th parameter `param` as this rank holds
    /// it: state shaped as the parameter is cut as it is, a step count is whole.
    pub fn gathered_state(
        &self,
        i: usize,
        state: &Tensor,
        param: &Tensor,
        ranks: &Ranks,
        span: Span,
    ) -> Result<Tensor, Diagnostic> {
        let cut = match state.size() == param.size() {
            true => self.cut(i),
            false => Cut::Whole,
        };
        self.gathered(state, cut, ranks, span)
    }

    /// A whole checkpoint's tensors as this rank's pieces: each parameter, and each optimizer
    /// state shaped as its parameter, cut as the parameter is; the rest as it is. `params` are
    /// the model's, by name, as this rank holds them.
    pub fn pieces(
        &self,
        params: &[(&str, &Tensor)],
        tensors: &[(String, Tensor)],
        span: Span,
    ) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        let (t, degree) = (self.tensor.rank, self.tensor.degree);
        let mut pieces = Vec::with_capacity(tensors.len());
        for (name, whole) in tensors {
            let cut = params.iter().zip(&self.cuts).find_map(|((n, p), cut)| {
                let of = |prefix: &str| {
                    name.strip_prefix(prefix)
                        .is_some_and(|rest| rest == *n || rest.starts_with(&format!("{n}/")))
                };
                (of("param/") || of("optim/")).then_some((*p, *cut))
            });
            let piece = match cut {
                Some((p, cut)) if whole.dim() == p.dim() && cut != Cut::Whole => {
                    piece(whole, cut, t, degree).at(span)?
                }
                Some(_) | None => whole.shallow_clone(),
            };
            pieces.push((name.clone(), piece));
        }
        Ok(pieces)
    }
}

/// Shallow clones of the model's parameters and buffers.
fn shallow(net: &Net) -> (Vec<Tensor>, Vec<Tensor>) {
    (
        net.params
            .iter()
            .map(|p| p.tensor.shallow_clone())
            .collect(),
        net.buffers
            .iter()
            .map(|b| b.tensor.shallow_clone())
            .collect(),
    )
}

/// This rank of a tensor-parallel run whose data dimension replicates.
pub struct TensorParallel {
    /// Field order is drop order: the mesh's groups before the run's group and store.
    mesh: Mesh,
    ranks: Ranks,
    params: Vec<Tensor>,
    buffers: Vec<Tensor>,
}

impl TensorParallel {
    /// Meets the other ranks (as `ddp` does), makes the mesh's groups, makes every rank's
    /// parameters rank 0's, and splits the model. Returns the strategy and the token the loop
    /// must watch for stopping.
    pub fn start(
        exp: &Experiment,
        plan: &ParallelPlan,
        net: &mut Net,
        member: Member,
        signals: Cancel,
        degree: usize,
    ) -> Result<(TensorParallel, Cancel), Diagnostic> {
        let (ranks, stop) = Ranks::start(exp, plan, net, member, signals)?;
        let mesh = Mesh::split(exp, net, &ranks, degree, false)?;
        let (params, buffers) = shallow(net);
        Ok((
            TensorParallel {
                mesh,
                ranks,
                params,
                buffers,
            },
            stop,
        ))
    }

    /// The model's parameters whole, in its order (every rank of each tensor group takes part).
    fn params_whole(&self, model: &dyn Model) -> Result<Vec<Tensor>, Diagnostic> {
        model
            .params()
            .into_iter()
            .enumerate()
            .map(|(i, (_, p))| {
                self.mesh
                    .gathered(p, self.mesh.cut(i), &self.ranks, self.ranks.span)
            })
            .collect()
    }
}

impl Backprop for TensorParallel {
    fn backprop(
        &mut self,
        model: &dyn Model,
        objective: &Objective,
        batch: &Batch,
    ) -> Result<Pass, Diagnostic> {
        let span = batch.span;
        let (d, data_degree) = self.mesh.data_rank;
        let rows = self.ranks.rows_of(batch, d, data_degree)?;
        let mut pass = Pass::default();
        for (((xm, ym), weight), first) in rows
            .xs
            .iter()
            .zip(&rows.ys)
            .zip(&rows.weights)
            .zip(&rows.starts)
        {
            let out = with_dropout_rows(batch.dropout, *first, || model.forward(xm, true))?;
            let ym = ym.f_to_device(out.device()).at(span)?;
            let part = objective.part(&out, &ym, &batch.whole, &mut pass, *weight)?;
            part.f_mul_scalar(batch.scale * weight)
                .at(span)?
                .f_backward()
                .map_err(|e| self.ranks.lost(&e.to_string()))?;
        }
        let (pass, finite) = self.ranks.agree_counting(pass, span, self.mesh.first())?;
        if !finite {
            return Ok(pass);
        }
        if let Some(data) = &self.mesh.data {
            tch::no_grad(|| -> Result<(), Diagnostic> {
                for p in &self.params {
                    let g = p.grad();
                    if g.defined() {
                        data.all_reduce_sum(&g).map_err(|e| self.ranks.lost(&e.0))?;
                    }
                }
                Ok(())
            })?;
        }
        if !self.buffers.is_empty() {
            self.ranks.broadcast(&self.buffers)?;
        }
        Ok(pass)
    }

    /// The ranks of a tensor group evaluate the same rows: their data rank's run of a split.
    fn share(&self) -> (usize, usize) {
        self.mesh.data_rank
    }

    /// The sums of the first rank of each tensor group add up.
    fn reduce(&self, values: &mut [f64]) -> Result<(), Diagnostic> {
        if !self.mesh.first() {
            values.fill(0.0);
        }
        self.ranks.reduce(values)
    }

    /// The pieces of the gradient add up over the tensor group.
    fn all_sum(&self, t: &Tensor) -> Result<(), Diagnostic> {
        self.mesh.sum(t, &self.ranks)
    }

    /// A replicated layer's gradient is counted by the first tensor rank alone.
    fn counted(&self, i: usize) -> bool {
        self.mesh.counted(i)
    }
}

/// Every rank holds its pieces of the split layers and the rest whole; checkpoints and the final
/// weights are whole, gathered over each tensor group; rank 0 writes them.
impl Strategy for TensorParallel {
    fn state_for_save(
        &self,
        model: &dyn Model,
        optim: &Optim,
    ) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        let named = model.params();
        let mut states = Vec::with_capacity(named.len());
        for (i, ((_, p), state)) in named.iter().zip(&optim.state).enumerate() {
            let mut own = Vec::with_capacity(state.len());
            for (key, s) in state {
                let whole = self
                    .mesh
                    .gathered_state(i, s, p, &self.ranks, self.ranks.span)?;
                own.push((*key, whole));
            }
            states.push(own);
        }
        let mut out: Vec<(String, Tensor)> = named
            .iter()
            .zip(self.params_whole(model)?)
            .map(|((name, _), t)| (format!("param/{name}"), t))
            .collect();
        // The buffers, and the optimizer's state in the whole-model layout.
        out.extend(
            whole_state(model, &states)
                .into_iter()
                .filter(|(name, _)| !name.starts_with("param/")),
        );
        Ok(out)
    }

    fn restore(
        &self,
        model: &dyn Model,
        optim: &mut Optim,
        tensors: &[(String, Tensor)],
        span: Span,
    ) -> Result<(), Diagnostic> {
        let pieces = self.mesh.pieces(&model.params(), tensors, span)?;
        restore_whole(model, optim, &pieces, span)
    }

    fn state_dict(&self, model: &dyn Model) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        let mut out: Vec<(String, Tensor)> = model
            .params()
            .iter()
            .zip(self.params_whole(model)?)
            .map(|((name, _), t)| (name.to_string(), t))
            .collect();
        out.extend(buffers_of(model));
        Ok(out)
    }
}
