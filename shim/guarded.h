// The shims' one rule for C++ exceptions: none crosses into Rust. `kiln::guarded(error, f)` runs
// `f` and returns 0, or -1 with the exception's message in `error` (each shim keeps its own
// thread-local message and a `kiln_<shim>_last_error()` that returns it).
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>
#include <utility>

namespace kiln {

template <typename F>
int guarded(std::string& error, F&& f) {
  try {
    std::forward<F>(f)();
    return 0;
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an unknown C++ exception";
  }
  return -1;
}

}  // namespace kiln
