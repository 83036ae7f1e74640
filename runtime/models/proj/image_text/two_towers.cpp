// proj.image_text.two_towers: big_vision's SigLIP/LiT model
// (models/proj/image_text/two_towers.py): an image tower `img` (vit) and a text tower `txt`
// (text_transformer), each embedding L2-normalised, plus the temperature `t` (stored as its log)
// and, for SigLIP, the bias `b`. apply(images, texts) returns the pairwise logits
// zimg @ ztxt^T * exp(t) + b, with zimg, ztxt and big_vision's out dict in the out table;
// apply(images) and apply(nil, texts) run one tower and return its embedding.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/quote.h"
#include "models/model.h"

namespace bv::models {

namespace {

using json = nlohmann::json;

struct TowersConfig {
  json img, txt;
  double temperature_init = 1.0;
  bool has_bias = false;
  double bias_init = 0;
};

// The config keys: the parser refuses others, bv.config_keys documents them (ModelApi::keys).
constexpr ConfigKey kKeys[] = {
    {"image", "table", "{}", "the image tower's options (model:vit)", "image_model"},
    {"text", "table", "{}", "the text tower's options", "text_model"},
    {"image_model", "string", "\"vit\"", "only vit"},
    {"text_model", "string", "\"proj.image_text.text_transformer\"", "only this one"},
    {"out_dim", "int|list", "128", "both towers' output size, or {img, txt} (None: no head)"},
    {"temperature_init", "float", "1.0", "the learned temperature's start"},
    {"bias_init", "float", "null", "a learned bias starting here (SigLIP); None: no bias"},
};

TowersConfig parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "two_towers: the model config must be a table");
  check_config_keys(cfg, kKeys, "two_towers");
  for (const char* key : {"image_model", "text_model"}) {
    if (cfg.contains(key)) {
      std::string want = std::string(key) == "image_model" ? "vit"
                                                           : "proj.image_text.text_transformer";
      BV_CHECK(cfg[key] == want, "two_towers: only ", key, "='", want, "' is built, got ",
               snippet(cfg[key].dump()));
    }
  }
  TowersConfig c;
  c.img = cfg.contains("image") ? cfg["image"] : json::object();
  c.txt = cfg.contains("text") ? cfg["text"] : json::object();
  // out_dim: an int for both towers or (img, txt); null means no head on that tower.
  json out_dim = cfg.contains("out_dim") ? cfg["out_dim"] : json(128);
  json dims = out_dim.is_array() ? out_dim : json::array({out_dim, out_dim});
  BV_CHECK(dims.size() == 2, "two_towers: ", config_key("out_dim"),
           " must be an int or (img, txt)");
  for (const json& d : dims) {
    BV_CHECK(d.is_null() || (d.is_number_integer() && d.get<int64_t>() > 0),
             "two_towers: ", config_key("out_dim"),
             " must be a positive integer, None or two of them, got ", snippet(out_dim.dump()));
  }
  c.img["num_classes"] = dims[0];
  c.txt["num_classes"] = dims[1];
  if (cfg.contains("temperature_init")) {
    const json& t = cfg["temperature_init"];
    // (stored as its log)
    BV_CHECK(t.is_number() && t.get<double>() > 0, "two_towers: ", config_key("temperature_init"),
             " must be a positive number, got ", snippet(t.dump()));
    c.temperature_init = t.get<double>();
  }
  if (cfg.contains("bias_init") && !cfg["bias_init"].is_null()) {
    c.has_bias = true;
    c.bias_init = cfg["bias_init"].get<double>();
  }
  return c;
}

std::vector<ParamSpec> towers_param_specs(const json& cfg) {
  TowersConfig c = parse_config(cfg);
  std::vector<ParamSpec> out;
  {
    ConfigPart part("image");
    append_prefixed(out, vit_api().param_specs(c.img), "img/");
  }
  {
    ConfigPart part("text");
    append_prefixed(out, text_transformer_api().param_specs(c.txt), "txt/");
  }
  out.push_back({"t", {1}, at::kFloat, Init::kFixed});
  if (c.has_bias) out.push_back({"b", {1}, at::kFloat, Init::kFixed});
  return out;
}

void towers_init_fixed(const json& cfg, Params& params) {
  TowersConfig c = parse_config(cfg);
  params["t"].fill_(std::log(c.temperature_init));
  if (c.has_bias) params["b"].fill_(c.bias_init);
}

// A tower's outputs under `prefix` ("img/"), lazy ones staying lazy, then its embedding's norm
// and the embedding divided by it: big_vision's "img/norm" and "img/normalized". Returns the
// normalized embedding.
at::Tensor add_tower(Output& out, Output tower, const std::string& prefix) {
  for (auto& [name, t] : tower.aux) out.aux.emplace_back(prefix + name, std::move(t));
  for (auto& [name, f] : tower.lazy) out.lazy.emplace_back(prefix + name, std::move(f));
  at::Tensor norm = tower.out.norm(2, {-1}, /*keepdim=*/true);
  at::Tensor z = tower.out / (norm + 1e-8);
  out.aux.emplace_back(prefix + "norm", norm);
  out.aux.emplace_back(prefix + "normalized", z);
  return z;
}

// big_vision returns (zimg, ztxt, out); here the pairwise logits come first and zimg, ztxt join
// big_vision's out dict: img/... and txt/... (each tower's own out, its norm, normalized),
// t = exp(t/parameter), t/parameter (the parameter, the log temperature) and b.
// As big_vision's __call__(image, text=None), either input may be left out (an undefined tensor,
// nil from Lua, or no second input): only the other tower runs, its normalized embedding comes
// first instead of the logits, and zimg or ztxt is absent from the out dict. t, t/parameter and b
// are always there. big_vision's zero-shot and retrieval evaluators embed each side this way.
Output towers_apply(const json& cfg, const Params& params, const std::vector<at::Tensor>& inputs,
                    bool train) {
  TowersConfig c = parse_config(cfg);
  BV_CHECK(inputs.size() == 1 || inputs.size() == 2,
           "two_towers: inputs are images, texts or both ((images), (images, texts) or (nil, "
           "texts)), got ",
           inputs.size(), " inputs");
  at::Tensor images = inputs[0];
  at::Tensor texts = inputs.size() == 2 ? inputs[1] : at::Tensor();
  BV_CHECK(images.defined() || texts.defined(),
           "two_towers: neither images nor texts were given: apply(params, images, texts) needs "
           "at least one (nil for the tower not to run)");
  Output out;
  at::Tensor zimg;
  if (images.defined()) {
    ConfigPart part("image");
    zimg = add_tower(out, vit_api().apply(c.img, subtree(params, "img/"), {images}, train), "img/");
    out.aux.emplace_back("zimg", zimg);
  }
  at::Tensor ztxt;
  if (texts.defined()) {
    ConfigPart part("text");
    ztxt = add_tower(
        out, text_transformer_api().apply(c.txt, subtree(params, "txt/"), {texts}, train), "txt/");
    out.aux.emplace_back("ztxt", ztxt);
  }
  at::Tensor t_param = param(params, "t", "two_towers");
  at::Tensor t = t_param.exp();
  out.aux.emplace_back("t", t);
  out.aux.emplace_back("t/parameter", t_param);
  at::Tensor b;
  if (c.has_bias) {
    b = param(params, "b", "two_towers");
    out.aux.emplace_back("b", b);
  }
  if (!zimg.defined() || !ztxt.defined()) {
    out.out = zimg.defined() ? zimg : ztxt;
    return out;
  }
  at::Tensor logits = at::matmul(zimg, ztxt.t()) * t;
  out.out = b.defined() ? logits + b : logits;
  return out;
}

}  // namespace

const ModelApi& two_towers_api() {
  static const ModelApi api = {
      "proj.image_text.two_towers",
      "proj.image_text.two_towers(image={...}, text={...}, out_dim=128, temperature_init=1.0, "
      "bias_init=None): SigLIP/LiT image and text towers with a learned temperature (and bias)",
      kKeys,
      towers_param_specs,
      towers_init_fixed,
      towers_apply};
  return api;
}

}  // namespace bv::models
