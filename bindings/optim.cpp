// bv.optim: big_vision's optimizer (runtime/optim) seen from Lua. Configs cross as JSON text
// (require("bv.json").encode(config)), parameters and gradients as tables name -> tensor.
//   local opt = bv.optim.new(json.encode(config), model:param_shapes(),
//                            {total_steps = n, batch_size = b, data_size = d})
//   local metrics = opt:update(params, grads)  -- params changed in place
//   opt:set_lr_multiplier(0.5)  -- every schedule's value times 0.5 from the next update on
//   opt:lr_multiplier()         -- 0.5 (1 by default)
#include <lua.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "core/tensor_util.h"
#include "dist.h"
#include "distributed/dist.h"
#include "lua_util.h"
#include "optim/optimizer.h"
#include "optim/transforms.h"
#include "tensor.h"

namespace bv::lua {

namespace {

constexpr const char* kOptimizerMeta = "bv.Optimizer";
using OptimizerPtr = std::unique_ptr<optim::Optimizer>;

optim::Optimizer& check_optimizer(lua_State* L, int arg) {
  return **static_cast<OptimizerPtr*>(luaL_checkudata(L, arg, kOptimizerMeta));
}

nlohmann::json check_json(lua_State* L, int arg, const char* what) {
  if (lua_type(L, arg) != LUA_TSTRING) {
    raise(L, str(what, " must be JSON text (use require('bv.json').encode), got a ",
                 luaL_typename(L, arg)));
  }
  return parse_json(lua_tostring(L, arg), what);  // bounded nesting, errors start with `what`
}

// An integer field of the table at `idx`; `fallback` when nil.
int64_t int_field(lua_State* L, int idx, const char* key, int64_t fallback, const char* what) {
  lua_getfield(L, idx, key);
  int64_t v = fallback;
  if (!lua_isnil(L, -1)) {
    int ok = 0;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok) {
      raise(L, str(what, ".", key, " must be an integer, got ", luaL_tolstring(L, -1, nullptr)));
    }
  }
  lua_pop(L, 1);
  return v;
}

// A table name -> tensor at `arg` (`what` names it in errors).
std::map<std::string, at::Tensor> check_named_tensors(lua_State* L, int arg, const char* what) {
  luaL_checktype(L, arg, LUA_TTABLE);
  std::map<std::string, at::Tensor> out;
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    if (lua_type(L, -2) != LUA_TSTRING) raise(L, str(what, ": names must be strings"));
    at::Tensor* t = test_tensor(L, -1);
    if (!t) {
      raise(L, str(what, ": '", lua_tostring(L, -2), "' is a ", luaL_typename(L, -1),
                   ", not a tensor"));
    }
    out[lua_tostring(L, -2)] = *t;
    lua_pop(L, 1);
  }
  return out;
}

// {{name=, shape={...}}, ...} as model:param_shapes() returns it.
using ParamShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

ParamShapes check_param_shapes(lua_State* L, int arg) {
  luaL_checktype(L, arg, LUA_TTABLE);
  ParamShapes out;
  lua_Integer n = luaL_len(L, arg);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, arg, i);
    if (!lua_istable(L, -1)) {
      raise(L, str("param_shapes[", i, "] must be a table {name=, shape=}"));
    }
    lua_getfield(L, -1, "name");
    if (lua_type(L, -1) != LUA_TSTRING) {
      raise(L, str("param_shapes[", i, "].name must be a string"));
    }
    std::string name = lua_tostring(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, -1, "shape");
    if (!lua_istable(L, -1)) {
      raise(L, str("param_shapes[", i, "].shape ('", name, "') must be a list"));
    }
    std::vector<int64_t> shape;
    lua_Integer d = luaL_len(L, -1);
    for (lua_Integer k = 1; k <= d; ++k) {
      lua_geti(L, -1, k);
      int ok = 0;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      if (!ok || v < 0) raise(L, str("param_shapes[", i, "].shape ('", name, "') must hold sizes"));
      shape.push_back(v);
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
    out.emplace_back(std::move(name), std::move(shape));
  }
  return out;
}

// bv.optim.new(config_json, param_shapes, {total_steps=, batch_size=, data_size=, device=
//               (where the state is made: the parameters' device; "cpu" by default),
//               owned = {names...} (sharded state: only these keep state and are updated),
//               group = g, replicated = {names...} (fsdp: the shapes are this rank's parts;
//               global norms are summed over g, the replicated parameters counted on rank 0)})
int optim_new(lua_State* L) {
  nlohmann::json config = check_json(L, 1, "optimizer config");
  auto shapes = check_param_shapes(L, 2);
  optim::ScheduleContext ctx;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    ctx.total_steps = int_field(L, 3, "total_steps", 0, "ctx");
    ctx.batch_size = int_field(L, 3, "batch_size", 0, "ctx");
    ctx.data_size = int_field(L, 3, "data_size", 0, "ctx");
    if (lua_getfield(L, 3, "device") != LUA_TNIL) {
      std::string device = luaL_checkstring(L, -1);
      try {
        ctx.device = c10::Device(device);
      } catch (const c10::Error&) {
        raise(L, str("ctx.device: '", device, "' is not a device (cpu, cuda:0)"));
      }
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "owned") != LUA_TNIL) {
      luaL_argcheck(L, lua_istable(L, -1), 3, "ctx.owned must be a list of parameter names");
      std::set<std::string> owned;
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= n; ++i) {
        lua_geti(L, -1, i);
        if (!lua_isstring(L, -1)) raise(L, str("ctx.owned[", i, "] is not a parameter name"));
        owned.insert(lua_tostring(L, -1));
        lua_pop(L, 1);
      }
      ctx.owned = std::move(owned);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "replicated") != LUA_TNIL) {
      luaL_argcheck(L, lua_istable(L, -1), 3, "ctx.replicated must be a list of parameter names");
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= n; ++i) {
        lua_geti(L, -1, i);
        if (!lua_isstring(L, -1)) raise(L, str("ctx.replicated[", i, "] is not a parameter name"));
        ctx.replicated.insert(lua_tostring(L, -1));
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "group") != LUA_TNIL) {
      std::shared_ptr<DistGroup> group = check_dist_group(L, lua_gettop(L));
      ctx.count_replicated = dist_rank(*group) == 0;
      ctx.sum_over_processes = [group](at::Tensor& t) {
        std::vector<at::Tensor> ts{t};
        dist_all_reduce(*group, ts, /*mean=*/false);
      };
    }
    lua_pop(L, 1);
  }
  auto opt = std::make_unique<optim::Optimizer>(config, shapes, ctx);  // may throw: before alloc
  void* p = lua_newuserdatauv(L, sizeof(OptimizerPtr), 0);
  new (p) OptimizerPtr(std::move(opt));
  luaL_setmetatable(L, kOptimizerMeta);
  return 1;
}

// opt:update(params, grads [, {norms = false}]) -> {l2_grads=, l2_updates=, l2_params=,
// global_schedule={...}}; with norms = false the norms are left out (no host sync, and cheaper).
int optim_update(lua_State* L) {
  optim::Optimizer& opt = check_optimizer(L, 1);
  auto params = check_named_tensors(L, 2, "params");
  auto grads = check_named_tensors(L, 3, "grads");
  bool all_norms = true;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_getfield(L, 4, "norms");
    all_norms = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  // The tensors share the Lua ones' storage: params change in place.
  optim::UpdateMetrics m = opt.update(params, grads, all_norms);
  lua_createtable(L, 0, 4);
  if (all_norms) {
    lua_pushnumber(L, m.l2_grads);
    lua_setfield(L, -2, "l2_grads");
    lua_pushnumber(L, m.l2_updates);
    lua_setfield(L, -2, "l2_updates");
    lua_pushnumber(L, m.l2_params);
    lua_setfield(L, -2, "l2_params");
  }
  lua_createtable(L, static_cast<int>(m.global_schedule.size()), 0);
  for (size_t i = 0; i < m.global_schedule.size(); ++i) {
    lua_pushnumber(L, m.global_schedule[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "global_schedule");
  return 1;
}

int optim_count(lua_State* L) {
  lua_pushinteger(L, check_optimizer(L, 1).count());
  return 1;
}

int optim_frozen(lua_State* L) {
  optim::Optimizer& opt = check_optimizer(L, 1);
  lua_pushboolean(L, opt.frozen(luaL_checkstring(L, 2)));
  return 1;
}

// opt:rows_independent(name): whether fsdp may update `name` in row blocks (layer stacks).
int optim_rows_independent(lua_State* L) {
  optim::Optimizer& opt = check_optimizer(L, 1);
  lua_pushboolean(L, opt.rows_independent(luaL_checkstring(L, 2)));
  return 1;
}

int optim_num_schedules(lua_State* L) {
  lua_pushinteger(L, check_optimizer(L, 1).num_schedules());
  return 1;
}

// opt:schedule(i, count): schedule i (1-based, as in global_schedule) at optimizer count `count`,
// without the lr multiplier.
int optim_schedule(lua_State* L) {
  optim::Optimizer& opt = check_optimizer(L, 1);
  int64_t i = check_int(L, 2);
  int64_t count = check_int(L, 3);
  if (i < 1 || i > opt.num_schedules()) {
    raise(L, str("schedule ", i, " out of range 1..", opt.num_schedules()));
  }
  lua_pushnumber(L, opt.schedule(static_cast<int>(i - 1), count));
  return 1;
}

// opt:set_lr_multiplier(m): every schedule's value (and global_schedule) times m from the next
// update on; m finite and >= 0 (0 freezes the parameters). Returns opt.
int optim_set_lr_multiplier(lua_State* L) {
  check_optimizer(L, 1).set_lr_multiplier(luaL_checknumber(L, 2));
  lua_settop(L, 1);
  return 1;
}

// opt:lr_multiplier() -> the factor set_lr_multiplier set (1 by default).
int optim_lr_multiplier(lua_State* L) {
  lua_pushnumber(L, check_optimizer(L, 1).lr_multiplier());
  return 1;
}

int optim_state(lua_State* L) {
  optim::NamedTensors state = check_optimizer(L, 1).state();
  lua_createtable(L, 0, static_cast<int>(state.size()));
  for (const auto& [name, t] : state) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

// opt:state_spec() -> {{name=, param=, shape={...}, dtype=, owned=}, ...}: every state tensor,
// including those another process owns (sharded state), sorted by name.
int optim_state_spec(lua_State* L) {
  auto spec = check_optimizer(L, 1).state_spec();
  lua_createtable(L, static_cast<int>(spec.size()), 0);
  for (size_t i = 0; i < spec.size(); ++i) {
    const auto& s = spec[i];
    lua_createtable(L, 0, 5);
    lua_pushstring(L, s.name.c_str());
    lua_setfield(L, -2, "name");
    lua_pushstring(L, s.param.c_str());
    lua_setfield(L, -2, "param");
    push_shape(L, s.shape);
    lua_setfield(L, -2, "shape");
    lua_pushstring(L, dtype_name(s.dtype).c_str());
    lua_setfield(L, -2, "dtype");
    lua_pushboolean(L, s.owned);
    lua_setfield(L, -2, "owned");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

int optim_load_state(lua_State* L) {
  optim::Optimizer& opt = check_optimizer(L, 1);
  auto given = check_named_tensors(L, 2, "optimizer state");
  opt.load_state(optim::NamedTensors(given.begin(), given.end()));
  lua_settop(L, 1);
  return 1;
}

// opt:load_state_tensor(name, t): one tensor of a state, copied in place (a resume's, read one
// at a time).
int optim_load_state_tensor(lua_State* L) {
  check_optimizer(L, 1).load_state_tensor(luaL_checkstring(L, 2), check_tensor(L, 3));
  lua_settop(L, 1);
  return 1;
}

int optim_gc(lua_State* L) {
  static_cast<OptimizerPtr*>(luaL_checkudata(L, 1, kOptimizerMeta))->~OptimizerPtr();
  return 0;
}

int optim_tostring(lua_State* L) {
  optim::Optimizer& opt = check_optimizer(L, 1);
  lua_pushfstring(L, "bv.Optimizer: count %d, %d schedule(s)", static_cast<int>(opt.count()),
                  opt.num_schedules());
  return 1;
}

// bv._durations.steps(prefix, config_json, data_size, batch_size, total_steps [, fallback]):
// big_vision's utils.steps; nil sizes are unknown; without fallback a missing duration is an
// error naming the prefix.
int durations_steps(lua_State* L) {
  std::string prefix = luaL_checkstring(L, 1);
  nlohmann::json config = check_json(L, 2, "steps config");
  auto opt_int = [&](int arg) { return lua_isnoneornil(L, arg) ? 0 : check_int(L, arg); };
  int64_t fallback = lua_isnoneornil(L, 6) ? -1 : check_int(L, 6);
  lua_pushinteger(L, optim::steps(prefix, config, opt_int(3), opt_int(4), opt_int(5), fallback));
  return 1;
}

// bv._durations.itstime(step, every, total [, {last=true, first=true, drop_close_to_last=0.25}])
int durations_itstime(lua_State* L) {
  int64_t step = check_int(L, 1);
  int64_t every = lua_isnoneornil(L, 2) ? 0 : check_int(L, 2);
  int64_t total = check_int(L, 3);
  bool last = true, first = true;
  double drop = 0.25;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_getfield(L, 4, "last");
    if (!lua_isnil(L, -1)) last = lua_toboolean(L, -1);
    lua_getfield(L, 4, "first");
    if (!lua_isnil(L, -1)) first = lua_toboolean(L, -1);
    lua_getfield(L, 4, "drop_close_to_last");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) == LUA_TBOOLEAN) drop = lua_toboolean(L, -1) ? 0.25 : 0;
      else drop = luaL_checknumber(L, -1);
    }
    lua_pop(L, 3);
  }
  lua_pushboolean(L, optim::itstime(step, every, total, last, first, drop));
  return 1;
}

// bv.optim.docs() -> {[optax_name] = one-line doc}, for the REPL's `?name`.
int optim_docs(lua_State* L) {
  const auto& docs = optim::transform_docs();
  lua_createtable(L, 0, static_cast<int>(docs.size()));
  for (const auto& [name, doc] : docs) {
    lua_pushlstring(L, doc.data(), doc.size());
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

}  // namespace

void open_optim(lua_State* L) {
  static const luaL_Reg methods[] = {
      BV_FN("update", optim_update),
      BV_FN("count", optim_count),
      BV_FN("frozen", optim_frozen),
      BV_FN("num_schedules", optim_num_schedules),
      BV_FN("schedule", optim_schedule),
      BV_FN("set_lr_multiplier", optim_set_lr_multiplier),
      BV_FN("lr_multiplier", optim_lr_multiplier),
      BV_FN("state", optim_state),
      BV_FN("load_state", optim_load_state),
      BV_FN("load_state_tensor", optim_load_state_tensor),
      BV_FN("state_spec", optim_state_spec),
      BV_FN("rows_independent", optim_rows_independent),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kOptimizerMeta);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, optim_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, guarded<optim_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  static const luaL_Reg functions[] = {
      BV_FN("new", optim_new),
      BV_FN("docs", optim_docs),
      {nullptr, nullptr},
  };
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_setfield(L, -2, "optim");

  // Durations (runtime/optim/durations.cpp, which the schedules use too): Lua reaches them as
  // bv.chrono.steps / bv.chrono.itstime, beside the Chrono, as big_vision's utils.py has them.
  static const luaL_Reg durations[] = {
      BV_FN("steps", durations_steps),
      BV_FN("itstime", durations_itstime),
      {nullptr, nullptr},
  };
  lua_newtable(L);
  luaL_setfuncs(L, durations, 0);
  lua_setfield(L, -2, "_durations");
}

}  // namespace bv::lua
