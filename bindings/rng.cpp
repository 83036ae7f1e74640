#include "rng.h"

#include <new>

#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

// bv.rng(seed): seeds are integers; the same seed gives the same stream on every run.
int rng_new(lua_State* L) {
  push_rng(L, Rng(static_cast<uint64_t>(check_int(L, 1))));
  return 1;
}

// rng:uniform() in [0,1), rng:uniform(hi) in [0,hi), rng:uniform(lo, hi) in [lo,hi).
int rng_uniform(lua_State* L) {
  Rng& r = check_rng(L, 1);
  if (lua_isnoneornil(L, 2)) {
    lua_pushnumber(L, r.uniform());
  } else if (lua_isnoneornil(L, 3)) {
    lua_pushnumber(L, r.uniform(0, luaL_checknumber(L, 2)));
  } else {
    lua_pushnumber(L, r.uniform(luaL_checknumber(L, 2), luaL_checknumber(L, 3)));
  }
  return 1;
}

int rng_normal(lua_State* L) {
  Rng& r = check_rng(L, 1);
  lua_pushnumber(L, r.normal(luaL_optnumber(L, 2, 0.0), luaL_optnumber(L, 3, 1.0)));
  return 1;
}

// rng:integer(hi) in [1, hi], rng:integer(lo, hi) in [lo, hi]: the conventions of math.random.
int rng_integer(lua_State* L) {
  Rng& r = check_rng(L, 1);
  int64_t lo = 1, hi;
  if (lua_isnoneornil(L, 3)) {
    hi = check_int(L, 2);
  } else {
    lo = check_int(L, 2);
    hi = check_int(L, 3);
  }
  lua_pushinteger(L, r.integer(lo, hi));
  return 1;
}

int rng_split(lua_State* L) {
  push_rng(L, check_rng(L, 1).split());
  return 1;
}

// rng:state() -> uint8 tensor; rng:set_state(t) puts a saved stream back exactly.
int rng_state(lua_State* L) {
  push_tensor(L, check_rng(L, 1).state());
  return 1;
}

int rng_set_state(lua_State* L) {
  check_rng(L, 1).set_state(check_tensor(L, 2));
  lua_settop(L, 1);
  return 1;
}

int rng_gc(lua_State* L) {
  static_cast<Rng*>(luaL_checkudata(L, 1, kRngMeta))->~Rng();
  return 0;
}

int rng_tostring(lua_State* L) {
  lua_pushfstring(L, "bv.Rng: %p", lua_touserdata(L, 1));
  return 1;
}

}  // namespace

void push_rng(lua_State* L, Rng rng) {
  void* p = lua_newuserdatauv(L, sizeof(Rng), 0);
  new (p) Rng(std::move(rng));  // constructed before the metatable is set: no __gc on garbage
  luaL_setmetatable(L, kRngMeta);
}

Rng& check_rng(lua_State* L, int arg) {
  return *static_cast<Rng*>(luaL_checkudata(L, arg, kRngMeta));
}

Rng* test_rng(lua_State* L, int arg) { return static_cast<Rng*>(luaL_testudata(L, arg, kRngMeta)); }

void open_rng(lua_State* L) {
  static const luaL_Reg methods[] = {
      BV_FN("uniform", rng_uniform),
      BV_FN("normal", rng_normal),
      BV_FN("integer", rng_integer),
      BV_FN("split", rng_split),
      BV_FN("state", rng_state),
      BV_FN("set_state", rng_set_state),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kRngMeta);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, rng_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, rng_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  lua_pushcfunction(L, guarded<rng_new>);
  lua_setfield(L, -2, "rng");
}

}  // namespace bv::lua
