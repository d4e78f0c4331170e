//! How compression lengthens a run, and where the learning-rate schedule stands at each step.
//!
//! Training as written lasts `train` steps, and the learning-rate schedule spans them. Pruning
//! `after(finetune: D)` adds D steps of fine-tuning at the schedule's last learning rate.
//! `iterative(rounds: R, rewind: W)` adds R rounds of `train - W` steps: each round starts
//! from the weights of step W and runs the schedule again from step W.

use super::super::budget::Budget;
use kiln::ir::{Compression, Experiment, PruneSchedule};

/// The steps of a run with compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// Steps of training as written (the schedule's length).
    pub train: u64,
    /// Steps of the whole run.
    pub end: u64,
    /// What comes after `train` steps.
    pub tail: Tail,
}

/// What follows the written training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Nothing.
    None,
    /// Fine-tuning at the schedule's last learning rate.
    Finetune(u64),
    /// Rounds of iterative pruning, each rewound to step `rewind`.
    Rounds {
        /// Number of rounds.
        rounds: u64,
        /// The step the survivors are rewound to.
        rewind: u64,
    },
}

impl Timeline {
    /// The timeline of `exp` over `budget` (the checker allows one statement that lengthens
    /// training; the first is taken).
    pub fn new(exp: &Experiment, budget: &Budget) -> Timeline {
        let train = budget.total;
        let tail = exp
            .compression
            .iter()
            .find_map(|c| match c {
                Compression::Prune {
                    schedule: PruneSchedule::After { finetune },
                    ..
                } if budget.steps(*finetune) > 0 => Some(Tail::Finetune(budget.steps(*finetune))),
                Compression::Prune {
                    schedule: PruneSchedule::Iterative { rounds, rewind },
                    ..
                } => Some(Tail::Rounds {
                    rounds: *rounds,
                    rewind: (*rewind).min(train.saturating_sub(1)),
                }),
                _ => None,
            })
            .unwrap_or(Tail::None);
        let end = match tail {
            Tail::None => train,
            Tail::Finetune(n) => train.saturating_add(n),
            Tail::Rounds { rounds, rewind } => {
                train.saturating_add(rounds.saturating_mul(train - rewind))
            }
        };
        Timeline { train, end, tail }
    }

    /// The schedule's step for the run's step `step`.
    pub fn lr_step(&self, step: u64) -> u64 {
        if step < self.train {
            return step;
        }
        match self.tail {
            Tail::None | Tail::Finetune(_) => self.train.saturating_sub(1),
            Tail::Rounds { rewind, .. } => rewind + (step - self.train) % (self.train - rewind),
        }
    }

    /// The step boundaries (steps taken so far) at which iterative rounds prune and rewind.
    pub fn round_ends(&self) -> Vec<u64> {
        match self.tail {
            Tail::Rounds { rounds, rewind } => (0..rounds)
                .map(|k| self.train + k * (self.train - rewind))
                .collect(),
            Tail::None | Tail::Finetune(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(train: u64, tail: Tail) -> Timeline {
        let end = match tail {
            Tail::None => train,
            Tail::Finetune(n) => train + n,
            Tail::Rounds { rounds, rewind } => train + rounds * (train - rewind),
        };
        Timeline { train, end, tail }
    }

    #[test]
    fn finetuning_keeps_the_last_learning_rate() {
        let t = timeline(100, Tail::Finetune(20));
        assert_eq!(t.end, 120);
        assert_eq!(t.lr_step(99), 99);
        assert_eq!(t.lr_step(100), 99);
        assert_eq!(t.lr_step(119), 99);
        assert!(t.round_ends().is_empty());
    }

    #[test]
    fn rounds_rerun_the_schedule_from_the_rewind_step() {
        let t = timeline(
            100,
            Tail::Rounds {
                rounds: 3,
                rewind: 10,
            },
        );
        assert_eq!(t.end, 370);
        assert_eq!(t.round_ends(), vec![100, 190, 280]);
        assert_eq!(t.lr_step(100), 10);
        assert_eq!(t.lr_step(189), 99);
        assert_eq!(t.lr_step(190), 10);
        assert_eq!(t.lr_step(369), 99);
    }
}
