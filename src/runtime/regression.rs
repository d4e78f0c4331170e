//! The regression metrics of an evaluation, `mae`, `rmse` and `r2`, over a whole split, as
//! scikit-learn's `mean_absolute_error`, `root_mean_squared_error` and `r2_score` define them
//! with their default `multioutput="uniform_average"`: each output's score, then the mean over
//! outputs (an output is one value of a sample's targets; a single target is one output).
//!
//! Sums in f64 over the batches, never a mean of batch means: `Σ|p - y|` and, per output,
//! `Σ(p - y)²`, kept on the device until the evaluation ends (one read), which processes that
//! share an evaluation add up. `r2`'s denominators,
//! `Σ(y - ȳ)²` per output, depend on the targets alone; every process computes them from the
//! whole split in two passes (the mean first), so a target far from 0 loses no digits.

use tch::{Kind, Tensor};

use super::failure::At;
use kiln::diagnostic::Diagnostic;
use kiln::span::Span;

/// A split's regression metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    /// Mean absolute error over every value.
    pub mae: f64,
    /// The mean over outputs of each output's root mean squared error.
    pub rmse: f64,
    /// The mean over outputs of each output's coefficient of determination.
    pub r2: f64,
}

/// What a split's regression metrics need, summed over its batches.
pub struct Regression {
    /// The samples of the whole split.
    samples: f64,
    /// `Σ(y - ȳ)²` of each output over the whole split.
    spread: Vec<f64>,
    /// `Σ|p - y|` over the batches seen, every output, then `Σ(p - y)²` of each output, in
    /// f64 on the predictions' device; `None` before the first batch.
    sums: Option<Tensor>,
    span: Span,
}

/// `t` (`[N, ..]`) as f64 values `[N, outputs]`.
fn per_output(t: &Tensor, span: Span) -> Result<Tensor, Diagnostic> {
    let size = t.size();
    let n = size.first().copied().unwrap_or(0);
    let outputs: i64 = size.iter().skip(1).product();
    t.f_to_kind(Kind::Double)
        .at(span)?
        .f_reshape([n, outputs])
        .at(span)
}

/// The values of a 1-D f64 tensor.
fn values(t: &Tensor, span: Span) -> Result<Vec<f64>, Diagnostic> {
    Vec::<f64>::try_from(t).at(span)
}

impl Regression {
    /// The sums of a split whose targets are `targets` (`[N, ..]`, all of them, whichever
    /// share of the split this process evaluates), before any batch; failures point at `span`.
    pub fn new(targets: &Tensor, span: Span) -> Result<Regression, Diagnostic> {
        let y = per_output(targets, span)?;
        let mean = y
            .f_mean_dim(Some([0i64].as_slice()), true, Kind::Double)
            .at(span)?;
        let spread = y
            .f_sub(&mean)
            .at(span)?
            .f_square()
            .at(span)?
            .f_sum_dim_intlist(Some([0i64].as_slice()), false, Kind::Double)
            .at(span)?;
        let spread = values(&spread, span)?;
        Ok(Regression {
            samples: y.size()[0] as f64,
            spread,
            sums: None,
            span,
        })
    }

    /// Adds a batch: predictions `p` and targets `y` of the same shape, as the loss compares
    /// them (`Objective::fit`).
    pub fn add(&mut self, p: &Tensor, y: &Tensor) -> Result<(), Diagnostic> {
        let span = self.span;
        let e = per_output(p, span)?.f_sub(&per_output(y, span)?).at(span)?;
        let abs = e
            .f_abs()
            .at(span)?
            .f_sum(Kind::Double)
            .at(span)?
            .f_reshape([1])
            .at(span)?;
        let squares = e
            .f_square()
            .at(span)?
            .f_sum_dim_intlist(Some([0i64].as_slice()), false, Kind::Double)
            .at(span)?;
        let batch = Tensor::f_cat(&[abs, squares], 0).at(span)?;
        self.sums = Some(match self.sums.take() {
            None => batch,
            Some(sums) => sums.f_add(&batch).at(span)?,
        });
        Ok(())
    }

    /// The sums that processes sharing an evaluation add up, read from the device: `Σ|p - y|`,
    /// then `Σ(p - y)²` of each output (zeros before any batch).
    pub fn sums(&self) -> Result<Vec<f64>, Diagnostic> {
        match &self.sums {
            Some(t) => values(&t.f_to_device(tch::Device::Cpu).at(self.span)?, self.span),
            None => Ok(vec![0.0; 1 + self.spread.len()]),
        }
    }

    /// The metrics of the split from `sums` (every process's [`Regression::sums`] added up).
    /// With `n` samples and `K` outputs: `mae = Σ|p - y| /
    /// (n K)`; `rmse = mean_k sqrt(Σ(p - y)²_k / n)`; `r2 = mean_k r2_k`, `r2_k = 1 -
    /// Σ(p - y)²_k / Σ(y - ȳ)²_k`, 1 when the output's predictions are exact and 0 when they
    /// are not and its targets are constant (scikit-learn's `force_finite`). NaN where
    /// scikit-learn has none: every metric of an empty split, `r2` of fewer than 2 samples.
    pub fn scores(&self, sums: &[f64]) -> Scores {
        let (abs, squares) = sums.split_first().unwrap_or((&0.0, &[]));
        let n = self.samples;
        let k = squares.len() as f64;
        if n == 0.0 || k == 0.0 {
            return Scores {
                mae: f64::NAN,
                rmse: f64::NAN,
                r2: f64::NAN,
            };
        }
        let rmse = squares.iter().map(|s| (s / n).sqrt()).sum::<f64>() / k;
        let r2 = if n < 2.0 {
            f64::NAN
        } else {
            let each = squares.iter().zip(&self.spread).map(|(&res, &tot)| {
                if res == 0.0 {
                    1.0
                } else if tot == 0.0 {
                    0.0
                } else {
                    1.0 - res / tot
                }
            });
            each.sum::<f64>() / k
        };
        Scores {
            mae: abs / (n * k),
            rmse,
            r2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(values: &[f32], shape: &[i64]) -> Tensor {
        Tensor::from_slice(values).reshape(shape)
    }

    #[test]
    fn metrics_over_batches_are_those_of_the_whole_split() {
        // Two outputs, the second far from 0; predictions in two uneven batches.
        let y = [1.0, 100.5, 2.0, 99.0, 4.0, 101.0, 3.0, 100.0, 0.5, 100.25];
        let p = [1.5, 100.0, 2.0, 99.5, 3.0, 100.0, 3.5, 100.5, 1.0, 99.75];
        let mut r = Regression::new(&tensor(&y, &[5, 2]), Span::default()).expect("sums");
        r.add(&tensor(&p[..4], &[2, 2]), &tensor(&y[..4], &[2, 2]))
            .expect("first batch");
        r.add(&tensor(&p[4..], &[3, 2]), &tensor(&y[4..], &[3, 2]))
            .expect("second batch");
        // By hand, per output: errors (0.5, 0, -1, 0.5, 0.5) and (-0.5, 0.5, -1, 0.5, -0.5);
        // targets' means 2.1 and 100.15.
        let (res0, res1) = (
            0.25 + 0.0 + 1.0 + 0.25 + 0.25,
            0.25 + 0.25 + 1.0 + 0.25 + 0.25,
        );
        let tot0 = [1.0, 2.0, 4.0, 3.0, 0.5]
            .iter()
            .map(|v: &f64| (v - 2.1).powi(2))
            .sum::<f64>();
        let tot1 = [100.5, 99.0, 101.0, 100.0, 100.25]
            .iter()
            .map(|v: &f64| (v - 100.15).powi(2))
            .sum::<f64>();
        let s = r.scores(&r.sums().expect("sums"));
        assert!((s.mae - 5.5 / 10.0).abs() < 1e-15, "{s:?}");
        let rmse = ((res0 / 5.0f64).sqrt() + (res1 / 5.0f64).sqrt()) / 2.0;
        assert!((s.rmse - rmse).abs() < 1e-15, "{s:?}");
        let r2 = ((1.0 - res0 / tot0) + (1.0 - res1 / tot1)) / 2.0;
        assert!((s.r2 - r2).abs() < 1e-12, "{s:?} against {r2}");
    }

    #[test]
    fn constant_targets_and_single_samples_follow_scikit_learn() {
        let y = tensor(&[2.0, 2.0, 2.0], &[3]);
        let mut exact = Regression::new(&y, Span::default()).expect("sums");
        exact.add(&y, &y).expect("batch");
        assert_eq!(exact.scores(&exact.sums().expect("sums")).r2, 1.0);
        let mut off = Regression::new(&y, Span::default()).expect("sums");
        off.add(&tensor(&[2.0, 3.0, 2.0], &[3]), &y).expect("batch");
        assert_eq!(off.scores(&off.sums().expect("sums")).r2, 0.0);
        let one = tensor(&[1.0], &[1]);
        let mut single = Regression::new(&one, Span::default()).expect("sums");
        single.add(&tensor(&[1.5], &[1]), &one).expect("batch");
        assert!(single.scores(&single.sums().expect("sums")).r2.is_nan());
        assert_eq!(single.scores(&single.sums().expect("sums")).mae, 0.5);
    }
}
