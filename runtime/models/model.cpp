// The model registry (by big_vision's model names) and parameter initialisation.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "models/model.h"

namespace bv::models {

namespace {

std::vector<const ModelApi*> all_models() {
  return {&vit_api(),       &bit_api(), &gemma_api(), &paligemma_api(), &text_transformer_api(),
          &two_towers_api()};
}

}  // namespace

namespace {

// The parts a composite model is working on, outermost first (ConfigPart).
thread_local std::vector<std::string> t_config_parts;

}  // namespace

std::string config_key(const std::string& name) {
  std::string key = "model.";
  for (const std::string& part : t_config_parts) key += part + ".";
  return key + name;
}

ConfigPart::ConfigPart(const std::string& part) { t_config_parts.push_back(part); }

ConfigPart::~ConfigPart() { t_config_parts.pop_back(); }

const ModelApi* find_model(const std::string& name) {
  for (const ModelApi* m : all_models()) {
    if (name == m->name) return m;
  }
  return nullptr;
}

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const ModelApi* m : all_models()) out.push_back(m->name);
  return out;
}

Params init_params(const ModelApi& model, const nlohmann::json& cfg, uint64_t seed) {
  Rng rng(seed);
  Params params;
  for (const ParamSpec& spec : model.param_specs(cfg)) {
    auto opts = at::TensorOptions().dtype(at::kFloat);
    at::Tensor t;
    switch (spec.init) {
      case Init::kZeros:
      case Init::kFixed: t = at::zeros(spec.shape, opts); break;
      case Init::kOnes: t = at::ones(spec.shape, opts); break;
      case Init::kNormal: t = at::randn(spec.shape, rng.gen, opts) * spec.stddev; break;
      case Init::kLecunNormal: {
        // flax's lecun_normal: a normal truncated at two standard deviations, rescaled so its
        // standard deviation is sqrt(1 / fan_in) (0.8796... is the truncated normal's std).
        double stddev = std::sqrt(1.0 / static_cast<double>(spec.fan_in)) / 0.87962566103423978;
        t = at::empty(spec.shape, opts);
        float* p = t.data_ptr<float>();
        for (int64_t i = 0; i < t.numel(); ++i) {
          double z;
          do {
            z = rng.normal();
          } while (z < -2.0 || z > 2.0);
          p[i] = static_cast<float>(z * stddev);
        }
        break;
      }
      case Init::kXavierUniform: {
        double limit = std::sqrt(6.0 / static_cast<double>(spec.fan_in + spec.fan_out));
        t = at::rand(spec.shape, rng.gen, opts) * (2 * limit) - limit;
        break;
      }
    }
    params[spec.name] = t.to(spec.dtype);
  }
  if (model.init_fixed) model.init_fixed(cfg, params);
  relayout_params(model, params);
  return params;
}

void relayout_params(const ModelApi& model, Params& params) {
  if (model.relayout) model.relayout(params);
}

namespace {
thread_local ParamSource* param_source = nullptr;
}  // namespace

ParamSource* current_param_source() { return param_source; }

ParamSourceScope::ParamSourceScope(ParamSource* source) : previous_(param_source) {
  param_source = source;
}

ParamSourceScope::~ParamSourceScope() { param_source = previous_; }

at::Tensor param(const Params& params, const std::string& name, const char* model) {
  auto it = params.find(name);
  BV_CHECK(it != params.end(), model, ": parameter '", name, "' is missing");
  if (param_source) {
    at::Tensor t = param_source->whole(it->second);
    if (t.defined()) return t;
  }
  return it->second;
}

at::Tensor layer_param(const Params& params, const std::string& name, int64_t i,
                       const char* model) {
  auto it = params.find(name);
  BV_CHECK(it != params.end(), model, ": parameter '", name, "' is missing");
  BV_CHECK(it->second.dim() >= 1 && i >= 0 && i < it->second.size(0), model, ": layer ", i, " of '",
           name, "', which stacks ", it->second.dim() ? it->second.size(0) : 0, " layers");
  if (param_source) {
    at::Tensor t = param_source->layer(it->second, i);
    if (t.defined()) return t;
  }
  return it->second[i];
}

void check_config_keys(const nlohmann::json& cfg, std::span<const ConfigKey> keys,
                       const char* model) {
  for (const auto& [key, v] : cfg.items()) {
    bool known = false;
    for (const ConfigKey& k : keys) known = known || key == k.name;
    BV_CHECK(known, model, ": unknown config key '", key, "'");
  }
}

void append_prefixed(std::vector<ParamSpec>& out, std::vector<ParamSpec> specs,
                     const std::string& prefix) {
  for (ParamSpec& s : specs) {
    s.name = prefix + s.name;
    out.push_back(std::move(s));
  }
}

Params subtree(const Params& params, const std::string& prefix) {
  Params out;
  for (const auto& [name, t] : params) {
    if (name.compare(0, prefix.size(), prefix) == 0) out[name.substr(prefix.size())] = t;
  }
  return out;
}

}  // namespace bv::models
