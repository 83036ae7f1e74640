// bv._models: the native model registry (runtime/models) seen from Lua. lib/bv/models.lua makes
// the user-facing bv.models.build(name, cfg) objects. Configs cross as JSON text (the model
// section of a config is JSON-able by construction), parameters as a table name -> tensor.
#include <lua.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "models/gemma.h"
#include "models/paligemma.h"
#include "models/samplers.h"
#include "rng.h"
#include "models/model.h"
#include "models.h"
#include "tensor.h"

namespace bv::lua {

namespace {

const models::ModelApi& check_model(lua_State* L, int arg) {
  std::string name = luaL_checkstring(L, arg);
  const models::ModelApi* m = models::find_model(name);
  if (!m) {
    std::string known;
    for (const auto& n : models::model_names()) known += (known.empty() ? "" : ", ") + n;
    raise(L, str("unknown model '", name, "' (known: ", known, ")"));
  }
  return *m;
}

nlohmann::json check_config(lua_State* L, int arg) {
  const char* text = luaL_checkstring(L, arg);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("model config is not valid JSON: ", e.what());
  }
}

// bv._models.param_specs(name, cfg_json) -> {{name=, shape={...}, dtype=, scan=true|nil}, ...}
// sorted by name (scan: a stack of layers along dim 0).
int models_param_specs(lua_State* L) {
  const models::ModelApi& m = check_model(L, 1);
  auto specs = m.param_specs(check_config(L, 2));
  std::sort(specs.begin(), specs.end(),
            [](const models::ParamSpec& a, const models::ParamSpec& b) { return a.name < b.name; });
  lua_createtable(L, static_cast<int>(specs.size()), 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    lua_createtable(L, 0, 3);
    lua_pushstring(L, specs[i].name.c_str());
    lua_setfield(L, -2, "name");
    lua_createtable(L, static_cast<int>(specs[i].shape.size()), 0);
    for (size_t d = 0; d < specs[i].shape.size(); ++d) {
      lua_pushinteger(L, specs[i].shape[d]);
      lua_rawseti(L, -2, static_cast<lua_Integer>(d + 1));
    }
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

// bv._models.init(name, cfg_json, seed) -> table name -> tensor
int models_init(lua_State* L) {
  const models::ModelApi& m = check_model(L, 1);
  models::Params params = models::init_params(m, check_config(L, 2), static_cast<uint64_t>(check_int(L, 3)));
  lua_createtable(L, 0, static_cast<int>(params.size()));
  for (auto& [name, t] : params) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

// bv._models.apply(name, cfg_json, params, train, input...) -> out, aux table
int models_apply(lua_State* L) {
  const models::ModelApi& m = check_model(L, 1);
  nlohmann::json cfg = check_config(L, 2);
  models::Params params = check_params(L, 3);
  bool train = lua_toboolean(L, 4);
  std::vector<at::Tensor> inputs;
  for (int i = 5; i <= lua_gettop(L); ++i) inputs.push_back(check_tensor(L, i));
  models::Output out = m.apply(cfg, params, inputs, train);
  push_tensor(L, out.out);
  lua_createtable(L, 0, static_cast<int>(out.aux.size()));
  for (auto& [name, t] : out.aux) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 2;
}

// bv._models.relayout(name, params): in place, the model's preferred memory layout.
int models_relayout(lua_State* L) {
  const models::ModelApi& m = check_model(L, 1);
  models::Params params = check_params(L, 2);
  models::relayout_params(m, params);
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

// bv._models.gemma_prefill(cfg_json, params, tokens [B, T], max_len [, input_mask [B, T]])
//   -> logits [B, T, V], cache
int models_gemma_prefill(lua_State* L) {
  nlohmann::json cfg = check_config(L, 1);
  models::Params params = check_params(L, 2);
  at::Tensor tokens = check_tensor(L, 3);
  int64_t max_len = check_int(L, 4);
  if (tokens.dim() != 2) raise(L, "prefill: tokens must be [batch, length]");
  int64_t B = tokens.size(0), T = tokens.size(1);
  at::Tensor input_mask = lua_isnoneornil(L, 5) ? at::ones({B, T}, at::kBool) : check_tensor(L, 5);
  auto cache = std::make_shared<models::gemma::Cache>();
  at::Tensor causal = at::ones({T, T}, at::kBool).tril().expand({B, T, T});
  at::Tensor x = models::gemma::embed(cfg, params, tokens);
  at::Tensor pre = models::gemma::prefill(cfg, params, x, causal, input_mask, max_len, cache.get());
  push_tensor(L, models::gemma::logits(params, pre));
  push_cache(L, std::move(cache));
  return 2;
}

// bv._models.gemma_extend(cfg_json, params, cache, tokens [B]) -> logits [B, V]
int models_gemma_extend(lua_State* L) {
  nlohmann::json cfg = check_config(L, 1);
  models::Params params = check_params(L, 2);
  CachePtr& cache = check_cache(L, 3);
  at::Tensor tokens = check_tensor(L, 4);
  if (tokens.dim() != 1) raise(L, "extend: tokens must be [batch], one per row");
  at::Tensor x = models::gemma::embed(cfg, params, tokens.unsqueeze(1));
  at::Tensor pre = models::gemma::extend(cfg, params, x, cache.get());
  push_tensor(L, models::gemma::logits(params, pre).squeeze(1));
  return 1;
}

// bv._models.paligemma_prefill(cfg_json, params, image, text, mask_ar, input_mask,
//                              max_decode_len) -> logits [B, V] after each prompt, cache
int models_paligemma_prefill(lua_State* L) {
  nlohmann::json cfg = check_config(L, 1);
  models::Params params = check_params(L, 2);
  auto cache = std::make_shared<models::gemma::Cache>();
  push_tensor(L, models::paligemma::prefill(cfg, params, check_tensor(L, 3), check_tensor(L, 4),
                                            check_tensor(L, 5), check_tensor(L, 6),
                                            check_int(L, 7), cache.get()));
  push_cache(L, std::move(cache));
  return 2;
}

// bv._models.paligemma_extend(cfg_json, params, cache, tokens [B]) -> logits [B, V]
int models_paligemma_extend(lua_State* L) {
  nlohmann::json cfg = check_config(L, 1);
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
  auto [tokens, logp] = models::sample(logits, sampler, rng.gen, tok_mask);
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
  lua_pushstring(L, check_model(L, 1).doc);
  return 1;
}

}  // namespace

models::Params check_params(lua_State* L, int arg) {
  luaL_checktype(L, arg, LUA_TTABLE);
  models::Params params;
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    if (lua_type(L, -2) != LUA_TSTRING) raise(L, "parameter names must be strings");
    at::Tensor* t = test_tensor(L, -1);
    if (!t) raise(L, str("parameter '", lua_tostring(L, -2), "' is a ", luaL_typename(L, -1), ", not a tensor"));
    params[lua_tostring(L, -2)] = *t;
    lua_pop(L, 1);
  }
  return params;
}

void open_models(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("param_specs", models_param_specs), BV_FN("init", models_init),
      BV_FN("apply", models_apply),             BV_FN("names", models_names),
      BV_FN("doc", models_doc),                 BV_FN("resample_posemb", models_resample_posemb),
      BV_FN("relayout", models_relayout),
      BV_FN("paligemma_prefill", models_paligemma_prefill),
      BV_FN("paligemma_extend", models_paligemma_extend),
      BV_FN("sample", models_sample),
      BV_FN("gemma_prefill", models_gemma_prefill), BV_FN("gemma_extend", models_gemma_extend),
      {nullptr, nullptr},
  };
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
