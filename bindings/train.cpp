// bv.train: the native half of a training step (runtime/train/step.h) and the losses.
#include <lua.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "lua_util.h"
#include "models.h"
#include "models/model.h"
#include "rng.h"
#include "tensor.h"
#include "train/step.h"

namespace bv::lua {

namespace {

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
  lua_pushnumber(L, g.loss);
  lua_createtable(L, 0, static_cast<int>(g.grads.size()));
  for (auto& [name, t] : g.grads) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
}

const models::ModelApi& check_model_name(lua_State* L, int arg) {
  const models::ModelApi* model = models::find_model(luaL_checkstring(L, arg));
  if (!model) raise(L, str("unknown model '", lua_tostring(L, arg), "'"));
  return *model;
}

// bv.train.loss_and_grads(model_name, cfg_json, params, images, labels [, opts])
//   opts = {loss = "sigmoid_xent", accum_steps = 1, mixup_p = 0, rng = bv.rng(...),
//           autocast = "bfloat16" (or "float16"; default float32)}
//   -> loss (number), grads (table name -> tensor)
int train_loss_and_grads(lua_State* L) {
  const models::ModelApi& model = check_model_name(L, 1);
  nlohmann::json cfg = nlohmann::json::parse(luaL_checkstring(L, 2));
  models::Params params = check_params(L, 3);
  at::Tensor images = check_tensor(L, 4), labels = check_tensor(L, 5);
  Rng* rng = nullptr;
  train::StepOptions opts = check_step_options(L, 6, &rng);
  push_gradients(L, train::loss_and_grads(model, cfg, params, images, labels, opts, rng));
  return 2;
}

// bv.train.lm_loss_and_grads(model_name, cfg_json, params, image, text, mask_ar, mask_loss
//                            [, {label_smoothing = 0, accum_steps = 1, autocast = ...}])
//   -> loss (number), grads: the prefix-LM step of big_vision's PaliGemma trainer.
int train_lm_loss_and_grads(lua_State* L) {
  const models::ModelApi& model = check_model_name(L, 1);
  nlohmann::json cfg = nlohmann::json::parse(luaL_checkstring(L, 2));
  models::Params params = check_params(L, 3);
  at::Tensor image = check_tensor(L, 4), text = check_tensor(L, 5);
  at::Tensor mask_ar = check_tensor(L, 6), mask_loss = check_tensor(L, 7);
  train::StepOptions opts = check_step_options(L, 8, nullptr);
  push_gradients(L, train::lm_loss_and_grads(model, cfg, params, image, text, mask_ar, mask_loss,
                                             opts));
  return 2;
}

// bv.train.token_nll(logits [B, T, V], targets [B, T] [, label_smoothing]) -> [B, T]
int train_token_nll(lua_State* L) {
  push_tensor(L, train::token_nll(check_tensor(L, 1), check_tensor(L, 2), luaL_optnumber(L, 3, 0)));
  return 1;
}

// bv.train.per_example_loss(name, logits, labels) -> [B]
int train_per_example_loss(lua_State* L) {
  push_tensor(L, train::per_example_loss(luaL_checkstring(L, 1), check_tensor(L, 2),
                                         check_tensor(L, 3)));
  return 1;
}

}  // namespace

void open_train(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("loss_and_grads", train_loss_and_grads),
      BV_FN("per_example_loss", train_per_example_loss),
      BV_FN("lm_loss_and_grads", train_lm_loss_and_grads),
      BV_FN("token_nll", train_token_nll),
      {nullptr, nullptr},
  };
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_setfield(L, -2, "train");
}

}  // namespace bv::lua
