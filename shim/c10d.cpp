// Kiln's C interface to PyTorch's distributed engine (c10d): TCPStore, ProcessGroup (Gloo, and
// NCCL when built with it) and the Reducer, called from `src/runtime/dist/c10d.rs`; the units
// of fully sharded data parallel over a group are in `shim/unit.cpp`.
//
// Every function catches every exception (Gloo's are not c10::Error) and returns 0 on success
// or -1 with the message in `kiln_c10d_last_error()`; constructors return null on failure.
// Tensors cross as tch's handles, which are `at::Tensor*`.
//
// The shim instantiates no Gloo type: it only holds pointers and calls functions that libtorch
// exports, which is what makes Debian's Gloo headers safe to compile against (see build.rs and
// the link guard in tests/c10d.rs).

#include "c10d.h"
#include "guarded.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#ifdef KILN_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

// Runs `f`, turning any exception into -1 and a message.
template <typename F>
int guarded(F&& f) {
  return kiln::guarded(last_error, std::forward<F>(f));
}

struct Store {
  c10::intrusive_ptr<c10d::Store> store;
};

using kiln::Group;

// Member order is destruction order reversed: the logger goes before its reducer.
struct Reducer {
  std::shared_ptr<c10d::Reducer> reducer;
  std::shared_ptr<c10d::Logger> logger;
};

at::Tensor& tensor(void* p) { return *static_cast<at::Tensor*>(p); }

}  // namespace

extern "C" {

const char* kiln_c10d_last_error() { return last_error.c_str(); }

int kiln_c10d_has_nccl() {
#ifdef KILN_NCCL
  return 1;
#else
  return 0;
#endif
}

// Serves (`is_server`) or joins the store at `host:port`. A server takes over `listen_fd`, a
// socket already listening on `port` of the one address it may be reached at: left to itself,
// TCPStore would listen on every interface of the machine.
void* kiln_store_new(const char* host, uint16_t port, int is_server, int64_t world,
                     int64_t timeout_ms, int listen_fd) {
  Store* out = nullptr;
  guarded([&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server != 0;
    if (opts.isServer) {
      if (listen_fd < 0) throw std::runtime_error("a store server needs a listening socket");
      opts.masterListenFd = listen_fd;
    }
    // The server never blocks waiting for workers: arrival is checked key by key, so a rank
    // that never comes is named.
    opts.numWorkers = is_server ? std::optional<std::size_t>(world) : std::nullopt;
    opts.waitWorkers = false;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    out = new Store{store};
  });
  return out;
}

int kiln_store_set(void* s, const char* key, const uint8_t* value, size_t len) {
  return guarded([&] {
    static_cast<Store*>(s)->store->set(key, std::vector<uint8_t>(value, value + len));
  });
}

int kiln_store_get(void* s, const char* key, uint8_t** value, size_t* len) {
  return guarded([&] {
    auto v = static_cast<Store*>(s)->store->get(key);
    *len = v.size();
    *value = static_cast<uint8_t*>(std::malloc(v.size() + 1));
    if (*value == nullptr) throw std::bad_alloc();
    std::memcpy(*value, v.data(), v.size());
  });
}

void kiln_c10d_free_bytes(uint8_t* p) { std::free(p); }

int kiln_store_check(void* s, const char* const* keys, size_t n, int* all) {
  return guarded([&] {
    std::vector<std::string> k(keys, keys + n);
    *all = static_cast<Store*>(s)->store->check(k) ? 1 : 0;
  });
}

void kiln_store_free(void* s) { guarded([&] { delete static_cast<Store*>(s); }); }

// A process group of `world` ranks over the prefix `name` of `s` (one group per name: the whole
// run's, or one slice of a mesh dimension's, as `new_group` makes them). `backend`: 0 Gloo, 1 NCCL on CUDA
// device `device`. Gloo binds to `iface` when given (GLOO_SOCKET_IFNAME), else to `host` when
// given (the loopback address of a single-machine run), else to whatever this machine's
// hostname resolves to.
void* kiln_group_new(void* s, const char* name, int rank, int world, int backend, int device,
                     const char* iface, const char* host, int64_t timeout_ms) {
  Group* out = nullptr;
  guarded([&] {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::PrefixStore>(std::string(name),
                                                         static_cast<Store*>(s)->store);
    auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world);
    if (backend == 1) {
#ifdef KILN_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
      pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      (void)device;
#else
      (void)device;
      throw std::runtime_error("this build of Kiln has no NCCL (libtorch without CUDA)");
#endif
    } else {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      if (iface != nullptr && *iface != 0) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
      } else if (host != nullptr && *host != 0) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
      pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
      pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    }
    out = new Group{pg};
  });
  return out;
}

int kiln_group_allreduce(void* g, void* t) {
  return guarded([&] {
    std::vector<at::Tensor> ts{tensor(t)};
    static_cast<Group*>(g)->pg->allreduce(ts)->wait();
  });
}

// Every rank's `in` laid end to end, in rank order, into `out` (`world` times as long).
int kiln_group_allgather(void* g, void* out, void* in) {
  return guarded([&] {
    static_cast<Group*>(g)->pg->_allgather_base(tensor(out), tensor(in))->wait();
  });
}

int kiln_group_broadcast(void* g, void* t, int root) {
  return guarded([&] {
    std::vector<at::Tensor> ts{tensor(t)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    static_cast<Group*>(g)->pg->broadcast(ts, opts)->wait();
  });
}

// Shuts the group's backends down (what `destroy_process_group` does; NCCL warns of leaked
// resources otherwise), then frees it.
void kiln_group_free(void* g) {
  guarded([&] { static_cast<Group*>(g)->pg->shutdown(); });
  guarded([&] { delete static_cast<Group*>(g); });
}

// The Reducer's communication: each bucket summed over the ranks. Without a hook the Reducer
// divides every gradient by the world size as it copies it into its bucket, and the ranks' losses
// must be multiplied by it before backward: a factor that, unless a power of two, bf16's
// backward rounds differently from one process's. With this hook the bucket is the ranks' plain
// sum (PyTorch's internal `_AllReduceBySumCommHook`, which libtorch does not export), and each
// rank's loss is its share of the global batch's mean as it is.
class SumHook final : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  using CppCommHookInterface::CppCommHookInterface;
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<at::Tensor> tensors = {bucket.getBufferRef()};
    return state_->allreduce(tensors)->getFuture();
  }
};

// PyTorch's Reducer over `params`, bucketed as DistributedDataParallel does (a 1 MiB first
// bucket, then `cap_bytes`, in reverse order of the parameters). Checks first that every rank
// has parameters of the same number, shapes and types. Buckets are summed, not averaged
// (`SumHook`). With `stats`, DDP's own logger times every iteration's backward computation and
// communication (see `kiln_reducer_stats`).
void* kiln_reducer_new(void* g, void* const* params, size_t n, int64_t cap_bytes, int stats) {
  Reducer* out = nullptr;
  guarded([&] {
    auto pg = static_cast<Group*>(g)->pg;
    std::vector<at::Tensor> ps;
    for (size_t i = 0; i < n; i++) ps.push_back(tensor(params[i]));
    c10d::verify_params_across_processes(pg, ps, std::nullopt);
    const int64_t first = c10d::kDefaultFirstBucketBytes;
    std::vector<bool> sparse(ps.size(), false);
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(
        ps, {static_cast<size_t>(first), static_cast<size_t>(cap_bytes)}, sparse);
    (void)limits;
    std::reverse(buckets.begin(), buckets.end());
    auto r = std::make_shared<c10d::Reducer>(ps, buckets, pg, sparse, cap_bytes,
                                             /*find_unused_parameters=*/false,
                                             /*gradient_as_bucket_view=*/false,
                                             std::unordered_map<size_t, std::string>{}, first,
                                             /*skip_all_reduce_unused_params=*/false,
                                             /*use_python_reducer=*/false,
                                             /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
    r->register_comm_hook(std::make_unique<SumHook>(pg));
    std::shared_ptr<c10d::Logger> logger;
    if (stats) {
      logger = std::make_shared<c10d::Logger>(r);
      r->set_logger(logger);
      r->set_ddp_runtime_logging_sample_rate(1);
    }
    out = new Reducer{r, logger};
  });
  return out;
}

int kiln_reducer_prepare_forward(void* r) {
  return guarded([&] {
    auto* red = static_cast<Reducer*>(r);
    red->reducer->rebuild_buckets();
    // As DistributedDataParallel's forward: the previous iteration's timings are taken first.
    if (red->logger) red->logger->set_runtime_stats_and_log();
    red->reducer->prepare_for_forward();
  });
}

// DDP's averages over the timed iterations, in nanoseconds: backward computation, the
// gradients' communication, and the part of the communication that ran while backward was
// still computing. Fails when the reducer was made without `stats`.
int kiln_reducer_stats(void* r, int64_t* out) {
  return guarded([&] {
    auto* red = static_cast<Reducer*>(r);
    if (!red->logger) throw std::runtime_error("the reducer keeps no timings");
    auto data = red->logger->get_ddp_logging_data();
    out[0] = data.ints_map["avg_backward_compute_time"];
    out[1] = data.ints_map["avg_backward_comm_time"];
    out[2] = data.ints_map["avg_backward_compute_comm_overlap_time"];
  });
}

int kiln_reducer_prepare_backward(void* r) {
  return guarded([&] { static_cast<Reducer*>(r)->reducer->prepare_for_backward({}); });
}

void kiln_reducer_free(void* r) { guarded([&] { delete static_cast<Reducer*>(r); }); }

}  // extern "C"
