//! Unit tests of the pruning masks, the unit scores and the schedule formulas, against hand
//! arithmetic and the positions ATen's `topk` gives ties; `prune_parity.rs` compares the masks
//! with `torch.nn.utils.prune`'s.

use std::sync::Mutex;

use tch::{Device, Kind, Tensor};

use super::*;
use Amount::{Count, Fraction};

/// The tests that seed libtorch's global generator and then draw from it take turns.
pub(super) static GENERATOR: Mutex<()> = Mutex::new(());

/// Deterministic values in [-1, 1) from splitmix64, without libtorch's generator (which other
/// tests share).
pub(super) fn uniform(seed: u64, shape: &[i64]) -> Tensor {
    let numel: i64 = shape.iter().product();
    let mut state = seed;
    let values: Vec<f32> = (0..numel)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_slice(&values).reshape(shape)
}

/// Values in {-2, -1, 0, 1, 2}: magnitudes tie everywhere.
pub(super) fn few_distinct(seed: u64, shape: &[i64]) -> Tensor {
    (uniform(seed, shape) * 2.5).floor().clamp(-2.0, 2.0)
}

/// A tensor whose entries are all equal.
pub(super) fn equal(shape: &[i64]) -> Tensor {
    Tensor::full(shape, 0.5, (Kind::Float, Device::Cpu))
}

/// The number of pruned entries.
pub(super) fn zeros(mask: &Tensor) -> i64 {
    mask.eq(0.0).sum(Kind::Int64).int64_value(&[])
}

/// The pruned positions of a mask, in increasing order.
fn pruned_at(mask: &Tensor) -> Vec<i64> {
    let flat = mask.reshape([-1]).eq(0.0).nonzero().reshape([-1]);
    Vec::<i64>::try_from(&flat).expect("indices")
}

#[test]
fn ties_fall_where_atens_topk_puts_them() {
    let prune = |shape: &[i64], k| {
        let w = equal(shape);
        pruned_at(&l1_unstructured(&w, &w.ones_like(), Count(k)).unwrap())
    };
    assert_eq!(prune(&[10], 3), [6, 7, 8]);
    assert_eq!(prune(&[10], 5), [5, 6, 7, 8, 9]);
    assert_eq!(prune(&[4096], 41), (0..41).collect::<Vec<i64>>());
    let scattered = prune(&[1000], 100);
    assert_eq!(scattered.len(), 100);
    assert!(
        scattered.iter().all(|i| (626..=749).contains(i)),
        "{scattered:?}"
    );
    assert_ne!(
        scattered,
        (626..726).collect::<Vec<i64>>(),
        "not a stable sort"
    );
    let rows = equal(&[10, 6]);
    let mask = ln_structured(&rows, &rows.ones_like(), Fraction(0.3), 2, 0).unwrap();
    let pruned_rows: Vec<i64> = pruned_at(&mask.select(1, 0));
    assert_eq!(pruned_rows, [0, 2, 4]);
}

#[test]
fn counts_round_half_to_even() {
    assert_eq!(count(Fraction(0.5), 5), 2);
    assert_eq!(count(Fraction(0.5), 3), 2);
    assert_eq!(count(Fraction(0.35), 10), 4);
    assert_eq!(count(Fraction(0.45), 10), 4);
    assert_eq!(count(Fraction(0.25), 10), 2);
    assert_eq!(count(Fraction(0.3), 10), 3);
    assert_eq!(count(Fraction(1.0), 7), 7);
    assert_eq!(count(Count(7), 1000), 7);
}

#[test]
fn impossible_requests_are_errors() {
    let w = uniform(80, &[4, 5]);
    let ones = w.ones_like();
    for amount in [
        Fraction(1.5),
        Fraction(-0.1),
        Fraction(f64::NAN),
        Count(-1),
        Count(21),
    ] {
        assert!(l1_unstructured(&w, &ones, amount).is_err(), "{amount:?}");
        assert!(global_l1(&[&w], &[&ones], amount).is_err(), "{amount:?}");
    }
    assert!(l1_unstructured(&w, &ones, Count(20)).is_ok());
    assert!(ln_structured(&w, &ones, Count(5), 2, 0).is_err());
    assert!(ln_structured(&w, &ones, Count(4), 2, 0).is_ok());
    assert!(ln_structured(&w, &ones, Fraction(0.5), 2, 2).is_err());
    assert!(ln_structured(&w, &ones, Fraction(0.5), 2, -3).is_err());
    let v = uniform(81, &[6]);
    assert!(ln_structured(&v, &v.ones_like(), Fraction(0.5), 2, 0).is_err());
    assert!(l1_unstructured(
        &w,
        &Tensor::ones([5, 4], (Kind::Float, Device::Cpu)),
        Count(1)
    )
    .is_err());
    assert!(global_l1(&[&w, &w], &[&ones], Count(1)).is_err());
    assert!(global_l1(&[], &[], Count(0)).is_err());
    assert!(ln_units(&[], 2).is_err());
    assert!(ln_units(&[(&w, 0), (&w, 1)], 2).is_err());
    assert!(keep_units(
        &uniform(82, &[4]),
        &Tensor::ones([5], (Kind::Float, Device::Cpu)),
        Count(1)
    )
    .is_err());
    assert!(apply(&w, &Tensor::ones([1], (Kind::Float, Device::Cpu))).is_err());
}

#[test]
fn random_pruning_draws_exact_counts_uniformly() {
    let _generator = GENERATOR.lock().unwrap_or_else(|e| e.into_inner());
    let w = uniform(90, &[50]);
    let ones = w.ones_like();
    let trials = 2000;
    let (mut once, mut twice) = (w.zeros_like(), w.zeros_like());
    for seed in 0..trials {
        tch::manual_seed(seed);
        let first = random_unstructured(&w, &ones, Fraction(0.3)).unwrap();
        assert_eq!(zeros(&first), 15);
        once += first.eq(0.0).to_kind(Kind::Float);
        let half = random_unstructured(&w, &ones, Fraction(0.5)).unwrap();
        let quarter = random_unstructured(&w, &half, Fraction(0.5)).unwrap();
        // 25 pruned, then round(0.5 * 25) = 12 of the remaining 25 (half to even).
        assert_eq!(zeros(&quarter), 37);
        assert_eq!(zeros(&(&half * &quarter)), 37, "pruned entries stay pruned");
        twice += quarter.eq(0.0).to_kind(Kind::Float);
    }
    // Each position's frequency has a standard deviation of about 0.01 over 2000 trials.
    for (hits, expected) in [(once, 0.3), (twice, 37.0 / 50.0)] {
        let freq = hits / trials as f64;
        let worst = (freq - expected).abs().max().double_value(&[]);
        assert!(
            worst < 0.06,
            "a position is pruned {worst} away from {expected}"
        );
    }
}

#[test]
fn joint_unit_scores_combine_each_tensors_norm() {
    let (w, b, next) = (
        uniform(100, &[6, 4, 3, 3]),
        uniform(101, &[6]),
        uniform(102, &[5, 6]),
    );
    for n in 1..=3 {
        let joint = ln_units(&[(&w, 0), (&b, 0), (&next, 1)], n).unwrap();
        // The same norm over each unit's entries laid side by side.
        let rows = Tensor::cat(&[w.reshape([6, -1]), b.reshape([6, 1]), next.t_copy()], 1);
        let direct = rows.norm_scalaropt_dim(n as i64, [1], false);
        let error = (&joint - &direct).abs().max().double_value(&[]);
        assert!(error < 1e-5, "n = {n}: {joint} against {direct}");
        let single = ln_units(&[(&b, 0)], n).unwrap();
        assert!(
            single.allclose(&b.abs(), 0.0, 0.0, false),
            "a 1-D tensor's units are its entries"
        );
    }
    let counted = ln_units(&[(&few_distinct(103, &[6, 5]), 0), (&b, 0)], 0).unwrap();
    let expected = few_distinct(103, &[6, 5])
        .ne(0.0)
        .sum_dim_intlist(1, false, Kind::Float)
        + 1.0;
    assert!(counted.equal(&expected), "n = 0 counts the nonzero entries");
}

#[test]
fn kept_units_are_the_largest_still_kept() {
    let scores = Tensor::from_slice(&[5.0f32, 1.0, 9.0, 2.0, 3.0]);
    let unit_mask = Tensor::from_slice(&[1.0f32, 1.0, 0.0, 1.0, 1.0]);
    let kept = keep_units(&scores, &unit_mask, Fraction(0.5)).unwrap();
    assert_eq!(
        Vec::<f32>::try_from(&kept).unwrap(),
        [1.0, 0.0, 0.0, 0.0, 1.0]
    );
    let all = keep_units(&scores, &unit_mask, Count(0)).unwrap();
    assert!(all.equal(&unit_mask));
    let none = keep_units(&scores, &unit_mask, Fraction(1.0)).unwrap();
    assert_eq!(zeros(&none), 5);
}

#[test]
fn gradual_sparsity_follows_the_cubic_ramp() {
    let s = |step| gradual_sparsity(0.1, 0.9, 100, 200, 10, step);
    assert_eq!(s(0), 0.0);
    assert_eq!(s(99), 0.0);
    assert_eq!(s(100), 0.1);
    // Halfway: 0.9 + (0.1 - 0.9) * 0.5^3 = 0.8.
    assert!((s(150) - 0.8).abs() < 1e-12);
    assert_eq!(s(155), s(150), "constant between pruning steps");
    assert_eq!(s(200), 0.9);
    assert_eq!(s(1000), 0.9);
    let ramp: Vec<f64> = (0..=220).map(s).collect();
    assert!(ramp.windows(2).all(|p| p[0] <= p[1]), "never decreases");
    // An interval that does not divide the range: pruning at 0, 3, 6, 9 and at the end, 10.
    let steps: Vec<u64> = (0..=12).filter(|&t| is_pruning_step(0, 10, 3, t)).collect();
    assert_eq!(steps, [0, 3, 6, 9, 10]);
    let at9 = 0.5 * (1.0 - (1.0f64 - 0.9).powi(3));
    assert!((gradual_sparsity(0.0, 0.5, 0, 10, 3, 9) - at9).abs() < 1e-12);
    assert_eq!(gradual_sparsity(0.0, 0.5, 0, 10, 3, 10), 0.5);
    assert!(is_pruning_step(5, 5, 2, 5) && !is_pruning_step(5, 5, 2, 6));
    assert_eq!(gradual_sparsity(0.0, 0.5, 5, 5, 2, 5), 0.5);
    assert_eq!(
        gradual_sparsity(0.2, 0.5, 0, 10, 0, 1),
        gradual_sparsity(0.2, 0.5, 0, 10, 1, 1)
    );
}

#[test]
fn iterative_rounds_compound_to_the_amount() {
    for (amount, rounds) in [(0.9, 3), (0.5, 1), (0.8, 5), (0.0, 4)] {
        let each = iterative_round_amount(amount, rounds);
        let left = (1.0 - each).powi(rounds as i32);
        assert!(
            (left - (1.0 - amount)).abs() < 1e-12,
            "{amount} in {rounds}"
        );
    }
    assert!((iterative_round_amount(0.9, 3) - 0.5358411166).abs() < 1e-9);
    assert_eq!(
        iterative_round_amount(0.7, 0),
        iterative_round_amount(0.7, 1)
    );
}

#[test]
fn apply_zeroes_pruned_weights_in_place() {
    let w = uniform(110, &[8, 9]).set_requires_grad(true);
    let before = w.detach().copy();
    let mask = l1_unstructured(&w, &w.ones_like(), Fraction(0.5)).unwrap();
    apply(&w, &mask).unwrap();
    assert!(w.requires_grad() && w.is_leaf(), "still a trainable leaf");
    assert!(w.detach().equal(&(&before * &mask)));
    assert_eq!(zeros(&w.detach()), 36);
}
