// bv.dist: multi-process training (runtime/distributed). Ranks are 0-based, as in torch: they are
// ids, not Lua list positions.
//
//   bv.dist.env()                          --> {rank, world_size, local_rank, master_addr,
//                                               master_port} from torchrun's variables
//   local g = bv.dist.init{backend = "auto", timeout = 300}   -- a bv.DistGroup
//   g:rank(), g:world_size(), g:backend()
//   g:all_reduce({t1, t2, ...}, {mean = false})   -- in place; a single tensor works too
//   g:broadcast({t1, t2, ...}, root)               -- in place, from rank `root`
//   g:barrier()
//   g:new_subgroups({{0, 1}, {2, 3}})       --> the group of this rank's list (its rank there: its
//                                              place in the list), or nil; collective: every
//                                              rank, the same lists, in the same order
//   g:sent_bytes()                         --> bytes this rank sent in collectives on g
//   g:set(key, value); g:get(key)                  -- strings; get waits up to the timeout
//   g:check(key)                           --> whether the store has key now (no waiting)
//   bv.dist.launch({exe, args...}, nproc, {port = 0, grace = 30})   --> exit code
//   bv.dist.executable()                   --> this program's path, for relaunching it
//   bv.dist.fsdp(group, specs)             --> fully sharded parameters (bindings/fsdp.cpp)
//   local b = bv.dist.grad_buckets(group, names, {bucket_mb = 32, wire_dtype = "float32"})
//                                          --> the gradients of `names` all-reduced during the
//                                              backward (runtime/distributed/grad_buckets.h)
//   b:run(fn, ...)                         --> fn(...), a training step's loss_and_grads inside:
//                                              its loss and those gradients come back averaged
//   b:stats()                              --> {steps, buckets, started_in_backward,
//                                              layout_buckets}
#include <ATen/ATen.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist.h"
#include "distributed/dist.h"
#include "distributed/grad_buckets.h"
#include "distributed/launch.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

constexpr const char* kGroupMeta = "bv.DistGroup";
using GroupPtr = std::shared_ptr<DistGroup>;

DistGroup& check_group(lua_State* L, int arg) {
  return **static_cast<GroupPtr*>(luaL_checkudata(L, arg, kGroupMeta));
}

int group_gc(lua_State* L) {
  static_cast<GroupPtr*>(luaL_checkudata(L, 1, kGroupMeta))->~GroupPtr();
  return 0;
}

// opts[key] as a number, or `fallback` when absent.
double opt_number(lua_State* L, int arg, const char* key, double fallback, const char* fn) {
  if (lua_isnoneornil(L, arg)) return fallback;
  lua_getfield(L, arg, key);
  double v = fallback;
  if (!lua_isnil(L, -1)) {
    if (!lua_isnumber(L, -1)) {
      raise(L, str(fn, ": option '", key, "' must be a number, got a ", luaL_typename(L, -1)));
    }
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

// The tensors of argument `arg`: a list of bv.Tensor, or one tensor. The at::Tensor copies share
// storage with the Lua tensors, so in-place results reach them.
std::vector<at::Tensor> check_tensor_list(lua_State* L, int arg, const char* fn) {
  if (at::Tensor* t = test_tensor(L, arg)) return {*t};
  if (lua_type(L, arg) != LUA_TTABLE) {
    raise(L, str(fn, ": expected a list of tensors, got a ", luaL_typename(L, arg)));
  }
  std::vector<at::Tensor> out;
  lua_Integer n = luaL_len(L, arg);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, arg, i);
    at::Tensor* t = test_tensor(L, -1);
    if (!t) raise(L, str(fn, ": element ", i, " is a ", luaL_typename(L, -1), ", not a tensor"));
    out.push_back(*t);
    lua_pop(L, 1);
  }
  return out;
}

void set_int_field(lua_State* L, const char* key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

int dist_env(lua_State* L) {
  DistEnv env = dist_env_from_environ();
  lua_createtable(L, 0, 5);
  set_int_field(L, "rank", env.rank);
  set_int_field(L, "world_size", env.world_size);
  set_int_field(L, "local_rank", env.local_rank);
  lua_pushstring(L, env.master_addr.c_str());
  lua_setfield(L, -2, "master_addr");
  set_int_field(L, "master_port", env.master_port);
  return 1;
}

int dist_backend_lua(lua_State* L) {
  lua_pushstring(L, dist_resolve_backend(luaL_checkstring(L, 1)).c_str());
  return 1;
}

int dist_init_lua(lua_State* L) {
  check_option_keys(L, 1, "dist.init", {"backend", "timeout"});
  std::string backend = "auto";
  if (!lua_isnoneornil(L, 1)) {
    lua_getfield(L, 1, "backend");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TSTRING) raise(L, "dist.init: option 'backend' must be a string");
      backend = lua_tostring(L, -1);
    }
    lua_pop(L, 1);
  }
  double timeout = opt_number(L, 1, "timeout", 300, "dist.init");
  GroupPtr g = dist_init(dist_env_from_environ(), backend, timeout);
  void* p = lua_newuserdatauv(L, sizeof(GroupPtr), 0);
  new (p) GroupPtr(std::move(g));  // constructed before the metatable: no __gc on garbage
  luaL_setmetatable(L, kGroupMeta);
  return 1;
}

int group_rank(lua_State* L) {
  lua_pushinteger(L, dist_rank(check_group(L, 1)));
  return 1;
}

int group_world_size(lua_State* L) {
  lua_pushinteger(L, dist_world_size(check_group(L, 1)));
  return 1;
}

int group_backend(lua_State* L) {
  lua_pushstring(L, dist_backend(check_group(L, 1)).c_str());
  return 1;
}

int group_all_reduce(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  std::vector<at::Tensor> tensors = check_tensor_list(L, 2, "all_reduce");
  check_option_keys(L, 3, "all_reduce", {"mean"});
  bool mean = false;
  if (!lua_isnoneornil(L, 3)) {
    lua_getfield(L, 3, "mean");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) {
      raise(L, "all_reduce: 'mean' must be a boolean");
    }
    mean = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  dist_all_reduce(g, tensors, mean);
  return 0;
}

int group_broadcast(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  std::vector<at::Tensor> tensors = check_tensor_list(L, 2, "broadcast");
  int root = static_cast<int>(check_int(L, 3));
  dist_broadcast(g, tensors, root);
  return 0;
}

void push_group(lua_State* L, GroupPtr g) {
  void* p = lua_newuserdatauv(L, sizeof(GroupPtr), 0);
  new (p) GroupPtr(std::move(g));  // constructed before the metatable: no __gc on garbage
  luaL_setmetatable(L, kGroupMeta);
}

// g:new_subgroups({{ranks...}, ...})
int group_new_subgroups(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  std::vector<std::vector<int>> groups;
  lua_Integer n = luaL_len(L, 2);
  for (lua_Integer i = 1; i <= n; ++i) {
    if (lua_geti(L, 2, i) != LUA_TTABLE) {
      raise(L, str("new_subgroups: groups[", i, "] is a ", luaL_typename(L, -1),
                   ", not a list of ranks"));
    }
    std::vector<int> ranks;
    lua_Integer m = luaL_len(L, -1);
    for (lua_Integer j = 1; j <= m; ++j) {
      lua_geti(L, -1, j);
      int isnum = 0;
      lua_Integer r = lua_tointegerx(L, -1, &isnum);
      if (!isnum) raise(L, str("new_subgroups: groups[", i, "][", j, "] is not an integer rank"));
      ranks.push_back(static_cast<int>(r));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    groups.push_back(std::move(ranks));
  }
  GroupPtr sub = dist_new_subgroups(g, groups);
  if (!sub) {
    lua_pushnil(L);
  } else {
    push_group(L, std::move(sub));
  }
  return 1;
}

int group_sent_bytes(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(dist_sent_bytes(check_group(L, 1))));
  return 1;
}

int group_barrier(lua_State* L) {
  dist_barrier(check_group(L, 1));
  return 0;
}

int group_set(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  size_t klen = 0, vlen = 0;
  const char* key = luaL_checklstring(L, 2, &klen);
  const char* value = luaL_checklstring(L, 3, &vlen);
  dist_store_set(g, std::string(key, klen), std::string(value, vlen));
  return 0;
}

int group_get(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  size_t klen = 0;
  const char* key = luaL_checklstring(L, 2, &klen);
  std::string value = dist_store_get(g, std::string(key, klen));
  lua_pushlstring(L, value.data(), value.size());
  return 1;
}

// g:check(key) -> whether some rank has set `key` (g:set's keys), without waiting.
int group_check(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  size_t klen = 0;
  const char* key = luaL_checklstring(L, 2, &klen);
  lua_pushboolean(L, dist_store_check(g, std::string(key, klen)));
  return 1;
}

// g:wait(key, timeout_s): get, waiting up to timeout_s instead of the group's timeout.
int group_wait(lua_State* L) {
  DistGroup& g = check_group(L, 1);
  size_t klen = 0;
  const char* key = luaL_checklstring(L, 2, &klen);
  std::string value = dist_store_wait(g, std::string(key, klen), luaL_checknumber(L, 3));
  lua_pushlstring(L, value.data(), value.size());
  return 1;
}

int group_tostring(lua_State* L) {
  const DistGroup& g = check_group(L, 1);
  lua_pushstring(L, str("bv.DistGroup(rank ", dist_rank(g), " of ", dist_world_size(g), ", ",
                        dist_backend(g), ")")
                        .c_str());
  return 1;
}

int dist_launch_lua(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  std::vector<std::string> argv;
  lua_Integer n = luaL_len(L, 1);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 1, i);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER) {
      raise(L, str("dist.launch: argv[", i, "] must be a string, got a ", luaL_typename(L, -1)));
    }
    argv.emplace_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  int nproc = static_cast<int>(check_int(L, 2));
  check_option_keys(L, 3, "dist.launch", {"port", "grace"});
  double port = opt_number(L, 3, "port", 0, "dist.launch");
  double grace = opt_number(L, 3, "grace", 30, "dist.launch");
  if (port != static_cast<int>(port)) raise(L, "dist.launch: option 'port' must be an integer");
  lua_pushinteger(L, launch_local(argv, nproc, static_cast<int>(port), grace));
  return 1;
}

constexpr const char* kBucketsMeta = "bv.GradBuckets";
using BucketsPtr = std::shared_ptr<GradBuckets>;

GradBuckets& check_buckets(lua_State* L, int arg) {
  return **static_cast<BucketsPtr*>(luaL_checkudata(L, arg, kBucketsMeta));
}

int buckets_gc(lua_State* L) {
  static_cast<BucketsPtr*>(luaL_checkudata(L, 1, kBucketsMeta))->~BucketsPtr();
  return 0;
}

// bv.dist.grad_buckets(group, names [, {bucket_mb = 32}])
int dist_grad_buckets(lua_State* L) {
  std::shared_ptr<DistGroup> group = *static_cast<GroupPtr*>(luaL_checkudata(L, 1, kGroupMeta));
  luaL_checktype(L, 2, LUA_TTABLE);
  std::vector<std::string> names;
  lua_Integer n = luaL_len(L, 2);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 2, i);
    if (lua_type(L, -1) != LUA_TSTRING) {
      raise(L, str("dist.grad_buckets: names[", i, "] is a ", luaL_typename(L, -1),
                   ", not a parameter name"));
    }
    names.emplace_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  check_option_keys(L, 3, "dist.grad_buckets", {"bucket_mb", "wire_dtype"});
  double mb = opt_number(L, 3, "bucket_mb", 32, "dist.grad_buckets");
  if (!(mb > 0)) raise(L, str("dist.grad_buckets: bucket_mb must be positive, got ", mb));
  std::string wire = "float32";
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "wire_dtype");
    if (!lua_isnil(L, -1)) wire = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
    lua_pop(L, 1);
  }
  if (wire != "float32" && wire != "bfloat16") {
    raise(L, "dist.grad_buckets: wire_dtype must be \"float32\" or \"bfloat16\"");
  }
  auto b = std::make_shared<GradBuckets>(std::move(group), std::move(names),
                                         static_cast<int64_t>(mb * (1 << 20)), wire == "bfloat16");
  void* p = lua_newuserdatauv(L, sizeof(BucketsPtr), 0);
  new (p) BucketsPtr(std::move(b));
  luaL_setmetatable(L, kBucketsMeta);
  return 1;
}

// b:run(fn, ...): fn(...) with b watching the backward of the training steps it runs.
int buckets_run(lua_State* L) {
  GradBuckets& b = check_buckets(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  train::BackwardObserverScope scope(&b);
  lua_call(L, lua_gettop(L) - 2, LUA_MULTRET);
  return lua_gettop(L) - 1;
}

int buckets_stats(lua_State* L) {
  GradBucketStats s = check_buckets(L, 1).stats();
  lua_createtable(L, 0, 4);
  set_int_field(L, "steps", s.steps);
  set_int_field(L, "buckets", s.buckets);
  set_int_field(L, "started_in_backward", s.started_in_backward);
  set_int_field(L, "layout_buckets", s.layout_buckets);
  return 1;
}

int dist_executable(lua_State* L) {
  lua_pushstring(L, current_executable().c_str());
  return 1;
}

}  // namespace

void open_fsdp(lua_State* L);  // fsdp.cpp

std::shared_ptr<DistGroup> check_dist_group(lua_State* L, int arg) {
  return *static_cast<GroupPtr*>(luaL_checkudata(L, arg, kGroupMeta));
}

void open_dist(lua_State* L) {
  static const luaL_Reg methods[] = {
      BV_FN("rank", group_rank),
      BV_FN("world_size", group_world_size),
      BV_FN("backend", group_backend),
      BV_FN("all_reduce", group_all_reduce),
      BV_FN("broadcast", group_broadcast),
      BV_FN("barrier", group_barrier),
      BV_FN("new_subgroups", group_new_subgroups),
      BV_FN("sent_bytes", group_sent_bytes),
      BV_FN("set", group_set),
      BV_FN("get", group_get),
      BV_FN("check", group_check),
      BV_FN("wait", group_wait),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kGroupMeta);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, group_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, guarded<group_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  static const luaL_Reg bucket_methods[] = {
      BV_FN("run", buckets_run),
      BV_FN("stats", buckets_stats),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kBucketsMeta);
  luaL_newlib(L, bucket_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, buckets_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  static const luaL_Reg functions[] = {
      BV_FN("env", dist_env),
      BV_FN("grad_buckets", dist_grad_buckets),
      BV_FN("init", dist_init_lua),
      BV_FN("backend", dist_backend_lua),
      BV_FN("launch", dist_launch_lua),
      BV_FN("executable", dist_executable),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  open_fsdp(L);  // bv.dist.fsdp
  lua_setfield(L, -2, "dist");
}

}  // namespace bv::lua
