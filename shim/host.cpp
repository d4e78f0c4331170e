// Kiln's allocator for host tensors (`src/runtime/host_memory.rs`), in front of libtorch's CPU
// allocator, installed the first time one of its two jobs is asked for:
//
// - counting (`KILN_MEMORY_PROFILE`): the bytes of the tensors alive and their peak, so that the
//   plan's arithmetic (live tensors) can be told apart from what the C allocator keeps resident
//   around them;
// - mapping large blocks (fully sharded data parallel on the CPU): a block of `map_from` bytes or
//   more is mapped from the system, and kept when freed for the next block of the same size
//   (up to `cache_limit` bytes kept; beyond, unmapped). Such a run allocates and frees a
//   gradient as large as each parameter every step, between buffers that live longer; from
//   glibc's heap (`kiln-runtime` keeps blocks up to 256 MiB there) they leave holes that keep
//   the heap well above what lives in it. Mapped and reused by size, they hold what the step
//   needs at once and fault their pages in once (unmapping them when freed cost a fifth of a
//   small model's steps in page faults).
//
// Blocks allocated before it was installed keep their own deleters.

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

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

// The allocator's books, under one lock: its blocks by address, the freed mapped blocks kept by
// size, and their bytes. Never destroyed: a tensor may be freed while the process exits, after
// static objects are gone.
struct Books {
  std::mutex lock;
  std::unordered_map<void*, Block> blocks;
  std::unordered_multimap<size_t, void*> cache;
  size_t cached = 0;
};
Books& books() {
  static auto* b = new Books();
  return *b;
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
  }
  if (b.counted) live.fetch_sub(b.bytes);
  if (!b.mapped) {
    behind_deleter(p);
    return;
  }
  {
    std::lock_guard<std::mutex> guard(k.lock);
    if (k.cached + b.bytes <= cache_limit) {
      k.cache.emplace(b.bytes, p);
      k.cached += b.bytes;
      return;
    }
  }
  munmap(p, b.bytes);
}

// A mapped block of `n` bytes that was freed, or null.
void* reuse(size_t n) {
  Books& k = books();
  std::lock_guard<std::mutex> guard(k.lock);
  auto it = k.cache.find(n);
  if (it == k.cache.end()) return nullptr;
  void* p = it->second;
  k.cache.erase(it);
  k.cached -= n;
  return p;
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
    if (map) {
      data = reuse(n);
      if (data == nullptr) {
        data = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        TORCH_CHECK_WITH(OutOfMemoryError, data != MAP_FAILED,
                         "DefaultCPUAllocator: not enough memory: you tried to allocate ", n,
                         " bytes.");
      }
    } else {
      auto block = behind->allocate(n);
      data = block.get();
      block.release_context();
    }
    {
      Books& k = books();
      std::lock_guard<std::mutex> guard(k.lock);
      k.blocks[data] = Block{n, map, count};
    }
    if (count) {
      const uint64_t now = live.fetch_add(n) + n;
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
