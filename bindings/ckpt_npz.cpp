// bv.ckpt npz functions (runtime/ckpt/npz.h): big_vision's np.savez checkpoints.
//
//   bv.ckpt.load_npz(path [, filter]) -> {name = tensor, ...}
//       filter: a Lua pattern matched against each name with string.find (anchor it with ^...$
//       for an exact match), or a function(name) -> boolean. bf16 members (|V2) come back as
//       bfloat16 tensors.
//   bv.ckpt.save_npz(path, {name = tensor, ...})
//       what np.savez writes, members sorted by name; atomic (PATH.tmp-<pid>, fsync, rename).
//   bv.ckpt.npz_index(path) -> {{name=, shape={...}, dtype="float32", bytes=, descr="<f4",
//       deflated=false}, ...} sorted by name; reads only the directory and the .npy headers.
//       bytes: the array data as stored in the file (numel x the file's itemsize).
#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ckpt.h"
#include "ckpt/npz.h"
#include "core/error.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

// Pushes string.find from the loaded-modules table (not the global, which a script may shadow).
void push_string_find(lua_State* L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "string");
  luaL_checktype(L, -1, LUA_TTABLE);
  lua_getfield(L, -1, "find");
  lua_replace(L, -3);
  lua_pop(L, 1);
}

int ckpt_load_npz(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  int filter_type = lua_type(L, 2);
  if (filter_type != LUA_TNONE && filter_type != LUA_TNIL && filter_type != LUA_TSTRING &&
      filter_type != LUA_TFUNCTION)
    luaL_typeerror(L, 2, "nil, a Lua pattern (string) or a function(name) -> boolean");
  std::function<bool(const std::string&)> want;
  if (filter_type == LUA_TSTRING) {
    want = [L](const std::string& name) {
      push_string_find(L);
      lua_pushlstring(L, name.data(), name.size());
      lua_pushvalue(L, 2);
      lua_call(L, 2, 1);
      bool ok = !lua_isnil(L, -1);
      lua_pop(L, 1);
      return ok;
    };
  } else if (filter_type == LUA_TFUNCTION) {
    want = [L](const std::string& name) {
      lua_pushvalue(L, 2);
      lua_pushlstring(L, name.data(), name.size());
      lua_call(L, 1, 1);
      bool ok = lua_toboolean(L, -1);
      lua_pop(L, 1);
      return ok;
    };
  }
  auto params = ckpt::load_npz(path, want);
  lua_createtable(L, 0, static_cast<int>(params.size()));
  for (auto& [name, t] : params) {
    push_tensor(L, std::move(t));
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

int ckpt_save_npz(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  std::vector<std::pair<std::string, at::Tensor>> params;
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      raise(L, str("save_npz: params keys must be strings (array names), got a ",
                   luaL_typename(L, -2)));
    size_t n = 0;
    const char* key = lua_tolstring(L, -2, &n);
    std::string name(key, n);
    at::Tensor* t = test_tensor(L, -1);
    if (!t)
      raise(L,
            str("save_npz: params['", name, "'] is a ", luaL_typename(L, -1), ", not a bv.Tensor"));
    params.emplace_back(name, *t);
    lua_pop(L, 1);
  }
  std::sort(params.begin(), params.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  ckpt::save_npz(path, params);
  return 0;
}

int ckpt_npz_index(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  std::vector<ckpt::NpzEntry> entries = ckpt::npz_index(path);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  lua_createtable(L, static_cast<int>(entries.size()), 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const ckpt::NpzEntry& e = entries[i];
    lua_createtable(L, 0, 6);
    lua_pushlstring(L, e.name.data(), e.name.size());
    lua_setfield(L, -2, "name");
    push_shape(L, e.shape);
    lua_setfield(L, -2, "shape");
    lua_pushstring(L, dtype_name(e.dtype).c_str());
    lua_setfield(L, -2, "dtype");
    lua_pushinteger(L, static_cast<lua_Integer>(e.nbytes));
    lua_setfield(L, -2, "bytes");
    lua_pushstring(L, e.descr.c_str());
    lua_setfield(L, -2, "descr");
    lua_pushboolean(L, e.deflated);
    lua_setfield(L, -2, "deflated");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

}  // namespace

void open_ckpt_npz(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      BV_FN("load_npz", ckpt_load_npz),
      BV_FN("save_npz", ckpt_save_npz),
      BV_FN("npz_index", ckpt_npz_index),
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_pop(L, 1);
}

}  // namespace bv::lua
