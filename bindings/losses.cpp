// bv._losses: big_vision's losses (runtime/train/losses.h) for lib/bv/losses.lua, which the
// evaluators use; the training step calls the same functions natively.
#include <ATen/ATen.h>
#include <lua.hpp>

#include "lua_util.h"
#include "tensor.h"
#include "train/losses.h"

namespace bv::lua {

namespace {

// bv._losses.softmax_xent(logits, labels [, kl]) -> per-example losses
int losses_softmax_xent(lua_State* L) {
  push_tensor(L, train::softmax_xent(check_tensor(L, 1), check_tensor(L, 2), lua_toboolean(L, 3)));
  return 1;
}

// bv._losses.sigmoid_xent(logits, labels) -> per-example losses
int losses_sigmoid_xent(lua_State* L) {
  push_tensor(L, train::sigmoid_xent(check_tensor(L, 1), check_tensor(L, 2)));
  return 1;
}

// bv._losses.log_sigmoid(x) -> log σ(x), stable for large |x|
int losses_log_sigmoid(lua_State* L) {
  push_tensor(L, at::log_sigmoid(check_tensor(L, 1)));
  return 1;
}

// bv._losses.per_example_loss(name, logits, labels) -> [B]
int losses_per_example_loss(lua_State* L) {
  push_tensor(
      L, train::per_example_loss(luaL_checkstring(L, 1), check_tensor(L, 2), check_tensor(L, 3)));
  return 1;
}

// bv._losses.token_nll(logits [B, T, V], targets [B, T] [, label_smoothing]) -> [B, T]
int losses_token_nll(lua_State* L) {
  push_tensor(L, train::token_nll(check_tensor(L, 1), check_tensor(L, 2), luaL_optnumber(L, 3, 0)));
  return 1;
}

}  // namespace

void open_losses(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("softmax_xent", losses_softmax_xent),
      BV_FN("sigmoid_xent", losses_sigmoid_xent),
      BV_FN("log_sigmoid", losses_log_sigmoid),
      BV_FN("per_example_loss", losses_per_example_loss),
      BV_FN("token_nll", losses_token_nll),
      {nullptr, nullptr},
  };
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_setfield(L, -2, "_losses");
}

}  // namespace bv::lua
