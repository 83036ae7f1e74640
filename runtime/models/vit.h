// ViT's encoder and MAP head, shared with the models built from them (big_vision's text
// transformer reuses vit.Encoder under the name "Encoder_0").
#pragma once

#include <string>
#include <vector>

#include "models/model.h"

namespace bv::models {

struct EncoderConfig {
  int64_t width, depth, mlp_dim, num_heads;
  double dropout;
  bool scan;
  bool remat = false;  // rematerialise each layer when training (models/remat.h)
};

// `name`/encoderblock_<i>/... (or the stacked `name`/encoderblock/... with scan) and
// `name`/encoder_norm.
void add_encoder_specs(std::vector<ParamSpec>& out, const EncoderConfig& c,
                       const std::string& name);
void add_map_head_specs(std::vector<ParamSpec>& out, const EncoderConfig& c);

// x [n, l, D] -> encoder_norm(blocks(x)). With `out`, records big_vision's Encoder outputs
// under `out_prefix`: blockNN/sa (the attention), blockNN/+sa (x after it), blockNN/mlp,
// blockNN/+mlp (the block's output) and, without scan, pre_ln (the last block's output). A
// rematerialised layer's sa, +sa and mlp are lazy (the layer runs again when they are read).
at::Tensor encoder_forward(const Params& params, const EncoderConfig& c, const std::string& name,
                           at::Tensor x, bool train, Output* out,
                           const std::string& out_prefix = "encoder/");
// MAPHead_0: attention pooling with a learned probe, [n, l, D] -> [n, D].
at::Tensor map_head_forward(const Params& params, const EncoderConfig& c, const at::Tensor& x);

}  // namespace bv::models
