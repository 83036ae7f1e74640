// bit: big_vision's BiT ResNet-v1 (models/bit.py): bottleneck units with weight-standardised
// convolutions, GroupNorm (32 groups), TF's "SAME" padding, and the stride on the 3x3 conv.
//   image [n, H, W, 3] -> conv_root 7x7/2 -> gn_root -> relu -> maxpool 3x3/2
//   -> block1..4 (unit1..N) -> mean over H, W -> head
// Parameters keep flax's layout (conv kernels HWIO); compute runs in NCHW.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <limits>

#include "core/error.h"
#include "core/quote.h"
#include "models/common.h"
#include "models/model.h"

namespace bv::models {

namespace {

using json = nlohmann::json;

struct BitConfig {
  int64_t num_classes = 0;
  double width = 1;
  std::vector<int64_t> blocks;
  int64_t root_width() const { return static_cast<int64_t>(64 * width); }
};

// The config keys: the parser refuses others, bv.config_keys documents them (ModelApi::keys).
constexpr ConfigKey kKeys[] = {
    {"depth", "int|list", "50", "26, 50, 101, 152, 200, or a list of units per stage"},
    {"width", "float", "1", "channel multiplier (64 * width must be a multiple of 32)"},
    {"num_classes", "int", "null", "the head's outputs; None: no head"},
};

BitConfig parse_config(const json& cfg) {
  BV_CHECK(cfg.is_object(), "bit: the model config must be a table");
  check_config_keys(cfg, kKeys, "bit");
  BitConfig c;
  if (cfg.contains("num_classes") && !cfg["num_classes"].is_null()) {
    BV_CHECK(cfg["num_classes"].is_number_integer() && cfg["num_classes"].get<int64_t>() > 0,
             "bit: ", config_key("num_classes"), " must be a positive integer, got ",
             snippet(cfg["num_classes"].dump()));
    c.num_classes = cfg["num_classes"].get<int64_t>();
  }
  if (cfg.contains("width")) {
    BV_CHECK(cfg["width"].is_number() && cfg["width"].get<double>() > 0,
             "bit: width must be a positive number, got ", snippet(cfg["width"].dump()));
    c.width = cfg["width"].get<double>();
    // (a width past this makes int(64 * width) overflow before anything else could refuse it)
    BV_CHECK(c.width <= 1 << 20, "bit: ", config_key("width"), " ", c.width,
             " is too large (BiT's are 1 to 4)");
  }
  // Every GroupNorm has 32 groups, and every stage's channels are the root's times 2^k.
  BV_CHECK(c.root_width() >= 32 && c.root_width() % 32 == 0, "bit: width ", c.width,
           " gives the root conv int(64 * width) = ", c.root_width(),
           " channels, which GroupNorm's 32 groups must divide: use a width that makes 64 * width"
           " a multiple of 32 (0.5, 1, 1.5, 2, ...)");
  json depth = cfg.contains("depth") ? cfg["depth"] : json(50);
  if (depth.is_array()) {
    // Each stage doubles the channels: past 8 stages they no longer fit the shapes' integers.
    BV_CHECK(depth.size() <= 8, "bit: ", config_key("depth"), " lists ", depth.size(),
             " stages; at most 8 are built (BiT has 4)");
    for (const auto& d : depth) {
      BV_CHECK(d.is_number_integer() && d.get<int64_t>() > 0, "bit: ", config_key("depth"),
               " must list positive numbers of units per stage, got ", snippet(depth.dump()));
      c.blocks.push_back(d.get<int64_t>());
    }
  } else {
    BV_CHECK(depth.is_number_integer(), "bit: ", config_key("depth"),
             " must be 26, 50, 101, 152, 200 or a list of units per stage, got ",
             snippet(depth.dump()));
    int64_t d = depth.get<int64_t>();
    if (d == 26) c.blocks = {2, 2, 2, 2};
    else if (d == 50) c.blocks = {3, 4, 6, 3};
    else if (d == 101) c.blocks = {3, 4, 23, 3};
    else if (d == 152) c.blocks = {3, 8, 36, 3};
    else if (d == 200) c.blocks = {3, 24, 36, 3};
    else fail("bit: unknown depth ", d, " (26, 50, 101, 152, 200, or a list of units per stage)");
  }
  BV_CHECK(!c.blocks.empty(), "bit: depth gives no stages");
  return c;
}

std::vector<ParamSpec> bit_param_specs(const json& cfg) {
  BitConfig c = parse_config(cfg);
  std::vector<ParamSpec> out;
  int64_t w = c.root_width();
  add_conv(out, "conv_root", 7, 3, w);
  add_norm(out, "gn_root", w);
  int64_t in = w;
  for (size_t s = 0; s < c.blocks.size(); ++s) {
    int64_t nmid = w << s, nout = 4 * nmid;
    for (int64_t u = 0; u < c.blocks[s]; ++u) {
      std::string p = "block" + std::to_string(s + 1) + "/unit" + std::to_string(u + 1) + "/";
      bool strided = u == 0 && s > 0;
      if (in != nout || strided) {
        add_conv(out, p + "conv_proj", 1, in, nout);
        add_norm(out, p + "gn_proj", nout);
      }
      add_conv(out, p + "conv1", 1, in, nmid);
      add_norm(out, p + "gn1", nmid);
      add_conv(out, p + "conv2", 3, nmid, nmid);
      add_norm(out, p + "gn2", nmid);
      add_conv(out, p + "conv3", 1, nmid, nout);
      add_norm(out, p + "gn3", nout, /*zero_scale=*/true);
      in = nout;
    }
  }
  if (c.num_classes)
    add_dense(out, "head", {in, c.num_classes}, {c.num_classes}, Init::kZeros, 0, 0);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Forward (NCHW inside)

// GroupNorm `name` with 32 groups (its scale read before its bias).
at::Tensor gn(const at::Tensor& x, const Params& p, const std::string& name) {
  at::Tensor scale = param(p, name + "/scale", "bit");
  return models::group_norm(x, 32, scale, param(p, name + "/bias", "bit"));
}

at::Tensor nhwc(const at::Tensor& x) { return x.permute({0, 2, 3, 1}); }

Output bit_apply(const json& cfg, const Params& params, const std::vector<at::Tensor>& inputs,
                 bool train) {
  BitConfig c = parse_config(cfg);
  BV_CHECK(inputs.size() == 1, "bit: expected one input (images), got ", inputs.size());
  const at::Tensor& image = inputs[0];
  BV_CHECK(image.dim() == 4 && image.size(3) == 3, "bit: images must be [n, H, W, 3]");
  auto P = [&](const std::string& name) { return param(params, name, "bit"); };
  Output out;
  // Training in NCHW: GroupNorm's and the convs' backward are slower on channels-last strides.
  // Inference in channels-last (the NHWC images as they come): oneDNN's forward convs are
  // 20-35% faster on it (BiT-R26 at 224 on 2 threads), and the feature maps come out NHWC.
  at::Tensor x = image.to(at::kFloat).permute({0, 3, 1, 2});
  x = x.contiguous(train ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast);
  x = std_conv(x, P("conv_root/kernel"), 2);
  x = gn(x, params, "gn_root").relu_();
  x = at::max_pool2d(pad_same(x, 3, 2, -std::numeric_limits<double>::infinity()), {3, 3}, {2, 2});
  out.aux.emplace_back("stem", nhwc(x));
  for (size_t s = 0; s < c.blocks.size(); ++s) {
    for (int64_t u = 0; u < c.blocks[s]; ++u) {
      std::string p = "block" + std::to_string(s + 1) + "/unit" + std::to_string(u + 1) + "/";
      int64_t stride = (u == 0 && s > 0) ? 2 : 1;
      at::Tensor residual = x;
      if (params.count(p + "conv_proj/kernel")) {
        residual = gn(std_conv(x, P(p + "conv_proj/kernel"), stride), params, p + "gn_proj");
      }
      // In place where autograd allows it (GroupNorm's backward does not need its output): fewer
      // passes over the activations, as torchvision's ResNet does.
      at::Tensor y = gn(std_conv(x, P(p + "conv1/kernel"), 1), params, p + "gn1").relu_();
      y = gn(std_conv(y, P(p + "conv2/kernel"), stride), params, p + "gn2").relu_();
      y = gn(std_conv(y, P(p + "conv3/kernel"), 1), params, p + "gn3");
      x = y.add_(residual).relu_();
    }
    out.aux.emplace_back("stage" + std::to_string(s + 1), nhwc(x));
  }
  out.aux.emplace_back("pre_logits_2d", nhwc(x));
  at::Tensor pooled = x.mean({2, 3});
  out.aux.emplace_back("pre_logits", pooled);
  classifier_head(params, pooled, c.num_classes, "bit", out);
  return out;
}

// Conv kernels keep flax's HWIO shape but get OIHW memory (a permuted view of an OIHW tensor).
// Then the permute in std_conv is free, the gradients arrive in the same strides as the
// parameters, and the optimizer's element-wise passes run on matching layouts. ATen's
// transposing copy of a 3x3x512x512 kernel costs more than the conv's own weight reorder.
void bit_relayout(Params& params) {
  for (auto& [name, t] : params) {
    if (t.dim() != 4 || name.size() < 7 || name.compare(name.size() - 7, 7, "/kernel") != 0) {
      continue;
    }
    at::Tensor oihw = t.permute({3, 2, 0, 1});
    if (!oihw.is_contiguous()) t = oihw.contiguous().permute({2, 3, 1, 0});
  }
}

}  // namespace

const ModelApi& bit_api() {
  static const ModelApi api = {
      "bit",
      "bit(depth=50, width=1, num_classes=None): big_vision's BiT ResNet-v1 (GroupNorm, "
      "weight standardisation)",
      kKeys,
      bit_param_specs,
      nullptr,
      bit_apply,
      bit_relayout};
  return api;
}

}  // namespace bv::models
