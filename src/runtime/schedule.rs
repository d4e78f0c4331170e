//! Learning-rate schedules, with the formulas of `torch.optim.lr_scheduler` (closed forms, in
//! f64), so that runs match PyTorch step for step: the rate of each step, the momentum (or
//! Adam's beta1) `one_cycle` cycles, and the state of `reduce_on_plateau`, which the training
//! loop feeds with its validation evaluations and saves in checkpoints.

use std::f64::consts::PI;

use super::budget::Budget;
use kiln::diagnostic::problem::Warnings;
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Duration, OneCycle, Plateau, PlateauMetric, Schedule};
use kiln::rundir::Eval;
use kiln::rundir::PlateauState;
use kiln::span::Span;

/// `ReduceLROnPlateau`'s `eps`: a reduction smaller than this is not made.
const PLATEAU_EPS: f64 = 1e-8;

/// Learning rates over the run's [`Budget`].
pub struct Lr {
    base: f64,
    schedule: Schedule,
    /// Steps the schedule spans (at least one).
    total: u64,
    /// Steps an epoch (at least one).
    per_epoch: u64,
    budget: Budget,
    /// Where `reduce_on_plateau` stands; `None` for other schedules.
    plateau: Option<PlateauState>,
    /// The data source, where a missing validation metric is reported.
    source: Span,
}

impl Lr {
    /// The schedule of an optimizer whose configured rate is `base`, over the experiment's full
    /// length (`--max-steps` does not shorten it); `source` is the data source's span.
    pub fn new(base: f64, schedule: &Schedule, budget: &Budget, source: Span) -> Lr {
        Lr {
            base,
            schedule: schedule.clone(),
            total: budget.total.max(1),
            per_epoch: budget.per_epoch.max(1),
            budget: *budget,
            plateau: matches!(schedule, Schedule::ReduceOnPlateau(_)).then_some(PlateauState {
                lr: base,
                ..PlateauState::default()
            }),
            source,
        }
    }

    /// The rate for optimizer step `step` (0-based).
    pub fn at(&self, step: u64) -> f64 {
        match self.plateau {
            Some(p) => p.lr,
            None => self.rate(&self.schedule, step, self.total),
        }
    }

    /// The momentum (SGD, RMSprop) or beta1 (Adam, AdamW) for step `step`, when `one_cycle`
    /// cycles it (the checker leaves it off for optimizers without one); `None` leaves the
    /// optimizer's own.
    pub fn momentum(&self, step: u64) -> Option<f64> {
        let (schedule, step, total) = self.phase(&self.schedule, step, self.total);
        match schedule {
            Schedule::OneCycle(c) => c
                .momentum
                .map(|(base, max)| one_cycle(c, step, total, (max, base)).1),
            _ => None,
        }
    }

    /// The schedule in force at `step` of a schedule spanning `total` steps, with the step
    /// within it and its length: the phase of a sequence, or the schedule itself.
    fn phase<'s>(&self, schedule: &'s Schedule, step: u64, total: u64) -> (&'s Schedule, u64, u64) {
        let Schedule::Sequence {
            schedules,
            milestones,
        } = schedule
        else {
            return (schedule, step, total);
        };
        let marks: Vec<u64> = milestones.iter().map(|m| self.steps(*m)).collect();
        // As `SequentialLR`: the schedule after the last milestone at or before the step.
        let i = marks.iter().take_while(|m| **m <= step).count();
        let start = if i == 0 { 0 } else { marks[i - 1] };
        let end = marks.get(i).copied().unwrap_or(total).max(start + 1);
        match schedules.get(i) {
            Some(s) => self.phase(s, step - start, end - start),
            None => (schedule, step, total),
        }
    }

    fn steps(&self, d: Duration) -> u64 {
        self.budget.steps(d)
    }

    /// The rate of `schedule` at `step` when it spans `total` steps.
    fn rate(&self, schedule: &Schedule, step: u64, total: u64) -> f64 {
        let lr = self.base;
        // `LinearLR`'s factor: from `start` to `end` over `length` steps, then `end`.
        let linear = |start: f64, end: f64, length: u64| {
            start + (end - start) * step.min(length) as f64 / length.max(1) as f64
        };
        match schedule {
            Schedule::Constant => lr,
            Schedule::Step { every, gamma } => {
                lr * gamma.powi((step / self.steps(*every).max(1)) as i32)
            }
            Schedule::Exponential { gamma } => lr * gamma.powi((step / self.per_epoch) as i32),
            Schedule::Warmup { length, start } => {
                let w = self.steps(*length).max(1);
                match start {
                    Some(s) => lr * linear(*s, 1.0, w),
                    None => lr * ((step + 1) as f64 / w as f64).min(1.0),
                }
            }
            Schedule::Cosine {
                warmup,
                min_lr,
                start,
            } => {
                let w = warmup.map_or(0, |d| self.steps(d));
                if step < w {
                    match start {
                        Some(s) => lr * linear(*s, 1.0, w),
                        None => lr * (step + 1) as f64 / w as f64,
                    }
                } else {
                    let span = total.saturating_sub(w).max(1) as f64;
                    let progress = ((step - w) as f64 / span).min(1.0);
                    min_lr + (lr - min_lr) * (1.0 + (PI * progress).cos()) / 2.0
                }
            }
            Schedule::OneCycle(c) => one_cycle(c, step, total, (0.0, 0.0)).0,
            Schedule::Linear { start, end, length } => {
                lr * linear(*start, *end, length.map_or(total, |d| self.steps(d)))
            }
            Schedule::ReduceOnPlateau(_) => self.plateau.map_or(lr, |p| p.lr),
            Schedule::Sequence { .. } => {
                let (s, step, total) = self.phase(schedule, step, total);
                if matches!(s, Schedule::Sequence { .. }) {
                    lr
                } else {
                    self.rate(s, step, total)
                }
            }
        }
    }

    /// Feeds `reduce_on_plateau` one validation evaluation, as `ReduceLROnPlateau.step(metric)`
    /// after each validation; other schedules ignore it.
    pub fn observe(&mut self, eval: &Eval) -> Result<(), Diagnostic> {
        let (Schedule::ReduceOnPlateau(p), Some(state)) = (&self.schedule, self.plateau.as_mut())
        else {
            return Ok(());
        };
        let value = match p.metric {
            PlateauMetric::ValLoss => eval.loss,
            PlateauMetric::ValAccuracy => eval.accuracy.ok_or_else(|| {
                Problem::Warnings(Warnings::PlateauWithoutValidation {
                    span: self.source,
                    source: self.source,
                    accuracy: true,
                })
                .diagnostic()
            })?,
        };
        plateau_step(p, state, value);
        Ok(())
    }

    /// The state of `reduce_on_plateau`, for checkpoints.
    pub fn plateau(&self) -> Option<PlateauState> {
        self.plateau
    }

    /// Continues `reduce_on_plateau` from a checkpoint's state (a checkpoint of another
    /// schedule has none, and the schedule starts afresh).
    pub fn resume(&mut self, state: Option<PlateauState>) {
        if let (Some(mine), Some(saved)) = (self.plateau.as_mut(), state) {
            *mine = saved;
        }
    }
}

/// `OneCycleLR` at `step` of `total`: the rate, and the momentum cycled between
/// `(max, base)` (zeros when it is not cycled).
fn one_cycle(c: &OneCycle, step: u64, total: u64, (max_m, base_m): (f64, f64)) -> (f64, f64) {
    let initial = c.max_lr / c.div_factor;
    let min = initial / c.final_div_factor;
    let total = total as f64;
    let up = c.pct_start * total - 1.0;
    // (end step, start rate, end rate, start momentum, end momentum) of each phase.
    let phases: Vec<(f64, f64, f64, f64, f64)> = if c.three_phase {
        vec![
            (up, initial, c.max_lr, max_m, base_m),
            (
                2.0 * c.pct_start * total - 2.0,
                c.max_lr,
                initial,
                base_m,
                max_m,
            ),
            (total - 1.0, initial, min, max_m, max_m),
        ]
    } else {
        vec![
            (up, initial, c.max_lr, max_m, base_m),
            (total - 1.0, c.max_lr, min, base_m, max_m),
        ]
    };
    let anneal = |start: f64, end: f64, pct: f64| {
        if c.cosine {
            end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0)
        } else {
            (end - start) * pct + start
        }
    };
    let s = step as f64;
    let mut from = 0.0;
    for (i, &(end, lr0, lr1, m0, m1)) in phases.iter().enumerate() {
        if s <= end || i == phases.len() - 1 {
            let pct = if end > from {
                ((s - from) / (end - from)).min(1.0)
            } else {
                1.0
            };
            return (anneal(lr0, lr1, pct), anneal(m0, m1, pct));
        }
        from = end;
    }
    (min, max_m)
}

/// One `ReduceLROnPlateau.step(value)`.
fn plateau_step(p: &Plateau, state: &mut PlateauState, value: f64) {
    let better = match state.best {
        None => true,
        Some(best) => match (p.maximize, p.relative) {
            (false, true) => value < best * (1.0 - p.threshold),
            (false, false) => value < best - p.threshold,
            (true, true) => value > best * (p.threshold + 1.0),
            (true, false) => value > best + p.threshold,
        },
    };
    if better {
        state.best = Some(value);
        state.bad = 0;
    } else {
        state.bad += 1;
    }
    if state.cooldown > 0 {
        state.cooldown -= 1;
        state.bad = 0;
    }
    if state.bad > p.patience {
        let new = (state.lr * p.factor).max(p.min_lr);
        if state.lr - new > PLATEAU_EPS {
            state.lr = new;
        }
        state.cooldown = p.cooldown;
        state.bad = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(total: u64) -> Budget {
        Budget {
            per_epoch: 10,
            total,
            stop: total,
            epochs: None,
        }
    }

    fn cycle() -> OneCycle {
        OneCycle {
            max_lr: 0.1,
            pct_start: 0.3,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
            cosine: true,
            momentum: Some((0.85, 0.95)),
        }
    }

    #[test]
    fn one_cycle_starts_low_peaks_and_ends_at_its_floor_with_momentum_mirrored() {
        let lr = Lr::new(
            1.0,
            &Schedule::OneCycle(cycle()),
            &budget(100),
            Span::default(),
        );
        assert!((lr.at(0) - 0.1 / 25.0).abs() < 1e-15);
        assert!((lr.at(29) - 0.1).abs() < 1e-15);
        assert!((lr.at(99) - 0.1 / 25.0 / 1e4).abs() < 1e-15);
        assert_eq!(lr.momentum(0), Some(0.95));
        assert!((lr.momentum(29).unwrap() - 0.85).abs() < 1e-15);
        assert!((lr.momentum(99).unwrap() - 0.95).abs() < 1e-15);
        let plain = OneCycle {
            momentum: None,
            ..cycle()
        };
        let off = Lr::new(
            1.0,
            &Schedule::OneCycle(plain),
            &budget(100),
            Span::default(),
        );
        assert_eq!(off.momentum(0), None);
    }

    #[test]
    fn a_sequence_hands_over_at_its_milestones_with_local_steps() {
        let s = Schedule::Sequence {
            schedules: vec![
                Schedule::Linear {
                    start: 0.5,
                    end: 1.0,
                    length: Some(Duration::Steps(4)),
                },
                Schedule::Cosine {
                    warmup: None,
                    min_lr: 0.0,
                    start: None,
                },
            ],
            milestones: vec![Duration::Steps(4)],
        };
        let lr = Lr::new(2.0, &s, &budget(14), Span::default());
        assert_eq!(lr.at(0), 1.0);
        assert_eq!(lr.at(2), 1.5);
        assert_eq!(lr.at(4), 2.0);
        // Halfway through the cosine's ten steps.
        assert!((lr.at(9) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_plateau_waits_for_patience_then_reduces_and_cools_down() {
        let p = Plateau {
            metric: PlateauMetric::ValLoss,
            maximize: false,
            factor: 0.5,
            patience: 1,
            threshold: 0.0,
            relative: true,
            cooldown: 1,
            min_lr: 0.3,
        };
        let mut lr = Lr::new(
            1.0,
            &Schedule::ReduceOnPlateau(p),
            &budget(10),
            Span::default(),
        );
        let eval = |loss| Eval {
            loss,
            accuracy: None,
            top_k: None,
            ..Eval::default()
        };
        for loss in [1.0, 1.0, 1.0] {
            lr.observe(&eval(loss)).unwrap();
        }
        assert_eq!(lr.at(5), 0.5);
        // Cooling down: the next bad evaluation does not count.
        lr.observe(&eval(1.0)).unwrap();
        lr.observe(&eval(1.0)).unwrap();
        assert_eq!(lr.at(5), 0.5);
        lr.observe(&eval(1.0)).unwrap();
        assert_eq!(lr.at(5), 0.3);
        let saved = lr.plateau();
        let mut again = Lr::new(1.0, &lr.schedule, &budget(10), Span::default());
        again.resume(saved);
        assert_eq!(again.at(0), 0.3);
    }
}
