//! The ranking of a sweep's trials, used by the table `kiln run` prints at the end of a sweep and
//! by `kiln report` on a sweep directory.

use std::cmp::Ordering;

use super::Outcome;

/// The figure a trial is ranked by, smaller is better: the negated validation accuracy, else the
/// validation loss (no accuracy), else the training loss (no validation split). `None` when that
/// figure is NaN, or when there is no outcome (the trial has no report).
pub fn rank_key(outcome: Option<&Outcome>) -> Option<f64> {
    let o = outcome?;
    let key = match &o.val {
        Some(v) => v.accuracy.map_or(v.loss, |a| -a),
        None => o.train_loss,
    };
    (!key.is_nan()).then_some(key)
}

/// Sorts trials best first by [`rank_key`]; trials without a key (NaN, no report) come last.
/// The sort is stable: ties keep their order.
pub fn rank<T>(trials: &mut [T], outcome: impl Fn(&T) -> Option<&Outcome>) {
    trials.sort_by(|a, b| match (rank_key(outcome(a)), rank_key(outcome(b))) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    });
}
