// The layers and parameter specs that models share (big_vision's models/common.py, timm's
// layers/): flax's Dense, LayerNorm, GroupNorm, Gemma's RMSNorm, BiT's weight-standardised conv
// with TF's "SAME" padding, and the specs that create their parameters under flax's names.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"

namespace bv::models {

// ---------------------------------------------------------------------------------------------
// Parameter specs

// `prefix`/kernel and `prefix`/bias: a flax Dense (or DenseGeneral with these shapes).
void add_dense(std::vector<ParamSpec>& out, const std::string& prefix, std::vector<int64_t> kshape,
               std::vector<int64_t> bshape, Init kinit, int64_t fan_in, int64_t fan_out,
               Init binit = Init::kZeros, double bstd = 0);

// `prefix`/scale (ones, or zeros with zero_scale) and `prefix`/bias (zeros): a LayerNorm or a
// GroupNorm over d channels.
void add_norm(std::vector<ParamSpec>& out, const std::string& prefix, int64_t d,
              bool zero_scale = false);

// `prefix`/scale (zeros): Gemma's RMSNorm, which multiplies by 1 + scale.
void add_rms_norm(std::vector<ParamSpec>& out, const std::string& prefix, int64_t d);

// `prefix`/kernel [k, k, in, o] (HWIO) without a bias, flax Conv's lecun_normal init.
void add_conv(std::vector<ParamSpec>& out, const std::string& prefix, int64_t k, int64_t in,
              int64_t o);

// The spec of one layer's parameter as a stack of `depth` layers along a new dim 0 (flax's
// nn.scan); apply reads layer i with layer_param.
ParamSpec scanned(ParamSpec spec, int64_t depth);

// ---------------------------------------------------------------------------------------------
// Layers

// flax's LayerNorm over the last dim (epsilon 1e-6).
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& bias);

// Gemma's RMSNorm over the last dim: x / sqrt(mean(x^2) + 1e-6) * (1 + scale).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& scale);

// x @ kernel + bias over the last dim, kernel [in, out], as one GEMM with the bias fused.
at::Tensor linear(const at::Tensor& x, const at::Tensor& kernel, const at::Tensor& bias);

// x @ `name`/kernel + `name`/bias: a flax Dense layer.
at::Tensor dense(const Params& params, const std::string& name, const at::Tensor& x,
                 const char* model);

// How big_vision's classifiers end: with num_classes, logits = x @ head/kernel + head/bias
// (also out.aux["logits"]); without, the representation x itself. Sets out.out.
void classifier_head(const Params& params, const at::Tensor& x, int64_t num_classes,
                     const char* model, Output& out);

// flax's GroupNorm of NCHW x (epsilon 1e-6), the statistics in float32.
at::Tensor group_norm(const at::Tensor& x, int64_t groups, const at::Tensor& scale,
                      const at::Tensor& bias);

// TF's "SAME" padding of one dim: (before, after) for size `in`, kernel k, stride s.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t k, int64_t s);

// NCHW x padded with `value` as TF's "SAME" does for a k x k window of stride s.
at::Tensor pad_same(const at::Tensor& x, int64_t k, int64_t s, double value);

// BiT's StdConv: a weight-standardised conv of NCHW x with an HWIO kernel, "SAME" padding.
at::Tensor std_conv(const at::Tensor& x, const at::Tensor& kernel_hwio, int64_t stride);

}  // namespace bv::models
