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

// bv.train.loss_and_grads(model_name, cfg_json, params, images, labels [, opts])
//   opts = {loss = "sigmoid_xent", accum_steps = 1, mixup_p = 0, rng = bv.rng(...),
//           autocast = "bfloat16" (or "float16"; default float32)}
//   -> loss (number), grads (table name -> tensor)
int train_loss_and_grads(lua_State* L) {
  const models::ModelApi* model = models::find_model(luaL_checkstring(L, 1));
  if (!model) raise(L, str("unknown model '", lua_tostring(L, 1), "'"));
  nlohmann::json cfg = nlohmann::json::parse(luaL_checkstring(L, 2));
  models::Params params = check_params(L, 3);
  at::Tensor images = check_tensor(L, 4), labels = check_tensor(L, 5);
  train::StepOptions opts;
  Rng* rng = nullptr;
  if (lua_istable(L, 6)) {
    lua_getfield(L, 6, "loss");
    if (!lua_isnil(L, -1)) opts.loss = luaL_checkstring(L, -1);
    lua_getfield(L, 6, "accum_steps");
    if (!lua_isnil(L, -1)) opts.accum_steps = check_int(L, -1);
    lua_getfield(L, 6, "mixup_p");
    if (!lua_isnil(L, -1)) opts.mixup_p = luaL_checknumber(L, -1);
    lua_getfield(L, 6, "autocast");
    if (!lua_isnil(L, -1)) opts.autocast = luaL_checkstring(L, -1);
    lua_getfield(L, 6, "rng");
    if (!lua_isnil(L, -1)) rng = &check_rng(L, lua_gettop(L));
    lua_pop(L, 5);
  }
  train::Gradients g = train::loss_and_grads(*model, cfg, params, images, labels, opts, rng);
  lua_pushnumber(L, g.loss);
  lua_createtable(L, 0, static_cast<int>(g.grads.size()));
  for (auto& [name, t] : g.grads) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 2;
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
      {nullptr, nullptr},
  };
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_setfield(L, -2, "train");
}

}  // namespace bv::lua
