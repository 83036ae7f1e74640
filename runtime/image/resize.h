// Image resizing with the semantics of big_vision's pp ops: TF2 `tf.image.resize` computed in
// float32, then clipped to the input dtype's range and cast back to it (float -> uint8 truncates).
// Images are HxWxC (or HxW, treated as one channel and returned as HxW), uint8 or float32.
#pragma once

#include <cstdint>
#include <string>

#include "core/forward.h"

namespace bv::image {

enum class ResizeMethod { kBilinear, kNearest, kBicubic, kArea };

// "bilinear", "nearest", "bicubic", "area"; anything else throws bv::Error listing those.
ResizeMethod resize_method_from_name(const std::string& name);
std::string resize_method_name(ResizeMethod method);

// Resizes to exactly height x width. `antialias` widens the bilinear/bicubic kernels when
// downscaling (TF's scale_and_translate); nearest and area ignore it, as TF does.
at::Tensor resize(const at::Tensor& img, int64_t height, int64_t width, ResizeMethod method,
                  bool antialias);

// Scales so that the smaller side becomes `smaller_size` (the other side is rounded half to
// even in float32, as tf.round does).
at::Tensor resize_small(const at::Tensor& img, int64_t smaller_size, ResizeMethod method,
                        bool antialias);

// Scales so that the longer side becomes `longer_size`.
at::Tensor resize_long(const at::Tensor& img, int64_t longer_size, ResizeMethod method,
                       bool antialias);

}  // namespace bv::image
