// What the c10d shim (`shim/c10d.cpp`) shares with the fsdp units (`shim/unit.cpp`): the
// process group behind a `kiln_group_new` handle.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace kiln {

struct Group {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
};

}  // namespace kiln
