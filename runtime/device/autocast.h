// Mixed precision for one scope, with libtorch's autocast: the ops autocast lists (matmuls,
// convolutions) run in a low-precision dtype on one device type, and the previous state comes
// back at the end. Parameters, gradients and the loss keep their own dtypes.
#pragma once

#include <optional>

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>

namespace bv {

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype) : device_(device) {
    was_enabled_ = at::autocast::is_autocast_enabled(device);
    was_dtype_ = at::autocast::get_autocast_dtype(device);
    at::autocast::set_autocast_enabled(device, true);
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    // Leaving the outermost scope drops the cached low-precision copies of the weights.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
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
  if (!at::autocast::is_autocast_enabled(device)) return std::nullopt;
  return at::autocast::get_autocast_dtype(device);
}

}  // namespace bv
