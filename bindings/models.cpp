// bv._models: the native models (runtime/models) seen from Lua. bv._models.build(name, cfg_json)
// makes a handle that holds the registry entry and the parsed config, once; the other functions
// take that handle. lib/bv/models.lua wraps it in the user-facing bv.models.build(name, cfg)
// objects. Parameters cross as a table name -> tensor.
#include <ATen/ATen.h>
#include <lua.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "models.h"
#include "models/model.h"
#include "models/ppp/gemma.h"
#include "models/proj/paligemma/paligemma.h"
#include "models/samplers.h"
#include "rng.h"
#include "tensor.h"
#include "train/step.h"

namespace bv::lua {

namespace {

const models::ModelApi& check_model_name(lua_State* L, int arg) {
  std::string name = luaL_checkstring(L, arg);
  const models::ModelApi* m = models::find_model(name);
  if (!m) {
    std::string known;
    for (const auto& n : models::model_names()) known += (known.empty() ? "" : ", ") + n;
    raise(L, str("unknown model '", name, "' (known: ", known, ")"));
  }
  return *m;
}

// A model built once: its registry entry and its config, parsed and checked at build time.
struct BuiltModel {
  const models::ModelApi* api;
  nlohmann::json cfg;
};

constexpr const char* kModelMeta = "bv.Model";

BuiltModel& check_model(lua_State* L, int arg) {
  return *static_cast<BuiltModel*>(luaL_checkudata(L, arg, kModelMeta));
}

int model_gc(lua_State* L) {
  check_model(L, 1).~BuiltModel();
  return 0;
}

int model_tostring(lua_State* L) {
  lua_pushfstring(L, "bv.Model(%s)", check_model(L, 1).api->name);
  return 1;
}

// bv._models.build(name, cfg_json) -> handle. The config is parsed here, once; param_specs runs
// once too, so a config the model rejects (an unknown variant, a bad key) fails at build time.
int models_build(lua_State* L) {
  const models::ModelApi& api = check_model_name(L, 1);
  const char* text = luaL_checkstring(L, 2);
  nlohmann::json cfg = parse_json(text, "model config");  // bounded nesting
  api.param_specs(cfg);
  void* p = lua_newuserdatauv(L, sizeof(BuiltModel), 0);
  new (p) BuiltModel{&api, std::move(cfg)};
  luaL_setmetatable(L, kModelMeta);
  return 1;
}

// bv._models.param_specs(model) -> {{name=, shape={...}, dtype=, scan=true|nil}, ...}
// sorted by name (scan: a stack of layers along dim 0).
int models_param_specs(lua_State* L) {
  const BuiltModel& m = check_model(L, 1);
  auto specs = m.api->param_specs(m.cfg);
  std::sort(specs.begin(), specs.end(),
            [](const models::ParamSpec& a, const models::ParamSpec& b) { return a.name < b.name; });
  lua_createtable(L, static_cast<int>(specs.size()), 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, specs[i].name.c_str());
    lua_setfield(L, -2, "name");
    push_shape(L, specs[i].shape);
    lua_setfield(L, -2, "shape");
    lua_pushstring(L, dtype_name(specs[i].dtype).c_str());
    lua_setfield(L, -2, "dtype");
    if (specs[i].scan) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, "scan");
    }
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

// bv._models.init(model, seed) -> table name -> tensor
int models_init(lua_State* L) {
  const BuiltModel& m = check_model(L, 1);
  models::Params params =
      models::init_params(*m.api, m.cfg, static_cast<uint64_t>(check_int(L, 2)));
  lua_createtable(L, 0, static_cast<int>(params.size()));
  for (auto& [name, t] : params) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

// bv._models.apply(model, params, train, input...) -> out, aux table (big_vision's out dict,
// flat: "img/pre_logits", "encoder/block00/+mlp"). A nil input is big_vision's None, which only
// two_towers takes (a tower left out); it reaches the model as an undefined tensor.
int models_apply(lua_State* L) {
  const BuiltModel& m = check_model(L, 1);
  models::Params params = check_params(L, 2);
  bool train = lua_toboolean(L, 3);
  std::vector<at::Tensor> inputs;
  for (int i = 4; i <= lua_gettop(L); ++i) {
    if (lua_isnil(L, i) && m.api == &models::two_towers_api()) {
      inputs.emplace_back();
      continue;
    }
    if (lua_isnil(L, i)) raise(L, str(m.api->name, ": input ", i - 3, " is nil"));
    inputs.push_back(check_tensor(L, i));
  }
  models::Output out = m.api->apply(m.cfg, params, inputs, train);
  push_tensor(L, out.out);
  lua_createtable(L, 0, static_cast<int>(out.aux.size() + out.lazy.size()));
  for (auto& [name, t] : out.aux) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  // The whole out dict, as big_vision's apply returns it: its lazy entries computed too.
  for (auto& [name, f] : out.lazy) {
    push_tensor(L, f());
    lua_setfield(L, -2, name.c_str());
  }
  return 2;
}

// bv._models.relayout(model, params): in place, the model's preferred memory layout.
int models_relayout(lua_State* L) {
  const BuiltModel& m = check_model(L, 1);
  models::Params params = check_params(L, 2);
  models::relayout_params(*m.api, params);
  for (auto& [name, t] : params) {
    push_tensor(L, t);
    lua_setfield(L, 2, name.c_str());
  }
  return 0;
}

// bv._models.resample_posemb(posemb, new_tokens)
int models_resample_posemb(lua_State* L) {
  push_tensor(L, models::resample_posemb(check_tensor(L, 1), check_int(L, 2)));
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Gemma decoding with a KV cache

constexpr const char* kCacheMeta = "bv.KVCache";
using CachePtr = std::shared_ptr<models::gemma::Cache>;

CachePtr& check_cache(lua_State* L, int arg) {
  return *static_cast<CachePtr*>(luaL_checkudata(L, arg, kCacheMeta));
}

int cache_length(lua_State* L) {
  lua_pushinteger(L, check_cache(L, 1)->length);
  return 1;
}

int cache_gc(lua_State* L) {
  static_cast<CachePtr*>(luaL_checkudata(L, 1, kCacheMeta))->~CachePtr();
  return 0;
}

void push_cache(lua_State* L, CachePtr cache) {
  void* p = lua_newuserdatauv(L, sizeof(CachePtr), 0);
  new (p) CachePtr(std::move(cache));
  luaL_setmetatable(L, kCacheMeta);
}

// bv._models.gemma_prefill(model, params, tokens [B, T], max_len [, input_mask [B, T]])
//   -> logits [B, T, V], cache
int models_gemma_prefill(lua_State* L) {
  const nlohmann::json& cfg = check_model(L, 1).cfg;
  models::Params params = check_params(L, 2);
  at::Tensor tokens = check_tensor(L, 3);
  int64_t max_len = check_int(L, 4);
  if (tokens.dim() != 2) raise(L, "prefill: tokens must be [batch, length]");
  int64_t B = tokens.size(0), T = tokens.size(1);
  // The masks made here go where the tokens are (a host mask among device tensors fails there).
  at::TensorOptions on_tokens = tokens.options().dtype(at::kBool);
  at::Tensor input_mask = lua_isnoneornil(L, 5) ? at::ones({B, T}, on_tokens) : check_tensor(L, 5);
  auto cache = std::make_shared<models::gemma::Cache>();
  at::Tensor causal = at::ones({T, T}, on_tokens).tril().expand({B, T, T});
  at::Tensor x = models::gemma::embed(cfg, params, tokens);
  at::Tensor pre = models::gemma::prefill(cfg, params, x, causal, input_mask, max_len, cache.get());
  push_tensor(L, models::gemma::logits(params, pre));
  push_cache(L, std::move(cache));
  return 2;
}

// bv._models.gemma_extend(model, params, cache, tokens [B]) -> logits [B, V]
int models_gemma_extend(lua_State* L) {
  const nlohmann::json& cfg = check_model(L, 1).cfg;
  models::Params params = check_params(L, 2);
  CachePtr& cache = check_cache(L, 3);
  at::Tensor tokens = check_tensor(L, 4);
  if (tokens.dim() != 1) raise(L, "extend: tokens must be [batch], one per row");
  at::Tensor x = models::gemma::embed(cfg, params, tokens.unsqueeze(1));
  at::Tensor pre = models::gemma::extend(cfg, params, x, cache.get());
  push_tensor(L, models::gemma::logits(params, pre).squeeze(1));
  return 1;
}

// bv._models.paligemma_prefill(model, params, image, text, mask_ar, input_mask,
//                              max_decode_len) -> logits [B, V] after each prompt, cache
int models_paligemma_prefill(lua_State* L) {
  const nlohmann::json& cfg = check_model(L, 1).cfg;
  models::Params params = check_params(L, 2);
  auto cache = std::make_shared<models::gemma::Cache>();
  push_tensor(L, models::paligemma::prefill(cfg, params, check_tensor(L, 3), check_tensor(L, 4),
                                            check_tensor(L, 5), check_tensor(L, 6), check_int(L, 7),
                                            cache.get()));
  push_cache(L, std::move(cache));
  return 2;
}

// bv._models.paligemma_extend(model, params, cache, tokens [B]) -> logits [B, V]
int models_paligemma_extend(lua_State* L) {
  const nlohmann::json& cfg = check_model(L, 1).cfg;
  models::Params params = check_params(L, 2);
  CachePtr& cache = check_cache(L, 3);
  push_tensor(L, models::paligemma::extend(cfg, params, check_tensor(L, 4), cache.get()));
  return 1;
}

// bv._models.sample(logits [B, V], sampler_spec, rng [, tok_mask]) -> tokens [B], logp [B]
int models_sample(lua_State* L) {
  at::Tensor logits = check_tensor(L, 1);
  models::Sampler sampler = models::parse_sampler(luaL_checkstring(L, 2));
  Rng& rng = check_rng(L, 3);
  at::Tensor tok_mask = lua_isnoneornil(L, 4) ? at::Tensor() : check_tensor(L, 4);
  auto [tokens, logp] = models::sample(logits, sampler, rng, tok_mask);
  push_tensor(L, tokens);
  push_tensor(L, logp);
  return 2;
}

int models_names(lua_State* L) {
  auto names = models::model_names();
  lua_createtable(L, static_cast<int>(names.size()), 0);
  for (size_t i = 0; i < names.size(); ++i) {
    lua_pushstring(L, names[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

int models_doc(lua_State* L) {
  lua_pushstring(L, check_model_name(L, 1).doc);
  return 1;
}

// bv._models.config_keys(name) -> {{name =, type =, default = JSON text, doc =, model_key =}, ...}:
// the keys the model's parser accepts (ModelApi::keys), for bv.config_keys.
int models_config_keys(lua_State* L) {
  const models::ModelApi& m = check_model_name(L, 1);
  lua_createtable(L, static_cast<int>(m.keys.size()), 0);
  for (size_t i = 0; i < m.keys.size(); ++i) {
    const models::ConfigKey& k = m.keys[i];
    lua_createtable(L, 0, 5);
    lua_pushstring(L, k.name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, k.type);
    lua_setfield(L, -2, "type");
    lua_pushstring(L, k.default_json);
    lua_setfield(L, -2, "default");
    lua_pushstring(L, k.doc);
    lua_setfield(L, -2, "doc");
    if (k.model_key) {
      lua_pushstring(L, k.model_key);
      lua_setfield(L, -2, "model_key");
    }
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

// ---------------------------------------------------------------------------------------------
// The training step (runtime/train/step.h): forward, loss and backward in one call

// The step options a Lua table gives (absent keys keep their defaults); `rng` gets the mixup
// stream when the table has one.
train::StepOptions check_step_options(lua_State* L, int arg, Rng** rng) {
  train::StepOptions opts;
  if (lua_isnoneornil(L, arg)) return opts;
  luaL_checktype(L, arg, LUA_TTABLE);
  auto field = [&](const char* key) {
    lua_getfield(L, arg, key);
    return !lua_isnil(L, -1);
  };
  if (field("loss")) opts.loss = luaL_checkstring(L, -1);
  if (field("accum_steps")) opts.accum_steps = check_int(L, -1);
  if (field("mixup_p")) opts.mixup_p = luaL_checknumber(L, -1);
  if (field("autocast")) opts.autocast = luaL_checkstring(L, -1);
  if (field("label_smoothing")) opts.label_smoothing = luaL_checknumber(L, -1);
  if (field("rng") && rng) *rng = &check_rng(L, lua_gettop(L));
  lua_pop(L, 6);
  return opts;
}

void push_gradients(lua_State* L, const train::Gradients& g) {
  push_tensor(L, g.loss);
  lua_createtable(L, 0, static_cast<int>(g.grads.size()));
  for (auto& [name, t] : g.grads) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
}

// bv._models.loss_and_grads(model, params, images, labels [, opts])
//   opts = {loss = "sigmoid_xent", accum_steps = 1, mixup_p = 0, rng = bv.rng(...),
//           autocast = "bfloat16" (default float32; "float16" is refused: no loss scaling)}
//   -> loss (a scalar tensor on the parameters' device), grads (table name -> tensor)
int models_loss_and_grads(lua_State* L) {
  const BuiltModel& m = check_model(L, 1);
  models::Params params = check_params(L, 2);
  at::Tensor images = check_tensor(L, 3), labels = check_tensor(L, 4);
  Rng* rng = nullptr;
  train::StepOptions opts = check_step_options(L, 5, &rng);
  push_gradients(L, train::loss_and_grads(*m.api, m.cfg, params, images, labels, opts, rng));
  return 2;
}

// bv._models.lm_loss_and_grads(model, params, image, text, mask_ar, mask_loss
//                              [, {label_smoothing = 0, accum_steps = 1, autocast = ...}])
//   -> loss (scalar tensor), grads: the prefix-LM step of big_vision's PaliGemma trainer.
int models_lm_loss_and_grads(lua_State* L) {
  const BuiltModel& m = check_model(L, 1);
  models::Params params = check_params(L, 2);
  at::Tensor image = check_tensor(L, 3), text = check_tensor(L, 4);
  at::Tensor mask_ar = check_tensor(L, 5), mask_loss = check_tensor(L, 6);
  train::StepOptions opts = check_step_options(L, 7, nullptr);
  push_gradients(
      L, train::lm_loss_and_grads(*m.api, m.cfg, params, image, text, mask_ar, mask_loss, opts));
  return 2;
}

}  // namespace

models::Params check_params(lua_State* L, int arg) {
  luaL_checktype(L, arg, LUA_TTABLE);
  models::Params params;
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    if (lua_type(L, -2) != LUA_TSTRING) raise(L, "parameter names must be strings");
    at::Tensor* t = test_tensor(L, -1);
    if (!t)
      raise(L, str("parameter '", lua_tostring(L, -2), "' is a ", luaL_typename(L, -1),
                   ", not a tensor"));
    params[lua_tostring(L, -2)] = *t;
    lua_pop(L, 1);
  }
  return params;
}

void open_models(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("build", models_build),
      BV_FN("param_specs", models_param_specs),
      BV_FN("init", models_init),
      BV_FN("apply", models_apply),
      BV_FN("names", models_names),
      BV_FN("doc", models_doc),
      BV_FN("config_keys", models_config_keys),
      BV_FN("resample_posemb", models_resample_posemb),
      BV_FN("relayout", models_relayout),
      BV_FN("paligemma_prefill", models_paligemma_prefill),
      BV_FN("paligemma_extend", models_paligemma_extend),
      BV_FN("sample", models_sample),
      BV_FN("gemma_prefill", models_gemma_prefill),
      BV_FN("gemma_extend", models_gemma_extend),
      BV_FN("loss_and_grads", models_loss_and_grads),
      BV_FN("lm_loss_and_grads", models_lm_loss_and_grads),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kModelMeta);
  lua_pushcfunction(L, model_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, model_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  static const luaL_Reg cache_methods[] = {BV_FN("length", cache_length), {nullptr, nullptr}};
  luaL_newmetatable(L, kCacheMeta);
  lua_newtable(L);
  luaL_setfuncs(L, cache_methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, cache_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_setfield(L, -2, "_models");
}

}  // namespace bv::lua
