//! The phases of a run: the one definition of where each phase starts and ends, which the
//! training loop, the learning-rate schedule, early stopping, pruning, the records and the
//! progress display all read.
//!
//! Training as written lasts `train` steps, and the learning-rate schedule spans them. Pruning
//! `after(finetune: D)` adds a phase of D steps of fine-tuning at the last learning rate of the
//! training. `iterative(rounds: R, rewind: W)` adds R rounds of `train - W` steps: each round
//! starts from the weights of step W and runs the schedule again from step W.
//!
//! A phase ends when its steps are taken or when early stopping ends it; the next phase starts
//! at that step, with a new epoch, evaluations counted from its start, and early stopping's best
//! value and patience afresh. Where each phase started is part of the position
//! ([`PhaseMark`]), so checkpoints keep it and a resumed run ends its phases where an
//! uninterrupted one does.

use super::super::budget::Budget;
use kiln::ir::{Compression, Duration, Experiment, PruneSchedule};
use kiln::rundir::{PhaseKind, PhaseMark, PhaseRun, PhaseTag, Position};

/// The phases of a run with compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// Steps of training as written (the schedule's length): the first phase.
    pub train: u64,
    /// The phases after it.
    pub tail: Tail,
    /// Steps an epoch.
    per_epoch: u64,
    /// Early stopping counts the training's evaluations only after this step: the last
    /// boundary at which a gradual schedule grows masks (0 without one).
    settle: u64,
    /// The training's length in epochs, when it is given in epochs.
    train_epochs: Option<u64>,
    /// Fine-tuning's length in epochs, when it is given in epochs.
    finetune_epochs: Option<u64>,
}

/// What follows the written training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Nothing.
    None,
    /// Fine-tuning at the last learning rate of the training.
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
        let mut finetune_epochs = None;
        let tail = exp
            .compression
            .iter()
            .find_map(|c| match c {
                Compression::Prune {
                    schedule: PruneSchedule::After { finetune },
                    ..
                } if budget.steps(*finetune) > 0 => {
                    if let Duration::Epochs(n) = finetune {
                        finetune_epochs = Some(*n);
                    }
                    Some(Tail::Finetune(budget.steps(*finetune)))
                }
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
        let settle = exp
            .compression
            .iter()
            .filter_map(|c| match c {
                Compression::Prune {
                    schedule: PruneSchedule::Gradual { end, .. },
                    ..
                } => Some(*end),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Timeline {
            train,
            tail,
            per_epoch: budget.per_epoch,
            settle,
            train_epochs: budget.epochs,
            finetune_epochs,
        }
    }

    /// Phases in the run when none ends early: the training, then fine-tuning or the rounds.
    pub fn count(&self) -> usize {
        match self.tail {
            Tail::None => 1,
            Tail::Finetune(_) => 2,
            Tail::Rounds { rounds, .. } => 1 + rounds as usize,
        }
    }

    /// What phase `i` is, with its round's number (1-based) for a round.
    pub fn kind(&self, i: usize) -> (PhaseKind, Option<u64>) {
        match (i, self.tail) {
            (0, _) | (_, Tail::None) => (PhaseKind::Train, None),
            (_, Tail::Finetune(_)) => (PhaseKind::Finetune, None),
            (i, Tail::Rounds { .. }) => (PhaseKind::Round, Some(i as u64)),
        }
    }

    /// Steps of phase `i` unless early stopping ends it first.
    pub fn length(&self, i: usize) -> u64 {
        match (i, self.tail) {
            (0, _) | (_, Tail::None) => self.train,
            (_, Tail::Finetune(n)) => n,
            (_, Tail::Rounds { rewind, .. }) => self.train - rewind,
        }
    }

    /// Epochs of phase `i`, when its length is a whole number of epochs given in epochs.
    fn epochs(&self, i: usize) -> Option<u64> {
        match (i, self.tail) {
            (0, _) | (_, Tail::None) => self.train_epochs,
            (_, Tail::Finetune(_)) => self.finetune_epochs,
            (_, Tail::Rounds { rewind, .. }) => self
                .train_epochs
                .filter(|_| self.per_epoch > 0 && rewind.is_multiple_of(self.per_epoch))
                .map(|_| (self.train - rewind) / self.per_epoch),
        }
    }

    /// Steps of the whole run when no phase ends early: the longest it can be.
    pub fn end(&self) -> u64 {
        (0..self.count()).fold(0u64, |sum, i| sum.saturating_add(self.length(i)))
    }

    /// The phases begun by step `step` when none ended early: `[training]` for a new run. A
    /// checkpoint written before phases were recorded has none, and gets these; a boundary
    /// belongs to the phase it ends, whose end was not processed yet in such a checkpoint.
    pub fn marks_at(&self, step: u64) -> Vec<PhaseMark> {
        let mut marks = vec![PhaseMark::default()];
        let mut start = 0u64;
        for i in 0..self.count().saturating_sub(1) {
            start = start.saturating_add(self.length(i));
            if start >= step {
                break;
            }
            marks.push(PhaseMark {
                step: start,
                epoch: start / self.per_epoch.max(1),
                stopped: false,
            });
        }
        marks
    }

    /// The phase in progress: its index and where it started.
    pub fn current(&self, pos: &Position) -> (usize, PhaseMark) {
        match pos.phases.last() {
            Some(m) => (pos.phases.len() - 1, *m),
            None => (0, PhaseMark::default()),
        }
    }

    /// The step at which the phase in progress ends unless early stopping ends it first.
    pub fn due(&self, pos: &Position) -> u64 {
        let (i, mark) = self.current(pos);
        mark.step.saturating_add(self.length(i))
    }

    /// Whether the phase in progress is over: its steps are taken, or early stopping ended it.
    pub fn over(&self, pos: &Position) -> bool {
        let (_, mark) = self.current(pos);
        mark.stopped || pos.step >= self.due(pos)
    }

    /// Whether the phase in progress is the run's last.
    pub fn is_last(&self, pos: &Position) -> bool {
        self.current(pos).0 + 1 >= self.count()
    }

    /// Ends the phase in progress by early stopping (at the end of the current epoch).
    pub fn stop(&self, pos: &mut Position) {
        if let Some(m) = pos.phases.last_mut() {
            m.stopped = true;
        }
    }

    /// Starts the next phase at the current step, between epochs: early stopping starts
    /// afresh.
    pub fn advance(&self, pos: &mut Position) {
        pos.phases.push(PhaseMark {
            step: pos.step,
            epoch: pos.epoch,
            stopped: false,
        });
        pos.best = None;
        pos.bad_evals = 0;
    }

    /// The schedule's step for the run's step `step` in the phase in progress.
    pub fn lr_step(&self, pos: &Position, step: u64) -> u64 {
        let (i, mark) = self.current(pos);
        match (i, self.tail) {
            (0, _) | (_, Tail::None) => step,
            // The rate of the last step the training took.
            (_, Tail::Finetune(_)) => mark.step.saturating_sub(1),
            (_, Tail::Rounds { rewind, .. }) => rewind + step.saturating_sub(mark.step),
        }
    }

    /// Whether validations feed the schedule (`reduce_on_plateau`) in the phase in progress:
    /// not during fine-tuning, which keeps the last rate of the training.
    pub fn feeds_schedule(&self, pos: &Position) -> bool {
        self.kind(self.current(pos).0).0 != PhaseKind::Finetune
    }

    /// Whether early stopping counts an evaluation at the current position: always, but in the
    /// training before a gradual schedule's last masks (its evaluations measure the pruning
    /// still to come, and stopping there would leave the amount unreached).
    pub fn watched(&self, pos: &Position) -> bool {
        self.current(pos).0 > 0 || pos.step > self.settle
    }

    /// Whether an evaluation is due after the steps taken so far in the phase in progress:
    /// `eval_every` counts each phase's steps, or its epochs, from its start.
    pub fn eval_due(&self, pos: &Position, every: Duration, epoch_end: bool) -> bool {
        let (_, mark) = self.current(pos);
        match every {
            Duration::Steps(n) => (pos.step - mark.step).is_multiple_of(n.max(1)),
            Duration::Epochs(n) => epoch_end && (pos.epoch - mark.epoch).is_multiple_of(n.max(1)),
        }
    }

    /// The phase of the records of epoch `epoch` (1-based, counted over the run) in the phase in
    /// progress; `None` in the written training.
    pub fn tag(&self, pos: &Position, epoch: u64) -> Option<PhaseTag> {
        let (i, mark) = self.current(pos);
        let (name, round) = self.kind(i);
        (name != PhaseKind::Train).then(|| PhaseTag {
            name,
            round,
            epoch: epoch.saturating_sub(mark.epoch).max(1),
            epochs: self.epochs(i),
        })
    }

    /// The phases as they ran, for the report; empty for a run of one phase.
    pub fn ran(&self, pos: &Position) -> Vec<PhaseRun> {
        if self.count() < 2 {
            return Vec::new();
        }
        pos.phases
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (name, round) = self.kind(i);
                PhaseRun {
                    name,
                    round,
                    from_step: m.step,
                    to_step: pos.phases.get(i + 1).map_or(pos.step, |next| next.step),
                    stopped_early: m.stopped,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(train: u64, tail: Tail) -> Timeline {
        Timeline {
            train,
            tail,
            per_epoch: 10,
            settle: 0,
            train_epochs: Some(train / 10),
            finetune_epochs: match tail {
                Tail::Finetune(n) => Some(n / 10),
                _ => None,
            },
        }
    }

    /// A position at `step` in the phases that started at `starts`.
    fn at(step: u64, starts: &[u64]) -> Position {
        Position {
            step,
            epoch: step / 10,
            phases: starts
                .iter()
                .map(|s| PhaseMark {
                    step: *s,
                    epoch: s / 10,
                    stopped: false,
                })
                .collect(),
            ..Position::default()
        }
    }

    #[test]
    fn finetuning_keeps_the_last_learning_rate_of_the_training() {
        let t = timeline(100, Tail::Finetune(20));
        assert_eq!(t.end(), 120);
        assert_eq!(t.count(), 2);
        assert_eq!(t.lr_step(&at(99, &[0]), 99), 99);
        assert_eq!(t.lr_step(&at(100, &[0, 100]), 100), 99);
        assert_eq!(t.lr_step(&at(119, &[0, 100]), 119), 99);
        // Training ended early at step 60: fine-tuning runs at step 59's rate, for its 20 steps.
        let early = at(70, &[0, 60]);
        assert_eq!(t.lr_step(&early, 70), 59);
        assert_eq!(t.due(&early), 80);
        assert!(!t.feeds_schedule(&early));
        let tag = t.tag(&early, 7).expect("a phase of its own");
        assert_eq!(tag.to_string(), "finetune 1/2");
        assert_eq!(t.tag(&at(30, &[0]), 3), None);
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
        assert_eq!(t.end(), 370);
        assert_eq!(t.count(), 4);
        assert_eq!(t.lr_step(&at(100, &[0, 100]), 100), 10);
        assert_eq!(t.lr_step(&at(189, &[0, 100]), 189), 99);
        assert_eq!(t.lr_step(&at(190, &[0, 100, 190]), 190), 10);
        assert_eq!(t.lr_step(&at(369, &[0, 100, 190, 280]), 369), 99);
        assert_eq!(t.kind(2), (PhaseKind::Round, Some(2)));
        let tag = t.tag(&at(195, &[0, 100, 190]), 20).expect("a round");
        assert_eq!(tag.to_string(), "round 2 epoch 1/9");
        // A round that early stopping ended at step 150 is followed by one of the full length.
        let mut p = at(150, &[0, 100]);
        t.stop(&mut p);
        assert!(t.over(&p) && !t.is_last(&p));
        p.best = Some(0.5);
        t.advance(&mut p);
        assert_eq!((t.due(&p), p.best, p.bad_evals), (240, None, 0));
    }

    #[test]
    fn checkpoints_without_phases_get_the_phases_their_step_lies_in() {
        let t = timeline(100, Tail::Finetune(20));
        let starts = |step| -> Vec<u64> { t.marks_at(step).iter().map(|m| m.step).collect() };
        assert_eq!(starts(0), vec![0]);
        // At step 100 the training's end was not processed yet: pruning comes before step 101.
        assert_eq!(starts(100), vec![0]);
        assert_eq!(starts(101), vec![0, 100]);
        let r = timeline(
            100,
            Tail::Rounds {
                rounds: 3,
                rewind: 10,
            },
        );
        let starts = |step| -> Vec<u64> { r.marks_at(step).iter().map(|m| m.step).collect() };
        assert_eq!(starts(280), vec![0, 100, 190]);
        assert_eq!(starts(300), vec![0, 100, 190, 280]);
    }

    #[test]
    fn early_stopping_waits_for_a_gradual_schedules_last_masks_and_evaluations_count_per_phase() {
        let mut t = timeline(100, Tail::Finetune(20));
        t.settle = 60;
        assert!(!t.watched(&at(60, &[0])));
        assert!(t.watched(&at(61, &[0])));
        assert!(t.watched(&at(10, &[0, 5])));
        // Every 20 steps of the phase: fine-tuning that started at step 75 evaluates at 95.
        let p = at(95, &[0, 75]);
        assert!(t.eval_due(&p, Duration::Steps(20), false));
        assert!(!t.eval_due(&at(100, &[0, 75]), Duration::Steps(20), false));
    }
}
