//! The training state a checkpoint holds: the model's tensors, the optimizer's state and the
//! position; and when the loop writes it.

use tch::Tensor;

use super::budget::Budget;
use super::checkpoint::{Fingerprint, Position, Sidecar};
use super::failure::At;
use super::optim::Optim;
use super::output::Output;
use super::step::Model;
use kiln::diagnostic::problem::Resume;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::Experiment;
use kiln::span::Span;

/// The plan's fingerprint, compared on resume.
pub fn fingerprint(e: &Experiment) -> Fingerprint {
    Fingerprint {
        layers: kiln::ir::layers(&e.model.nodes)
            .iter()
            .map(|l| {
                format!(
                    "{} {} {} {}",
                    l.name,
                    l.kind.kind().name(),
                    l.output,
                    l.params
                )
            })
            .collect(),
        optimizer: e.optimizer.name().to_string(),
        world_size: e.parallel.data_parallel_size(),
    }
}

/// The named tensors of a checkpoint: `param/…`, `buffer/…` and `optim/<param>/<state>`.
pub fn tensors(model: &dyn Model, optim: &Optim) -> Vec<(String, Tensor)> {
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
    for ((name, _), state) in params.iter().zip(&optim.state) {
        for (key, t) in state {
            out.push((format!("optim/{name}/{key}"), t.shallow_clone()));
        }
    }
    out
}

/// Loads a checkpoint's tensors into the model and the optimizer.
pub fn restore(
    model: &dyn Model,
    optim: &mut Optim,
    tensors: &[(String, Tensor)],
    span: Span,
) -> Result<(), Diagnostic> {
    let find = |name: &str| tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let missing = |name: &str| {
        Problem::ResumeIncompatible {
            span,
            situation: Resume::MissingTensor {
                name: name.to_string(),
            },
        }
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

/// When checkpoints are written: every `every` steps when the experiment asks for them, at the
/// end of such a run, and whenever a run is cancelled.
pub struct Checkpoints {
    every: Option<u64>,
    keep: u64,
    sidecar: Sidecar,
    span: Span,
}

impl Checkpoints {
    /// The checkpoint policy of `exp` over `budget`.
    pub fn new(exp: &Experiment, budget: &Budget) -> Checkpoints {
        let ck = exp.train.checkpoint.as_ref();
        Checkpoints {
            every: ck.map(|c| budget.steps(c.every).max(1)),
            keep: ck.map_or(3, |c| c.keep),
            sidecar: Sidecar {
                kiln: env!("CARGO_PKG_VERSION").into(),
                fingerprint: fingerprint(exp),
                position: Position::default(),
                tensors: String::new(),
            },
            span: exp.optimizer.span,
        }
    }

    /// Whether the experiment asks for checkpoints.
    pub fn enabled(&self) -> bool {
        self.every.is_some()
    }

    /// Whether a checkpoint is due after `step`.
    pub fn due(&self, step: u64) -> bool {
        self.every.is_some_and(|c| step % c == 0)
    }

    /// Writes one.
    pub fn save(
        &mut self,
        model: &dyn Model,
        optim: &Optim,
        pos: &Position,
        out: &mut dyn Output,
    ) -> Result<(), Diagnostic> {
        self.sidecar.position = pos.clone();
        out.checkpoint(&self.sidecar, &tensors(model, optim), self.keep, self.span)
    }
}
