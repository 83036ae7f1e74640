// bv.ops: the tensor kernels behind the general pp ops (runtime/pp/ops_general.h). The pp ops in
// lib/bv/pp/ops_general.lua call these; scripts and the REPL can too.
#include <lua.hpp>

#include <vector>

#include "lua_util.h"
#include "pp/ops_general.h"
#include "tensor.h"

namespace bv::lua {

namespace {

// A number or a list of numbers.
std::vector<double> check_numbers(lua_State* L, int arg) {
  std::vector<double> out;
  if (lua_type(L, arg) == LUA_TNUMBER) {
    out.push_back(lua_tonumber(L, arg));
    return out;
  }
  luaL_argexpected(L, lua_istable(L, arg), arg, "number or list of numbers");
  lua_Integer n = luaL_len(L, arg);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, arg, i);
    if (lua_type(L, -1) != LUA_TNUMBER) luaL_argerror(L, arg, "list entries must be numbers");
    out.push_back(lua_tonumber(L, -1));
    lua_pop(L, 1);
  }
  return out;
}

// bv.ops.value_range(x, vmin, vmax, in_min, in_max, clip_values)
int ops_value_range(lua_State* L) {
  at::Tensor& x = check_tensor(L, 1);
  push_tensor(L, pp::value_range(x, luaL_checknumber(L, 2), luaL_checknumber(L, 3),
                                 check_numbers(L, 4), check_numbers(L, 5), lua_toboolean(L, 6)));
  return 1;
}

// bv.ops.normalize(x, mean, std)
int ops_normalize(lua_State* L) {
  at::Tensor& x = check_tensor(L, 1);
  push_tensor(L, pp::normalize(x, check_numbers(L, 2), check_numbers(L, 3)));
  return 1;
}

// bv.ops.onehot(labels, depth, multi, on, off)
int ops_onehot(lua_State* L) {
  at::Tensor& labels = check_tensor(L, 1);
  push_tensor(L, pp::onehot(labels, check_int(L, 2), lua_toboolean(L, 3), luaL_checknumber(L, 4),
                            luaL_checknumber(L, 5)));
  return 1;
}

// bv.ops.pad_to_shape(x, shape, pad_value, where): shape entries < 0 leave a dimension alone.
int ops_pad_to_shape(lua_State* L) {
  at::Tensor& x = check_tensor(L, 1);
  std::vector<int64_t> shape;
  for (double d : check_numbers(L, 2)) shape.push_back(static_cast<int64_t>(d));
  push_tensor(L, pp::pad_to_shape(x, shape, luaL_checknumber(L, 3), luaL_checkstring(L, 4)));
  return 1;
}

}  // namespace

void open_ops(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("value_range", ops_value_range),
      BV_FN("normalize", ops_normalize),
      BV_FN("onehot", ops_onehot),
      BV_FN("pad_to_shape", ops_pad_to_shape),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "ops");
}

}  // namespace bv::lua
