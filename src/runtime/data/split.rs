//! Splitting the samples into training, validation and test sets, and the PRNG (SplitMix64 with
//! Fisher-Yates) behind every shuffle.

use kiln::ir::Split;
use kiln::span::Span;

use super::error::{At, DataError};
use super::{invalid, Dataset, Splits};

/// Mixed into the seed of the split permutation, so that it differs from the epoch orders
/// derived from the same seed.
const SPLIT_STREAM: u64 = 0x5EED_5B11_7000_0001;

/// Samples in each split, as [`Split::counts`] counts them.
fn split_counts(n: usize, split: &Split) -> (usize, usize, usize) {
    let (train, val, test) = split.counts(n as u64);
    // Each count is at most `n`, so it fits in a `usize`.
    let back = |c: u64| usize::try_from(c).unwrap_or(n);
    (back(train), back(val), back(test))
}

/// Splits `data` by `split`'s fractions with a permutation seeded by `seed`; each split keeps
/// its samples in file order.
pub(super) fn split(
    data: &Dataset,
    split: &Split,
    seed: u64,
    span: Span,
) -> Result<Splits, DataError> {
    let n = usize::try_from(data.len()).unwrap_or(0);
    let (train, val, test) = split_counts(n, split);
    if train == 0 {
        return Err(invalid(
            span,
            format!(
                "the training split is empty: {} of {n} sample{} is less than one",
                split.train,
                if n == 1 { "" } else { "s" }
            ),
            "no training samples",
            "use more samples or a larger `train` fraction",
        ));
    }
    let order = permutation(n, seed ^ SPLIT_STREAM);
    let part = |from: usize, len: usize| -> Result<Option<Dataset>, DataError> {
        if len == 0 {
            return Ok(None);
        }
        let mut indices = order[from..from + len].to_vec();
        indices.sort_unstable();
        data.select(&indices).map(Some).at(span)
    };
    let train_set = part(0, train)?.ok_or_else(|| {
        invalid(
            span,
            "the training split is empty",
            "no training samples",
            "use more samples",
        )
    })?;
    Ok(Splits {
        train: train_set,
        val: part(train, val)?,
        test: part(train + val, test)?,
        vocab: None,
    })
}

/// SplitMix64 (Steele, Lea and Flood, 2014): small, fast, and good enough to shuffle.
pub(super) struct SplitMix64(pub(super) u64);

impl SplitMix64 {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on `[0, bound)` without bias (Lemire, 2019). `bound` must be positive.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        let mut m = u128::from(self.next()) * u128::from(bound);
        if (m as u64) < bound {
            let threshold = bound.wrapping_neg() % bound;
            while (m as u64) < threshold {
                m = u128::from(self.next()) * u128::from(bound);
            }
        }
        (m >> 64) as u64
    }
}

/// A uniformly random permutation of `0..n` (Fisher-Yates).
pub(super) fn permutation(n: usize, seed: u64) -> Vec<i64> {
    let mut order: Vec<i64> = (0..n as i64).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// The seed of one epoch's order.
pub(super) fn epoch_seed(order_seed: u64, epoch: u64) -> u64 {
    let a = SplitMix64(order_seed).next();
    SplitMix64(a ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03)).next()
}

#[cfg(test)]
mod tests {
    use super::super::error::DataKind;
    use super::super::tests::{floats, ints, source_span};
    use super::*;
    use std::collections::HashSet;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn split_sizes_and_membership() {
        let frac = |train, val, test| Split { train, val, test };
        assert_eq!(split_counts(10_000, &frac(0.8, 0.2, 0.0)), (8000, 2000, 0));
        assert_eq!(split_counts(100, &frac(0.29, 0.71, 0.0)), (29, 71, 0));
        assert_eq!(split_counts(10, &frac(0.7, 0.15, 0.15)), (7, 1, 1));
        assert_eq!(split_counts(3, &frac(0.5, 0.5, 0.0)), (1, 1, 0));

        let n = 103;
        let d = Dataset::rows(
            Tensor::arange(n, (Kind::Float, Device::Cpu)).reshape([n, 1]),
            Tensor::arange(n, (Kind::Int64, Device::Cpu)),
        );
        let s = split(&d, &frac(0.5, 0.3, 0.2), 5, source_span()).unwrap();
        let (val, test) = (s.val.unwrap(), s.test.unwrap());
        assert_eq!((s.train.len(), val.len(), test.len()), (51, 30, 20));
        let mut seen = HashSet::new();
        for part in [&s.train, &val, &test] {
            let ids = ints(&part.targets);
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "file order within a split"
            );
            assert_eq!(
                floats(&part.inputs),
                ids.iter().map(|&v| v as f32).collect::<Vec<_>>()
            );
            for id in ids {
                assert!(seen.insert(id));
            }
        }
        assert_eq!(seen.len(), 101);
        // The training split is not simply the first samples.
        assert_ne!(ints(&s.train.targets), (0..51).collect::<Vec<i64>>());

        let e = split(&d, &frac(0.001, 0.0, 0.0), 5, source_span()).unwrap_err();
        assert!(matches!(e.kind, DataKind::Invalid), "{e:?}");
        assert!(e.detail.contains("training split is empty"), "{}", e.detail);
    }

    #[test]
    fn permutations_are_uniform_enough() {
        for n in [0usize, 1, 2, 17, 1000] {
            let mut p = permutation(n, 3);
            p.sort_unstable();
            assert_eq!(p, (0..n as i64).collect::<Vec<_>>());
        }
        // Each of 4 items lands in each of 4 places about equally often.
        let mut counts = [[0u32; 4]; 4];
        for seed in 0..4000 {
            for (place, &item) in permutation(4, seed).iter().enumerate() {
                counts[item as usize][place] += 1;
            }
        }
        for row in counts {
            for c in row {
                assert!((850..1150).contains(&c), "{counts:?}");
            }
        }
    }
}
