// bv.dist.fsdp: fully sharded parameters (runtime/distributed/fsdp.h), driven by
// lib/bv/sharding.lua.
//
//   local fsdp = bv.dist.fsdp(group, {{name = "w", value = tensor, owners = {0} | {r0, r1, ...}}}
//                             [, {reshard_after_forward = true | false,
//                                 wire_dtype = "float32" | "bfloat16"}])
//   fsdp:placeholder(name)   -- what the model's params table holds for it
//   fsdp:owned(name)         -- what this rank owns of it (whole, or its rows stacked), or nil
//   fsdp:run(fn, ...)        -- fn(...) with the placeholders resolved (a training step)
//   fsdp:take_grads()        -- name -> gradient of what this rank owns, averaged over ranks
//   fsdp:gather(name)        -- the whole value, on every rank (collective)
//   fsdp:read(name[, layer]) -- inside fs:run, on every rank: what the model's read of `name`
//                               gets (param(), or layer_param() of layer 1..n), without
//                               gradients; one of the run's reads (a collective)
//   fsdp:prefetched()        -- reads served by a prefetch so far (fsdp.h: the last run's script)
//   fsdp:broadcasts()        -- broadcasts of parts started by reads and prefetches so far
//   fsdp:reduces()           -- gradient reduces so far
//   fsdp:broadcast_bytes()   -- the bytes of those broadcasts (bfloat16 copies: wire_dtype)
//   fsdp:reduce_bytes()      -- the bytes of those reduces
//   fsdp:kept_peak_bytes()   -- the most bytes kept for remat's recomputations at once
//   fsdp:kept_bytes()        -- the bytes kept now
#include <ATen/ATen.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quote.h"
#include "dist.h"
#include "distributed/fsdp.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

constexpr const char* kFsdpMeta = "bv.Fsdp";
using FsdpPtr = std::shared_ptr<FsdpParams>;

FsdpParams& check_fsdp(lua_State* L, int arg) {
  return **static_cast<FsdpPtr*>(luaL_checkudata(L, arg, kFsdpMeta));
}

int fsdp_gc(lua_State* L) {
  static_cast<FsdpPtr*>(luaL_checkudata(L, 1, kFsdpMeta))->~FsdpPtr();
  return 0;
}

// bv.dist.fsdp(group, specs[, options])
int fsdp_new(lua_State* L) {
  std::shared_ptr<DistGroup> group = check_dist_group(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  std::vector<FsdpParamSpec> specs;
  lua_Integer n = luaL_len(L, 2);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 2, i);
    if (!lua_istable(L, -1)) raise(L, str("fsdp: spec ", i, " must be {name=, value=, owners=}"));
    FsdpParamSpec s;
    lua_getfield(L, -1, "name");
    if (!lua_isstring(L, -1)) raise(L, str("fsdp: spec ", i, " has no name"));
    s.name = lua_tostring(L, -1);
    lua_getfield(L, -2, "value");
    at::Tensor* t = test_tensor(L, -1);
    if (!t) raise(L, str("fsdp: '", s.name, "' has no value tensor"));
    s.full = *t;
    lua_getfield(L, -3, "owners");
    if (!lua_istable(L, -1)) raise(L, str("fsdp: '", s.name, "' has no owners list"));
    lua_Integer m = luaL_len(L, -1);
    for (lua_Integer k = 1; k <= m; ++k) {
      lua_geti(L, -1, k);
      if (!lua_isinteger(L, -1))
        raise(L, str("fsdp: owners[", k, "] of '", s.name, "' is not a rank"));
      s.owners.push_back(static_cast<int>(lua_tointeger(L, -1)));
      lua_pop(L, 1);
    }
    lua_pop(L, 4);
    specs.push_back(std::move(s));
  }
  bool reshard_after_forward = true, wire_bfloat16 = false;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      std::string key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
      if (key == "reshard_after_forward") {
        if (!lua_isboolean(L, -1)) raise(L, "fsdp: reshard_after_forward must be true or false");
        reshard_after_forward = lua_toboolean(L, -1);
      } else if (key == "wire_dtype") {
        std::string v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (v != "float32" && v != "bfloat16") {
          raise(L, str("fsdp: wire_dtype must be \"float32\" or \"bfloat16\", got ",
                       snippet(luaL_tolstring(L, -1, nullptr))));
        }
        wire_bfloat16 = v == "bfloat16";
      } else {
        lua_pushvalue(L, -2);
        raise(L, str("fsdp: unknown option '", snippet(luaL_tolstring(L, -1, nullptr)),
                     "' (reshard_after_forward and wire_dtype are the options)"));
      }
      lua_pop(L, 1);
    }
  }
  auto fs = std::make_shared<FsdpParams>(std::move(group), std::move(specs), reshard_after_forward,
                                         wire_bfloat16);
  void* p = lua_newuserdatauv(L, sizeof(FsdpPtr), 0);
  new (p) FsdpPtr(std::move(fs));
  luaL_setmetatable(L, kFsdpMeta);
  return 1;
}

int fsdp_placeholder(lua_State* L) {
  push_tensor(L, check_fsdp(L, 1).placeholder(luaL_checkstring(L, 2)));
  return 1;
}

int fsdp_owned(lua_State* L) {
  at::Tensor t = check_fsdp(L, 1).owned(luaL_checkstring(L, 2));
  if (t.defined()) push_tensor(L, t);
  else lua_pushnil(L);
  return 1;
}

// Clears the step's fetched values however fn ends (an error unwinds through here too; a
// prefetch that fails then is not reported over the error that is already on its way).
struct ResolveScope {
  FsdpParams& fs;
  models::ParamSourceScope scope;
  explicit ResolveScope(FsdpParams& f) : fs(f), scope(&f) {}
  ~ResolveScope() {
    try {
      fs.clear_cache();
    } catch (const std::exception&) {
    }
  }
};

int fsdp_run(lua_State* L) {
  FsdpParams& fs = check_fsdp(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  ResolveScope scope(fs);
  int base = 1;  // results are everything above the userdata
  lua_call(L, lua_gettop(L) - 2, LUA_MULTRET);
  fs.clear_cache();  // here, where a failed prefetch can raise
  return lua_gettop(L) - base;
}

// fsdp:prefetched() -> how many reads a prefetch served so far
int fsdp_prefetched(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).prefetched());
  return 1;
}

int fsdp_broadcasts(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).broadcasts());
  return 1;
}

int fsdp_reduces(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).reduces());
  return 1;
}

int fsdp_broadcast_bytes(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).broadcast_bytes());
  return 1;
}

int fsdp_reduce_bytes(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).reduce_bytes());
  return 1;
}

int fsdp_kept_peak_bytes(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).kept_peak_bytes());
  return 1;
}

int fsdp_kept_bytes(lua_State* L) {
  lua_pushinteger(L, check_fsdp(L, 1).kept_bytes());
  return 1;
}

int fsdp_take_grads(lua_State* L) {
  auto grads = check_fsdp(L, 1).take_grads();
  lua_createtable(L, 0, static_cast<int>(grads.size()));
  for (auto& [name, g] : grads) {
    push_tensor(L, g);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

int fsdp_gather(lua_State* L) {
  push_tensor(L, check_fsdp(L, 1).gather(luaL_checkstring(L, 2)));
  return 1;
}

int fsdp_read(lua_State* L) {
  FsdpParams& fs = check_fsdp(L, 1);
  at::Tensor held = fs.placeholder(luaL_checkstring(L, 2));
  at::NoGradGuard no_grad;
  if (lua_isnoneornil(L, 3)) {
    push_tensor(L, fs.whole(held));
  } else {
    lua_Integer i = luaL_checkinteger(L, 3);
    if (held.dim() == 0 || i < 1 || i > held.size(0)) {
      raise(L, str("fsdp:read: layer ", i, " is not a row of '", lua_tostring(L, 2), "' (1 to ",
                   held.dim() == 0 ? 0 : held.size(0), ")"));
    }
    push_tensor(L, fs.layer(held, i - 1));
  }
  return 1;
}

}  // namespace

// Adds bv.dist.fsdp; the `dist` table is at the top of the stack.
void open_fsdp(lua_State* L) {
  static const luaL_Reg methods[] = {
      BV_FN("placeholder", fsdp_placeholder),
      BV_FN("owned", fsdp_owned),
      BV_FN("run", fsdp_run),
      BV_FN("take_grads", fsdp_take_grads),
      BV_FN("gather", fsdp_gather),
      BV_FN("read", fsdp_read),
      BV_FN("prefetched", fsdp_prefetched),
      BV_FN("broadcasts", fsdp_broadcasts),
      BV_FN("reduces", fsdp_reduces),
      BV_FN("broadcast_bytes", fsdp_broadcast_bytes),
      BV_FN("reduce_bytes", fsdp_reduce_bytes),
      BV_FN("kept_peak_bytes", fsdp_kept_peak_bytes),
      BV_FN("kept_bytes", fsdp_kept_bytes),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kFsdpMeta);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, fsdp_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_pushcfunction(L, guarded<fsdp_new>);
  lua_setfield(L, -2, "fsdp");
}

}  // namespace bv::lua
