//! A CUDA device's memory, read through the ATen shim (`shim/optim.cpp`), so that `placement
//! auto` can keep the data on a device whose capacity the experiment does not declare.

use std::ffi::c_int;

extern "C" {
    fn kiln_cuda_total_memory(index: c_int, total: *mut u64) -> c_int;
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
