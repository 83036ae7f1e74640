// vit: big_vision's Vision Transformer (models/vit.py) on libtorch, with its parameter tree.
//   image [n, H, W, 3] -> patches (a VALID conv as one matmul) + position embedding
//   -> pre-LN encoder blocks (attention, GELU-tanh MLP) -> encoder_norm -> pool -> head
// The config keys are big_vision's (variant "B/16", pool_type, posemb, rep_size, ...), plus
// `image_size` (default 224): big_vision reads it from the first batch when it initialises.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "core/error.h"
#include "core/notes.h"
#include "core/quote.h"
#include "core/tensor_util.h"
#include "device/autocast.h"
#include "models/common.h"
#include "models/model.h"
#include "models/remat.h"
#include "models/vit.h"

namespace bv::models {

namespace {

using json = nlohmann::json;

struct ViTConfig {
  int64_t num_classes = 0;  // 0: no head (a feature extractor)
  int64_t patch_h = 16, patch_w = 16;
  int64_t width = 768, depth = 12, mlp_dim = 0, num_heads = 12;
  std::string posemb = "learn";
  int64_t rep_size = 0;  // 0: no pre_logits layer
  double dropout = 0;
  std::string pool_type = "gap";
  bool head_zeroinit = true;
  bool scan = false;
  // big_vision remats a scanned encoder's layers (policy "nothing_saveable" by default); "none"
  // turns it off. Every other policy is taken as "nothing_saveable": the numbers are the same.
  std::string remat_policy = "nothing_saveable";
  // big_vision's dtype_mm: the patch embedding and the encoder's matmuls (attention and MLP) in
  // this dtype; LayerNorms, the residual stream, the MAP head and the head stay float32.
  std::string dtype_mm = "float32";
  int64_t image_h = 224, image_w = 224;
  int64_t grid_h() const { return image_h / patch_h; }
  int64_t grid_w() const { return image_w / patch_w; }
};

struct Variant {
  const char* name;
  int64_t width, depth, mlp_dim, num_heads;
};

// big_vision's decode_variant table.
const Variant kVariants[] = {
    {"mu", 32, 1, 128, 2},          {"Ti", 192, 12, 768, 3},   {"S", 384, 12, 1536, 6},
    {"M", 512, 12, 2048, 8},        {"B", 768, 12, 3072, 12},  {"L", 1024, 24, 4096, 16},
    {"So400m", 1152, 27, 4304, 16}, {"H", 1280, 32, 5120, 16}, {"g", 1408, 40, 6144, 16},
    {"g-opt", 1536, 40, 6144, 16},  {"G", 1664, 48, 8192, 16}, {"G-opt", 1536, 48, 8192, 16},
    {"e", 1792, 56, 15360, 16},
};

int64_t positive_int(const json& v, const char* key) {
  BV_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, "vit: ", config_key(key),
           " must be a positive integer, got ", snippet(v.dump()));
  return v.get<int64_t>();
}

// A size given as N or [h, w].
void read_pair(const json& v, const char* key, int64_t* h, int64_t* w) {
  if (v.is_array()) {
    BV_CHECK(v.size() == 2, "vit: ", config_key(key), " must be N or [h, w], got ",
             snippet(v.dump()));
    *h = positive_int(v[0], key);
    *w = positive_int(v[1], key);
  } else {
    *h = *w = positive_int(v, key);
  }
}

// The config keys: the parser refuses others, bv.config_keys documents them (ModelApi::keys).
constexpr ConfigKey kKeys[] = {
    {"variant", "string", "null",
     "SIZE/PATCH, e.g. \"B/16\" (sizes: mu, Ti, S, M, B, L, So400m, H, g, g-opt, G, G-opt, e); "
     "sets width, depth, mlp_dim, num_heads and patch_size"},
    {"num_classes", "int", "null",
     "the head's outputs; None: no head (the trainer sets it from config.num_classes)"},
    {"patch_size", "list", "[16,16]", "the patch, {h, w}"},
    {"width", "int", "768", "the encoder's width"},
    {"depth", "int", "12", "encoder blocks"},
    {"mlp_dim", "int", "null", "the MLP's hidden size (default 4 * width)"},
    {"num_heads", "int", "12", "attention heads"},
    {"posemb", "string", "\"learn\"", "position embeddings: learn or sincos2d"},
    {"rep_size", "int|bool", "false", "a pre_logits layer of this size (true: width)"},
    {"dropout", "float", "0", "dropout rate"},
    {"pool_type", "string", "\"gap\"", "gap, map, tok, 0 or none"},
    {"head_zeroinit", "bool", "true", "the head starts at zero"},
    {"scan", "bool", "false", "the encoder's layers stacked in one parameter each"},
    {"remat_policy", "string", "\"nothing_saveable\"",
     "recompute layers in the backward when scanned (none: keep activations)"},
    {"dtype_mm", "string", "\"float32\"", "the matmuls' dtype: float32, bfloat16, float16"},
    {"image_size", "list", "[224,224]",
     "the input image size, {h, w} (trainers set it from the data)"},
};

ViTConfig parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "vit: the model config must be a table");
  check_config_keys(cfg, kKeys, "vit");
  ViTConfig c;
  // Where the patch size comes from, for the messages: the variant or patch_size.
  std::string patch_from = "the default patch";
  if (cfg.contains("variant") && !cfg["variant"].is_null()) {
    BV_CHECK(cfg["variant"].is_string(), "vit: ", config_key("variant"),
             " must be a string such as \"B/16\", got ", snippet(cfg["variant"].dump()));
    std::string v = cfg["variant"].get<std::string>();
    std::string size = v.substr(0, v.find('/'));
    bool found = false;
    for (const Variant& var : kVariants) {
      if (size == var.name) {
        c.width = var.width, c.depth = var.depth, c.mlp_dim = var.mlp_dim;
        c.num_heads = var.num_heads;
        found = true;
      }
    }
    BV_CHECK(found, "vit: unknown variant '", snippet(v),
             "' (sizes: mu, Ti, S, M, B, L, So400m, H, g, ", "g-opt, G, G-opt, e; e.g. \"B/16\")");
    if (v.find('/') != std::string::npos) {
      std::string patch = v.substr(v.find('/') + 1);
      std::string where = str(config_key("variant"), " '", snippet(v), "'");
      BV_CHECK(!patch.empty() && patch.find_first_not_of("0123456789") == std::string::npos,
               "vit: ", where, ": the patch size after '/' must be a whole number");
      BV_CHECK(patch.size() <= 9, "vit: ", where, ": the patch size is too large");
      c.patch_h = c.patch_w = std::stoll(patch);
      BV_CHECK(c.patch_h > 0, "vit: ", where, ": the patch size must be positive");
      patch_from = where;
    }
  }
  // Explicit keys override the variant, as in big_vision.
  auto get = [&](const char* key) -> const json* {
    return cfg.contains(key) && !cfg[key].is_null() ? &cfg[key] : nullptr;
  };
  if (auto v = get("num_classes")) c.num_classes = positive_int(*v, "num_classes");
  if (auto v = get("patch_size")) {
    read_pair(*v, "patch_size", &c.patch_h, &c.patch_w);
    patch_from = config_key("patch_size");
  }
  if (auto v = get("width")) c.width = positive_int(*v, "width");
  if (auto v = get("depth")) c.depth = positive_int(*v, "depth");
  if (auto v = get("mlp_dim")) c.mlp_dim = positive_int(*v, "mlp_dim");
  if (auto v = get("num_heads")) c.num_heads = positive_int(*v, "num_heads");
  if (auto v = get("posemb")) c.posemb = v->get<std::string>();
  if (auto v = get("rep_size")) {
    c.rep_size = v->is_boolean() ? (v->get<bool>() ? c.width : 0) : positive_int(*v, "rep_size");
  }
  if (auto v = get("dropout")) {
    BV_CHECK(v->is_number() && v->get<double>() >= 0 && v->get<double>() < 1,
             "vit: ", config_key("dropout"), " must be a rate in [0, 1), got ", snippet(v->dump()));
    c.dropout = v->get<double>();
  }
  if (auto v = get("pool_type")) c.pool_type = v->get<std::string>();
  if (auto v = get("head_zeroinit")) c.head_zeroinit = v->get<bool>();
  if (auto v = get("scan")) c.scan = v->get<bool>();
  if (auto v = get("remat_policy")) c.remat_policy = v->get<std::string>();
  if (auto v = get("image_size")) read_pair(*v, "image_size", &c.image_h, &c.image_w);
  if (auto v = get("dtype_mm")) {
    BV_CHECK(v->is_string() &&
                 (v->get<std::string>() == "float32" || v->get<std::string>() == "bfloat16" ||
                  v->get<std::string>() == "float16"),
             "vit: dtype_mm=", snippet(v->dump()),
             " is not one of \"float32\", \"bfloat16\", \"float16\"");
    c.dtype_mm = v->get<std::string>();
  }
  if (c.mlp_dim == 0) c.mlp_dim = 4 * c.width;
  BV_CHECK(c.posemb == "learn" || c.posemb == "sincos2d", "vit: unknown posemb '", c.posemb,
           "' (learn or sincos2d)");
  BV_CHECK(c.pool_type == "gap" || c.pool_type == "map" || c.pool_type == "tok" ||
               c.pool_type == "0" || c.pool_type == "none",
           "vit: unknown pool_type '", c.pool_type, "' (gap, map, tok, 0 or none)");
  BV_CHECK(c.width % c.num_heads == 0, "vit: width ", c.width, " (", config_key("width"),
           " or the variant's) is not divisible by num_heads ", c.num_heads, " (",
           config_key("num_heads"), " or the variant's)");
  BV_CHECK(c.image_h >= c.patch_h && c.image_w >= c.patch_w, "vit: the image size ", c.image_h, "x",
           c.image_w, " (", config_key("image_size"),
           "; the training images' size when it is not set) is smaller than one ", c.patch_h, "x",
           c.patch_w, " patch (", patch_from, ")");
  // Not an error: big_vision's patch convolution (VALID, stride = patch) drops the pixels that
  // do not fill a patch, and standard checkpoints rely on it (So400m/14 at 384: 27x27 patches).
  if (c.image_h % c.patch_h != 0 || c.image_w % c.patch_w != 0) {
    post_note(str("vit: the image size ", c.image_h, "x", c.image_w, " is not divisible into ",
                  c.patch_h, "x", c.patch_w, " patches (", patch_from, "): the last ",
                  c.image_h % c.patch_h, " rows and ", c.image_w % c.patch_w,
                  " columns of each image are not seen, as in big_vision"));
  }
  BV_CHECK(c.posemb != "sincos2d" || c.width % 4 == 0, "vit: sincos2d needs width % 4 == 0");
  return c;
}

// ---------------------------------------------------------------------------------------------
// Parameter tree

void add_attention(std::vector<ParamSpec>& out, const std::string& p, int64_t d, int64_t heads) {
  int64_t hd = d / heads;
  for (const char* name : {"query", "key", "value"}) {
    add_dense(out, p + "/" + name, {d, heads, hd}, {heads, hd}, Init::kXavierUniform, d, d);
  }
  add_dense(out, p + "/out", {heads, hd, d}, {d}, Init::kXavierUniform, d, d);
}

void add_mlp(std::vector<ParamSpec>& out, const std::string& p, int64_t d, int64_t mlp) {
  add_dense(out, p + "/Dense_0", {d, mlp}, {mlp}, Init::kXavierUniform, d, mlp, Init::kNormal,
            1e-6);
  add_dense(out, p + "/Dense_1", {mlp, d}, {d}, Init::kXavierUniform, mlp, d, Init::kNormal, 1e-6);
}

EncoderConfig encoder_of(const ViTConfig& c) {
  return {c.width,
          c.depth,
          c.mlp_dim,
          c.num_heads,
          c.dropout,
          c.scan,
          c.scan && c.remat_policy != "none"};
}

// One encoder block's parameters under `prefix`.
std::vector<ParamSpec> block_specs(const EncoderConfig& c, const std::string& prefix) {
  std::vector<ParamSpec> out;
  add_norm(out, prefix + "/LayerNorm_0", c.width);
  add_norm(out, prefix + "/LayerNorm_1", c.width);
  add_attention(out, prefix + "/MultiHeadDotProductAttention_0", c.width, c.num_heads);
  add_mlp(out, prefix + "/MlpBlock_0", c.width, c.mlp_dim);
  return out;
}

}  // namespace

void add_encoder_specs(std::vector<ParamSpec>& out, const EncoderConfig& c,
                       const std::string& name) {
  if (c.scan) {
    // One stacked subtree: every leaf gets a leading `depth` axis (layer i = index i).
    for (ParamSpec& s : block_specs(c, name + "/encoderblock")) out.push_back(scanned(s, c.depth));
  } else {
    for (int64_t i = 0; i < c.depth; ++i) {
      for (ParamSpec& s : block_specs(c, name + "/encoderblock_" + std::to_string(i))) {
        out.push_back(s);
      }
    }
  }
  add_norm(out, name + "/encoder_norm", c.width);
}

void add_map_head_specs(std::vector<ParamSpec>& out, const EncoderConfig& c) {
  out.push_back(
      {"MAPHead_0/probe", {1, 1, c.width}, at::kFloat, Init::kXavierUniform, 0, c.width, c.width});
  add_attention(out, "MAPHead_0/MultiHeadDotProductAttention_0", c.width, c.num_heads);
  add_norm(out, "MAPHead_0/LayerNorm_0", c.width);
  add_mlp(out, "MAPHead_0/MlpBlock_0", c.width, c.mlp_dim);
}

namespace {

std::vector<ParamSpec> vit_param_specs(const json& cfg) {
  ViTConfig c = parse_config(cfg);
  std::vector<ParamSpec> out;
  int64_t patch_in = c.patch_h * c.patch_w * 3;
  add_dense(out, "embedding", {c.patch_h, c.patch_w, 3, c.width}, {c.width}, Init::kLecunNormal,
            patch_in, c.width);
  int64_t tokens = c.grid_h() * c.grid_w();
  if (c.posemb == "learn") {
    out.push_back({"pos_embedding",
                   {1, tokens, c.width},
                   at::kFloat,
                   Init::kNormal,
                   1.0 / std::sqrt(static_cast<double>(c.width))});
  }
  if (c.pool_type == "tok") out.push_back({"cls", {1, 1, c.width}, at::kFloat, Init::kZeros});
  add_encoder_specs(out, encoder_of(c), "Transformer");
  if (c.pool_type == "map") add_map_head_specs(out, encoder_of(c));
  int64_t rep = c.width;
  if (c.rep_size) {
    add_dense(out, "pre_logits", {c.width, c.rep_size}, {c.rep_size}, Init::kLecunNormal, c.width,
              c.rep_size);
    rep = c.rep_size;
  }
  if (c.num_classes) {
    add_dense(out, "head", {rep, c.num_classes}, {c.num_classes},
              c.head_zeroinit ? Init::kZeros : Init::kLecunNormal, rep, c.num_classes);
  }
  return out;
}

// posemb_sincos_2d(h, w, width, temperature=1e4): [1, h*w, width], on the device of `like`.
at::Tensor sincos2d(int64_t h, int64_t w, int64_t width, const at::Tensor& like,
                    double temperature = 1e4) {
  auto opts = like.options().dtype(at::kFloat);
  at::Tensor y = at::arange(h, opts).view({h, 1}).expand({h, w}).reshape({-1});
  at::Tensor x = at::arange(w, opts).view({1, w}).expand({h, w}).reshape({-1});
  int64_t quarter = width / 4;
  at::Tensor omega = at::arange(quarter, opts) / static_cast<double>(quarter - 1);
  omega = 1.0 / at::pow(temperature, omega);
  at::Tensor ys = y.unsqueeze(1) * omega.unsqueeze(0);
  at::Tensor xs = x.unsqueeze(1) * omega.unsqueeze(0);
  return at::cat({xs.sin(), xs.cos(), ys.sin(), ys.cos()}, 1).unsqueeze(0);
}

// ---------------------------------------------------------------------------------------------
// Forward

// Reads layer i's parameter from either form of the tree (per layer or scanned).
struct Layer {
  const Params& params;
  const EncoderConfig& c;
  const std::string& encoder;
  int64_t i;
  at::Tensor operator()(const std::string& name) const {
    if (c.scan) return layer_param(params, encoder + "/encoderblock/" + name, i, "vit");
    return param(params, encoder + "/encoderblock_" + std::to_string(i) + "/" + name, "vit");
  }
};

// flax's MultiHeadDotProductAttention: q/k/v kernels [D, H, Dh], out kernel [H, Dh, D].
// Self-attention projects q, k and v with one GEMM over the concatenated kernels.
template <typename Get>
at::Tensor attention(const at::Tensor& q_in, const at::Tensor& kv_in, const Get& p, int64_t heads) {
  int64_t n = q_in.size(0), lq = q_in.size(1), lk = kv_in.size(1);
  int64_t d = q_in.size(-1), hd = d / heads;
  auto kernel = [&](const char* name) { return p(std::string(name) + "/kernel").reshape({d, d}); };
  auto bias = [&](const char* name) { return p(std::string(name) + "/bias").reshape({d}); };
  auto split_heads = [&](const at::Tensor& y, int64_t l) {  // [n, l, H*Dh] -> [n, H, l, Dh]
    return y.view({n, l, heads, hd}).transpose(1, 2);
  };
  at::Tensor q, k, v;
  if (q_in.is_same(kv_in)) {
    at::Tensor qkv = linear(q_in, at::cat({kernel("query"), kernel("key"), kernel("value")}, 1),
                            at::cat({bias("query"), bias("key"), bias("value")}));
    auto parts = qkv.split(d, -1);
    q = split_heads(parts[0], lq), k = split_heads(parts[1], lk), v = split_heads(parts[2], lk);
  } else {
    q = split_heads(linear(q_in, kernel("query"), bias("query")), lq);
    k = split_heads(linear(kv_in, kernel("key"), bias("key")), lk);
    v = split_heads(linear(kv_in, kernel("value"), bias("value")), lk);
  }
  at::Tensor o;
  if (q.device().is_cpu()) {
    // Measured: on the CPU the plain form trains faster than libtorch's fused kernel (ViT-S/16
    // at 224 px: 0.216 against 0.184 steps/s on 2 cores).
    q = q * (1.0 / std::sqrt(static_cast<double>(hd)));
    o = at::matmul(at::softmax(at::matmul(q, k.transpose(-2, -1)), -1), v);
  } else {
    // softmax(q k^T / sqrt(Dh)) v in the fused kernel (flash or memory-efficient attention on
    // CUDA): the [n, H, lq, lk] weights are never held whole.
    o = at::scaled_dot_product_attention(q, k, v);
  }
  o = o.transpose(1, 2).reshape({n, lq, d});
  return linear(o, p("out/kernel").reshape({d, d}), p("out/bias"));
}

template <typename Get>
at::Tensor mlp(const at::Tensor& x, const Get& p, double dropout, bool train) {
  at::Tensor y = at::gelu(linear(x, p("Dense_0/kernel"), p("Dense_0/bias")), "tanh");
  if (train && dropout > 0) y = at::dropout(y, dropout, true);
  return linear(y, p("Dense_1/kernel"), p("Dense_1/bias"));
}

// What big_vision's Encoder1DBlock puts in its out dict besides its result ("+mlp").
struct BlockOut {
  at::Tensor sa, plus_sa, mlp;
};

// Encoder block i: x -> x + attention(norm(x)) -> ... + mlp(norm(...)).
at::Tensor encoder_block(const Params& params, const EncoderConfig& c, const std::string& name,
                         int64_t i, bool train, const at::Tensor& x, BlockOut* bo = nullptr) {
  Layer layer{params, c, name, i};
  auto attn_p = [&](const std::string& s) { return layer("MultiHeadDotProductAttention_0/" + s); };
  auto mlp_p = [&](const std::string& s) { return layer("MlpBlock_0/" + s); };
  at::Tensor y = layer_norm(x, layer("LayerNorm_0/scale"), layer("LayerNorm_0/bias"));
  y = attention(y, y, attn_p, c.num_heads);
  if (bo) bo->sa = y;
  if (train && c.dropout > 0) y = at::dropout(y, c.dropout, true);
  at::Tensor h = x + y;
  if (bo) bo->plus_sa = h;
  y = layer_norm(h, layer("LayerNorm_1/scale"), layer("LayerNorm_1/bias"));
  y = mlp(y, mlp_p, c.dropout, train);
  if (bo) bo->mlp = y;
  if (train && c.dropout > 0) y = at::dropout(y, c.dropout, true);
  return h + y;
}

}  // namespace

at::Tensor encoder_forward(const Params& params, const EncoderConfig& c, const std::string& name,
                           at::Tensor x, bool train, Output* out, const std::string& out_prefix) {
  bool remat = c.remat && train && at::GradMode::is_enabled();
  BV_CHECK(!remat || c.dropout == 0,
           "vit: a scanned encoder rematerialises its layers, which "
           "needs dropout 0 (got ",
           c.dropout, "); or set remat_policy='none'");
  for (int64_t i = 0; i < c.depth; ++i) {
    char block[32];  // "block" + up to 20 digits
    std::snprintf(block, sizeof block, "block%02lld", static_cast<long long>(i));
    std::string key = out_prefix + block + "/";
    if (remat) {
      // The block runs again during the backward: it owns copies of what it reads. Keeping its
      // inner values would undo the remat, so they are lazy: reading one runs the block again
      // (no dropout under remat: the same values).
      at::Tensor in = x;
      x = models::remat(
          [params, c, name, i](const at::Tensor& h) {
            return encoder_block(params, c, name, i, /*train=*/true, h);
          },
          x);
      if (out) {
        auto memo = std::make_shared<BlockOut>();
        auto inner = [params, c, name, i, in, memo](at::Tensor BlockOut::*field) {
          return [params, c, name, i, in, memo, field]() {
            if (!memo->sa.defined()) encoder_block(params, c, name, i, true, in, memo.get());
            return (*memo).*field;
          };
        };
        out->lazy.emplace_back(key + "sa", inner(&BlockOut::sa));
        out->lazy.emplace_back(key + "+sa", inner(&BlockOut::plus_sa));
        out->lazy.emplace_back(key + "mlp", inner(&BlockOut::mlp));
      }
    } else {
      BlockOut bo;
      x = encoder_block(params, c, name, i, train, x, out ? &bo : nullptr);
      if (out) {
        out->aux.emplace_back(key + "sa", bo.sa);
        out->aux.emplace_back(key + "+sa", bo.plus_sa);
        out->aux.emplace_back(key + "mlp", bo.mlp);
      }
    }
    if (out) out->aux.emplace_back(key + "+mlp", x);
  }
  // big_vision's alias of the last block's output, set by its unscanned loop only.
  if (out && !c.scan) out->aux.emplace_back(out_prefix + "pre_ln", x);
  return layer_norm(x, param(params, name + "/encoder_norm/scale", "vit"),
                    param(params, name + "/encoder_norm/bias", "vit"));
}

at::Tensor map_head_forward(const Params& params, const EncoderConfig& c, const at::Tensor& x) {
  auto head_p = [&](const std::string& s) { return param(params, "MAPHead_0/" + s, "vit"); };
  auto attn_p = [&](const std::string& s) { return head_p("MultiHeadDotProductAttention_0/" + s); };
  auto mlp_p = [&](const std::string& s) { return head_p("MlpBlock_0/" + s); };
  at::Tensor probe = head_p("probe").expand({x.size(0), 1, c.width});
  at::Tensor h = attention(probe, x, attn_p, c.num_heads);
  at::Tensor y = layer_norm(h, head_p("LayerNorm_0/scale"), head_p("LayerNorm_0/bias"));
  h = h + mlp(y, mlp_p, 0, false);
  return h.select(1, 0);
}

namespace {

Output vit_apply(const json& cfg, const Params& params, const std::vector<at::Tensor>& inputs,
                 bool train) {
  ViTConfig c = parse_config(cfg);
  BV_CHECK(inputs.size() == 1, "vit: expected one input (images), got ", inputs.size());
  const at::Tensor& image = inputs[0];
  BV_CHECK(image.dim() == 4 && image.size(3) == 3, "vit: images must be [n, H, W, 3], got [",
           image.sizes(), "]");
  auto P = [&](const std::string& name) { return param(params, name, "vit"); };
  Output out;
  // dtype_mm: libtorch's autocast casts exactly the ops big_vision gives dtype_mm (matmuls and
  // attention) and keeps LayerNorm in float32; sums with the float32 residual stream promote
  // back to float32, as jnp's do. Remat's recompute restores the scope (models/remat.cpp).
  std::unique_ptr<AutocastGuard> mm;
  if (c.dtype_mm != "float32") {
    mm = std::make_unique<AutocastGuard>(image.device().type(), dtype_from_name(c.dtype_mm));
  }
  int64_t n = image.size(0);
  int64_t gh = image.size(1) / c.patch_h, gw = image.size(2) / c.patch_w;
  BV_CHECK(gh > 0 && gw > 0, "vit: images of ", image.size(1), "x", image.size(2),
           " are smaller than a patch");
  // The VALID strided conv as one matmul over flattened patches (rows, then columns).
  at::Tensor x = image.to(at::kFloat)
                     .narrow(1, 0, gh * c.patch_h)
                     .narrow(2, 0, gw * c.patch_w)
                     .reshape({n, gh, c.patch_h, gw, c.patch_w, 3})
                     .permute({0, 1, 3, 2, 4, 5})
                     .reshape({n, gh * gw, c.patch_h * c.patch_w * 3});
  x = linear(x, P("embedding/kernel").reshape({-1, c.width}), P("embedding/bias"));
  out.aux.emplace_back("stem", x.view({n, gh, gw, c.width}));
  if (c.posemb == "learn") {
    const at::Tensor& pe = P("pos_embedding");
    BV_CHECK(pe.size(1) == gh * gw, "vit: pos_embedding has ", pe.size(1), " tokens but the ",
             image.size(1), "x", image.size(2), " images give ", gh * gw,
             " (set model.image_size, or resample the embedding)");
    x = x + pe;
  } else {
    x = x + sincos2d(gh, gw, c.width, x);
  }
  out.aux.emplace_back("with_posemb", x);
  if (c.pool_type == "tok") x = at::cat({P("cls").expand({n, 1, c.width}), x}, 1);
  if (train && c.dropout > 0) x = at::dropout(x, c.dropout, true);

  x = encoder_forward(params, encoder_of(c), "Transformer", x, train, &out).to(at::kFloat);
  out.aux.emplace_back("encoded", x);
  mm.reset();  // the MAP head and the head are float32, as in big_vision

  at::Tensor pooled;
  if (c.pool_type == "gap") {
    pooled = x.mean(1);
  } else if (c.pool_type == "tok" || c.pool_type == "0") {
    pooled = x.select(1, 0);
  } else if (c.pool_type == "map") {
    pooled = map_head_forward(params, encoder_of(c), x);
  } else {  // none: keep the sequence
    pooled = x;
  }
  if (c.pool_type != "none") out.aux.emplace_back("head_input", pooled);
  // big_vision's x_2d: the encoded tokens (without tok's cls token) on the gh x gw patch grid;
  // pre_logits and the head apply to it token by token (pre_logits_2d, logits_2d). With
  // pool_type none these are the pooled path's own values, seen on the grid: no extra work.
  // Otherwise a per-token layer is real work, which big_vision's jit skips unless something
  // reads it: here it is lazy (Output::lazy).
  bool grid_is_pooled = c.pool_type == "none";
  at::Tensor x_2d = (c.pool_type == "tok" ? x.narrow(1, 1, gh * gw) : x).reshape({n, gh, gw, -1});
  // The layers x_2d goes through, read now (under fsdp a lazy entry runs after the step's reads).
  Params layers;
  for (const char* name : {"pre_logits/kernel", "pre_logits/bias", "head/kernel", "head/bias"}) {
    bool used = name[0] == 'p' ? c.rep_size > 0 : c.num_classes > 0;
    if (used && !grid_is_pooled) layers[name] = P(name);
  }
  auto on_grid = [n, gh, gw](const at::Tensor& t) { return t.reshape({n, gh, gw, -1}); };
  std::function<at::Tensor()> pre_2d;  // pre_logits_2d when it is lazy
  if (c.rep_size) {
    pooled = at::tanh(dense(params, "pre_logits", pooled, "vit"));
    if (grid_is_pooled) {
      x_2d = on_grid(pooled);
    } else {
      auto memo = std::make_shared<at::Tensor>();
      pre_2d = [layers, x_2d, memo]() {
        if (!memo->defined()) *memo = at::tanh(dense(layers, "pre_logits", x_2d, "vit"));
        return *memo;
      };
      out.lazy.emplace_back("pre_logits_2d", pre_2d);
    }
  }
  if (!pre_2d) out.aux.emplace_back("pre_logits_2d", x_2d);
  out.aux.emplace_back("pre_logits", pooled);
  classifier_head(params, pooled, c.num_classes, "vit", out);
  if (c.num_classes) {
    if (grid_is_pooled) {
      out.aux.emplace_back("logits_2d", on_grid(out.out));
    } else {
      out.lazy.emplace_back("logits_2d", [layers, x_2d, pre_2d]() {
        return dense(layers, "head", pre_2d ? pre_2d() : x_2d, "vit");
      });
    }
  }
  return out;
}

}  // namespace

at::Tensor resample_posemb(const at::Tensor& posemb, int64_t new_tokens) {
  BV_CHECK(posemb.dim() == 3 && posemb.size(0) == 1, "resample_posemb: expected [1, N, C], got [",
           posemb.sizes(), "]");
  auto side = [](int64_t n) {
    auto g = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
    return g * g == n ? g : int64_t{-1};
  };
  int64_t old_g = side(posemb.size(1)), new_g = side(new_tokens);
  BV_CHECK(old_g > 0 && new_g > 0, "resample_posemb: only square grids: ", posemb.size(1), " -> ",
           new_tokens, " tokens");
  int64_t c = posemb.size(2);
  at::Tensor grid = posemb.reshape({1, old_g, old_g, c}).permute({0, 3, 1, 2}).to(at::kFloat);
  at::Tensor out = at::upsample_bilinear2d(grid, {new_g, new_g}, /*align_corners=*/true);
  return out.permute({0, 2, 3, 1}).reshape({1, new_g * new_g, c}).to(posemb.scalar_type());
}

const ModelApi& vit_api() {
  static const ModelApi api = {
      "vit",
      "vit(variant='B/16', num_classes=None, pool_type='gap', posemb='learn', rep_size=False, "
      "image_size=224, ...): big_vision's Vision Transformer",
      kKeys,
      vit_param_specs,
      nullptr,
      vit_apply};  // sincos2d is computed in apply, not stored
  return api;
}

}  // namespace bv::models
