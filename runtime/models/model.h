// Models, big_vision-style: a model is a named set of plain functions over a config (the JSON of
// the config's `model` section) and a flat parameter map whose names, shapes and dtypes are
// exactly big_vision's ("Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel"). Parameters
// live outside the model, so the trainer, the optimizer and checkpoints all see the same tree.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace bv::models {

// Sorted by name, as big_vision's flattened trees are.
using Params = std::map<std::string, at::Tensor>;

// How a parameter starts: big_vision's (flax's) initialisers.
enum class Init { kZeros, kOnes, kNormal, kLecunNormal, kXavierUniform, kFixed };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::ScalarType::Float;
  Init init = Init::kZeros;
  double stddev = 0;                // kNormal
  int64_t fan_in = 0, fan_out = 0;  // kLecunNormal, kXavierUniform (flax's DenseGeneral fans)
  bool scan = false;  // a stack of layers along dim 0 (flax's nn.scan); apply reads it per layer
};

struct Output {
  at::Tensor out;  // logits (or the representation when there is no head)
  std::vector<std::pair<std::string, at::Tensor>> aux;  // big_vision's out dict
  // Entries of the out dict that cost real work and that big_vision's jit computes only when
  // something reads them (ViT's per-token logits_2d): bv.models' apply computes them all into
  // its out table; the training step, which reads `out` alone, never does.
  std::vector<std::pair<std::string, std::function<at::Tensor()>>> lazy;
};

// A config key the model reads, declared once, in the model's file: its parser refuses every
// other key (check_config_keys), and bv.config_keys makes the list the scope "model:NAME"
// (lib/bv/config_keys/model.lua), which `?NAME` in the REPL, docs/config_keys.md and the
// warnings about unknown keys read.
struct ConfigKey {
  const char* name;
  const char* type;  // bv.config_keys' types: int, float, bool, string, table, list, "int|list"
  const char* default_json;  // the default as JSON text; "null": None (absent)
  const char* doc;           // one line
  // For a table of a part's options: the key that names the part's model ("img_model"), whose
  // own default names it when the config leaves it out. nullptr for other keys.
  const char* model_key = nullptr;
};

struct ModelApi {
  const char* name;
  const char* doc;  // "name(key=default, ...): what it is"
  std::span<const ConfigKey> keys;
  std::vector<ParamSpec> (*param_specs)(const nlohmann::json& cfg);
  // Parameters with a fixed value (e.g. sincos position embeddings) are filled by this; others
  // come from their Init. May be null.
  void (*init_fixed)(const nlohmann::json& cfg, Params& params);
  Output (*apply)(const nlohmann::json& cfg, const Params& params,
                  const std::vector<at::Tensor>& inputs, bool train);
  // Stores parameters in the memory layout apply reads fastest (names, shapes and values stay
  // the same; only strides change). May be null: row-major is fine.
  void (*relayout)(Params& params) = nullptr;
};

// The models, one file each (the registry in model.cpp lists them; composite models such as
// PaliGemma and two_towers call their parts' through these).
const ModelApi& vit_api();               // vit.cpp
const ModelApi& bit_api();               // bit.cpp
const ModelApi& gemma_api();             // ppp/gemma.cpp
const ModelApi& paligemma_api();         // proj/paligemma/paligemma.cpp
const ModelApi& text_transformer_api();  // proj/image_text/text_transformer.cpp
const ModelApi& two_towers_api();        // proj/image_text/two_towers.cpp

const ModelApi* find_model(const std::string& name);  // nullptr when unknown
std::vector<std::string> model_names();

// The model's preferred memory layout for `params` (a no-op for most models). init_params
// applies it; call it again after replacing parameters (a checkpoint, model_init).
void relayout_params(const ModelApi& model, Params& params);

// Fresh parameters for the specs, drawn from a generator seeded by `seed`.
Params init_params(const ModelApi& model, const nlohmann::json& cfg, uint64_t seed);

// ViT's learned position embedding [1, N, C] resampled to new_tokens (square grids), as
// big_vision's resample_posemb: bilinear with corner-aligned sampling (scipy zoom, order 1).
at::Tensor resample_posemb(const at::Tensor& posemb, int64_t new_tokens);

// The parameter, or a bv::Error naming it and the model.
at::Tensor param(const Params& params, const std::string& name, const char* model);

// Layer i of a scanned parameter (a stack along dim 0): param(...)[i], but a ParamSource can
// bring that one layer instead of the whole stack.
at::Tensor layer_param(const Params& params, const std::string& name, int64_t i, const char* model);

// Parameters that live elsewhere (fsdp: runtime/distributed/fsdp.h). While a ParamSource is set for
// the thread, param() and layer_param() ask it first; it recognises its parameters by the
// placeholder tensors it put into Params, so a subtree() copy still finds them. Models read
// every parameter through param()/layer_param(), never through Params directly.
struct ParamSource {
  virtual ~ParamSource() = default;
  // The value standing for `held`, or an undefined tensor when `held` is not a placeholder.
  virtual at::Tensor whole(const at::Tensor& held) = 0;
  virtual at::Tensor layer(const at::Tensor& held, int64_t i) = 0;
};

ParamSource* current_param_source();

// Sets the thread's ParamSource for its lifetime (and restores the previous one).
class ParamSourceScope {
 public:
  explicit ParamSourceScope(ParamSource* source);
  ~ParamSourceScope();
  ParamSourceScope(const ParamSourceScope&) = delete;
  ParamSourceScope& operator=(const ParamSourceScope&) = delete;

 private:
  ParamSource* previous_;
};

// Refuses a key of `cfg` that `keys` does not declare: "<model>: unknown config key 'KEY'".
void check_config_keys(const nlohmann::json& cfg, std::span<const ConfigKey> keys,
                       const char* model);

// The dotted config key `name` of the model config as a user writes it, for error messages:
// "model.variant", or "model.img.variant" while a composite model works on its part "img"
// (ConfigPart). Models refuse a bad dimension before building anything, naming the key.
std::string config_key(const std::string& name);

// While alive, config_key(name) names `part`.`name` inside the enclosing part (per thread):
// PaliGemma's img and llm, two_towers' image and text.
class ConfigPart {
 public:
  explicit ConfigPart(const std::string& part);
  ~ConfigPart();
  ConfigPart(const ConfigPart&) = delete;
  ConfigPart& operator=(const ConfigPart&) = delete;
};

// Appends a sub-model's specs with their names under `prefix` ("img/").
void append_prefixed(std::vector<ParamSpec>& out, std::vector<ParamSpec> specs,
                     const std::string& prefix);

// The parameters under `prefix` ("img/"), with the prefix taken off: a sub-model's own tree.
Params subtree(const Params& params, const std::string& prefix);

}  // namespace bv::models
