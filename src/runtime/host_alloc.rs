//! Kiln's allocator for host tensors (`shim/host.cpp`), in front of libtorch's CPU allocator
//! once one of its jobs is asked for: counting the bytes of the tensors alive (the memory
//! profile, [`super::host_memory`]) and mapping large blocks from the system (fully sharded data
//! parallel on the CPU).

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

/// From now on, CPU tensors of `bytes` or more are mapped from the system instead of taken from
/// the C allocator's heap, and kept when freed for the next tensor of the same size.
pub fn map_blocks_from(bytes: usize) {
    // SAFETY: installs Kiln's host allocator (once) and sets its threshold.
    unsafe { kiln_host_map_from(bytes) }
}
