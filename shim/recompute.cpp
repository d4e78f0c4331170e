// Activation checkpointing (`recompute` in an experiment's model), behind a C interface called
// from `src/runtime/model/recompute.rs`: a custom autograd function whose forward runs a group of
// Kiln's layers without keeping their activations (grad mode is off in a custom function's
// forward) and whose backward runs them again from the saved input, with the random generators
// put back in the state the forward found them in (dropout draws the same masks), and takes the
// gradients of that second run. The layers run in Rust: both runs call `run` with the group's
// closure, which the function's node owns and hands back to `release` when autograd frees the
// node. The parameters are inputs of the function, so their gradients reach their
// AccumulateGrad nodes as any others' do (hooks on them, as DDP's Reducer's, fire as usual).
//
// Every function catches every exception and returns 0 on success or -1 with the message in
// `kiln_recompute_last_error()`. Tensors cross as tch's handles, which are `at::Tensor*`.

#include "guarded.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

thread_local std::string last_error;

// Runs the group on `x` into `*y` (a tensor the callee allocated, which the caller deletes);
// 0 on success, else -1 with a message of at most `cap` bytes in `message`.
using Run = int (*)(void* closure, at::Tensor* x, at::Tensor** y, char* message, size_t cap);
using Release = void (*)(void* closure);

// The group's closure, released with the node that holds it.
struct Closure : torch::CustomClassHolder {
  Closure(void* closure, Run run, Release release)
      : closure(closure), run(run), release(release) {}
  ~Closure() override { release(closure); }
  Closure(const Closure&) = delete;
  Closure& operator=(const Closure&) = delete;

  at::Tensor call(const at::Tensor& x) const {
    at::Tensor in = x;
    at::Tensor* out = nullptr;
    char message[512] = {0};
    if (run(closure, &in, &out, message, sizeof message - 1) != 0 || out == nullptr) {
      throw std::runtime_error(message[0] ? message : "the recomputed layers failed");
    }
    at::Tensor y = *out;
    delete out;
    return y;
  }

  void* closure;
  Run run;
  Release release;
};

// The states of the generators a group may draw from: the CPU's, and the device's of `x`.
std::vector<std::pair<at::Device, at::Tensor>> generator_states(const at::Tensor& x) {
  std::vector<at::Device> devices{at::Device(at::kCPU)};
  if (!x.device().is_cpu()) devices.push_back(x.device());
  std::vector<std::pair<at::Device, at::Tensor>> out;
  for (const auto& d : devices) {
    auto gen = at::globalContext().defaultGenerator(d);
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.emplace_back(d, gen.get_state());
  }
  return out;
}

void set_generator_states(const std::vector<std::pair<at::Device, at::Tensor>>& states) {
  for (const auto& [d, state] : states) {
    auto gen = at::globalContext().defaultGenerator(d);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
}

struct Recompute : public torch::autograd::Function<Recompute> {
  // Saves the input, the parameters (leaves: saved as themselves) and the generators' states.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, at::TensorList params,
                                                const c10::intrusive_ptr<Closure>& closure) {
    auto states = generator_states(x);
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), params.begin(), params.end());
    for (auto& [d, state] : states) saved.push_back(state);
    ctx->save_for_backward(saved);
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    ctx->saved_data["params"] = static_cast<int64_t>(params.size());
    ctx->saved_data["input_grad"] = x.requires_grad();
    return {closure->call(x)};
  }

  // Runs the group again from the input, with the forward's generator states, and returns the
  // gradients of its output's with respect to the input and the parameters.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto closure = c10::static_intrusive_pointer_cast<Closure>(
        ctx->saved_data["closure"].toCapsule());
    const auto n = static_cast<size_t>(ctx->saved_data["params"].toInt());
    const bool input_grad = ctx->saved_data["input_grad"].toBool();
    at::Tensor x = saved[0].detach();
    x.set_requires_grad(input_grad);
    std::vector<std::pair<at::Device, at::Tensor>> forward_states{
        {at::Device(at::kCPU), saved[1 + n]}};
    if (!x.device().is_cpu()) forward_states.emplace_back(x.device(), saved[2 + n]);
    auto now = generator_states(x);
    set_generator_states(forward_states);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = closure->call(x);
    }
    set_generator_states(now);
    std::vector<at::Tensor> inputs;
    if (input_grad) inputs.push_back(x);
    for (size_t i = 0; i < n; ++i) {
      if (saved[1 + i].requires_grad()) inputs.push_back(saved[1 + i]);
    }
    torch::autograd::variable_list found;
    if (!inputs.empty() && y.requires_grad()) {
      found = torch::autograd::grad({y}, inputs, {grads[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    // One gradient per input of forward: the input, each parameter, none for the closure.
    torch::autograd::variable_list out;
    size_t next = 0;
    auto take = [&](bool wanted) {
      out.push_back(wanted && next < found.size() ? found[next] : at::Tensor());
      if (wanted) ++next;
    };
    take(input_grad);
    for (size_t i = 0; i < n; ++i) take(saved[1 + i].requires_grad());
    out.emplace_back();
    return out;
  }
};

}  // namespace

extern "C" {

const char* kiln_recompute_last_error() { return last_error.c_str(); }

// Runs the group of `closure` on `x` into `*y`: under grad mode, through `Recompute` (its
// activations recomputed in backward; `params`, `n` of them, are the tensors whose gradients it
// gives), else directly. `closure` is handed to `release` once nothing needs it, whatever the
// outcome.
int kiln_recompute(Run run, Release release, void* closure, at::Tensor* x, at::Tensor** params,
                   size_t n, at::Tensor** y) {
  auto holder = c10::make_intrusive<Closure>(closure, run, release);
  return kiln::guarded(last_error, [&] {
    if (!c10::GradMode::is_enabled()) {
      *y = new at::Tensor(holder->call(*x));
      return;
    }
    std::vector<at::Tensor> ps;
    ps.reserve(n);
    for (size_t i = 0; i < n; ++i) ps.push_back(*params[i]);
    auto outs = Recompute::apply(*x, at::TensorList(ps), holder);
    *y = new at::Tensor(outs.at(0));
  });
}

}  // extern "C"
