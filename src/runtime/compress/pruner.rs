//! Pruning during a run: each pruned tensor's mask is a buffer of the model (`fc1.weight_mask`,
//! as `torch.nn.utils.prune` names it), so checkpoints keep it and a resumed run goes on with
//! the same masks. The loop asks [`Pruner::fire`] once at every step boundary, saying which
//! phase of the run ([`Timeline`]) it lies in and whether that phase ends there; the schedule
//! decides whether the masks grow there. [`MaskKeeper`] re-applies the masks after every optimizer
//! update, so pruned weights stay exactly zero.

use tch::{Kind, Tensor};

use super::super::failure::At;
use super::super::model::{Buffer, Net};
use super::super::step::UpdateHook;
use super::prune::{self, Amount};
use super::shrink;
use super::timeline::Timeline;
use kiln::diagnostic::Diagnostic;
use kiln::ir::{Compression, Experiment, Node, PruneMethod, PruneSchedule, Target};
use kiln::plan::shrink::Role;
use kiln::span::Span;

/// One pruned tensor: the parameter and its mask (shallow clones of the model's).
struct Masked {
    param: Tensor,
    mask: Tensor,
}

/// One `prune` statement with its tensors.
struct Step {
    method: PruneMethod,
    amount: f64,
    schedule: PruneSchedule,
    span: Span,
    tensors: Vec<Masked>,
    /// Structured pruning of output units (`ln_structured`, `dim: 0`): the groups whose units
    /// are removed together.
    groups: Vec<Units>,
}

/// A structured group during training: the producers' weights, whose rows are the units and
/// score them, and every masked tensor of the group with the dimension and block its units
/// lie along.
struct Units {
    producers: Vec<Tensor>,
    /// The first producer's weight mask, whose rows say which units are kept.
    rows: Tensor,
    masked: Vec<(Masked, i64, i64)>,
}

/// The pruning of a run.
pub struct Pruner {
    steps: Vec<Step>,
    timeline: Timeline,
    seed: u64,
    /// Iterative pruning: every parameter and the buffer holding its value at the rewind step.
    rewind: Vec<(Tensor, Tensor)>,
}

/// A step boundary (steps taken so far), as the pruner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    /// Steps taken.
    pub step: u64,
    /// The phase it lies in (0: the written training; see [`Timeline`]).
    pub phase: usize,
    /// That phase ends here.
    pub ends: bool,
}

/// What happened at a step boundary.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// Some masks grew.
    pub pruned: bool,
    /// The weights were rewound (iterative pruning): the optimizer starts afresh.
    pub rewound: bool,
}

/// The parameters a target names: `layer.weight` / `layer.bias` as written, or every weight
/// matrix (two or more dimensions) of a layer or block.
pub fn target_params(net: &Net, t: &Target) -> Vec<usize> {
    net.params
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            let Some(rest) = p.name.strip_prefix(&t.layer) else {
                return false;
            };
            let Some(local) = rest.strip_prefix('.') else {
                return false;
            };
            match &t.param {
                Some(param) => local == param,
                None => local.ends_with("weight") && p.tensor.dim() >= 2,
            }
        })
        .map(|(i, _)| i)
        .collect()
}

impl Pruner {
    /// The pruning of `exp` on `net` (built from the checked `nodes`): a mask buffer (all ones)
    /// for every pruned tensor (for structured pruning of output units, every tensor of the
    /// unit's group) and, under iterative pruning, a buffer for each parameter's rewind value.
    /// Called after the weights are initialised or loaded and before a checkpoint is restored.
    pub fn new(
        exp: &Experiment,
        nodes: &[Node],
        net: &mut Net,
        timeline: Timeline,
    ) -> Result<Pruner, Diagnostic> {
        let mut steps = Vec::new();
        for c in &exp.compression {
            let Compression::Prune {
                targets,
                method,
                amount,
                schedule,
                span,
            } = c
            else {
                continue;
            };
            let mut tensors = Vec::new();
            let mut units = Vec::new();
            if matches!(method, PruneMethod::LnStructured { dim: 0, .. }) {
                units = groups(nodes, c, net, *span)?;
            } else {
                for t in targets {
                    for i in target_params(net, t) {
                        tensors.push(mask_of(net, i, *span)?);
                    }
                }
            }
            steps.push(Step {
                method: *method,
                amount: *amount,
                schedule: *schedule,
                span: *span,
                tensors,
                groups: units,
            });
        }
        let mut rewind = Vec::new();
        if steps
            .iter()
            .any(|s| matches!(s.schedule, PruneSchedule::Iterative { .. }))
        {
            for i in 0..net.params.len() {
                let name = format!("{}_rewind", net.params[i].name);
                let value = tch::no_grad(|| net.params[i].tensor.f_detach_copy()).at(exp.span)?;
                net.buffers.push(Buffer {
                    name,
                    tensor: value.shallow_clone(),
                });
                rewind.push((net.params[i].tensor.shallow_clone(), value));
            }
        }
        Ok(Pruner {
            steps,
            timeline,
            seed: exp.seed,
            rewind,
        })
    }

    /// The update hook that keeps pruned weights at zero.
    pub fn keeper(&self) -> MaskKeeper {
        let grouped = self
            .steps
            .iter()
            .flat_map(|s| &s.groups)
            .flat_map(|g| g.masked.iter().map(|(m, _, _)| m));
        MaskKeeper {
            pairs: self
                .steps
                .iter()
                .flat_map(|s| &s.tensors)
                .chain(grouped)
                .map(|m| (m.param.shallow_clone(), m.mask.shallow_clone()))
                .collect(),
        }
    }

    /// Whether a statement prunes only after the written training (the moment the
    /// uncompressed model is measured).
    pub fn prunes_after_training(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.schedule, PruneSchedule::After { .. }))
    }

    /// Grows the masks due at boundary `b`, and saves or restores the rewind values of
    /// iterative pruning there. Within the training (phase 0): `before` at boundary 0, a
    /// gradual schedule's steps, the rewind step. Where a phase ends: pruning after training
    /// when the training ends, an iterative round's pruning and rewind when the training or a
    /// round but the last ends. The loop calls this once per boundary.
    pub fn fire(&mut self, b: Boundary) -> Result<Fired, Diagnostic> {
        let mut fired = Fired::default();
        let training = b.phase == 0;
        let step = b.step;
        for s in &self.steps {
            let amount = match s.schedule {
                PruneSchedule::Before if training && step == 0 => Some(s.amount),
                PruneSchedule::After { .. } if training && b.ends => Some(s.amount),
                PruneSchedule::Gradual {
                    start,
                    end,
                    every,
                    initial,
                } if training && prune::is_pruning_step(start, end, every, step) => Some(
                    prune::gradual_sparsity(initial, s.amount, start, end, every, step),
                ),
                PruneSchedule::Iterative { rounds, .. } if b.ends && (b.phase as u64) < rounds => {
                    Some(prune::iterative_round_amount(s.amount, rounds))
                }
                _ => None,
            };
            let Some(amount) = amount else { continue };
            let total = matches!(s.schedule, PruneSchedule::Gradual { .. });
            if s.method == PruneMethod::RandomUnstructured {
                tch::manual_seed(self.seed.wrapping_mul(7_919).wrapping_add(step) as i64);
            }
            grow(s, Amount::Fraction(amount), total)?;
            fired.pruned = true;
        }
        if let PruneSchedule::Iterative { rounds, rewind } = self.schedule_of_rounds() {
            let rewind = rewind.min(self.timeline.train.saturating_sub(1));
            let span = self.steps.first().map_or(Span::default(), |s| s.span);
            tch::no_grad(|| -> Result<(), Diagnostic> {
                // The weights of the rewind step, or of the step the training ended at when
                // early stopping ended it before that.
                if training && (step == rewind || b.ends && step < rewind) {
                    for (p, saved) in &self.rewind {
                        saved.shallow_clone().f_copy_(p).at(span)?;
                    }
                }
                if b.ends && (b.phase as u64) < rounds {
                    for (p, saved) in &self.rewind {
                        p.shallow_clone().f_copy_(saved).at(span)?;
                    }
                    fired.rewound = true;
                }
                Ok(())
            })?;
        }
        if fired.pruned || fired.rewound {
            self.keeper()
                .apply(self.steps.first().map_or(Span::default(), |s| s.span))?;
        }
        Ok(fired)
    }

    fn schedule_of_rounds(&self) -> PruneSchedule {
        self.steps
            .iter()
            .map(|s| s.schedule)
            .find(|s| matches!(s, PruneSchedule::Iterative { .. }))
            .unwrap_or(PruneSchedule::Before)
    }
}

/// The structured groups of one `ln_structured(dim: 0)` statement, with a mask buffer for each
/// of their masked tensors.
fn groups(
    nodes: &[Node],
    c: &Compression,
    net: &mut Net,
    span: Span,
) -> Result<Vec<Units>, Diagnostic> {
    // The checker refused every group that cannot shrink (K0216).
    let found = kiln::plan::shrink::groups(nodes, std::slice::from_ref(c)).unwrap_or_default();
    let mut out = Vec::new();
    for (group, _) in found {
        let mut masked = Vec::new();
        let mut rows = None;
        let first = group
            .role(Role::Producer)
            .next()
            .map(|m| format!("{}.weight", m.layer));
        for t in shrink::mask_targets(&group) {
            let Some(i) = net.params.iter().position(|p| p.name == t.name) else {
                continue;
            };
            let m = mask_of(net, i, span)?;
            if first.as_deref() == Some(t.name.as_str()) {
                rows = Some(m.mask.shallow_clone());
            }
            masked.push((m, t.dim, t.block));
        }
        let producers = group
            .role(Role::Producer)
            .filter_map(|m| {
                let name = format!("{}.weight", m.layer);
                net.params.iter().find(|p| p.name == name)
            })
            .map(|p| p.tensor.shallow_clone())
            .collect();
        if let Some(rows) = rows {
            out.push(Units {
                producers,
                rows,
                masked,
            });
        }
    }
    Ok(out)
}

/// The mask buffer of parameter `i`, created (all ones) when no statement pruned it before.
fn mask_of(net: &mut Net, i: usize, span: Span) -> Result<Masked, Diagnostic> {
    let name = format!("{}_mask", net.params[i].name);
    let param = net.params[i].tensor.shallow_clone();
    let mask = match net.buffers.iter().find(|b| b.name == name) {
        Some(b) => b.tensor.shallow_clone(),
        None => {
            let ones = param.f_ones_like().at(span)?;
            net.buffers.push(Buffer {
                name,
                tensor: ones.shallow_clone(),
            });
            ones
        }
    };
    Ok(Masked { param, mask })
}

/// Grows the masks of one statement by `amount`: of the remaining entries (PyTorch's repeated
/// pruning), or, when `total`, up to that fraction of all entries (a gradual schedule's
/// sparsity at this step).
fn grow(s: &Step, amount: Amount, total: bool) -> Result<(), Diagnostic> {
    let span = s.span;
    let count = |units: i64, kept: i64| -> Amount {
        match (amount, total) {
            (Amount::Fraction(f), true) => {
                let target = prune::count(Amount::Fraction(f), units);
                Amount::Count((target - (units - kept)).max(0))
            }
            _ => amount,
        }
    };
    tch::no_grad(|| -> Result<(), Diagnostic> {
        match s.method {
            PruneMethod::GlobalL1 => {
                let params: Vec<&Tensor> = s.tensors.iter().map(|m| &m.param).collect();
                let masks: Vec<&Tensor> = s.tensors.iter().map(|m| &m.mask).collect();
                let units: i64 = s.tensors.iter().map(|m| m.param.numel() as i64).sum();
                let kept: i64 = s
                    .tensors
                    .iter()
                    .map(|m| kept_entries(&m.mask))
                    .sum::<Result<i64, _>>()
                    .at(span)?;
                if s.tensors.is_empty() {
                    return Ok(());
                }
                let a = count(units, kept);
                let new = prune::global_l1(&params, &masks, a).at(span)?;
                for (m, n) in s.tensors.iter().zip(new) {
                    m.mask.shallow_clone().f_copy_(&n).at(span)?;
                }
            }
            PruneMethod::L1Unstructured | PruneMethod::RandomUnstructured => {
                for m in &s.tensors {
                    let a = count(m.param.numel() as i64, kept_entries(&m.mask).at(span)?);
                    let new = if s.method == PruneMethod::L1Unstructured {
                        prune::l1_unstructured(&m.param, &m.mask, a)
                    } else {
                        prune::random_unstructured(&m.param, &m.mask, a)
                    }
                    .at(span)?;
                    m.mask.shallow_clone().f_copy_(&new).at(span)?;
                }
            }
            PruneMethod::LnStructured { n, .. } if !s.groups.is_empty() => {
                for g in &s.groups {
                    grow_units(g, n, &count, span)?;
                }
            }
            PruneMethod::LnStructured { n, dim } => {
                for m in &s.tensors {
                    let d = if dim < 0 {
                        m.param.dim() as i64 + dim
                    } else {
                        dim
                    };
                    let units = m.param.size()[d as usize];
                    let a = count(units, kept_units(&m.mask, d).at(span)?);
                    let new = prune::ln_structured(&m.param, &m.mask, a, n, dim).at(span)?;
                    m.mask.shallow_clone().f_copy_(&new).at(span)?;
                }
            }
        }
        Ok(())
    })
}

/// Grows a structured group's masks: the units kept are chosen on the producers' weights
/// (PyTorch's `ln_structured` rule; with several producers, joined by a residual add, their
/// rows' norms combine), and every tensor of the group loses the same units.
fn grow_units(
    g: &Units,
    n: u64,
    count: &dyn Fn(i64, i64) -> Amount,
    span: Span,
) -> Result<(), Diagnostic> {
    let units = g.rows.size()[0];
    let others: Vec<i64> = (1..g.rows.dim() as i64).collect();
    let unit_mask = g
        .rows
        .f_sum_dim_intlist(others.as_slice(), false, Kind::Float)
        .and_then(|t| t.f_ne(0.0))
        .and_then(|t| t.f_to_kind(Kind::Float))
        .at(span)?;
    let kept = unit_mask
        .f_sum(Kind::Float)
        .and_then(|t| t.f_double_value(&[]))
        .at(span)? as i64;
    let scored: Vec<(&Tensor, i64)> = g.producers.iter().map(|w| (w, 0)).collect();
    let scores = prune::ln_units(&scored, n).at(span)?;
    let keep = prune::keep_units(&scores, &unit_mask, count(units, kept)).at(span)?;
    for (m, dim, block) in &g.masked {
        let entries = keep
            .f_repeat_interleave_self_int(*block, Some(0), None::<i64>)
            .at(span)?;
        let mut shape = vec![1i64; m.mask.dim()];
        shape[*dim as usize] = entries.size()[0];
        let entries = entries.f_reshape(shape.as_slice()).at(span)?;
        let full = m
            .mask
            .f_ones_like()
            .and_then(|o| o.f_mul(&entries))
            .at(span)?;
        m.mask.shallow_clone().f_copy_(&full).at(span)?;
    }
    Ok(())
}

/// Entries a mask keeps.
fn kept_entries(mask: &Tensor) -> Result<i64, tch::TchError> {
    mask.f_sum(Kind::Float)?
        .f_double_value(&[])
        .map(|v| v as i64)
}

/// Slices along `dim` that a mask keeps (not all zero).
fn kept_units(mask: &Tensor, dim: i64) -> Result<i64, tch::TchError> {
    let others: Vec<i64> = (0..mask.dim() as i64).filter(|d| *d != dim).collect();
    let sums = if others.is_empty() {
        mask.shallow_clone()
    } else {
        mask.f_sum_dim_intlist(others.as_slice(), false, Kind::Float)?
    };
    sums.f_ne(0.0)?
        .f_sum(Kind::Float)?
        .f_double_value(&[])
        .map(|v| v as i64)
}

/// Keeps pruned weights at zero after every optimizer update.
pub struct MaskKeeper {
    pairs: Vec<(Tensor, Tensor)>,
}

impl MaskKeeper {
    /// Multiplies every pruned parameter by its mask.
    pub fn apply(&self, span: Span) -> Result<(), Diagnostic> {
        tch::no_grad(|| {
            for (p, m) in &self.pairs {
                prune::apply(p, m).at(span)?;
            }
            Ok(())
        })
    }
}

impl UpdateHook for MaskKeeper {
    fn gradients_ready(&mut self, _params: &[Tensor], _span: Span) -> Result<(), Diagnostic> {
        Ok(())
    }

    fn after_update(&mut self, _params: &[Tensor], span: Span) -> Result<(), Diagnostic> {
        self.apply(span)
    }
}
