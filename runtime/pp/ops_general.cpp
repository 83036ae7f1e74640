#include "pp/ops_general.h"

#include <ATen/ATen.h>

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

at::Tensor value_range(const at::Tensor& x, double vmin, double vmax,
                       const std::vector<double>& in_min, const std::vector<double>& in_max,
                       bool clip_values) {
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
  BV_CHECK(!at::isFloatingType(labels.scalar_type()) || labels.eq(labels.floor()).all().item<bool>(),
           "onehot: labels must be integers, got ", dtype_name(labels.scalar_type()));
  at::Tensor ids = labels.to(at::kLong);
  if (ids.dim() > 0 && multi) {
    BV_CHECK(ids.numel() == 0 || (ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < depth),
             "onehot: a label is outside [0, ", depth, ") for multi-hot labels ", shape_string(ids));
    at::Tensor hot = at::zeros({depth}, at::kFloat);
    hot.index_fill_(0, ids.flatten(), 1.0);
    return hot * static_cast<float>(on - off) + static_cast<float>(off);
  }
  // one_hot: ids outside [0, depth) match no column, so their row is all `off`.
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
