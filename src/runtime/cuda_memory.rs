//! A CUDA device's memory, read through the ATen shim (`shim/cuda.cpp`): its total, so that
//! `placement auto` can keep the data on a device whose capacity the experiment does not
//! declare, and the caching allocator's peak of allocated bytes over a run, which the report
//! shows beside the plan's estimate.

use std::ffi::c_int;

extern "C" {
    fn kiln_cuda_total_memory(index: c_int, total: *mut u64) -> c_int;
    fn kiln_cuda_reset_peak(index: c_int) -> c_int;
    fn kiln_cuda_peak_allocated(index: c_int, peak: *mut u64) -> c_int;
}

/// The total memory of CUDA device `index`, in bytes; `None` when it cannot be read (no such
/// device, or a build without CUDA's headers).
pub fn total_bytes(index: usize) -> Option<u64> {
    let index = c_int::try_from(index).ok()?;
    let mut total = 0u64;
    // SAFETY: the shim writes one u64 through the pointer, which lives for the call.
    let status = unsafe { kiln_cuda_total_memory(index, &mut total) };
    (status == 0).then_some(total)
}

/// Starts counting CUDA device `index`'s peak of allocated bytes afresh; whether it could.
pub fn reset_peak(index: usize) -> bool {
    let Ok(index) = c_int::try_from(index) else {
        return false;
    };
    // SAFETY: a plain call with an integer argument.
    unsafe { kiln_cuda_reset_peak(index) == 0 }
}

/// The most bytes allocated at once on CUDA device `index` since [`reset_peak`] (what
/// `torch.cuda.max_memory_allocated` reads); `None` when it cannot be read.
pub fn peak_bytes(index: usize) -> Option<u64> {
    let index = c_int::try_from(index).ok()?;
    let mut peak = 0u64;
    // SAFETY: the shim writes one u64 through the pointer, which lives for the call.
    let status = unsafe { kiln_cuda_peak_allocated(index, &mut peak) };
    (status == 0).then_some(peak)
}
