// The one place for differences between the libtorch versions we build against: Debian's 1.13
// (CPU, the CI machine) and the 2.x that ships with pip torch on GPU machines.
#pragma once

#include <torch/csrc/api/include/torch/version.h>

#define BV_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||     \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace bv::compat {

// "1.13.0", "2.5.1", ...
inline const char* torch_version() { return TORCH_VERSION; }

}  // namespace bv::compat
