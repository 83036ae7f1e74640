// PaliGemma decoding: the image and the prompt run once into Gemma's KV cache (prefill), then one
// token per row at a time (extend), as big_vision's prefill_cache / extend_cache.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "models/model.h"
#include "models/ppp/gemma.h"

namespace bv::models::paligemma {

// image [B, H, W, 3], prompt text [B, T] with mask_ar [B, T] and input_mask [B, T] (0: padding,
// never attended and taking no position) -> the logits [B, V] after each row's last real token.
// The cache gets room for max_decode_len more tokens.
at::Tensor prefill(const nlohmann::json& cfg, const Params& params, const at::Tensor& image,
                   const at::Tensor& text, const at::Tensor& mask_ar, const at::Tensor& input_mask,
                   int64_t max_decode_len, gemma::Cache* cache);

// The next token of every row, tokens [B] -> logits [B, V].
at::Tensor extend(const nlohmann::json& cfg, const Params& params, const at::Tensor& tokens,
                  gemma::Cache* cache);

}  // namespace bv::models::paligemma
