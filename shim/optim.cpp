// ATen calls tch does not generate, behind a C interface: the fused optimizer kernels
// (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, called from `src/runtime/optim/fused.rs`),
// which update every parameter of a list in one kernel per tensor (CPU) or in multi-tensor
// launches (CUDA), as `torch.optim.Adam(..., fused=True)` does; and unsetting gradients.
//
// Every function catches every exception and returns 0 on success or -1 with the message in
// `kiln_optim_last_error()`. Tensors cross as tch's handles, which are `at::Tensor*`.

#include "guarded.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdint>

#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

template <typename F>
int guarded(F&& f) {
  return kiln::guarded(last_error, std::forward<F>(f));
}

std::vector<at::Tensor> list(at::Tensor** ts, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*ts[i]);
  return out;
}

}  // namespace

extern "C" {

const char* kiln_optim_last_error() { return last_error.c_str(); }

// One Adam (`decoupled` 0) or AdamW (1) step of `n` parameters on one device and dtype.
// `steps` holds each parameter's step count after this step, as a float32 scalar on its device;
// `max_exp_avg_sqs` holds `n` tensors with `amsgrad`, none without.
int kiln_fused_adam(int decoupled, at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs,
                    at::Tensor** exp_avg_sqs, at::Tensor** max_exp_avg_sqs, at::Tensor** steps,
                    size_t n, double lr, double beta1, double beta2, double weight_decay,
                    double eps, int amsgrad) {
  return guarded([&] {
    c10::NoGradGuard no_grad;
    auto p = list(params, n);
    auto g = list(grads, n);
    auto m = list(exp_avgs, n);
    auto v = list(exp_avg_sqs, n);
    auto vmax = list(max_exp_avg_sqs, amsgrad ? n : 0);
    auto s = list(steps, n);
    if (decoupled) {
      at::_fused_adamw_(p, g, m, v, vmax, s, lr, beta1, beta2, weight_decay, eps, amsgrad != 0,
                        /*maximize=*/false);
    } else {
      at::_fused_adam_(p, g, m, v, vmax, s, lr, beta1, beta2, weight_decay, eps, amsgrad != 0,
                       /*maximize=*/false);
    }
  });
}

// One SGD step of `n` parameters on one device and dtype. `bufs` holds `n` momentum buffers
// when `momentum` is not 0, none otherwise; on the first step (`first`) they are overwritten
// with the gradients, as `torch.optim.SGD` starts them.
int kiln_fused_sgd(at::Tensor** params, at::Tensor** grads, at::Tensor** bufs, size_t n,
                   double weight_decay, double momentum, double lr, double dampening,
                   int nesterov, int first) {
  return guarded([&] {
    c10::NoGradGuard no_grad;
    auto p = list(params, n);
    auto g = list(grads, n);
    auto b = list(bufs, momentum != 0.0 ? n : 0);
    at::_fused_sgd_(p, g, b, weight_decay, momentum, lr, dampening, nesterov != 0,
                    /*maximize=*/false, first != 0);
  });
}

// Unsets the gradients of `n` tensors (`p.grad = None`, as `zero_grad(set_to_none=True)`): the
// next backward pass then stores each gradient as it is computed, with no zero fill before it
// and no addition into it.
int kiln_clear_grads(at::Tensor** params, size_t n) {
  return guarded([&] {
    for (size_t i = 0; i < n; ++i) params[i]->mutable_grad().reset();
  });
}

}  // extern "C"
