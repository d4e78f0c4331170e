// Tensor parallel's two collectives as autograd functions over a c10d group, called from
// `src/runtime/dist/tensor.rs` (Megatron-LM's `f` and `g`, PyTorch's `ColwiseParallel` input and
// `RowwiseParallel` output):
//
// - `kiln_tp_enter`: the identity in forward; in backward the input's gradient summed over the
//   group. It stands before a layer split by its outputs (columns, heads): each rank's part of
//   the layer reads the whole input, so the input's gradient is the sum of the ranks' parts.
// - `kiln_tp_leave`: the sum over the group in forward (every rank holds its partial product of
//   a layer split by its inputs, rows); the identity in backward, since every rank's part of the
//   sum contributes to it with weight 1.
// - `kiln_tp_gather`: every rank's part laid side by side along the last dimension, in rank
//   order, in forward (the outputs of a layer split by its outputs, made whole); in backward
//   this rank's part of the gradient, which every rank holds whole.
//
// The group is the handle `kiln_group_new` made, which outlives every graph that reads it (the
// strategy that owns it drops the model's tensors first). Every function catches every exception
// and returns 0 on success or -1 with the message in `kiln_tp_last_error()`; an exception in a
// backward pass (a peer gone) reaches `backward()`'s caller as libtorch's error.

#include "c10d.h"
#include "guarded.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

template <typename F>
int guarded(F&& f) {
  return kiln::guarded(last_error, std::forward<F>(f));
}

// The group's sum of `t`, in place (`t` contiguous).
void sum(kiln::Group* g, at::Tensor& t) {
  std::vector<at::Tensor> ts{t};
  g->pg->allreduce(ts)->wait();
}

kiln::Group* group_of(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<kiln::Group*>(ctx->saved_data["group"].toInt());
}

struct Enter : public torch::autograd::Function<Enter> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor g = grads[0].contiguous().clone();
    sum(group_of(ctx), g);
    return {g, at::Tensor()};
  }
};

struct Leave : public torch::autograd::Function<Leave> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x,
                            int64_t group) {
    at::Tensor y = x.contiguous().clone();
    sum(reinterpret_cast<kiln::Group*>(group), y);
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct Gather : public torch::autograd::Function<Gather> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t group, int64_t rank, int64_t degree) {
    at::Tensor mine = x.contiguous();
    at::Tensor out = at::empty({degree * mine.numel()}, mine.options());
    at::Tensor flat = mine.view({-1});
    reinterpret_cast<kiln::Group*>(group)->pg->_allgather_base(out, flat)->wait();
    std::vector<int64_t> shape{degree};
    for (auto d : mine.sizes()) shape.push_back(d);
    std::vector<int64_t> whole(mine.sizes().begin(), mine.sizes().end());
    const int64_t part = whole.back();
    whole.back() = part * degree;
    ctx->saved_data["rank"] = rank;
    ctx->saved_data["part"] = part;
    return out.view(shape).movedim(0, -2).reshape(whole);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t rank = ctx->saved_data["rank"].toInt();
    const int64_t part = ctx->saved_data["part"].toInt();
    return {grads[0].narrow(-1, rank * part, part).contiguous(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

extern "C" {

const char* kiln_tp_last_error() { return last_error.c_str(); }

int kiln_tp_enter(void* g, void* x, void** out) {
  return guarded([&] {
    at::Tensor y = Enter::apply(*static_cast<at::Tensor*>(x), reinterpret_cast<int64_t>(g));
    *out = new at::Tensor(std::move(y));
  });
}

int kiln_tp_leave(void* g, void* x, void** out) {
  return guarded([&] {
    at::Tensor y = Leave::apply(*static_cast<at::Tensor*>(x), reinterpret_cast<int64_t>(g));
    *out = new at::Tensor(std::move(y));
  });
}

int kiln_tp_gather(void* g, void* x, int64_t rank, int64_t degree, void** out) {
  return guarded([&] {
    at::Tensor y = Gather::apply(*static_cast<at::Tensor*>(x), reinterpret_cast<int64_t>(g),
                                 rank, degree);
    *out = new at::Tensor(std::move(y));
  });
}

}  // extern "C"
