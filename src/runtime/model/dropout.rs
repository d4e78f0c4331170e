//! Dropout: each element kept with probability `1 - p` and scaled by `1 / (1 - p)`, or zeroed.
//!
//! On the CPU, libtorch draws an fp32 mask with `bernoulli_` one element at a time from its
//! generator: 40% of a small transformer's training step (PyTorch's profiler on
//! `bench/torch_transformer.py`). There Kiln draws the mask itself: one 64-bit key from libtorch's
//! CPU generator per call, so that masks follow `manual_seed` as libtorch's do (the same at a
//! step whether or not the run was resumed), then each element's decision from a counter-based
//! generator, SplitMix64's finaliser of `key + (i / 2 + 1) · γ`, whose 64 bits give two elements
//! 24 bits each (`u = bits / 2^24`, kept when `u >= p`). Elsewhere (CUDA, other dtypes) it is
//! libtorch's own `dropout`. `tests/layers/reference.py` draws the same masks in NumPy.
//!
//! Threads that share the one CPU generator concurrently (a pipeline's stages) would draw their
//! keys in an order that varies from run to run: such a thread draws its keys from a stream of
//! its own instead ([`with_keys`]), SplitMix64 from a seed its caller derives deterministically.
//!
//! In a training step the masks follow the global batch rather than the generator
//! ([`with_rows`]): the step draws one key, the `k`-th mask of a forward pass takes the key
//! `mix(step key ^ mix((k + 1)·γ))`, and each element is decided by its place in the step's
//! whole batch (the pass's first row's place there, times the values per row, plus its own), so
//! that however the batch is cut (micro-batches, data ranks, tensor ranks' parts of a mask) each
//! sample is dropped as one process on the whole batch drops it.

use std::cell::Cell;

use tch::{Device, Kind, TchError, Tensor};

thread_local! {
    /// This thread's key stream, when it has one: the state of its SplitMix64 sequence.
    static KEYS: Cell<Option<u64>> = const { Cell::new(None) };
    /// The rows of the step's batch this thread's forward pass runs, when a step set them.
    static ROWS: Cell<Option<Rows>> = const { Cell::new(None) };
}

/// A forward pass's place in its step's batch: the step's key, the global index of the pass's
/// first row, and how many masks the pass has drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rows {
    key: u64,
    first: u64,
    drawn: u64,
}

/// Runs `f` (a forward pass on rows `first..` of a step's batch) with its masks decided by the
/// step's `key` and each element's place in the batch.
pub fn with_rows<R>(key: u64, first: u64, f: impl FnOnce() -> R) -> R {
    let before = ROWS.replace(Some(Rows {
        key,
        first,
        drawn: 0,
    }));
    let out = f();
    ROWS.set(before);
    out
}

/// Runs `f` with this thread's dropout keys drawn from the stream seeded by `seed` rather than
/// from libtorch's generator.
pub fn with_keys<R>(seed: u64, f: impl FnOnce() -> R) -> R {
    let before = KEYS.replace(Some(seed));
    let out = f();
    KEYS.set(before);
    out
}

/// This thread's key stream and rows as they stand (`None`: keys come from libtorch's
/// generator, masks are not placed in a batch).
pub(super) fn keys() -> (Option<u64>, Option<Rows>) {
    (KEYS.get(), ROWS.get())
}

/// Puts this thread's key stream and rows back to `state` (what [`keys`] returned).
pub(super) fn set_keys(state: (Option<u64>, Option<Rows>)) {
    KEYS.set(state.0);
    ROWS.set(state.1);
}

/// The next key: from this thread's stream, or from libtorch's CPU generator.
fn next_key() -> Result<u64, TchError> {
    match KEYS.get() {
        Some(state) => {
            let next = state.wrapping_add(GAMMA);
            KEYS.set(Some(next));
            Ok(mix(next))
        }
        None => draw(),
    }
}

/// One 64-bit draw from libtorch's CPU generator.
pub fn draw() -> Result<u64, TchError> {
    Ok(Tensor::f_randint(i64::MAX, [1], (Kind::Int64, Device::Cpu))?.f_int64_value(&[0])? as u64)
}

/// A seed of its own for `part` of the work that libtorch's generator, in the state it is in,
/// would otherwise draw for: one draw from that generator, mixed with `part`.
pub fn seed_for(draw: u64, part: u64) -> u64 {
    mix(draw ^ mix(part.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// SplitMix64's increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether Kiln draws the mask of `x` itself: fp32 on the CPU.
pub(super) fn drawn_here(x: &Tensor) -> bool {
    x.device() == Device::Cpu && x.kind() == Kind::Float
}

/// `x` with dropout `p` in training (`train`), `x` itself otherwise.
pub(super) fn dropout(x: &Tensor, p: f64, train: bool) -> Result<Tensor, TchError> {
    if !train || p == 0.0 {
        return Ok(x.shallow_clone());
    }
    if !drawn_here(x) || p >= 1.0 {
        return x.f_dropout(p, train);
    }
    let mask = mask(&x.size(), p)?;
    x.f_mul(&mask)
}

/// The key of the next mask and the global index of its first element: from the rows of the
/// step's batch when a step set them and this thread has no key stream of its own (the first
/// dimension of `shape` is the pass's rows), else a key from this thread's stream or libtorch's
/// generator and the mask's own indices.
fn next_mask(shape: &[i64], n: usize) -> Result<(u64, u64), TchError> {
    // A thread with a key stream of its own (a replica, a pipeline stage) draws from it.
    match (KEYS.get(), ROWS.get()) {
        (None, Some(r)) => {
            ROWS.set(Some(Rows {
                drawn: r.drawn + 1,
                ..r
            }));
            let rows = shape.first().copied().unwrap_or(1).max(1) as u64;
            let per_row = n as u64 / rows;
            Ok((
                mix(r.key ^ mix((r.drawn + 1).wrapping_mul(GAMMA))),
                r.first * per_row,
            ))
        }
        (Some(_), _) | (None, None) => Ok((next_key()?, 0)),
    }
}

/// A mask of `shape`: `1 / (1 - p)` where an element is kept, 0 where it is dropped, fp32 on
/// the CPU, from a key drawn from libtorch's CPU generator (or this thread's stream), written
/// straight into the tensor.
pub(super) fn mask(shape: &[i64], p: f64) -> Result<Tensor, TchError> {
    let n = shape.iter().product::<i64>().max(0) as usize;
    let (key, offset) = next_mask(shape, n)?;
    let scale = 1.0f32 / (1.0 - p) as f32;
    let mask = Tensor::f_empty(shape, (Kind::Float, Device::Cpu))?;
    // SAFETY: a new contiguous fp32 CPU tensor of `n` elements, which nothing else sees yet.
    let values = unsafe { std::slice::from_raw_parts_mut(mask.data_ptr().cast::<f32>(), n) };
    fill(values, key, p, scale, offset);
    Ok(mask)
}

/// Element `offset + i` of the mask into `values[i]`: elements `2j` and `2j + 1` are the two
/// halves of the hash of `key + (j + 1)·γ`.
fn fill(values: &mut [f32], key: u64, p: f64, scale: f32, offset: u64) {
    let unit = 1.0 / (1u64 << 24) as f64;
    let decide = |bits: u64| if bits as f64 * unit >= p { scale } else { 0.0 };
    let hash = |j: u64| mix(key.wrapping_add((j + 1).wrapping_mul(GAMMA)));
    let mut values = values;
    // An odd first element is the second half of its pair.
    if offset % 2 == 1 {
        let Some((first, rest)) = values.split_first_mut() else {
            return;
        };
        *first = decide((hash(offset / 2) >> 8) & 0xff_ffff);
        values = rest;
    }
    let base = offset.div_ceil(2);
    for (j, pair) in values.chunks_mut(2).enumerate() {
        let z = hash(base + j as u64);
        let halves = [z >> 40, (z >> 8) & 0xff_ffff];
        for (v, bits) in pair.iter_mut().zip(halves) {
            *v = decide(bits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_one_in_p_elements_is_dropped_and_the_rest_scaled() {
        tch::manual_seed(3);
        let x = Tensor::ones([1000, 1000], (Kind::Float, Device::Cpu));
        let y = dropout(&x, 0.3, true).expect("dropout");
        let dropped = f64::try_from(y.eq(0.0).to_kind(Kind::Double).mean(None)).expect("mean");
        // A million Bernoulli(0.3) draws: the standard deviation of the fraction is 0.00046.
        assert!((dropped - 0.3).abs() < 0.003, "{dropped}");
        let kept = y.masked_select(&y.ne(0.0));
        let scale = 1.0f32 / 0.7f32;
        assert_eq!(f64::try_from(kept.min()).expect("min") as f32, scale);
        assert_eq!(f64::try_from(kept.max()).expect("max") as f32, scale);
    }

    #[test]
    fn masks_follow_the_seed_and_differ_between_calls() {
        let x = Tensor::ones([4096], (Kind::Float, Device::Cpu));
        tch::manual_seed(11);
        let a = dropout(&x, 0.5, true).expect("first");
        let b = dropout(&x, 0.5, true).expect("second");
        tch::manual_seed(11);
        let again = dropout(&x, 0.5, true).expect("again");
        assert!(a.equal(&again));
        assert!(!a.equal(&b));
        // Neighbouring elements (the two halves of one hash) are not correlated.
        let pairs = a.reshape([2048, 2]);
        let both = pairs
            .select(1, 0)
            .ne(0.0)
            .logical_and(&pairs.select(1, 1).ne(0.0));
        let both = f64::try_from(both.to_kind(Kind::Double).mean(None)).expect("mean");
        assert!((both - 0.25).abs() < 0.04, "{both}");
    }

    #[test]
    fn gradients_flow_through_the_kept_elements_only() {
        tch::manual_seed(5);
        let x = Tensor::randn([64, 32], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let y = dropout(&x, 0.25, true).expect("dropout");
        y.sum(None).backward();
        let expected = y.detach().ne(0.0).to_kind(Kind::Float) * (1.0 / 0.75);
        assert!(x.grad().allclose(&expected, 1e-6, 1e-7, false));
        assert!(dropout(&x, 0.25, false).expect("eval").equal(&x));
    }
}
