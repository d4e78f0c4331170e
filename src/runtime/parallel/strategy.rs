//! The one interface of a parallel strategy. The trainer, the step and the checkpoint code talk
//! to a [`Strategy`] only: how the gradients of a batch come to be ([`Backprop`]), which
//! parameters this process's optimizer updates, what a checkpoint holds, how it is restored, and
//! the final weights. Every strategy today keeps the whole model and the whole optimizer state in
//! every process (a replica, a stage view sharing the model's tensors, a rank), so each uses the
//! whole-model layout of this file: `param/…`, `buffer/…` and `optim/<param>/<state>`.
//!
//! A sharded strategy (FSDP, ZeRO), whose ranks hold shards of the parameters and of the
//! optimizer state, fills the same methods: [`Strategy::params_owned`] gives the parameters (or
//! flat shards of them) whose state this rank's optimizer keeps, so the step updates only those
//! (its clipping then needs the norm all-reduced, in its `backprop`, which also reduce-scatters
//! the gradients instead of all-reducing them); [`Strategy::state_for_save`] either gathers the
//! full tensors to rank 0, which writes one checkpoint in this layout, or returns this rank's
//! shards under names that say which (each rank then writes its own); [`Strategy::restore`]
//! scatters a full checkpoint back into shards, or reads its own; and
//! [`Strategy::state_dict`] gathers the parameters for the final weights.

use tch::Tensor;

use super::super::failure::At;
use super::super::optim::Optim;
use super::super::step::{Backprop, Model};
use kiln::diagnostic::problem::{Resume, Running};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::span::Span;

/// A parallel strategy: the gradients of a batch, and the layout of the training state over
/// the processes. The defaults are the whole-model layout every process holds in full.
pub trait Strategy: Backprop {
    /// The parameters this process's optimizer updates and keeps state for (shallow clones),
    /// with their `state_dict` names, in the model's order: all of the model's.
    fn params_owned(&self, model: &dyn Model) -> Vec<(String, Tensor)> {
        model
            .params()
            .into_iter()
            .map(|(n, t)| (n.to_string(), t.shallow_clone()))
            .collect()
    }

    /// The named tensors of a checkpoint taken now: the model's and the optimizer's, whole.
    fn state_for_save(
        &self,
        model: &dyn Model,
        optim: &Optim,
    ) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        Ok(whole_state(model, &optim.state))
    }

    /// Loads a checkpoint's tensors into the model and the optimizer.
    fn restore(
        &self,
        model: &dyn Model,
        optim: &mut Optim,
        tensors: &[(String, Tensor)],
        span: Span,
    ) -> Result<(), Diagnostic> {
        restore_whole(model, optim, tensors, span)
    }

    /// The model's `state_dict`: its parameters and buffers by their PyTorch names, as a run's
    /// final weights hold them.
    fn state_dict(&self, model: &dyn Model) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        Ok(model_state_dict(model))
    }
}

/// The `state_dict` of a model whose parameters this process holds whole.
pub fn model_state_dict(model: &dyn Model) -> Vec<(String, Tensor)> {
    let mut out: Vec<(String, Tensor)> = model
        .params()
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.detach()))
        .collect();
    out.extend(buffers_of(model));
    out
}

/// The model's buffers by their `state_dict` names (shallow clones).
pub fn buffers_of(model: &dyn Model) -> Vec<(String, Tensor)> {
    model
        .buffers()
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.shallow_clone()))
        .collect()
}

/// The named tensors of a whole-model checkpoint: `param/…`, `buffer/…` and
/// `optim/<param>/<state>` (of `optim_state`, whole, in the model's order).
pub fn whole_state(
    model: &dyn Model,
    optim_state: &[Vec<(&'static str, Tensor)>],
) -> Vec<(String, Tensor)> {
    let params = model.params();
    let mut out: Vec<(String, Tensor)> = params
        .iter()
        .map(|(name, t)| (format!("param/{name}"), t.detach()))
        .collect();
    out.extend(
        model
            .buffers()
            .iter()
            .map(|(name, t)| (format!("buffer/{name}"), t.shallow_clone())),
    );
    for ((name, _), state) in params.iter().zip(optim_state) {
        for (key, t) in state {
            out.push((format!("optim/{name}/{key}"), t.shallow_clone()));
        }
    }
    out
}

/// Loads a whole-model checkpoint's tensors into the model and the optimizer.
pub fn restore_whole(
    model: &dyn Model,
    optim: &mut Optim,
    tensors: &[(String, Tensor)],
    span: Span,
) -> Result<(), Diagnostic> {
    let find = |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let missing = |name: &str| {
        Problem::Running(Running::ResumeIncompatible {
            span,
            situation: Resume::MissingTensor {
                name: name.to_string(),
            },
        })
        .diagnostic()
    };
    let params = model.params();
    tch::no_grad(|| -> Result<(), Diagnostic> {
        for (name, p) in &params {
            let t = find(&format!("param/{name}")).ok_or_else(|| missing(name))?;
            p.shallow_clone().f_copy_(t).at(span)?;
        }
        for (name, b) in model.buffers() {
            let t = find(&format!("buffer/{name}")).ok_or_else(|| missing(name))?;
            b.shallow_clone().f_copy_(t).at(span)?;
        }
        Ok(())
    })?;
    for (i, (name, p)) in params.iter().enumerate() {
        let prefix = format!("optim/{name}/");
        for (full, t) in tensors.iter().filter(|(n, _)| n.starts_with(&prefix)) {
            let key: &'static str = match &full[prefix.len()..] {
                "exp_avg" => "exp_avg",
                "exp_avg_sq" => "exp_avg_sq",
                "max_exp_avg_sq" => "max_exp_avg_sq",
                "momentum_buffer" => "momentum_buffer",
                "square_avg" => "square_avg",
                "grad_avg" => "grad_avg",
                other => return Err(missing(other)),
            };
            optim.state[i].push((key, t.f_to_device(p.device()).at(span)?));
        }
    }
    Ok(())
}
