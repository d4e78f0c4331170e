//! Kiln's allocator for host tensors (`shim/host.cpp`), in front of libtorch's CPU allocator
//! once one of its jobs is asked for: counting the bytes of the tensors alive (the memory
//! profile, [`super::host_memory`]) and mapping large blocks from the system (training on the
//! CPU).

extern "C" {
    fn kiln_host_count();
    fn kiln_host_reset_peak();
    fn kiln_host_counted(now: *mut u64, most: *mut u64);
    fn kiln_host_map_from(bytes: usize);
}

/// From now on, counts the CPU tensors allocated (those allocated before are not counted).
pub fn count() {
    // SAFETY: installs Kiln's host allocator (once) and turns its counting on.
    unsafe { kiln_host_count() }
}

/// Starts the peak of counted bytes afresh from the bytes alive now.
pub fn reset_peak() {
    // SAFETY: a plain call.
    unsafe { kiln_host_reset_peak() }
}

/// The bytes of the counted CPU tensors alive now, and their peak since the last reset.
pub fn counted() -> (u64, u64) {
    let (mut now, mut most) = (0, 0);
    // SAFETY: the shim writes one u64 through each pointer, which live for the call.
    unsafe { kiln_host_counted(&mut now, &mut most) };
    (now, most)
}

/// Host tensors of this many bytes or more are mapped by [`map_large_blocks`]: a training step's
/// activations, gradients and optimizer temporaries (fsdp's gathered units and gradients too)
/// for all but the smallest models; the rest stay on the C allocator's heap.
const MAPPED_FROM: usize = 1 << 20;

/// From now on, CPU tensors of [`MAPPED_FROM`] bytes or more are mapped from the system instead
/// of taken from the C allocator's heap, and kept when freed for the next tensors that fit
/// (`shim/host.cpp`): what is kept never takes the resident set more than the largest tensor
/// above the peak of the tensors alive at once. Called on the CPU once the model is built,
/// before the strategy takes it: what was allocated before (the data, the whole model that fsdp
/// shards and frees) keeps the heap; what the strategy makes (ddp's gradient buckets, which its
/// Reducer makes again after the first step; fsdp's shards and buffers) is mapped.
pub fn map_large_blocks() {
    // SAFETY: installs Kiln's host allocator (once) and sets its threshold.
    unsafe { kiln_host_map_from(MAPPED_FROM) }
}
