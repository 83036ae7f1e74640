// Tensor kernels behind big_vision's general pp ops (lib/bv/pp/ops_general.lua registers the ops
// and does the dict plumbing; these do the arithmetic). Semantics: big_vision pp/ops_general.py.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace bv::pp {

// out = vmin + (float(x) - in_min) / (in_max - in_min) * (vmax - vmin), in float32 in that
// order (as TF does); in_min/in_max hold one value or one per channel (the last axis).
at::Tensor value_range(const at::Tensor& x, double vmin, double vmax,
                       const std::vector<double>& in_min, const std::vector<double>& in_max,
                       bool clip_values);

// (float(x) - mean) / std, per channel (the last axis): vgg_value_range and clip_value_range.
at::Tensor normalize(const at::Tensor& x, const std::vector<double>& mean,
                     const std::vector<double>& std);

// big_vision's onehot: int labels -> float32. A rank>0 label with `multi` is a multi-hot vector
// of size depth; otherwise one_hot. A label outside [0, depth) is an error (tf.one_hot would give
// it an all-`off` row).
at::Tensor onehot(const at::Tensor& labels, int64_t depth, bool multi, double on, double off);

// Pads x with pad_value up to `shape` (-1 = leave that dimension); where is after|before|both.
at::Tensor pad_to_shape(const at::Tensor& x, const std::vector<int64_t>& shape, double pad_value,
                        const std::string& where);

}  // namespace bv::pp
