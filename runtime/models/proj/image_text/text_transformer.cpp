// proj.image_text.text_transformer: big_vision's text encoder for SigLIP/LiT
// (models/proj/image_text/text_transformer.py): token embedding (Embed_0) + a learned position
// embedding + ViT's encoder (named Encoder_0 here) + pooling (last, first, gap, max, map) + head.
// `text_len` (default 64) sizes the position embedding; big_vision reads it from the first batch.
// The out dict is big_vision's: embedded, blockNN/{sa,+sa,mlp,+mlp}, pre_ln (without scan),
// transformed, vocab_logits (lazy), pre_logits, logits (with num_classes).
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/quote.h"
#include "models/common.h"
#include "models/model.h"
#include "models/vit.h"

namespace bv::models {

namespace {

using json = nlohmann::json;

struct TextConfig {
  EncoderConfig enc{512, 12, 2048, 8, 0.0, false};
  int64_t num_classes = 0, vocab_size = 32000, text_len = 64;
  std::string pool_type = "last";
};

// big_vision's ViT variant table, for `variant` ("B", "So400m", ...).
bool apply_variant(const std::string& v, EncoderConfig* e) {
  struct V {
    const char* name;
    int64_t width, depth, mlp, heads;
  };
  static const V table[] = {
      {"mu", 32, 1, 128, 2},          {"Ti", 192, 12, 768, 3},   {"S", 384, 12, 1536, 6},
      {"M", 512, 12, 2048, 8},        {"B", 768, 12, 3072, 12},  {"L", 1024, 24, 4096, 16},
      {"So400m", 1152, 27, 4304, 16}, {"H", 1280, 32, 5120, 16}, {"g", 1408, 40, 6144, 16},
      {"G", 1664, 48, 8192, 16},
  };
  for (const V& t : table) {
    if (v == t.name) {
      e->width = t.width, e->depth = t.depth, e->mlp_dim = t.mlp, e->num_heads = t.heads;
      return true;
    }
  }
  return false;
}

// The config keys: the parser refuses others, bv.config_keys documents them (ModelApi::keys).
constexpr ConfigKey kKeys[] = {
    {"variant", "string", "null",
     "a ViT size (mu, Ti, S, M, B, L, So400m, H, g, g-opt, G, G-opt, e): width, depth, mlp_dim, "
     "num_heads"},
    {"num_classes", "int", "null", "the head's outputs; None: no head"},
    {"width", "int", "512", "the encoder's width"},
    {"depth", "int", "12", "encoder blocks"},
    {"mlp_dim", "int", "2048", "the MLP's hidden size"},
    {"num_heads", "int", "8", "attention heads"},
    {"dropout", "float", "0", "dropout rate"},
    {"vocab_size", "int", "32000", "the embedding's rows"},
    {"pool_type", "string", "\"last\"", "last, first, gap, map or max"},
    {"scan", "bool", "false", "layers stacked in one parameter each"},
    {"remat_policy", "string", "\"nothing_saveable\"",
     "recompute layers when scanned (none: keep)"},
    {"text_len", "int", "64", "tokens per text"},
};

TextConfig parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "text_transformer: the model config must be a table");
  check_config_keys(cfg, kKeys, "text_transformer");
  TextConfig c;
  if (cfg.contains("variant") && !cfg["variant"].is_null()) {
    std::string v = cfg["variant"].get<std::string>();
    BV_CHECK(apply_variant(v.substr(0, v.find('/')), &c.enc), "text_transformer: unknown variant '",
             v, "'");
  }
  auto get_int = [&](const char* key, int64_t* out) {
    if (cfg.contains(key) && !cfg[key].is_null()) {
      BV_CHECK(cfg[key].is_number_integer() && cfg[key].get<int64_t>() > 0,
               "text_transformer: ", config_key(key), " must be a positive integer, got ",
               snippet(cfg[key].dump()));
      *out = cfg[key].get<int64_t>();
    }
  };
  get_int("num_classes", &c.num_classes);
  get_int("width", &c.enc.width);
  get_int("depth", &c.enc.depth);
  get_int("mlp_dim", &c.enc.mlp_dim);
  get_int("num_heads", &c.enc.num_heads);
  get_int("vocab_size", &c.vocab_size);
  get_int("text_len", &c.text_len);
  if (cfg.contains("dropout")) {
    const json& d = cfg["dropout"];
    BV_CHECK(d.is_number() && d.get<double>() >= 0 && d.get<double>() < 1,
             "text_transformer: ", config_key("dropout"), " must be a rate in [0, 1), got ",
             snippet(d.dump()));
    c.enc.dropout = d.get<double>();
  }
  if (cfg.contains("scan")) c.enc.scan = cfg["scan"].get<bool>();
  // As ViT's encoder (big_vision shares it): a scanned encoder rematerialises its layers unless
  // remat_policy is "none".
  std::string remat_policy = "nothing_saveable";
  if (cfg.contains("remat_policy") && !cfg["remat_policy"].is_null()) {
    remat_policy = cfg["remat_policy"].get<std::string>();
  }
  c.enc.remat = c.enc.scan && remat_policy != "none";
  if (cfg.contains("pool_type")) c.pool_type = cfg["pool_type"].get<std::string>();
  static const std::set<std::string> pools = {"last", "first", "mean", "gap", "max", "gmp", "map"};
  BV_CHECK(pools.count(c.pool_type), "text_transformer: unknown pool_type '", c.pool_type, "'");
  BV_CHECK(c.enc.width % c.enc.num_heads == 0, "text_transformer: width ", c.enc.width, " (",
           config_key("width"), " or the variant's) is not divisible by num_heads ",
           c.enc.num_heads, " (", config_key("num_heads"), " or the variant's)");
  return c;
}

std::vector<ParamSpec> text_param_specs(const json& cfg) {
  TextConfig c = parse_config(cfg);
  int64_t d = c.enc.width;
  std::vector<ParamSpec> out;
  // flax nn.Embed: variance_scaling(1, fan_in, normal) whose fan_in works out to the width.
  out.push_back({"Embed_0/embedding",
                 {c.vocab_size, d},
                 at::kFloat,
                 Init::kNormal,
                 1.0 / std::sqrt(static_cast<double>(d))});
  out.push_back({"pos_embedding",
                 {1, c.text_len, d},
                 at::kFloat,
                 Init::kNormal,
                 1.0 / std::sqrt(static_cast<double>(d))});
  add_encoder_specs(out, c.enc, "Encoder_0");
  if (c.pool_type == "map") add_map_head_specs(out, c.enc);
  if (c.num_classes) {
    add_dense(out, "head", {d, c.num_classes}, {c.num_classes}, Init::kLecunNormal, d,
              c.num_classes);
  }
  return out;
}

Output text_apply(const json& cfg, const Params& params, const std::vector<at::Tensor>& inputs,
                  bool train) {
  TextConfig c = parse_config(cfg);
  BV_CHECK(inputs.size() == 1, "text_transformer: expected one input (tokens)");
  const at::Tensor& text = inputs[0];
  BV_CHECK(text.dim() == 2 && !at::isFloatingType(text.scalar_type()),
           "text_transformer: tokens must be an integer [batch, length] tensor");
  auto P = [&](const std::string& name) { return param(params, name, "text_transformer"); };
  Output out;
  at::Tensor table = P("Embed_0/embedding");
  at::Tensor x = at::embedding(table, text.to(at::kLong));
  out.aux.emplace_back("embedded", x);
  const at::Tensor& pe = P("pos_embedding");
  BV_CHECK(pe.size(1) == text.size(1), "text_transformer: pos_embedding has ", pe.size(1),
           " positions but the text has ", text.size(1), " tokens (set model.text_len)");
  // big_vision spreads the Encoder's out dict into the model's own: blockNN/..., pre_ln at the
  // top level (ViT nests them under encoder/).
  x = encoder_forward(params, c.enc, "Encoder_0", x + pe, train, &out, /*out_prefix=*/"");
  out.aux.emplace_back("transformed", x);
  // vocab_logits: every token against the whole vocabulary through the shared embedding table
  // (flax's Embed.attend), [n, l, vocab_size]. Nothing but an inspecting caller reads it, so it
  // is lazy: the training step never pays for it.
  out.lazy.emplace_back("vocab_logits", [x, table]() { return at::matmul(x, table.t()); });
  at::Tensor pooled;
  if (c.pool_type == "last") pooled = x.select(1, -1);
  else if (c.pool_type == "first") pooled = x.select(1, 0);
  else if (c.pool_type == "mean" || c.pool_type == "gap") pooled = x.mean(1);
  else if (c.pool_type == "max" || c.pool_type == "gmp") pooled = std::get<0>(x.max(1));
  else pooled = map_head_forward(params, c.enc, x);
  out.aux.emplace_back("pre_logits", pooled);
  classifier_head(params, pooled, c.num_classes, "text_transformer", out);
  return out;
}

}  // namespace

const ModelApi& text_transformer_api() {
  static const ModelApi api = {
      "proj.image_text.text_transformer",
      "proj.image_text.text_transformer(variant='B', vocab_size=32000, pool_type='last', "
      "num_classes=None, text_len=64): the SigLIP/LiT text encoder",
      kKeys,
      text_param_specs,
      nullptr,
      text_apply};
  return api;
}

}  // namespace bv::models
