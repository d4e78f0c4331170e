//! How long a run is, in optimizer steps: computed once, from the experiment and the size of the
//! training split, with checked arithmetic. The loop, the learning-rate schedule, evaluation and
//! checkpoint intervals and the progress display all read it.

use kiln::diagnostic::problem::{Names, OutOfRange};
use kiln::diagnostic::{Diagnostic, Problem};
use kiln::ir::{Data, Duration, Train};

/// The run's length in optimizer steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Optimizer steps in one epoch: batches of the training split, the last one partial.
    pub per_epoch: u64,
    /// Optimizer steps of the experiment as written (the schedule spans them).
    pub total: u64,
    /// Where the loop stops at the latest: the end of the run's last phase when no phase ends
    /// early (`total` without compression's fine-tuning or rounds), or fewer with `--max-steps`.
    pub stop: u64,
    /// The length in epochs, when it is given in epochs.
    pub epochs: Option<u64>,
}

impl Budget {
    /// The budget of `train` over the training split's `samples` samples, batched as `data`
    /// says (`batch`, `drop_last`); `max_steps` stops the loop early without changing the
    /// schedule. A length whose steps cannot be counted (more than 2^64) is K0121 at the
    /// `epochs` value.
    pub fn new(
        train: &Train,
        data: &Data,
        samples: u64,
        max_steps: Option<u64>,
    ) -> Result<Budget, Diagnostic> {
        let batch = data.batch;
        let per_epoch = data.steps_per_epoch(samples);
        let (total, epochs) = match train.length {
            Duration::Steps(n) => (n, None),
            Duration::Epochs(n) => {
                let total = n.checked_mul(per_epoch).ok_or_else(|| {
                    Problem::Names(Names::OutOfRange {
                        span: train.length_span,
                        situation: OutOfRange::EpochSteps {
                            epochs: n,
                            per_epoch,
                            samples,
                            batch,
                        },
                    })
                    .diagnostic()
                })?;
                (total, Some(n))
            }
        };
        Ok(Budget {
            per_epoch,
            total,
            stop: max_steps.map_or(total, |m| m.min(total)),
            epochs,
        })
    }

    /// Optimizer steps in `d`. An interval too long to count never comes, so it saturates.
    pub fn steps(&self, d: Duration) -> u64 {
        match d {
            Duration::Steps(n) => n,
            Duration::Epochs(n) => n.saturating_mul(self.per_epoch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_counted_in_steps_and_saturate() {
        let b = Budget {
            per_epoch: 100,
            total: 1000,
            stop: 1000,
            epochs: Some(10),
        };
        assert_eq!(b.steps(Duration::Steps(7)), 7);
        assert_eq!(b.steps(Duration::Epochs(3)), 300);
        assert_eq!(b.steps(Duration::Epochs(u64::MAX / 10)), u64::MAX);
    }

    #[test]
    fn an_epoch_leaves_out_its_partial_batch_with_drop_last() {
        let text = |drop_last: bool| {
            format!(
                "experiment \"b\" {{\n data {{ source synthetic(inputs: normal([2]), targets: randint(2), count: 10); batch 4; drop_last {drop_last} }}\n model {{ input [2]; linear(2) }}\n optimizer sgd(lr: 0.1)\n train {{ epochs 3; loss cross_entropy }}\n}}\n"
            )
        };
        for (drop_last, per_epoch) in [(false, 3), (true, 2)] {
            let checked = kiln::check::check_text("b.exp", text(drop_last));
            let e = checked.trials.first().expect("checks clean");
            let b = Budget::new(&e.train, &e.data, 10, None).expect("budget");
            assert_eq!((b.per_epoch, b.total), (per_epoch, 3 * per_epoch));
        }
    }
}
