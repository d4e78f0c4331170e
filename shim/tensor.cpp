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

}  // extern "C"
