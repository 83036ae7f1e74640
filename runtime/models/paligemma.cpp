// proj.paligemma.paligemma: big_vision's PaliGemma (models/proj/paligemma/paligemma.py).
//   image -> img (a ViT with pool_type none; its head projects every patch token to the LLM's
//   width) ; text -> llm embedding * sqrt(D) ; [image tokens; text tokens] -> Gemma with the
//   prefix-LM mask from mask_ar -> logits of the text positions
// Parameters: big_vision's "img/..." (the ViT tree) and "llm/..." (the Gemma tree).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <set>

#include "core/error.h"
#include "models/gemma.h"
#include "models/model.h"

namespace bv::models {

const ModelApi& vit_api();    // vit.cpp
const ModelApi& gemma_api();  // gemma.cpp

namespace {

using json = nlohmann::json;

struct Parts {
  json img, llm;
};

// The two sub-configs with PaliGemma's defaults: So400m/14 with pool none and scan, the ViT head
// sized to the LLM's width, Gemma 2B with the loc and seg tokens (257152).
Parts parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "paligemma: the model config must be a table");
  static const std::set<std::string> known = {"img", "llm", "img_model", "llm_model"};
  for (const auto& [key, v] : cfg.items()) {
    BV_CHECK(known.count(key), "paligemma: unknown config key '", key, "'");
  }
  Parts p;
  p.img = json{{"variant", "So400m/14"}, {"pool_type", "none"}, {"scan", true}};
  p.llm = json{{"variant", "gemma_2b"}, {"vocab_size", 257152}};
  if (cfg.contains("img")) p.img.update(cfg["img"]);
  if (cfg.contains("llm")) p.llm.update(cfg["llm"]);
  if (!p.img.contains("num_classes") || p.img["num_classes"].is_null()) {
    // The ViT head is the projection into the LLM: its size is the LLM's width.
    int64_t width = 0;
    for (const ParamSpec& s : gemma_api().param_specs(p.llm)) {
      if (s.name == "embedder/input_embedding") width = s.shape[1];
    }
    p.img["num_classes"] = width;
  }
  return p;
}

std::vector<ParamSpec> paligemma_param_specs(const json& cfg) {
  Parts p = parse_config(cfg);
  std::vector<ParamSpec> out;
  append_prefixed(out, vit_api().param_specs(p.img), "img/");
  append_prefixed(out, gemma_api().param_specs(p.llm), "llm/");
  return out;
}

// big_vision's make_attn_mask: c = cumsum(mask_ar); token i sees j when c[j] <= c[i] (and both
// are real tokens). Image, prefix and separator (mask_ar 0) see each other; the suffix is causal.
at::Tensor prefix_lm_mask(const at::Tensor& input_mask, const at::Tensor& mask_ar) {
  at::Tensor c = mask_ar.to(at::kLong).cumsum(1);
  at::Tensor sees = c.unsqueeze(1) <= c.unsqueeze(2);  // [B, i, j]: c[j] <= c[i]
  at::Tensor valid = input_mask.unsqueeze(1).logical_and(input_mask.unsqueeze(2));
  return sees.logical_and(valid);
}

// inputs: image [B, H, W, 3], text [B, T] (int), and optionally mask_ar [B, T] (default all 1)
// and input_mask [B, T] (default all true).
Output paligemma_apply(const json& cfg, const Params& params, const std::vector<at::Tensor>& inputs,
                       bool train) {
  Parts p = parse_config(cfg);
  BV_CHECK(inputs.size() >= 2 && inputs.size() <= 4,
           "paligemma: inputs are image, text [, mask_ar [, input_mask]]");
  const at::Tensor& text = inputs[1];
  BV_CHECK(text.dim() == 2, "paligemma: text must be [batch, length] tokens");
  int64_t B = text.size(0), T = text.size(1);
  at::Tensor mask_ar = inputs.size() >= 3 ? inputs[2] : at::ones({B, T}, at::kLong);
  at::Tensor input_mask = inputs.size() >= 4 ? inputs[3].to(at::kBool) : at::ones({B, T}, at::kBool);
  Params img = subtree(params, "img/"), llm = subtree(params, "llm/");

  Output out;
  at::Tensor zimg = vit_api().apply(p.img, img, {inputs[0]}, train).out;  // [B, N, D], not scaled
  BV_CHECK(zimg.dim() == 3 && zimg.size(0) == B, "paligemma: the image encoder gave [",
           zimg.sizes(), "] for a batch of ", B);
  int64_t n_img = zimg.size(1);
  at::Tensor ztxt = gemma::embed(p.llm, llm, text);
  BV_CHECK(zimg.size(2) == ztxt.size(2), "paligemma: image tokens have width ", zimg.size(2),
           " but the LLM has ", ztxt.size(2));
  at::Tensor x = at::cat({zimg, ztxt}, 1);
  at::Tensor full_ar = at::cat({at::zeros({B, n_img}, at::kLong), mask_ar.to(at::kLong)}, 1);
  at::Tensor full_mask = at::cat({at::ones({B, n_img}, at::kBool), input_mask}, 1);
  at::Tensor attn = prefix_lm_mask(full_mask, full_ar);
  at::Tensor positions = at::arange(n_img + T, at::kLong).expand({B, n_img + T});
  at::Tensor pre = gemma::stack(p.llm, llm, x, attn, positions);
  at::Tensor text_logits = gemma::logits(llm, pre.narrow(1, n_img, T));
  out.aux.emplace_back("img/zimg", zimg);
  out.aux.emplace_back("attn_mask", attn);
  out.aux.emplace_back("text_logits", text_logits);
  out.aux.emplace_back("text_tokens", text_logits.argmax(-1));
  out.out = text_logits;
  return out;
}

}  // namespace

const ModelApi& paligemma_api() {
  static const ModelApi api = {
      "proj.paligemma.paligemma",
      "proj.paligemma.paligemma(img={variant='So400m/14', pool_type='none', scan=True}, "
      "llm={variant='gemma_2b', vocab_size=257152}): PaliGemma (image encoder + Gemma with a "
      "prefix-LM mask)",
      paligemma_param_specs, nullptr, paligemma_apply};
  return api;
}

}  // namespace bv::models
