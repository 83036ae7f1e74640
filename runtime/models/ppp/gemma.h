// Gemma's pieces that other models (PaliGemma) compose: embedding, the layer stack over
// embeddings with an explicit attention mask, and the tied output projection.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "models/model.h"

namespace bv::models::gemma {

// tokens [B, T] -> [B, T, D], scaled by sqrt(D) as Gemma does for text.
at::Tensor embed(const nlohmann::json& cfg, const Params& params, const at::Tensor& tokens);
// The keys and values of every layer for the tokens seen so far, for decoding one token at a
// time without recomputing the prefix.
struct Cache {
  std::vector<at::Tensor> k, v;  // per layer [B, max_len, K, H]
  at::Tensor key_mask;           // [B, max_len] bool: slots that hold real tokens
  at::Tensor next_position;      // [B] int64: the position of each row's next token
  int64_t length = 0;            // slots used
};

// x [B, T, D], mask [B, T, S] bool (S = T, or cache length + T), positions [B, T]
// -> pre_logits [B, T, D] (after final_norm). With a cache, appends this call's keys/values.
at::Tensor stack(const nlohmann::json& cfg, const Params& params, at::Tensor x,
                 const at::Tensor& mask, const at::Tensor& positions, Cache* cache = nullptr);

// Starts decoding: runs the prompt x [B, T, D] with `mask` [B, T, T] (padding rows of
// input_mask [B, T] take no position and are never attended to) into a cache of max_len slots.
at::Tensor prefill(const nlohmann::json& cfg, const Params& params, const at::Tensor& x,
                   const at::Tensor& mask, const at::Tensor& input_mask, int64_t max_len,
                   Cache* cache);
// One more token per row, x [B, 1, D]: attends to every real slot so far -> pre_logits [B, 1, D].
at::Tensor extend(const nlohmann::json& cfg, const Params& params, const at::Tensor& x,
                  Cache* cache);
// pre_logits @ embedding^T (no final softcap, as big_vision's gemma_bv compute_logits).
at::Tensor logits(const Params& params, const at::Tensor& pre_logits);

// The name of an at::_fused_sdp_choice result (at::SDPBackend's values): "math" (the unfused
// kernel), "flash", "efficient", "cudnn", "overrideable", "none" (no kernel takes the inputs).
std::string sdp_backend_name(int64_t choice);

}  // namespace bv::models::gemma
