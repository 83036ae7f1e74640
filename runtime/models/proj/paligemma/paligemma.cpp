// proj.paligemma.paligemma: big_vision's PaliGemma (models/proj/paligemma/paligemma.py).
//   image -> img (a ViT with pool_type none; its head projects every patch token to the LLM's
//   width) ; text -> llm embedding * sqrt(D) ; [image tokens; text tokens] -> Gemma with the
//   prefix-LM mask from mask_ar -> logits of the text positions
// Parameters: big_vision's "img/..." (the ViT tree) and "llm/..." (the Gemma tree).
// img_model = "bit" (big_vision's Model takes any image model by name) puts a BiT ResNet there
// instead: its last feature map's cells are the image tokens, projected by img/head. A small
// CNN learns from scratch far faster than a small ViT (configs/paligemma.lua:variant=tiny).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/common.h"
#include "models/model.h"
#include "models/ppp/gemma.h"
#include "models/proj/paligemma/paligemma.h"

namespace bv::models {

namespace {

using json = nlohmann::json;

struct Parts {
  json img, llm;
  bool bit = false;   // img_model = "bit"
  int64_t width = 0;  // the LLM's width: what img/head projects to
};

// The config keys: the parser refuses others, bv.config_keys documents them (ModelApi::keys).
constexpr ConfigKey kKeys[] = {
    {"img", "table", "{\"pool_type\":\"none\",\"scan\":true,\"variant\":\"So400m/14\"}",
     "the image encoder's options, merged over the default", "img_model"},
    {"llm", "table", "{\"variant\":\"gemma_2b\",\"vocab_size\":257152}",
     "Gemma's options, merged over the default", "llm_model"},
    {"img_model", "string", "\"vit\"", "vit or bit"},
    {"llm_model", "string", "\"ppp.gemma\"", "the language model"},
};

// The two sub-configs with PaliGemma's defaults: So400m/14 with pool none and scan, the ViT head
// sized to the LLM's width, Gemma 2B with the loc and seg tokens (257152).
Parts parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "paligemma: the model config must be a table");
  check_config_keys(cfg, kKeys, "paligemma");
  Parts p;
  std::string img_model = "vit";
  if (cfg.contains("img_model")) {
    BV_CHECK(cfg["img_model"].is_string(), "paligemma: img_model must be a string");
    img_model = cfg["img_model"].get<std::string>();
  }
  BV_CHECK(img_model == "vit" || img_model == "bit", "paligemma: img_model '", img_model,
           "' is not supported (vit or bit)");
  p.bit = img_model == "bit";
  if (p.bit) {
    p.img = json{{"depth", 26}, {"width", 1}};
  } else {
    p.img = json{{"variant", "So400m/14"}, {"pool_type", "none"}, {"scan", true}};
  }
  p.llm = json{{"variant", "gemma_2b"}, {"vocab_size", 257152}};
  if (cfg.contains("img")) p.img.update(cfg["img"]);
  if (cfg.contains("llm")) p.llm.update(cfg["llm"]);
  {
    ConfigPart part("llm");
    for (const ParamSpec& s : gemma_api().param_specs(p.llm)) {
      if (s.name == "embedder/input_embedding") p.width = s.shape[1];
    }
  }
  if (p.bit) {
    BV_CHECK(!p.img.contains("num_classes"), "paligemma: img_model bit takes no num_classes ",
             "(img/head projects to the LLM's width)");
  } else if (!p.img.contains("num_classes") || p.img["num_classes"].is_null()) {
    p.img["num_classes"] = p.width;  // the ViT head is the projection into the LLM
  }
  return p;
}

// BiT's channels after its last stage.
int64_t bit_channels(const json& img) {
  int64_t c = 0;
  for (const ParamSpec& s : bit_api().param_specs(img)) {
    if (s.shape.size() == 4) c = s.shape[3];  // the last conv kernel is the last stage's conv3
  }
  return c;
}

std::vector<ParamSpec> paligemma_param_specs(const json& cfg) {
  Parts p = parse_config(cfg);
  std::vector<ParamSpec> out;
  {
    ConfigPart part("img");
    if (p.bit) {
      append_prefixed(out, bit_api().param_specs(p.img), "img/");
      int64_t c = bit_channels(p.img);
      add_dense(out, "img/head", {c, p.width}, {p.width}, Init::kLecunNormal, c, p.width);
    } else {
      append_prefixed(out, vit_api().param_specs(p.img), "img/");
    }
  }
  ConfigPart part("llm");
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

struct Embedded {
  at::Tensor zimg;       // [B, N, D] image tokens
  at::Tensor x;          // [B, N + T, D] image tokens then scaled text embeddings
  at::Tensor attn;       // [B, N + T, N + T] the prefix-LM mask
  at::Tensor full_mask;  // [B, N + T] real tokens
  int64_t n_img = 0;
};

// big_vision's embed_image_and_text plus make_attn_mask: image tokens are not scaled, text
// embeddings are; image tokens join the bidirectional prefix (mask_ar 0, always real).
Embedded embed_image_and_text(const Parts& p, const Params& params, const at::Tensor& image,
                              const at::Tensor& text, const at::Tensor& mask_ar,
                              const at::Tensor& input_mask, bool train) {
  int64_t B = text.size(0);
  Embedded e;
  Params img = subtree(params, "img/");
  if (p.bit) {
    Output o = bit_api().apply(p.img, img, {image}, train);
    at::Tensor fmap;  // [B, h, w, C]: each cell is a token
    for (const auto& [name, t] : o.aux) {
      if (name == "pre_logits_2d") fmap = t;
    }
    e.zimg = dense(img, "head", fmap.reshape({B, -1, fmap.size(3)}), "paligemma img");
  } else {
    e.zimg = vit_api().apply(p.img, img, {image}, train).out;  // [B, N, D]
  }
  BV_CHECK(e.zimg.dim() == 3 && e.zimg.size(0) == B, "paligemma: the image encoder gave [",
           e.zimg.sizes(), "] for a batch of ", B);
  e.n_img = e.zimg.size(1);
  at::Tensor ztxt = gemma::embed(p.llm, subtree(params, "llm/"), text);
  BV_CHECK(e.zimg.size(2) == ztxt.size(2), "paligemma: image tokens have width ", e.zimg.size(2),
           " but the LLM has ", ztxt.size(2));
  e.x = at::cat({e.zimg, ztxt}, 1);
  auto on_text = text.options();
  at::Tensor full_ar =
      at::cat({at::zeros({B, e.n_img}, on_text.dtype(at::kLong)), mask_ar.to(at::kLong)}, 1);
  e.full_mask =
      at::cat({at::ones({B, e.n_img}, on_text.dtype(at::kBool)), input_mask.to(at::kBool)}, 1);
  e.attn = prefix_lm_mask(e.full_mask, full_ar);
  return e;
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
  at::Tensor mask_ar = inputs.size() >= 3 ? inputs[2]
                                          : at::ones({B, T}, text.options().dtype(at::kLong));
  at::Tensor input_mask = inputs.size() >= 4 ? inputs[3].to(at::kBool)
                                             : at::ones({B, T}, text.options().dtype(at::kBool));
  Params llm = subtree(params, "llm/");
  Embedded e = embed_image_and_text(p, params, inputs[0], text, mask_ar, input_mask, train);
  int64_t n_img = e.n_img;
  at::Tensor positions =
      at::arange(n_img + T, text.options().dtype(at::kLong)).expand({B, n_img + T});
  at::Tensor pre = gemma::stack(p.llm, llm, e.x, e.attn, positions);
  at::Tensor text_logits = gemma::logits(llm, pre.narrow(1, n_img, T));
  Output out;
  at::Tensor attn = e.attn;
  out.aux.emplace_back("img/zimg", e.zimg);
  out.aux.emplace_back("attn_mask", attn);
  out.aux.emplace_back("text_logits", text_logits);
  out.aux.emplace_back("text_tokens", text_logits.argmax(-1));
  out.out = text_logits;
  return out;
}

// BiT's convolution kernels prefer OIHW memory (bit.cpp); the ViT and Gemma row-major.
void paligemma_relayout(Params& params) {
  if (!params.count("img/conv_root/kernel")) return;  // a ViT: nothing to do
  Params img = subtree(params, "img/");
  bit_api().relayout(img);
  for (auto& [name, t] : img) params["img/" + name] = t;
}

}  // namespace

namespace paligemma {

at::Tensor prefill(const nlohmann::json& cfg, const Params& params, const at::Tensor& image,
                   const at::Tensor& text, const at::Tensor& mask_ar, const at::Tensor& input_mask,
                   int64_t max_decode_len, gemma::Cache* cache) {
  Parts p = parse_config(cfg);
  BV_CHECK(text.dim() == 2, "paligemma prefill: text must be [batch, length] tokens, got [",
           text.sizes(), "]");
  BV_CHECK(mask_ar.sizes() == text.sizes() && input_mask.sizes() == text.sizes(),
           "paligemma prefill: mask_ar [", mask_ar.sizes(), "] and input_mask [",
           input_mask.sizes(), "] must have text's shape [", text.sizes(), "]");
  BV_CHECK(max_decode_len >= 0, "paligemma prefill: max_decode_len must be >= 0");
  int64_t B = text.size(0), T = text.size(1);
  Embedded e = embed_image_and_text(p, params, image, text, mask_ar, input_mask, false);
  int64_t L = e.n_img + T;
  at::Tensor pre = gemma::prefill(p.llm, subtree(params, "llm/"), e.x, e.attn, e.full_mask,
                                  L + max_decode_len, cache);
  // Each row's last real token: the prompt may end in padding.
  at::Tensor last =
      (e.full_mask.to(at::kLong) * at::arange(1, L + 1, text.options().dtype(at::kLong))).amax(1) -
      1;
  at::Tensor picked = pre.gather(1, last.view({B, 1, 1}).expand({B, 1, pre.size(2)}));
  return gemma::logits(subtree(params, "llm/"), picked).squeeze(1);
}

at::Tensor extend(const nlohmann::json& cfg, const Params& params, const at::Tensor& tokens,
                  gemma::Cache* cache) {
  Parts p = parse_config(cfg);
  BV_CHECK(tokens.dim() == 1, "paligemma extend: tokens must be [batch], one per row");
  Params llm = subtree(params, "llm/");
  at::Tensor x = gemma::embed(p.llm, llm, tokens.unsqueeze(1));
  return gemma::logits(llm, gemma::extend(p.llm, llm, x, cache)).squeeze(1);
}

}  // namespace paligemma

const ModelApi& paligemma_api() {
  static const ModelApi api = {
      "proj.paligemma.paligemma",
      "proj.paligemma.paligemma(img={variant='So400m/14', pool_type='none', scan=True}, "
      "llm={variant='gemma_2b', vocab_size=257152}): PaliGemma (image encoder + Gemma with a "
      "prefix-LM mask)",
      kKeys,
      paligemma_param_specs,
      nullptr,
      paligemma_apply,
      paligemma_relayout};
  return api;
}

}  // namespace bv::models
