//! When the loop writes checkpoints (the tensors they hold are the strategy's to give).

use super::budget::Budget;
use super::checkpoint::{Fingerprint, Position, Sidecar};
use super::optim::Optim;
use super::output::Output;
use super::parallel::strategy::Strategy;
use super::step::Model;
use kiln::diagnostic::Diagnostic;
use kiln::ir::Experiment;
use kiln::rundir::Segment;
use kiln::span::Span;

/// When checkpoints are written: every `every` steps when the experiment asks for them, at the
/// end of such a run, and whenever a run is cancelled.
pub struct Checkpoints {
    every: Option<u64>,
    keep: u64,
    sidecar: Sidecar,
    span: Span,
}

impl Checkpoints {
    /// The checkpoint policy of `exp` over `budget`; its checkpoints carry the experiment's
    /// `fingerprint` and the run's `history`.
    pub fn new(
        exp: &Experiment,
        budget: &Budget,
        fingerprint: Fingerprint,
        history: Vec<Segment>,
    ) -> Checkpoints {
        let ck = exp.train.checkpoint.as_ref();
        Checkpoints {
            every: ck.map(|c| budget.steps(c.every).max(1)),
            keep: ck.map_or(3, |c| c.keep),
            sidecar: Sidecar {
                kiln: env!("CARGO_PKG_VERSION").into(),
                fingerprint,
                position: Position::default(),
                tensors: String::new(),
                tensors_bytes: 0,
                tensors_crc32: String::new(),
                history,
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
        self.every.is_some_and(|c| step.is_multiple_of(c))
    }

    /// The sidecar of a checkpoint (or of the final weights) taken at `pos`.
    pub fn sidecar(&self, pos: &Position) -> Sidecar {
        Sidecar {
            position: pos.clone(),
            ..self.sidecar.clone()
        }
    }

    /// Writes one, holding what `strategy` saves of the model and the optimizer.
    pub fn save(
        &mut self,
        strategy: &dyn Strategy,
        model: &dyn Model,
        optim: &Optim,
        pos: &Position,
        out: &mut dyn Output,
    ) -> Result<(), Diagnostic> {
        self.sidecar.position = Position {
            optimizer_steps: Some(optim.steps),
            ..pos.clone()
        };
        let tensors = strategy.state_for_save(model, optim)?;
        out.checkpoint(&self.sidecar, &tensors, self.keep, self.span)
    }
}
