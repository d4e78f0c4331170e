// The units of fully sharded data parallel over a c10d process group (`shim/c10d.h`), called
// from `src/runtime/dist/unit.rs`: parameters gathered with `_allgather_base`, their gradients
// reduced with `_reduce_scatter_base`, or on the CPU with `alltoall_base` and a sum, and the
// pool of buffers the units of one run share.
//
// Every function catches every exception and returns 0 on success or -1 with the message in
// `kiln_unit_last_error()`; constructors return null on failure. Tensors cross as tch's handles,
// which are `at::Tensor*`.

#include "c10d.h"
#include "guarded.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

thread_local std::string last_error;

template <typename F>
int guarded(F&& f) {
  return kiln::guarded(last_error, std::forward<F>(f));
}

at::Tensor& tensor(void* p) { return *static_cast<at::Tensor*>(p); }

// Flat host buffers that the units of one run take for a gather or a reduction and give back
// after it, reused by size: a step allocates nothing for them once the first has run, and the
// C allocator never holds freed blocks of them (in which other allocations would leave holes
// that keep the heap at several times the size of what lives in it). On a GPU, CUDA's caching
// allocator already keeps its blocks, and only it knows which stream still reads one: there a
// buffer is allocated and freed as any tensor.
struct Pool {
  std::mutex lock;
  std::map<std::pair<int64_t, at::ScalarType>, std::vector<at::Tensor>> free;

  at::Tensor take(int64_t numel, const at::TensorOptions& options) {
    if (options.device().is_cpu()) {
      std::lock_guard<std::mutex> guard(lock);
      auto it = free.find({numel, options.dtype().toScalarType()});
      if (it != free.end() && !it->second.empty()) {
        at::Tensor t = std::move(it->second.back());
        it->second.pop_back();
        return t;
      }
    }
    return at::empty({numel}, options);
  }

  // Gives back a buffer `take` gave, which nothing reads or writes any more; unsets `t`.
  void give(at::Tensor& t) {
    if (t.defined() && t.is_cpu()) {
      std::lock_guard<std::mutex> guard(lock);
      free[{t.numel(), t.scalar_type()}].push_back(std::move(t));
    }
    t = at::Tensor();
  }
};

// Where a gathered parameter starts in its unit's buffer: byte offsets aligned to 64, as the
// CPU allocator aligns a tensor of its own.
constexpr int64_t alignment = 64;

// A unit of fully sharded data parallel: parameters gathered and freed together. Each parameter
// of `numel` values is cut into `world` shards of `ceil(numel / world)` values (the last padded
// with zeros); this rank keeps shard `rank` of each, flat, in `shards`. One all-gather of the
// shards laid end to end fills every parameter; one reduce-scatter of the gradients laid out the
// same way gives this rank its part of their sum, added to `grads`, of which each shard's `.grad`
// is a view. Once backward has accumulated the gradient of every parameter of the unit, a hook
// on each parameter's gradient accumulator frees the parameters and reduces the gradients.
struct Unit : std::enable_shared_from_this<Unit> {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::shared_ptr<Pool> pool;
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
  // Whether the parameters hold their values now (else their storage is empty), and the pool's
  // buffer their storage lies in (each parameter at its offset in bytes), while gathered.
  bool gathered = true;
  at::Tensor held;
  std::vector<int64_t> offsets;
  int64_t held_bytes = 0;
  // An all-gather under way (started by `prefetch`), the buffer it fills and, on the CPU, the
  // one it sends.
  c10::intrusive_ptr<c10d::Work> gathering;
  at::Tensor gathered_rows;
  at::Tensor sent_rows;
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

// Points `t`'s storage at `data` (which `t` does not own), `nbytes` long; null frees what it
// held. Every view of the storage, and every tensor autograd saved that shares it, follows.
void point_storage(const at::Tensor& t, void* data, size_t nbytes) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(data, t.device()));
  impl->set_nbytes(data == nullptr ? 0 : nbytes);
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
  u.gathered_rows = u.pool->take(u.world * u.total, u.flat.options());
  if (u.flat.is_cpu()) {
    // Gloo's all-gather allocates two buffers as large as its output for every call (outside
    // the pool, in the middle of a step); an all-to-all of the shards, one copy for each rank,
    // moves the same bytes and allocates none.
    u.sent_rows = u.pool->take(u.world * u.total, u.flat.options());
    u.sent_rows.view({u.world, u.total}).copy_(u.flat.unsqueeze(0).expand({u.world, u.total}));
    std::vector<int64_t> equal;
    u.gathering = u.pg->alltoall_base(u.gathered_rows, u.sent_rows, equal, equal);
  } else {
    u.gathering = u.pg->_allgather_base(u.gathered_rows, u.flat);
  }
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
    u.pool->give(u.sent_rows);
  }
  u.held = u.pool->take(u.held_bytes, u.flat.options().dtype(at::kByte));
  auto* base = static_cast<char*>(u.held.data_ptr());
  for (size_t i = 0; i < u.params.size(); i++) {
    auto& p = u.params[i];
    point_storage(p, base + u.offsets[i], p.numel() * p.element_size());
  }
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
  u.pool->give(u.gathered_rows);
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
  u.pool->give(u.reduced_input);
  u.pool->give(u.reduced_part);
}

void release(Unit& u) {
  for (auto& p : u.params) point_storage(p, nullptr, 0);
  u.pool->give(u.held);
  u.gathered = false;
  u.accumulated = 0;
}

// Gives the parameters storage of their own with the values they hold (when gathered), so that
// they outlive the unit and its pool.
void own(Unit& u) {
  if (!u.held.defined()) return;
  at::NoGradGuard no_grad;
  for (auto& p : u.params) {
    auto copy = p.detach().clone();
    auto block = copy.storage().unsafeGetStorageImpl()->set_data_ptr(at::DataPtr(nullptr, p.device()));
    p.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(block));
  }
  u.pool->give(u.held);
}

// Starts the reduce-scatter of the sum of every rank's gradients of the unit's parameters (a
// parameter without one counts as zeros), whose part for this rank `finish` adds to its shards'
// `.grad`, and unsets the parameters' gradients.
void reduce(Unit& u) {
  at::NoGradGuard no_grad;
  finish(u);
  // At most two reductions in flight, this one included: each holds a flat copy of its unit's
  // gradients (and, on the CPU, a buffer as large for what the other ranks send).
  while (in_flight.size() >= 2) {
    if (auto other = in_flight.front().lock()) finish(*other);
    in_flight.pop_front();
  }
  auto flat = u.pool->take(u.world * u.total, u.grads.options());
  auto rows = flat.view({u.world, u.total});
  int64_t at = 0;
  for (size_t i = 0; i < u.params.size(); i++) {
    const int64_t length = u.lengths[i];
    auto column = rows.narrow(1, at, length);
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
    u.params[i].mutable_grad() = at::Tensor();
  }
  if (u.world == 1) {
    u.grads.add_(flat);
    u.pool->give(flat);
    return;
  }
  u.reduced_input = flat;
  if (flat.is_cpu()) {
    // Gloo's reduce-scatter all-reduces the whole buffer (a copy of it) and keeps a chunk; an
    // all-to-all sends each rank only its chunk, which `finish` sums: half the traffic.
    u.reduced_part = u.pool->take(u.world * u.total, u.grads.options());
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

// Counts the unit's parameters whose gradient backward has accumulated; at the last, frees the
// parameters and reduces the gradients (nothing in backward reads the parameters after that:
// every node that uses a parameter's values gives it a gradient, so it ran before the
// accumulation).
struct Accumulated : torch::autograd::PostAccumulateGradHook {
  std::weak_ptr<Unit> unit;
  explicit Accumulated(std::weak_ptr<Unit> u) : unit(std::move(u)) {}
  void operator()(const torch::autograd::Variable&) override {
    auto u = unit.lock();
    if (!u) return;
    if (++u->accumulated < u->params.size()) return;
    u->accumulated = 0;
    if (!u->sync) return;
    release(*u);
    reduce(*u);
  }
};

}  // namespace

extern "C" {

const char* kiln_unit_last_error() { return last_error.c_str(); }

// A pool of buffers for the units of one run (see `Pool`).
void* kiln_pool_new() {
  std::shared_ptr<Pool>* out = nullptr;
  guarded([&] { out = new std::shared_ptr<Pool>(std::make_shared<Pool>()); });
  return out;
}

// Drops the caller's hold on the pool; its buffers go when the last unit using it goes.
void kiln_pool_free(void* pool) {
  guarded([&] { delete static_cast<std::shared_ptr<Pool>*>(pool); });
}

// A unit of the `n` parameters `params` (every rank's hold the same values) on the group `g`,
// taking its buffers from `pool`: this rank's shard of each is written to `shards[i]` (a new
// tensor handle for the caller), a flat fp32 tensor that requires grad, whose `.grad` is a view
// of the unit's gradient buffer. The parameters stay as they are (gathered).
void* kiln_unit_new(void* g, void* pool, void* const* params, size_t n, void** shards) {
  std::shared_ptr<Unit>* out = nullptr;
  guarded([&] {
    auto u = std::make_shared<Unit>();
    u->pg = static_cast<kiln::Group*>(g)->pg;
    u->pool = *static_cast<std::shared_ptr<Pool>*>(pool);
    u->world = u->pg->getSize();
    u->rank = u->pg->getRank();
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < n; i++) {
      auto p = tensor(params[i]);
      int64_t length = (p.numel() + u->world - 1) / u->world;
      u->params.push_back(p);
      u->lengths.push_back(length);
      u->total += length;
      u->offsets.push_back(u->held_bytes);
      const int64_t bytes = p.numel() * p.element_size();
      u->held_bytes += (bytes + alignment - 1) / alignment * alignment;
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

// Unsets the hooks on the parameters' gradient accumulators, gives gathered parameters storage
// of their own, then frees the unit.
void kiln_unit_free(void* u) {
  guarded([&] {
    auto* unit = static_cast<std::shared_ptr<Unit>*>(u);
    for (auto& p : (*unit)->params) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
    own(**unit);
    delete unit;
  });
}

}  // extern "C"
