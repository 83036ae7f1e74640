// The shared layers and parameter specs (models/common.h; big_vision's models/common.py).
#include "models/common.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace bv::models {

void add_dense(std::vector<ParamSpec>& out, const std::string& prefix, std::vector<int64_t> kshape,
               std::vector<int64_t> bshape, Init kinit, int64_t fan_in, int64_t fan_out, Init binit,
               double bstd) {
  out.push_back({prefix + "/kernel", std::move(kshape), at::kFloat, kinit, 0, fan_in, fan_out});
  out.push_back({prefix + "/bias", std::move(bshape), at::kFloat, binit, bstd});
}

void add_norm(std::vector<ParamSpec>& out, const std::string& prefix, int64_t d, bool zero_scale) {
  out.push_back({prefix + "/scale", {d}, at::kFloat, zero_scale ? Init::kZeros : Init::kOnes});
  out.push_back({prefix + "/bias", {d}, at::kFloat, Init::kZeros});
}

void add_rms_norm(std::vector<ParamSpec>& out, const std::string& prefix, int64_t d) {
  out.push_back({prefix + "/scale", {d}, at::kFloat, Init::kZeros});
}

void add_conv(std::vector<ParamSpec>& out, const std::string& prefix, int64_t k, int64_t in,
              int64_t o) {
  // flax Conv's default kernel init is lecun_normal over fan_in = k*k*in.
  out.push_back(
      {prefix + "/kernel", {k, k, in, o}, at::kFloat, Init::kLecunNormal, 0, k * k * in, o});
}

ParamSpec scanned(ParamSpec spec, int64_t depth) {
  spec.shape.insert(spec.shape.begin(), depth);
  spec.scan = true;
  return spec;
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& bias) {
  return at::layer_norm(x, {x.size(-1)}, scale, bias, 1e-6);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& scale) {
  at::Tensor var = (x * x).mean(-1, /*keepdim=*/true);
  return x * at::rsqrt(var + 1e-6) * (1 + scale);
}

// One GEMM with the bias fused (addmm), which is what torch's nn.Linear runs; matmul-then-add is
// a second pass over the output.
at::Tensor linear(const at::Tensor& x, const at::Tensor& kernel, const at::Tensor& bias) {
  int64_t in = kernel.size(0), out = kernel.size(1);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  return at::addmm(bias, x.reshape({-1, in}), kernel).view(shape);
}

at::Tensor dense(const Params& params, const std::string& name, const at::Tensor& x,
                 const char* model) {
  return at::matmul(x, param(params, name + "/kernel", model)) +
         param(params, name + "/bias", model);
}

void classifier_head(const Params& params, const at::Tensor& x, int64_t num_classes,
                     const char* model, Output& out) {
  if (num_classes == 0) {
    out.out = x;
    return;
  }
  out.out = dense(params, "head", x, model);
  out.aux.emplace_back("logits", out.out);
}

// Under autocast the convs give bfloat16. As PyTorch's autocast does on each device: on the CPU
// GroupNorm takes the bfloat16 activations as they are (ATen's CPU kernel accepts float32 scale
// and bias with them and keeps its statistics in float32; half the memory traffic, and the next
// conv needs no cast: BiT-R26's bf16 step 1.4x faster); elsewhere it runs in float32, the
// parameters' dtype (libtorch's autocast does not cast group_norm's inputs itself).
at::Tensor group_norm(const at::Tensor& x, int64_t groups, const at::Tensor& scale,
                      const at::Tensor& bias) {
  bool as_is = x.device().is_cpu() && scale.scalar_type() == at::kFloat &&
               (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
  at::Tensor in = as_is ? x : x.to(scale.scalar_type());
  // Off the CPU in its own layout: CUDA's kernel makes a channels-last input contiguous itself,
  // and libtorch's generic one (another device's, the fake device's) views it, which fails on
  // a channels-last evaluation batch with libtorch 2.11.
  if (!x.device().is_cpu()) in = in.contiguous();
  return at::group_norm(in, groups, scale, bias, 1e-6);
}

// TF "SAME": total padding max((ceil(in/s)-1)*s + k - in, 0), the smaller half before.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t k, int64_t s) {
  int64_t total = std::max<int64_t>(((in + s - 1) / s - 1) * s + k - in, 0);
  return {total / 2, total - total / 2};
}

at::Tensor pad_same(const at::Tensor& x, int64_t k, int64_t s, double value) {
  auto [top, bottom] = same_padding(x.size(2), k, s);
  auto [left, right] = same_padding(x.size(3), k, s);
  if (top == 0 && bottom == 0 && left == 0 && right == 0) return x;
  return at::constant_pad_nd(x, {left, right, top, bottom}, value);
}

// Per output channel, (w - mean) / (std + 1e-5) over (H, W, In). The kernel is made
// OIHW-contiguous first: reducing over its inner dims is several times faster than over HWIO's
// outer ones, and the conv wants OIHW anyway. Two passes (the mean, then the mean square of the
// centred kernel) rather than at::std_mean, whose Welford reduction is not vectorised on the
// CPU: 2-7x faster per conv, and half the time of a small BiT's inference.
at::Tensor std_conv(const at::Tensor& x, const at::Tensor& kernel_hwio, int64_t stride) {
  at::Tensor w = kernel_hwio.permute({3, 2, 0, 1}).contiguous();  // HWIO -> OIHW
  at::Tensor centred = w - w.mean({1, 2, 3}, /*keepdim=*/true);
  at::Tensor std = centred.square().mean({1, 2, 3}, /*keepdim=*/true).sqrt();
  w = centred / (std + 1e-5);
  auto [top, bottom] = same_padding(x.size(2), w.size(2), stride);
  auto [left, right] = same_padding(x.size(3), w.size(3), stride);
  if (top == bottom && left == right) {
    return at::conv2d(x, w, {}, stride, {top, left});  // symmetric: the conv pads, no copy
  }
  return at::conv2d(pad_same(x, w.size(2), stride, 0.0), w, {}, stride);
}

}  // namespace bv::models
