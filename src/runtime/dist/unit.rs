//! The units of fully sharded data parallel over a c10d group, through the shim in
//! `shim/unit.cpp`: parameters sharded over the ranks and gathered together, their gradients
//! reduce-scattered once backward has accumulated them, and the pool of buffers the units of a
//! run share. Every C++ failure comes back as a [`CommError`].

use std::ffi::{c_int, c_void};

use tch::Tensor;

use super::c10d::{checked, failure, CommError, Group};

extern "C" {
    fn kiln_unit_last_error() -> *const std::ffi::c_char;
    fn kiln_pool_new() -> *mut c_void;
    fn kiln_pool_free(p: *mut c_void);
    fn kiln_unit_new(
        g: *mut c_void,
        pool: *mut c_void,
        params: *const *mut c_void,
        n: usize,
        shards: *mut *mut c_void,
    ) -> *mut c_void;
    fn kiln_unit_gather(u: *mut c_void) -> c_int;
    fn kiln_unit_prefetch(u: *mut c_void) -> c_int;
    fn kiln_unit_release(u: *mut c_void) -> c_int;
    fn kiln_unit_gather_on_grad(u: *mut c_void, out: *mut c_void, before: *mut c_void) -> c_int;
    fn kiln_unit_reduce(u: *mut c_void) -> c_int;
    fn kiln_unit_sync(u: *mut c_void, sync: c_int) -> c_int;
    fn kiln_unit_free(u: *mut c_void);
}

/// The shim's message for the call that just failed on this thread.
fn last_error() -> CommError {
    failure(kiln_unit_last_error)
}

fn status(code: c_int) -> Result<(), CommError> {
    checked(code, kiln_unit_last_error)
}

/// Host buffers that the units of one run take for a gather or a reduction and give back after
/// it, reused by size, so that a step allocates none once the first has run and the C allocator
/// keeps no freed blocks of them (on a GPU, CUDA's caching allocator does this itself). The
/// buffers go when the pool and every unit that took from it have gone.
pub struct Pool(*mut c_void);

// SAFETY: the pool is locked inside; the handle is owned by one thread at a time.
unsafe impl Send for Pool {}

impl Pool {
    pub fn new() -> Result<Pool, CommError> {
        // SAFETY: a plain constructor; null on failure.
        let p = unsafe { kiln_pool_new() };
        if p.is_null() {
            return Err(last_error());
        }
        Ok(Pool(p))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once.
        unsafe { kiln_pool_free(self.0) }
    }
}

/// Parameters sharded over the ranks of a group and gathered together (a unit of fully sharded
/// data parallel). Each parameter of `n` values is cut into `world` shards of `ceil(n / world)`
/// values, the last padded with zeros; this rank keeps its shard of each as a flat tensor that
/// requires grad, whose `.grad` receives this rank's part of the ranks' summed gradients. Once a
/// backward pass has accumulated the gradient of every parameter of the unit, a hook starts
/// their reduction (a reduce-scatter, added to the shards' `.grad` by [`Unit::reduce`]) and
/// frees the parameters.
pub struct Unit(*mut c_void);

// SAFETY: as for `Group`; the autograd hooks that share the unit run on the thread of the
// backward pass that meets them.
unsafe impl Send for Unit {}

impl Unit {
    /// The unit of `params`, which every rank holds with the same values, taking its buffers
    /// from `pool`, and this rank's shard of each (new tensors, in the order of `params`). The
    /// parameters stay gathered.
    pub fn new(
        group: &Group,
        pool: &Pool,
        params: &[Tensor],
    ) -> Result<(Unit, Vec<Tensor>), CommError> {
        let ptrs: Vec<*mut c_void> = params.iter().map(|p| p.as_ptr() as *mut c_void).collect();
        let mut shards: Vec<*mut c_void> = vec![std::ptr::null_mut(); params.len()];
        // SAFETY: the group and tensors are live during the call; the shim writes one new
        // `at::Tensor*` per parameter, owned by the caller, and keeps its own references.
        let p = unsafe {
            kiln_unit_new(
                group.0,
                pool.0,
                ptrs.as_ptr(),
                ptrs.len(),
                shards.as_mut_ptr(),
            )
        };
        if p.is_null() {
            return Err(last_error());
        }
        let shards = shards
            .into_iter()
            // SAFETY: each is a fresh heap `at::Tensor*` whose ownership passes to tch.
            .map(|s| unsafe { Tensor::from_ptr(s as *mut torch_sys::C_tensor) })
            .collect();
        Ok((Unit(p), shards))
    }

    /// Starts the all-gather of the parameters, for a [`Unit::gather`] to come, so that it runs
    /// while this rank computes (nothing when they are gathered or a gather is under way).
    pub fn prefetch(&self) -> Result<(), CommError> {
        // SAFETY: the unit is live.
        status(unsafe { kiln_unit_prefetch(self.0) })
    }

    /// Fills the parameters from every rank's shards (an all-gather, or the end of the one
    /// [`Unit::prefetch`] started; nothing when they are gathered already).
    pub fn gather(&self) -> Result<(), CommError> {
        // SAFETY: the unit is live.
        status(unsafe { kiln_unit_gather(self.0) })
    }

    /// Frees the parameters' memory, and that of every tensor autograd saved of them.
    pub fn release(&self) -> Result<(), CommError> {
        // SAFETY: the unit is live.
        status(unsafe { kiln_unit_release(self.0) })
    }

    /// Gathers the parameters again when the gradient of `out`, which requires grad, arrives
    /// in backward (before the backward of what computed `out` runs), and starts gathering
    /// `before` (the unit that ran before this one), which backward reaches next.
    pub fn gather_on_grad(&self, out: &Tensor, before: Option<&Unit>) -> Result<(), CommError> {
        let before = before.map_or(std::ptr::null_mut(), |b| b.0);
        // SAFETY: the units and the tensor are live; the hook keeps its own reference to this
        // unit and a weak one to `before`.
        status(unsafe { kiln_unit_gather_on_grad(self.0, out.as_ptr() as *mut c_void, before) })
    }

    /// Reduces the gradients the parameters still hold, as the hook does (after a backward pass
    /// that did not reach every parameter of the unit), and waits for the reductions under way
    /// (the hook's reduce-scatter runs while backward goes on): after it, the shards' `.grad`
    /// hold every reduced gradient.
    pub fn reduce(&self) -> Result<(), CommError> {
        // SAFETY: the unit is live.
        status(unsafe { kiln_unit_reduce(self.0) })
    }
}

impl Unit {
    /// Whether the next backward passes reduce the gradients and free the parameters once they
    /// are accumulated (`true`, as a new unit does), or leave both whole (a micro-batch of
    /// gradient accumulation, as DDP's `no_sync`).
    pub fn set_sync(&self, sync: bool) -> Result<(), CommError> {
        // SAFETY: the unit is live.
        status(unsafe { kiln_unit_sync(self.0, c_int::from(sync)) })
    }
}

impl Drop for Unit {
    /// Gathered parameters keep their values, in storage of their own.
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once.
        unsafe { kiln_unit_free(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::super::c10d::tests::ranks;
    use super::*;
    use tch::{Device, Kind};

    /// A unit sharded over 3 ranks: each rank's shards are its slices of the parameters (the
    /// last padded); a backward pass that meets parameters released after its forward and
    /// gathered again by the hook gives the gradient it gives without, and once it has
    /// accumulated every parameter's gradient the unit reduces them: each rank's shards' `.grad`
    /// hold its slice of the ranks' summed gradients, and the parameters hold none; released
    /// parameters are gathered back to their values.
    #[test]
    fn units_shard_gather_and_reduce_scatter() {
        let out = ranks(3, |rank, g| {
            let a = Tensor::arange(5, (Kind::Float, Device::Cpu)).set_requires_grad(true);
            let b = (Tensor::arange(6, (Kind::Float, Device::Cpu)) * 10.0)
                .reshape([2, 3])
                .set_requires_grad(true);
            let (unit, shards) = Unit::new(
                g,
                &Pool::new().unwrap(),
                &[a.shallow_clone(), b.shallow_clone()],
            )
            .unwrap();
            let shard: Vec<Vec<f32>> = shards
                .iter()
                .map(|s| Vec::<f32>::try_from(&s.detach()).unwrap())
                .collect();
            // Forward saves `a` and `b`; they are released, then gathered when the gradient of
            // `h` arrives.
            let x = Tensor::full([2], rank as f64 + 1.0, (Kind::Float, Device::Cpu));
            let h = (&a * &a).sum(Kind::Float) * x.matmul(&b).sum(Kind::Float);
            unit.release().unwrap();
            unit.gather_on_grad(&h, None).unwrap();
            h.backward();
            assert!(!a.grad().defined() && !b.grad().defined());
            unit.reduce().unwrap();
            let reduced: Vec<Vec<f32>> = shards
                .iter()
                .map(|s| Vec::<f32>::try_from(&s.grad()).unwrap())
                .collect();
            unit.gather().unwrap();
            let back = Vec::<f32>::try_from(&b.detach().flatten(0, -1)).unwrap();
            (shard, reduced, back)
        });
        let slice = |v: &[f32], r: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| v.get(r * len + i).copied().unwrap_or(0.0))
                .collect()
        };
        let a: Vec<f32> = (0..5).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..6).map(|i| 10.0 * i as f32).collect();
        // On rank r, x = r + 1: d/da of (a·a)(x b 1) = 2a (x b 1), d/db = (a·a) x 1ᵀ. Summed
        // over the ranks, x is 1 + 2 + 3 = 6.
        let (bsum, asq) = (b.iter().sum::<f32>(), a.iter().map(|v| v * v).sum::<f32>());
        let sum_a: Vec<f32> = a.iter().map(|v| 2.0 * v * 6.0 * bsum).collect();
        let sum_b: Vec<f32> = vec![asq * 6.0; 6];
        for (rank, (shard, reduced, back)) in out.iter().enumerate() {
            assert_eq!(shard[0], slice(&a, rank, 2));
            assert_eq!(shard[1], slice(&b, rank, 2));
            assert_eq!(reduced[0], slice(&sum_a, rank, 2));
            assert_eq!(reduced[1], slice(&sum_b, rank, 2));
            assert_eq!(back, &b);
        }
    }
}
