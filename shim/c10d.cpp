// The only code in Kiln that touches PyTorch's distributed engine (c10d): a C interface over
// TCPStore, ProcessGroup (Gloo, and NCCL when built with it), the Reducer, and the units of
// fully sharded data parallel (gathered with `_allgather_base`, their gradients reduced with
// `_reduce_scatter_base`, or on the CPU with `alltoall_base` and a sum), called from
// `src/runtime/dist/c10d.rs`.
//
// Every function catches every exception (Gloo's are not c10::Error) and returns 0 on success
// or -1 with the message in `kiln_c10d_last_error()`; constructors return null on failure.
// Tensors cross as tch's handles, which are `at::Tensor*`.
//
// The shim instantiates no Gloo type: it only holds pointers and calls functions that libtorch
// exports, which is what makes Debian's Gloo headers safe to compile against (see build.rs and
// the link guard in tests/c10d.rs).

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

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <deque>
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

struct Group {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
};

// Member order is destruction order reversed: the logger goes before its reducer.
struct Reducer {
  std::shared_ptr<c10d::Reducer> reducer;
  std::shared_ptr<c10d::Logger> logger;
};

at::Tensor& tensor(void* p) { return *static_cast<at::Tensor*>(p); }

// A unit of fully sharded data parallel: parameters gathered and freed together. Each parameter
// of `numel` values is cut into `world` shards of `ceil(numel / world)` values (the last padded
// with zeros); this rank keeps shard `rank` of each, flat, in `shards`. One all-gather of the
// shards laid end to end fills every parameter; one reduce-scatter of the gradients laid out the
// same way gives this rank its part of their sum, added to `grads`, of which each shard's `.grad`
// is a view. Once backward has accumulated the gradient of every parameter of the unit, a hook
// on each parameter's gradient accumulator reduces them and frees the parameters.
struct Unit : std::enable_shared_from_this<Unit> {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::vector<at::Tensor> params;
  // This rank's shards, each a piece of `flat` (laid end to end, as the all-gather sends them).
  std::vector<at::Tensor> shards;
  at::Tensor flat;
  // Each shard's length; `total` is their sum.
  std::vector<int64_t> lengths;
  int64_t total = 0;
  int64_t world = 1;
  int64_t rank = 0;
  at::Tensor grads;
  // Whether the parameters hold their values now (else their storage is empty).
  bool gathered = true;
  // An all-gather under way (started by `prefetch`) and the buffer it fills.
  c10::intrusive_ptr<c10d::Work> gathering;
  at::Tensor gathered_rows;
  // A reduce-scatter under way (started by the hook), with its input and output, which `finish`
  // adds to `grads`.
  c10::intrusive_ptr<c10d::Work> reducing;
  at::Tensor reduced_input;
  at::Tensor reduced_part;
  // Parameters whose gradient this backward pass has accumulated so far.
  size_t accumulated = 0;
  // Whether the hook reduces the gradients and frees the parameters (false: a micro-batch of
  // gradient accumulation that keeps both whole until a later backward pass).
  bool sync = true;
};

// The units whose reduce-scatter was started last, oldest first (on the thread of the backward
// pass that started them).
thread_local std::deque<std::weak_ptr<Unit>> in_flight;

// Sets the size of `t`'s storage: 0 frees its memory (every view of it, and every tensor autograd
// saved that shares it, then has none); `nbytes` allocates it again, uninitialised.
void resize_storage(const at::Tensor& t, size_t nbytes) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == nbytes) return;
  at::Allocator* allocator = impl->allocator();
  if (allocator == nullptr) allocator = c10::GetAllocator(t.device().type());
  if (nbytes == 0) {
    impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  } else {
    impl->set_data_ptr_noswap(allocator->allocate(nbytes));
  }
  impl->set_nbytes(nbytes);
}

// `t` flat, padded with zeros to `world * length` values.
at::Tensor padded(const at::Tensor& t, int64_t world, int64_t length) {
  auto flat = t.reshape({-1});
  return at::constant_pad_nd(flat, {0, world * length - flat.numel()});
}

// Starts the all-gather of the unit's shards, unless the parameters are gathered or a gather is
// under way; `gather` waits for it.
void prefetch(Unit& u) {
  if (u.gathered || u.gathering || u.world == 1) return;
  at::NoGradGuard no_grad;
  u.gathered_rows = at::empty({u.world * u.total}, u.flat.options());
  u.gathering = u.pg->_allgather_base(u.gathered_rows, u.flat);
}

void gather(Unit& u) {
  if (u.gathered) return;
  at::NoGradGuard no_grad;
  prefetch(u);
  at::Tensor output = u.flat;
  if (u.gathering) {
    u.gathering->wait();
    output = u.gathered_rows;
    u.gathering.reset();
    u.gathered_rows = at::Tensor();
  }
  for (auto& p : u.params) resize_storage(p, p.numel() * p.element_size());
  auto rows = output.view({u.world, u.total});
  int64_t at = 0;
  for (size_t i = 0; i < u.params.size(); i++) {
    auto& p = u.params[i];
    const int64_t length = u.lengths[i];
    auto column = rows.narrow(1, at, length);
    at += length;
    // Written through an alias of the parameter's storage, which has a version counter of its
    // own: what autograd saved of the parameter is refilled, not modified in place.
    auto alias = at::empty({0}, p.options());
    alias.set_(p.storage(), p.storage_offset(), {p.numel()}, {1});
    // The full rows of the column at once, then the part of a row the parameter ends in.
    const int64_t n = p.numel();
    const int64_t full = n / length;
    const int64_t rest = n - full * length;
    if (full > 0) {
      alias.narrow(0, 0, full * length).view({full, length}).copy_(column.narrow(0, 0, full));
    }
    if (rest > 0) alias.narrow(0, full * length, rest).copy_(column[full].narrow(0, 0, rest));
  }
  u.gathered = true;
}

// Waits for the unit's reduce-scatter under way, if any, and adds this rank's part to `grads`.
void finish(Unit& u) {
  if (!u.reducing) return;
  u.reducing->wait();
  u.reducing.reset();
  at::NoGradGuard no_grad;
  if (u.reduced_part.numel() == u.total) {
    u.grads.add_(u.reduced_part);
  } else {
    // Every rank's chunk for this rank, one row each, in rank order: their sum.
    auto rows = u.reduced_part.view({u.world, u.total});
    for (int64_t r = 0; r < u.world; r++) u.grads.add_(rows[r]);
  }
  u.reduced_input = at::Tensor();
  u.reduced_part = at::Tensor();
}

void release(Unit& u) {
  for (auto& p : u.params) resize_storage(p, 0);
  u.gathered = false;
  u.accumulated = 0;
}

// Starts the reduce-scatter of the sum of every rank's gradients of the unit's parameters (a
// parameter without one counts as zeros), whose part for this rank `finish` adds to its shards'
// `.grad`, and unsets the parameters' gradients.
void reduce(Unit& u) {
  at::NoGradGuard no_grad;
  auto flat = at::empty({u.world, u.total}, u.grads.options());
  int64_t at = 0;
  for (size_t i = 0; i < u.params.size(); i++) {
    const int64_t length = u.lengths[i];
    auto column = flat.narrow(1, at, length);
    at += length;
    const auto& g = u.params[i].grad();
    if (!g.defined()) {
      column.zero_();
      continue;
    }
    // Row r of the column is rank r's shard of the gradient: the full rows copied at once, then
    // the part of a row the gradient ends in, then zeros.
    auto values = g.reshape({-1});
    const int64_t n = values.numel();
    const int64_t full = n / length;
    const int64_t rest = n - full * length;
    if (full > 0) {
      column.narrow(0, 0, full).copy_(values.narrow(0, 0, full * length).view({full, length}));
    }
    if (full < u.world) {
      auto row = column.select(0, full);
      if (rest > 0) row.narrow(0, 0, rest).copy_(values.narrow(0, full * length, rest));
      row.narrow(0, rest, length - rest).zero_();
      if (full + 1 < u.world) column.narrow(0, full + 1, u.world - full - 1).zero_();
    }
  }
  auto input = flat.view({-1});
  for (auto& p : u.params) p.mutable_grad() = at::Tensor();
  if (u.world == 1) {
    u.grads.add_(input);
    return;
  }
  finish(u);
  // At most two reductions in flight: each holds a flat copy of its unit's gradients.
  while (in_flight.size() >= 2) {
    if (auto other = in_flight.front().lock()) finish(*other);
    in_flight.pop_front();
  }
  u.reduced_input = input;
  if (input.is_cpu()) {
    // Gloo's reduce-scatter all-reduces the whole buffer (a copy of it) and keeps a chunk; an
    // all-to-all sends each rank only its chunk, which `finish` sums: half the traffic.
    u.reduced_part = at::empty({u.world * u.total}, u.grads.options());
    std::vector<int64_t> equal;
    u.reducing = u.pg->alltoall_base(u.reduced_part, u.reduced_input, equal, equal);
  } else {
    u.reduced_part = at::empty({u.total}, u.grads.options());
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    u.reducing = u.pg->_reduce_scatter_base(u.reduced_part, u.reduced_input, opts);
  }
  in_flight.push_back(u.weak_from_this());
}

// Counts the unit's parameters whose gradient backward has accumulated; at the last, reduces
// the gradients and frees the parameters (nothing in backward reads them after that: every
// node that uses a parameter's values gives it a gradient, so it ran before the accumulation).
struct Accumulated : torch::autograd::PostAccumulateGradHook {
  std::weak_ptr<Unit> unit;
  explicit Accumulated(std::weak_ptr<Unit> u) : unit(std::move(u)) {}
  void operator()(const torch::autograd::Variable&) override {
    auto u = unit.lock();
    if (!u) return;
    if (++u->accumulated < u->params.size()) return;
    u->accumulated = 0;
    if (!u->sync) return;
    reduce(*u);
    release(*u);
  }
};

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

// A process group of `world` ranks over a prefix of `s`. `backend`: 0 Gloo, 1 NCCL on CUDA
// device `device`. Gloo binds to `iface` when given (GLOO_SOCKET_IFNAME), else to `host` when
// given (the loopback address of a single-machine run), else to whatever this machine's
// hostname resolves to.
void* kiln_group_new(void* s, int rank, int world, int backend, int device, const char* iface,
                     const char* host, int64_t timeout_ms) {
  Group* out = nullptr;
  guarded([&] {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::PrefixStore>("default_pg",
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

// PyTorch's Reducer over `params`, bucketed as DistributedDataParallel does (a 1 MiB first
// bucket, then `cap_bytes`, in reverse order of the parameters). Checks first that every rank
// has parameters of the same number, shapes and types. With `stats`, DDP's own logger times
// every iteration's backward computation and communication (see `kiln_reducer_stats`).
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

// A unit of the `n` parameters `params` (every rank's hold the same values) on the group `g`:
// this rank's shard of each is written to `shards[i]` (a new tensor handle for the caller), a
// flat fp32 tensor that requires grad, whose `.grad` is a view of the unit's gradient buffer.
// The parameters stay as they are (gathered).
void* kiln_unit_new(void* g, void* const* params, size_t n, void** shards) {
  std::shared_ptr<Unit>* out = nullptr;
  guarded([&] {
    auto pg = static_cast<Group*>(g)->pg;
    auto u = std::make_shared<Unit>();
    u->pg = pg;
    u->world = pg->getSize();
    u->rank = pg->getRank();
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < n; i++) {
      auto p = tensor(params[i]);
      int64_t length = (p.numel() + u->world - 1) / u->world;
      u->params.push_back(p);
      u->lengths.push_back(length);
      u->total += length;
    }
    auto options = n > 0 ? u->params[0].options() : at::TensorOptions(at::kFloat);
    options = options.dtype(at::kFloat);
    u->flat = at::empty({u->total}, options);
    u->grads = at::zeros({u->total}, options);
    int64_t at = 0;
    for (size_t i = 0; i < n; i++) {
      const int64_t length = u->lengths[i];
      auto mine = padded(u->params[i].detach(), u->world, length).narrow(0, u->rank * length, length);
      // A shard is a piece of `flat` that autograd sees as a leaf of its own.
      auto shard = u->flat.narrow(0, at, length).detach();
      shard.copy_(mine);
      shard.set_requires_grad(true);
      shard.mutable_grad() = u->grads.narrow(0, at, length);
      u->shards.push_back(shard);
      shards[i] = new at::Tensor(shard);
      at += length;
    }
    for (auto& p : u->params) {
      torch::autograd::impl::set_post_acc_grad_hooks(
          p, std::make_unique<Accumulated>(std::weak_ptr<Unit>(u)));
    }
    out = new std::shared_ptr<Unit>(u);
  });
  return out;
}

// Gathers the unit's parameters from every rank's shards (nothing when they are gathered).
int kiln_unit_gather(void* u) {
  return guarded([&] { gather(**static_cast<std::shared_ptr<Unit>*>(u)); });
}

// Starts gathering the unit's parameters, for a `kiln_unit_gather` to come.
int kiln_unit_prefetch(void* u) {
  return guarded([&] { prefetch(**static_cast<std::shared_ptr<Unit>*>(u)); });
}

// Frees the memory of the unit's parameters (and of what autograd saved of them).
int kiln_unit_release(void* u) {
  return guarded([&] { release(**static_cast<std::shared_ptr<Unit>*>(u)); });
}

// Gathers the unit's parameters again when the gradient of `out` (an output of the unit's
// forward pass, which requires grad) arrives in backward, before the unit's own backward runs,
// and starts gathering `before` (the unit that ran before it, or null), which backward reaches
// next. A failure there fails the backward pass with its message.
int kiln_unit_gather_on_grad(void* u, void* out, void* before) {
  return guarded([&] {
    std::shared_ptr<Unit> unit = *static_cast<std::shared_ptr<Unit>*>(u);
    std::weak_ptr<Unit> next;
    if (before != nullptr) next = *static_cast<std::shared_ptr<Unit>*>(before);
    tensor(out).register_hook([unit, next](const at::Tensor&) {
      gather(*unit);
      if (auto n = next.lock()) prefetch(*n);
    });
  });
}

// Reduces the gradients the unit's parameters still hold (those of a backward pass that did not
// reach every parameter of the unit), as the hook does, and waits for the unit's reductions under
// way: after it, the shards' `.grad` hold every reduced gradient.
int kiln_unit_reduce(void* u) {
  return guarded([&] {
    auto& unit = **static_cast<std::shared_ptr<Unit>*>(u);
    bool any = false;
    for (auto& p : unit.params) any = any || p.grad().defined();
    if (any) reduce(unit);
    finish(unit);
    unit.accumulated = 0;
  });
}

// Whether the next backward passes reduce the unit's gradients and free its parameters once
// they are accumulated (`sync` 1), or leave both whole (0), as DDP's `no_sync` for gradient
// accumulation.
int kiln_unit_sync(void* u, int sync) {
  return guarded([&] { (*static_cast<std::shared_ptr<Unit>*>(u))->sync = sync != 0; });
}

// Unsets the hooks on the parameters' gradient accumulators, then frees the unit.
void kiln_unit_free(void* u) {
  guarded([&] {
    auto* unit = static_cast<std::shared_ptr<Unit>*>(u);
    for (auto& p : (*unit)->params) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
    delete unit;
  });
}

}  // extern "C"
