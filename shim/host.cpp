// Kiln's allocator for host tensors (`src/runtime/host_memory.rs`), in front of libtorch's CPU
// allocator, installed the first time one of its two jobs is asked for:
//
// - counting (`KILN_MEMORY_PROFILE`): the bytes of the tensors alive and their peak, so that the
//   plan's arithmetic (live tensors) can be told apart from what the C allocator keeps resident
//   around them;
// - mapping large blocks (training on the CPU): a block of `map_from` bytes or more is mapped
//   from the system, and its pages kept when it is freed, for the next blocks that fit: a kept
//   range serves the smallest request it holds (its rest stays kept) and merges with the kept
//   ranges beside it, as libtorch's CUDA caching allocator does with device memory. A new range
//   is mapped only when none fits (or only ranges twice as large, while there is room), after
//   unmapping kept ranges (the smallest first) until the mapped bytes, handed out and kept, are
//   within the most ever handed out at once plus the largest block asked for. So the pages kept
//   never take the resident set more than a block above the peak of what lives in them, and a
//   steady step faults its pages in once. From glibc's heap (`kiln-runtime` keeps blocks up to
//   256 MiB there), a step's activations and gradients, allocated and freed between blocks that
//   live longer, leave holes that keep the heap well above what lives in it (a recomputed block's
//   activations, made again in backward, saved a fifth of what they save in live tensors);
//   unmapping every block when freed cost a fifth of a small model's steps in page faults,
//   keeping blocks by exact size kept sizes the peak did not need, and a bound of the peak
//   alone had a 1 MiB block cut a 16 MiB range and the next 16 MiB block mapped afresh every
//   step (BENCHMARKS.md).
//
// Blocks allocated before it was installed keep their own deleters.

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

std::atomic<bool> counting{false};
std::atomic<size_t> map_from{0};
std::atomic<uint64_t> live{0};
std::atomic<uint64_t> peak{0};

// A block this allocator handed out itself (counted or mapped). Its context is its address, as
// libtorch's `raw_allocate` requires.
struct Block {
  size_t bytes;
  bool mapped;
  bool counted;
};
at::DeleterFnPtr behind_deleter = nullptr;

// The most bytes of freed mapped blocks kept for reuse.
constexpr size_t cache_limit = size_t{1} << 30;
// Mapped blocks are whole pages.
constexpr size_t page = 4096;

// The allocator's books, under one lock. Never destroyed: a tensor may be freed while the
// process exits, after static objects are gone.
struct Books {
  std::mutex lock;
  // The blocks handed out, by address.
  std::unordered_map<void*, Block> blocks;
  // The freed mapped ranges kept for reuse, by address and by size (then address), and their
  // bytes. Adjacent ranges are kept as one.
  std::map<char*, size_t> free_at;
  std::set<std::pair<size_t, char*>> free_by_size;
  size_t cached = 0;
  // The bytes of mapped blocks handed out, their most at once, and the largest block asked for.
  size_t in_use = 0;
  size_t most = 0;
  size_t widest = 0;
};
Books& books() {
  static auto* b = new Books();
  return *b;
}

// Keeps the range at `p` of `n` bytes for reuse (the lock held).
void keep(Books& k, char* p, size_t n) {
  k.cached += n;
  auto next = k.free_at.lower_bound(p);
  if (next != k.free_at.end() && p + n == next->first) {
    n += next->second;
    k.free_by_size.erase({next->second, next->first});
    next = k.free_at.erase(next);
  }
  if (next != k.free_at.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == p) {
      k.free_by_size.erase({prev->second, prev->first});
      p = prev->first;
      n += prev->second;
      k.free_at.erase(prev);
    }
  }
  k.free_at.emplace(p, n);
  k.free_by_size.emplace(n, p);
}

// Takes the kept range `r` (by size, then address) out of the books (the lock held).
void take(Books& k, std::pair<size_t, char*> r) {
  k.free_by_size.erase(r);
  k.free_at.erase(r.second);
  k.cached -= r.first;
}

void release(void* p) {
  Books& k = books();
  Block b{0, false, false};
  {
    std::lock_guard<std::mutex> guard(k.lock);
    auto it = k.blocks.find(p);
    if (it != k.blocks.end()) {
      b = it->second;
      k.blocks.erase(it);
    }
    if (b.mapped) {
      k.in_use -= b.bytes;
      if (k.cached + b.bytes <= cache_limit) {
        keep(k, static_cast<char*>(p), b.bytes);
        b.mapped = false;
        p = nullptr;
      }
    }
  }
  if (b.counted) live.fetch_sub(b.bytes);
  if (p == nullptr) return;
  if (b.mapped) {
    munmap(p, b.bytes);
  } else {
    behind_deleter(p);
  }
}

// A mapped block of `n` bytes (a multiple of the page): the front of the smallest kept range
// that holds it (the rest stays kept), or else a new one. A range of twice `n` or more is split
// only when mapping a new one would take the mapped bytes, handed out and kept, above their
// bound: the most ever handed out at once plus the largest block asked for. A small block then
// does not cut the front off a large range that a large block will want again (a 1 MiB
// activation out of a weight's 16 MiB gradient, which then had to be mapped afresh every
// step). Before mapping a new one, the smallest kept ranges are unmapped until the mapped bytes
// are within the bound: what is kept never takes the resident set more than one block above
// the peak of what lives in it.
void* mapped(size_t n) {
  Books& k = books();
  std::vector<std::pair<size_t, char*>> unmap;
  {
    std::lock_guard<std::mutex> guard(k.lock);
    k.in_use += n;
    k.most = std::max(k.most, k.in_use);
    k.widest = std::max(k.widest, n);
    const size_t bound = k.most + k.widest;
    auto fit = k.free_by_size.lower_bound({n, nullptr});
    if (fit != k.free_by_size.end() &&
        (fit->first < 2 * n || k.in_use + k.cached > bound)) {
      const auto r = *fit;
      take(k, r);
      if (r.first > n) keep(k, r.second + n, r.first - n);
      return r.second;
    }
    while (k.in_use + k.cached > bound) {
      unmap.push_back(*k.free_by_size.begin());
      take(k, unmap.back());
    }
  }
  for (const auto& r : unmap) munmap(r.second, r.first);
  void* data = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  // In the words of libtorch's own CPU allocator, which Kiln's diagnostics know.
  const int error = errno;
  if (data == MAP_FAILED) {
    std::lock_guard<std::mutex> guard(k.lock);
    k.in_use -= n;
  }
  TORCH_CHECK_WITH(OutOfMemoryError, data != MAP_FAILED,
                   "DefaultCPUAllocator: can't allocate memory: you tried to allocate ", n,
                   " bytes. Error code ", error, " (", std::strerror(error), ")");
  return data;
}

struct Host final : at::Allocator {
  at::Allocator* behind;
  explicit Host(at::Allocator* b) : behind(b) {}

  at::DataPtr allocate(size_t n) override {
    const size_t from = map_from.load();
    const bool count = counting.load();
    const bool map = from > 0 && n >= from;
    if (n == 0 || (!count && !map)) return behind->allocate(n);
    void* data = nullptr;
    size_t bytes = n;
    if (map) {
      bytes = (n + page - 1) / page * page;
      data = mapped(bytes);
    } else {
      auto block = behind->allocate(n);
      data = block.get();
      block.release_context();
    }
    {
      Books& k = books();
      std::lock_guard<std::mutex> guard(k.lock);
      k.blocks[data] = Block{bytes, map, count};
    }
    if (count) {
      const uint64_t now = live.fetch_add(bytes) + bytes;
      uint64_t seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
    }
    return {data, data, &release, at::Device(at::kCPU)};
  }

  at::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// Puts the allocator in front of libtorch's CPU allocator, once.
void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    static Host host(c10::GetCPUAllocator());
    behind_deleter = host.behind->raw_deleter();
    c10::SetCPUAllocator(&host, /*priority=*/100);
  });
}

}  // namespace

extern "C" {

// From now on, counts the CPU tensors allocated (those allocated before are not counted).
void kiln_host_count() {
  install();
  counting.store(true);
}

// Starts the peak afresh from the bytes alive now.
void kiln_host_reset_peak() { peak.store(live.load()); }

// The bytes of counted CPU tensors alive now, and their peak since the last reset.
void kiln_host_counted(uint64_t* now, uint64_t* most) {
  *now = live.load();
  *most = peak.load();
}

// From now on, maps CPU tensors of `bytes` or more from the system (kept for reuse when freed).
void kiln_host_map_from(size_t bytes) {
  install();
  map_from.store(bytes);
}

}  // extern "C"
