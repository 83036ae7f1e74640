// Gemma's pieces that other models (PaliGemma) compose: embedding, the layer stack over
// embeddings with an explicit attention mask, and the tied output projection.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "models/model.h"

namespace bv::models::gemma {

// tokens [B, T] -> [B, T, D], scaled by sqrt(D) as Gemma does for text.
at::Tensor embed(const nlohmann::json& cfg, const Params& params, const at::Tensor& tokens);
// x [B, T, D], mask [B, T, T] bool, positions [B, T] -> pre_logits [B, T, D] (after final_norm).
at::Tensor stack(const nlohmann::json& cfg, const Params& params, at::Tensor x,
                 const at::Tensor& mask, const at::Tensor& positions);
// pre_logits @ embedding^T (no final softcap, as big_vision's gemma_bv compute_logits).
at::Tensor logits(const Params& params, const at::Tensor& pre_logits);

}  // namespace bv::models::gemma
