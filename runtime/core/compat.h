// The one place for differences between the libtorch versions we build against: Debian's 1.13
// (CPU, the CI machine) and the 2.x that ships with pip torch on GPU machines.
#pragma once

#include <optional>

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <torch/csrc/api/include/torch/version.h>

#define BV_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||     \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace bv::compat {

// "1.13.0", "2.5.1", ...
inline const char* torch_version() { return TORCH_VERSION; }

// Mixed precision for one scope: ops autocast lists (matmuls, convolutions) run in `dtype` on
// `device` (CPU or CUDA); the previous state comes back at the end. 2.4 replaced the per-device
// setters (set_cpu_enabled, set_autocast_cpu_dtype, ...) with ones taking the device type.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype) : device_(device) {
#if BV_TORCH_AT_LEAST(2, 4)
    was_enabled_ = at::autocast::is_autocast_enabled(device);
    was_dtype_ = at::autocast::get_autocast_dtype(device);
    at::autocast::set_autocast_enabled(device, true);
    at::autocast::set_autocast_dtype(device, dtype);
#else
    bool cpu = device == c10::DeviceType::CPU;
    was_enabled_ = cpu ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
    was_dtype_ = cpu ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
    if (cpu) {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(dtype);
    } else {
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(dtype);
    }
#endif
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    // Leaving the outermost scope drops the cached low-precision copies of the weights.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if BV_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
#else
    if (device_ == c10::DeviceType::CPU) {
      at::autocast::set_cpu_enabled(was_enabled_);
      at::autocast::set_autocast_cpu_dtype(was_dtype_);
    } else {
      at::autocast::set_enabled(was_enabled_);
      at::autocast::set_autocast_gpu_dtype(was_dtype_);
    }
#endif
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Float;
};

// The dtype autocast runs `device`'s ops in, or none when it is off.
inline std::optional<c10::ScalarType> autocast_dtype(c10::DeviceType device) {
#if BV_TORCH_AT_LEAST(2, 4)
  if (!at::autocast::is_autocast_enabled(device)) return std::nullopt;
  return at::autocast::get_autocast_dtype(device);
#else
  bool cpu = device == c10::DeviceType::CPU;
  if (!(cpu ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled())) return std::nullopt;
  return cpu ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

}  // namespace bv::compat
