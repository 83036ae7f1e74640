// ppp.gemma: big_vision's Gemma decoder (models/ppp/gemma.py) on libtorch.
//   tokens [B, T] -> embed * sqrt(D) -> layers: RMSNorm -> attention (RoPE, multi-query or
//   grouped heads, causal) -> residual -> RMSNorm -> GeGLU MLP -> residual -> final_norm
//   -> logits = x @ embedding^T (tied)
// Parameters are big_vision's, scanned by default (`layers/...` with a leading depth axis) or
// per layer with scan=false (`layers/<i>/...`). Gemma 2's post-norms are not built yet.
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/notes.h"
#include "core/quote.h"
#include "core/tensor_util.h"
#include "models/common.h"
#include "models/model.h"
#include "models/ppp/gemma.h"
#include "models/remat.h"

namespace bv::models {

namespace {

using json = nlohmann::json;

struct GemmaConfig {
  int64_t width = 2048, depth = 18, mlp_dim = 16384, num_heads = 8, num_kv_heads = 1;
  int64_t head_dim = 256, vocab_size = 256000;
  bool scan = true;
  // big_vision's default "none" keeps every activation; any other policy rematerialises each
  // layer when training (models/remat.h), taken as "nothing_saveable": the numbers are the same.
  std::string remat_policy = "none";
  double final_logits_softcap = 0, attn_logits_softcap = 0;
  // big_vision's cache_dtype: the KV cache's keys and values are stored in it (bfloat16 halves
  // a decoding batch's cache); attention reads them back in the queries' dtype.
  std::optional<at::ScalarType> cache_dtype;
};

struct Variant {
  const char* name;
  int64_t width, depth, mlp_dim, num_heads, num_kv_heads, head_dim;
};

const Variant kVariants[] = {
    {"gemma_2b", 2048, 18, 16384, 8, 1, 256},
    {"gemma_7b", 3072, 28, 24576, 16, 16, 256},
};

// The config keys: the parser refuses others, bv.config_keys documents them (ModelApi::keys).
constexpr ConfigKey kKeys[] = {
    {"variant", "string", "\"gemma_2b\"", "gemma_2b or gemma_7b: width, depth, mlp_dim, heads"},
    {"width", "int", "2048", "the model's width"},
    {"depth", "int", "18", "decoder layers"},
    {"mlp_dim", "int", "16384", "the MLP's hidden size"},
    {"num_heads", "int", "8", "query heads"},
    {"num_kv_heads", "int", "1", "key/value heads"},
    {"head_dim", "int", "256", "per-head size"},
    {"vocab_size", "int", "256000", "the embedding's rows"},
    {"scan", "bool", "true", "layers stacked in one parameter each"},
    {"remat_policy", "string", "\"none\"",
     "recompute layers in the backward (any other than none)"},
    {"dropout", "float", "0", "only 0"},
    {"dropout_bdims", "list", "null", "accepted, no effect (no dropout)"},
    {"cache_dtype", "string", "null", "the KV cache's dtype: float32, bfloat16, float16"},
    {"embed_dtype", "string", "\"float32\"", "only float32 (config.autocast for bf16)"},
    {"final_logits_softcap", "float", "0", "tanh soft cap of the logits (0: none)"},
    {"attn_logits_softcap", "float", "0", "tanh soft cap of attention logits (0: none)"},
};

GemmaConfig parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "gemma: the model config must be a table");
  check_config_keys(cfg, kKeys, "gemma");
  GemmaConfig c;
  std::string variant = cfg.value("variant", std::string("gemma_2b"));
  bool found = false;
  for (const Variant& v : kVariants) {
    if (variant == v.name) {
      c.width = v.width, c.depth = v.depth, c.mlp_dim = v.mlp_dim, c.num_heads = v.num_heads;
      c.num_kv_heads = v.num_kv_heads, c.head_dim = v.head_dim;
      found = true;
    }
  }
  BV_CHECK(found, "gemma: unknown variant '", variant, "' (gemma_2b or gemma_7b)");
  auto set_int = [&](const char* key, int64_t* out) {
    if (cfg.contains(key) && !cfg[key].is_null()) {
      BV_CHECK(cfg[key].is_number_integer() && cfg[key].get<int64_t>() > 0,
               "gemma: ", config_key(key), " must be a positive integer, got ",
               snippet(cfg[key].dump()));
      *out = cfg[key].get<int64_t>();
    }
  };
  set_int("width", &c.width);
  set_int("depth", &c.depth);
  set_int("mlp_dim", &c.mlp_dim);
  set_int("num_heads", &c.num_heads);
  set_int("num_kv_heads", &c.num_kv_heads);
  set_int("head_dim", &c.head_dim);
  set_int("vocab_size", &c.vocab_size);
  if (cfg.contains("scan")) c.scan = cfg["scan"].get<bool>();
  if (cfg.contains("remat_policy") && !cfg["remat_policy"].is_null()) {
    c.remat_policy = cfg["remat_policy"].get<std::string>();
  }
  if (cfg.contains("final_logits_softcap") && !cfg["final_logits_softcap"].is_null()) {
    c.final_logits_softcap = cfg["final_logits_softcap"].get<double>();
  }
  if (cfg.contains("attn_logits_softcap") && !cfg["attn_logits_softcap"].is_null()) {
    c.attn_logits_softcap = cfg["attn_logits_softcap"].get<double>();
  }
  // Keys big_vision has that this Gemma does not implement: refused unless at their defaults, so
  // a config never trains differently from what it says.
  if (cfg.contains("dropout") && !cfg["dropout"].is_null()) {
    BV_CHECK(cfg["dropout"].is_number() && cfg["dropout"].get<double>() == 0,
             "gemma: dropout=", snippet(cfg["dropout"].dump()),
             " is not implemented (only 0, big_vision's default)");
  }
  if (cfg.contains("embed_dtype") && !cfg["embed_dtype"].is_null()) {
    BV_CHECK(cfg["embed_dtype"] == "float32",
             "gemma: embed_dtype=", snippet(cfg["embed_dtype"].dump()),
             " is not implemented "
             "(only float32; for bf16 compute use config.autocast = \"bfloat16\")");
  }
  if (cfg.contains("cache_dtype") && !cfg["cache_dtype"].is_null()) {
    const json& d = cfg["cache_dtype"];
    BV_CHECK(d == "float32" || d == "bfloat16" || d == "float16",
             "gemma: cache_dtype=", snippet(d.dump()),
             " is not one of \"float32\", \"bfloat16\", \"float16\"");
    c.cache_dtype = dtype_from_name(d.get<std::string>());
  }
  BV_CHECK(c.num_heads % c.num_kv_heads == 0, "gemma: num_heads ", c.num_heads, " (",
           config_key("num_heads"), " or the variant's) is not a multiple of num_kv_heads ",
           c.num_kv_heads, " (", config_key("num_kv_heads"), " or the variant's)");
  BV_CHECK(c.head_dim % 2 == 0, "gemma: ", config_key("head_dim"), " must be even (RoPE), got ",
           c.head_dim);
  return c;
}

// One layer's parameters (without the layer prefix), with flax's variance_scaling(1, fan_in,
// truncated_normal) fans.
std::vector<ParamSpec> layer_specs(const GemmaConfig& c) {
  int64_t D = c.width, N = c.num_heads, K = c.num_kv_heads, H = c.head_dim, F = c.mlp_dim;
  std::vector<ParamSpec> out;
  add_rms_norm(out, "pre_attention_norm", D);
  add_rms_norm(out, "pre_ffw_norm", D);
  if (K == N) {
    out.push_back({"attn/qkv_einsum/w", {3, N, D, H}, at::kFloat, Init::kLecunNormal, 0, D, H});
  } else {
    out.push_back({"attn/q_einsum/w", {N, D, H}, at::kFloat, Init::kLecunNormal, 0, D, H});
    out.push_back({"attn/kv_einsum/w", {2, K, D, H}, at::kFloat, Init::kLecunNormal, 0, D, H});
  }
  out.push_back({"attn/attn_vec_einsum/w", {N, H, D}, at::kFloat, Init::kLecunNormal, 0, N * H, D});
  out.push_back({"mlp/gating_einsum", {2, D, F}, at::kFloat, Init::kLecunNormal, 0, D, F});
  out.push_back({"mlp/linear", {F, D}, at::kFloat, Init::kLecunNormal, 0, F, D});
  return out;
}

std::vector<ParamSpec> gemma_param_specs(const json& cfg) {
  GemmaConfig c = parse_config(cfg);
  std::vector<ParamSpec> out;
  out.push_back({"embedder/input_embedding",
                 {c.vocab_size, c.width},
                 at::kFloat,
                 Init::kNormal,
                 1.0 / std::sqrt(static_cast<double>(c.width))});
  for (const ParamSpec& s : layer_specs(c)) {
    if (c.scan) {
      ParamSpec stacked = scanned(s, c.depth);
      stacked.name = "layers/" + s.name;
      out.push_back(stacked);
    } else {
      for (int64_t i = 0; i < c.depth; ++i) {
        ParamSpec one = s;
        one.name = "layers/" + std::to_string(i) + "/" + s.name;
        out.push_back(one);
      }
    }
  }
  add_rms_norm(out, "final_norm", c.width);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Forward

// RoPE, half-split: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), timescale 1e4^(2i/H).
at::Tensor rope(const at::Tensor& x, const at::Tensor& positions) {  // x [B, T, N, H]
  int64_t half = x.size(-1) / 2;
  at::Tensor frac =
      at::arange(half, x.options().dtype(at::kFloat)) * (2.0 / static_cast<double>(x.size(-1)));
  at::Tensor timescale = at::pow(1e4, frac);
  at::Tensor angle = positions.to(at::kFloat).unsqueeze(-1) / timescale;  // [B, T, half]
  at::Tensor sin = angle.sin().unsqueeze(2), cos = angle.cos().unsqueeze(2);
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

struct LayerParams {
  const Params& params;
  const GemmaConfig& c;
  int64_t i;
  at::Tensor operator()(const std::string& name) const {
    if (c.scan) return layer_param(params, "layers/" + name, i, "gemma");
    return param(params, "layers/" + std::to_string(i) + "/" + name, "gemma");
  }
  bool has(const std::string& name) const {
    return params.count(c.scan ? "layers/" + name : "layers/" + std::to_string(i) + "/" + name) > 0;
  }
};

// On CUDA, which kernel SDPA picks for q, k, v [B, heads, T or S, H] with this boolean mask,
// said once per kind of call (a NOTE in bv's log): a mask with grouped heads may leave it on
// the math kernel, slower and holding the [T, S] weights, where flash attention was meant. A
// kind: device, dtype, heads, kv heads, head_dim, one query or several, gradients or not (the
// batch and the cache's length, which change every step, are not part of it). Asking
// at::_fused_sdp_choice costs a little host time, once per kind; after that, a set lookup.
void note_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask, bool gqa) {
  using Kind = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool>;
  static std::mutex mutex;
  static std::set<Kind> seen;
  bool one_query = q.size(2) == 1, grad = at::GradMode::is_enabled();
  Kind kind{q.device().index(),
            static_cast<int>(q.scalar_type()),
            q.size(1),
            k.size(1),
            q.size(3),
            one_query,
            grad};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!seen.insert(kind).second) return;
  }
  int64_t choice = at::_fused_sdp_choice(q, k, v, mask, /*dropout_p=*/0.0, /*is_causal=*/false,
                                         /*scale=*/1.0, /*enable_gqa=*/gqa);
  std::string name = gemma::sdp_backend_name(choice);
  post_note(
      bv::str("gemma attention on ", q.device(), " (", q.scalar_type(), ", ", q.size(1),
              " heads on ", k.size(1), " kv heads, head_dim ", q.size(3),
              one_query ? ", one query per row" : ", a query per token",
              grad ? ", with gradients" : "", "): SDPA runs the ", name, " kernel",
              name == "math" ? " (unfused: slower, and it keeps the attention weights)" : ""));
}

// x [B, T, D], mask [B, T, S] bool -> [B, T, D]. With a cache, this call's keys and values are
// written into its slots [length, length + T) and the queries attend over slots [0, length + T).
at::Tensor attention(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& mask,
                     const LayerParams& p, const GemmaConfig& c, gemma::Cache* cache) {
  int64_t B = x.size(0), T = x.size(1), N = c.num_heads, K = c.num_kv_heads, H = c.head_dim;
  at::Tensor q, k, v;
  if (p.has("attn/qkv_einsum/w")) {
    at::Tensor w = p("attn/qkv_einsum/w");  // [3, N, D, H]
    q = at::einsum("btd,ndh->btnh", {x, w[0]});
    k = at::einsum("btd,ndh->btnh", {x, w[1]});
    v = at::einsum("btd,ndh->btnh", {x, w[2]});
  } else {
    q = at::einsum("btd,ndh->btnh", {x, p("attn/q_einsum/w")});
    at::Tensor kv = p("attn/kv_einsum/w");  // [2, K, D, H]
    k = at::einsum("btd,kdh->btkh", {x, kv[0]});
    v = at::einsum("btd,kdh->btkh", {x, kv[1]});
  }
  q = rope(q, positions) * (1.0 / std::sqrt(static_cast<double>(H)));
  k = rope(k, positions);
  if (cache) {
    int64_t start = cache->length;
    BV_CHECK(start + T <= cache->k[p.i].size(1), "gemma: the KV cache holds ",
             cache->k[p.i].size(1), " tokens; ", start + T, " do not fit (raise max_len)");
    cache->k[p.i].narrow(1, start, T).copy_(k);
    cache->v[p.i].narrow(1, start, T).copy_(v);
    k = cache->k[p.i].narrow(1, 0, start + T).to(q.scalar_type());
    v = cache->v[p.i].narrow(1, 0, start + T).to(q.scalar_type());
  }
  // Grouped heads: query head n = kv head (n / G), as big_vision's (K, G) reshape with K outer.
  int64_t G = N / K;
  at::Tensor enc;
  if (!x.device().is_cpu() && c.attn_logits_softcap == 0) {
    // Off the CPU, libtorch's fused kernel (flash or memory-efficient attention on CUDA), with
    // its grouped heads (enable_gqa repeats kv head n / G for query head n) and the mask as
    // "may attend". q is already scaled. A query row always sees itself or an earlier real
    // token, so no row is masked whole (where the fused kernel and the -inf fill would differ).
    at::Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);
    at::Tensor m = mask.reshape({B, 1, T, -1});  // not view: the mask may come strided
    if (x.device().is_cuda()) note_sdp_choice(qt, kt, vt, m, G > 1);
    at::Tensor o = at::scaled_dot_product_attention(qt, kt, vt, m, /*dropout_p=*/0.0,
                                                    /*is_causal=*/false, /*scale=*/1.0,
                                                    /*enable_gqa=*/G > 1);
    enc = o.transpose(1, 2);  // [B, T, N, H]
  } else {
    at::Tensor qg = q.view({B, T, K, G, H});
    at::Tensor logits = at::einsum("btkgh,bskh->bkgts", {qg, k});
    if (c.attn_logits_softcap > 0) {
      logits = at::tanh(logits / c.attn_logits_softcap) * c.attn_logits_softcap;
    }
    logits = logits.masked_fill(mask.logical_not().view({B, 1, 1, T, -1}), -2.3819763e38);
    at::Tensor probs = at::softmax(logits, -1);
    enc = at::einsum("bkgts,bskh->btkgh", {probs, v}).reshape({B, T, N, H});
  }
  return at::einsum("btnh,nhd->btd", {enc, p("attn/attn_vec_einsum/w")});
}

at::Tensor feed_forward(const at::Tensor& x, const LayerParams& p) {
  at::Tensor w = p("mlp/gating_einsum");  // [2, D, F]
  at::Tensor gate = at::gelu(at::matmul(x, w[0]), "tanh") * at::matmul(x, w[1]);
  return at::matmul(gate, p("mlp/linear"));
}

// Layer i: x + attention(norm(x)), then + feed_forward(norm(...)).
at::Tensor layer_forward(const Params& params, const GemmaConfig& c, int64_t i, const at::Tensor& x,
                         const at::Tensor& positions, const at::Tensor& mask, gemma::Cache* cache) {
  LayerParams p{params, c, i};
  at::Tensor h =
      x + attention(rms_norm(x, p("pre_attention_norm/scale")), positions, mask, p, c, cache);
  return h + feed_forward(rms_norm(h, p("pre_ffw_norm/scale")), p);
}

// inputs: tokens [B, T] (int), then optionally a bool attention mask [B, T, T] (default causal)
// and positions [B, T] (default 0..T-1).
Output gemma_apply(const json& cfg, const Params& params, const std::vector<at::Tensor>& inputs,
                   bool /*train*/) {
  GemmaConfig c = parse_config(cfg);
  BV_CHECK(!inputs.empty() && inputs.size() <= 3,
           "gemma: inputs are tokens [, mask [, positions]]");
  const at::Tensor& tokens = inputs[0];
  int64_t B = tokens.size(0), T = tokens.dim() == 2 ? tokens.size(1) : 0;
  at::Tensor mask =
      inputs.size() >= 2
          ? inputs[1].to(at::kBool)
          : at::ones({T, T}, tokens.options().dtype(at::kBool)).tril().expand({B, T, T});
  at::Tensor positions = inputs.size() == 3
                             ? inputs[2]
                             : at::arange(T, tokens.options().dtype(at::kLong)).expand({B, T});
  Output out;
  at::Tensor x = gemma::stack(cfg, params, gemma::embed(cfg, params, tokens), mask, positions);
  out.aux.emplace_back("pre_logits", x);
  at::Tensor logits = gemma::logits(params, x);
  out.aux.emplace_back("logits_pre_norm", logits);
  if (c.final_logits_softcap > 0) {
    logits = at::tanh(logits / c.final_logits_softcap) * c.final_logits_softcap;
  }
  out.aux.emplace_back("logits", logits);
  out.out = logits;
  return out;
}

}  // namespace

namespace gemma {

at::Tensor embed(const json& cfg, const Params& params, const at::Tensor& tokens) {
  GemmaConfig c = parse_config(cfg);
  BV_CHECK(tokens.dim() == 2 && !at::isFloatingType(tokens.scalar_type()),
           "gemma: tokens must be an integer [batch, length] tensor");
  const at::Tensor& table = param(params, "embedder/input_embedding", "gemma");
  return at::embedding(table, tokens.to(at::kLong)) * std::sqrt(static_cast<double>(c.width));
}

at::Tensor stack(const json& cfg, const Params& params, at::Tensor x, const at::Tensor& mask,
                 const at::Tensor& positions, Cache* cache) {
  GemmaConfig c = parse_config(cfg);
  int64_t B = x.size(0), T = x.size(1), S = T + (cache ? cache->length : 0);
  BV_CHECK(mask.dim() == 3 && mask.size(0) == B && mask.size(1) == T && mask.size(2) == S,
           "gemma: mask must be [batch, length, ", S, "]");
  bool remat = c.remat_policy != "none" && !cache && at::GradMode::is_enabled();
  for (int64_t i = 0; i < c.depth; ++i) {
    if (remat) {
      // The layer runs again during the backward: it owns copies of what it reads.
      x = models::remat(
          [params, c, i, positions, mask](const at::Tensor& h) {
            return layer_forward(params, c, i, h, positions, mask, nullptr);
          },
          x);
    } else {
      x = layer_forward(params, c, i, x, positions, mask, cache);
    }
  }
  if (cache) cache->length += T;
  return rms_norm(x, param(params, "final_norm/scale", "gemma"));
}

at::Tensor prefill(const json& cfg, const Params& params, const at::Tensor& x,
                   const at::Tensor& mask, const at::Tensor& input_mask, int64_t max_len,
                   Cache* cache) {
  GemmaConfig c = parse_config(cfg);
  int64_t B = x.size(0), T = x.size(1);
  BV_CHECK(max_len >= T, "gemma: max_len ", max_len, " is shorter than the prompt (", T, ")");
  BV_CHECK(input_mask.dim() == 2 && input_mask.size(0) == B && input_mask.size(1) == T,
           "gemma: input_mask must be [batch, length]");
  cache->k.clear();
  cache->v.clear();
  at::TensorOptions kv = x.options().dtype(c.cache_dtype.value_or(x.scalar_type()));
  for (int64_t i = 0; i < c.depth; ++i) {
    cache->k.push_back(at::zeros({B, max_len, c.num_kv_heads, c.head_dim}, kv));
    cache->v.push_back(at::zeros({B, max_len, c.num_kv_heads, c.head_dim}, kv));
  }
  cache->length = 0;
  cache->key_mask = at::zeros({B, max_len}, x.options().dtype(at::kBool));
  at::Tensor real = input_mask.to(at::kBool);
  cache->key_mask.narrow(1, 0, T).copy_(real);
  // Padding takes no position: the next real token continues where the real ones stopped.
  at::Tensor positions = (real.to(at::kLong).cumsum(1) - 1).clamp_min(0);
  cache->next_position = real.to(at::kLong).sum(1);
  return stack(cfg, params, x, mask.logical_and(real.unsqueeze(1)), positions, cache);
}

at::Tensor extend(const json& cfg, const Params& params, const at::Tensor& x, Cache* cache) {
  BV_CHECK(!cache->k.empty(), "gemma: extend needs a cache made by prefill");
  BV_CHECK(x.dim() == 3 && x.size(1) == 1, "gemma: extend takes one token per row, [batch, 1, D]");
  int64_t B = x.size(0), S = cache->length + 1;
  BV_CHECK(S <= cache->key_mask.size(1), "gemma: the KV cache holds ", cache->key_mask.size(1),
           " tokens; ", S, " do not fit (raise max_len)");
  cache->key_mask.select(1, cache->length).fill_(true);
  at::Tensor mask = cache->key_mask.narrow(1, 0, S).view({B, 1, S});
  at::Tensor positions = cache->next_position.view({B, 1}).clone();
  cache->next_position += 1;
  return stack(cfg, params, x, mask, positions, cache);
}

at::Tensor logits(const Params& params, const at::Tensor& pre_logits) {
  return at::matmul(pre_logits, param(params, "embedder/input_embedding", "gemma").t());
}

std::string sdp_backend_name(int64_t choice) {
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::error: return "none";
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "efficient";
    case at::SDPBackend::cudnn_attention: return "cudnn";
    case at::SDPBackend::overrideable: return "overrideable";
  }
  return bv::str("unknown (", choice, ")");  // a backend newer than this file
}

}  // namespace gemma

const ModelApi& gemma_api() {
  static const ModelApi api = {
      "ppp.gemma",
      "ppp.gemma(variant='gemma_2b', scan=True, vocab_size=256000, ...): big_vision's Gemma "
      "decoder (RMSNorm, RoPE, multi-query attention, GeGLU, tied embeddings)",
      kKeys,
      gemma_param_specs,
      nullptr,
      gemma_apply};
  return api;
}

}  // namespace bv::models
