// What a run reads of a CUDA device through ATen (`src/runtime/cuda_memory.rs`): its total
// memory, and the caching allocator's peak of allocated bytes since it was last reset. Compiled
// with CUDA's headers where this libtorch has CUDA (`KILN_CUDA`); without them every function
// returns -1. 0 on success, -1 with the message in `kiln_cuda_last_error()`.

#include "guarded.h"

#ifdef KILN_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <cstdint>
#include <string>

namespace {

thread_local std::string last_error;

template <typename F>
int guarded(F&& f) {
#ifdef KILN_CUDA
  return kiln::guarded(last_error, std::forward<F>(f));
#else
  (void)f;
  last_error = "built without CUDA's headers";
  return -1;
#endif
}

}  // namespace

extern "C" {

const char* kiln_cuda_last_error() { return last_error.c_str(); }

// The total memory of CUDA device `index`, in bytes, into `total`.
int kiln_cuda_total_memory(int index, uint64_t* total) {
  return guarded([&] {
#ifdef KILN_CUDA
    *total = at::cuda::getDeviceProperties(index)->totalGlobalMem;
#endif
  });
}

// Starts counting the peak of allocated bytes on CUDA device `index` afresh.
int kiln_cuda_reset_peak(int index) {
  return guarded([&] {
#ifdef KILN_CUDA
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
#endif
  });
}

// The most bytes allocated at once on CUDA device `index` since the last reset (what
// `torch.cuda.max_memory_allocated` reads), into `peak`.
int kiln_cuda_peak_allocated(int index, uint64_t* peak) {
  return guarded([&] {
#ifdef KILN_CUDA
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
    auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *peak = static_cast<uint64_t>(stats.allocated_bytes[all].peak);
#endif
  });
}

}  // extern "C"
