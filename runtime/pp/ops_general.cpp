#include "pp/ops_general.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::pp {

namespace {

// A per-channel constant shaped to broadcast over x's last axis (one value broadcasts anywhere).
at::Tensor per_channel(const std::vector<double>& v, const at::Tensor& x, const char* op,
                       const char* what) {
  BV_CHECK(!v.empty(), op, ": ", what, " is empty");
  if (v.size() == 1) return at::scalar_tensor(v[0], at::kFloat);
  BV_CHECK(x.dim() >= 1 && x.size(-1) == static_cast<int64_t>(v.size()), op, ": ", what, " has ",
           v.size(), " values but the input ", shape_string(x), " has ",
           x.dim() >= 1 ? x.size(-1) : 0, " channels");
  return at::tensor(v, at::kDouble).to(at::kFloat);
}

}  // namespace

// uint8 images (the common case) go through a per-channel table of the 256 possible results,
// computed with the same float32 operations as the general path, so the values are identical.
at::Tensor value_range_uint8(const at::Tensor& x, float vmin, float span,
                             const std::vector<double>& in_min, const std::vector<double>& in_max,
                             bool clip_values, double lo_clip, double hi_clip) {
  int64_t channels = in_min.size() > 1 || in_max.size() > 1 ? x.size(-1) : 1;
  std::vector<float> lut(static_cast<size_t>(channels) * 256);
  for (int64_t c = 0; c < channels; ++c) {
    float lo = static_cast<float>(in_min[in_min.size() > 1 ? c : 0]);
    float hi = static_cast<float>(in_max[in_max.size() > 1 ? c : 0]);
    for (int v = 0; v < 256; ++v) {
      float r = (static_cast<float>(v) - lo) / (hi - lo);
      r = vmin + r * span;
      if (clip_values)
        r = std::min(std::max(r, static_cast<float>(lo_clip)), static_cast<float>(hi_clip));
      lut[static_cast<size_t>(c * 256 + v)] = r;
    }
  }
  at::Tensor src = x.contiguous();
  at::Tensor out = at::empty(src.sizes(), at::kFloat);
  const uint8_t* in = src.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  int64_t n = src.numel();
  if (channels == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = lut[in[i]];
  } else {
    for (int64_t i = 0; i < n; i += channels) {
      for (int64_t c = 0; c < channels; ++c)
        o[i + c] = lut[static_cast<size_t>(c * 256 + in[i + c])];
    }
  }
  return out;
}

at::Tensor value_range(const at::Tensor& x, double vmin, double vmax,
                       const std::vector<double>& in_min, const std::vector<double>& in_max,
                       bool clip_values) {
  if (x.scalar_type() == at::kByte && x.device().is_cpu()) {
    per_channel(in_min, x, "value_range", "in_min");  // the same shape checks
    per_channel(in_max, x, "value_range", "in_max");
    return value_range_uint8(x, static_cast<float>(vmin), static_cast<float>(vmax - vmin), in_min,
                             in_max, clip_values, vmin, vmax);
  }
  at::Tensor lo = per_channel(in_min, x, "value_range", "in_min");
  at::Tensor hi = per_channel(in_max, x, "value_range", "in_max");
  // Same float32 operations in the same order as big_vision, so results match bit for bit.
  at::Tensor out = (x.to(at::kFloat) - lo) / (hi - lo);
  out = static_cast<float>(vmin) + out * static_cast<float>(vmax - vmin);
  if (clip_values) out = out.clamp(vmin, vmax);
  return out;
}

at::Tensor normalize(const at::Tensor& x, const std::vector<double>& mean,
                     const std::vector<double>& std) {
  at::Tensor m = per_channel(mean, x, "vgg_value_range", "mean");
  at::Tensor s = per_channel(std, x, "vgg_value_range", "std");
  return (x.to(at::kFloat) - m) / s;
}

at::Tensor onehot(const at::Tensor& labels, int64_t depth, bool multi, double on, double off) {
  BV_CHECK(depth > 0, "onehot: depth must be positive, got ", depth);
  BV_CHECK(
      !at::isFloatingType(labels.scalar_type()) || labels.eq(labels.floor()).all().item<bool>(),
      "onehot: labels must be integers, got ", dtype_name(labels.scalar_type()));
  at::Tensor ids = labels.to(at::kLong);
  // tf.one_hot gives a label outside [0, depth) an all-`off` row, a target that silently
  // trains towards no class; bvlua refuses it instead.
  if (ids.numel() > 0) {
    at::Tensor flat = ids.flatten();
    at::Tensor outside = flat.lt(0).logical_or(flat.ge(depth)).nonzero();
    BV_CHECK(outside.numel() == 0, "onehot: label ", flat[outside[0][0]].item<int64_t>(),
             " is out of range for depth ", depth, " (labels must be in [0, ", depth, "))");
  }
  if (ids.dim() > 0 && multi) {
    at::Tensor hot = at::zeros({depth}, at::kFloat);
    hot.index_fill_(0, ids.flatten(), 1.0);
    return hot * static_cast<float>(on - off) + static_cast<float>(off);
  }
  at::Tensor cols = at::arange(depth, at::kLong);
  at::Tensor hit = ids.unsqueeze(-1).eq(cols);
  return at::where(hit, at::scalar_tensor(on, at::kFloat), at::scalar_tensor(off, at::kFloat));
}

at::Tensor pad_to_shape(const at::Tensor& x, const std::vector<int64_t>& shape, double pad_value,
                        const std::string& where) {
  BV_CHECK(static_cast<int64_t>(shape.size()) == x.dim(), "pad_to_shape: shape has ", shape.size(),
           " dimensions but the input ", shape_string(x), " has ", x.dim());
  BV_CHECK(where == "after" || where == "before" || where == "both",
           "pad_to_shape: where must be 'after', 'before' or 'both', got '", where, "'");
  // at::constant_pad_nd takes (before, after) pairs starting from the LAST dimension.
  std::vector<int64_t> pads;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    int64_t target = shape[d];
    int64_t diff = target < 0 ? 0 : target - x.size(d);
    BV_CHECK(diff >= 0, "pad_to_shape: dimension ", d, " of the input ", shape_string(x),
             " is larger than the target ", target);
    int64_t before = where == "before" ? diff : where == "both" ? diff / 2 : 0;
    pads.push_back(before);
    pads.push_back(diff - before);
  }
  return at::constant_pad_nd(x, pads, pad_value);
}

}  // namespace bv::pp
