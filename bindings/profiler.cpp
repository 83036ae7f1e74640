// bv.profiler: libtorch's profiler over a stretch of work (runtime/core/profiler.h); the
// trainers' --profile START:STOP and bv.profile (lib/bv/profile.lua) use it.
//   bv.profiler.start{cuda = false}
//   bv.profiler.step(5)                       -- "ProfilerStep#5" in the trace, until the next
//   bv.profiler.push_range("eval/acc")        -- a named range inside it, until
//   bv.profiler.pop_range()
//   local r = bv.profiler.stop("trace.json")  --> {wall_s, steps, steps_s, outside_ops_s,
//                                             --     ops = {{name, calls, self_s, total_s,
//                                             --             device}, ...},
//                                             --     ranges = {{name, calls, self_s,
//                                             --                total_s}, ...}}
//   bv.profiler.running()
#include <lua.hpp>

#include <string>
#include <vector>

#include "core/profiler.h"
#include "lua_util.h"

namespace bv::lua {

namespace {

// t[key] = ns in seconds, for the table on top of the stack.
void set_seconds(lua_State* L, const char* key, int64_t ns) {
  lua_pushnumber(L, static_cast<double>(ns) * 1e-9);
  lua_setfield(L, -2, key);
}

int profiler_start(lua_State* L) {
  bool cuda = false;
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "cuda");
    cuda = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  profiler::start(cuda);
  return 0;
}

int profiler_running(lua_State* L) {
  lua_pushboolean(L, profiler::running());
  return 1;
}

int profiler_step(lua_State* L) {
  profiler::mark_step(check_int(L, 1));
  return 0;
}

int profiler_push_range(lua_State* L) {
  profiler::push_range(luaL_checkstring(L, 1));
  return 0;
}

int profiler_pop_range(lua_State*) {
  profiler::pop_range();
  return 0;
}

// Pushes the list of ops as {{name, calls, self_s, total_s, device}, ...}.
void push_ops(lua_State* L, const std::vector<profiler::OpTime>& ops) {
  lua_createtable(L, static_cast<int>(ops.size()), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const profiler::OpTime& op = ops[i];
    lua_createtable(L, 0, 5);
    lua_pushstring(L, op.name.c_str());
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, op.calls);
    lua_setfield(L, -2, "calls");
    set_seconds(L, "self_s", op.self_ns);
    set_seconds(L, "total_s", op.total_ns);
    lua_pushboolean(L, op.on_device);
    lua_setfield(L, -2, "device");
    lua_seti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

int profiler_stop(lua_State* L) {
  profiler::Result r = profiler::stop(luaL_checkstring(L, 1));
  lua_createtable(L, 0, 6);
  set_seconds(L, "wall_s", r.wall_ns);
  lua_pushinteger(L, r.steps);
  lua_setfield(L, -2, "steps");
  set_seconds(L, "steps_s", r.steps_ns);
  set_seconds(L, "outside_ops_s", r.outside_ops_ns);
  push_ops(L, r.ops);
  lua_setfield(L, -2, "ops");
  push_ops(L, r.ranges);
  lua_setfield(L, -2, "ranges");
  return 1;
}

}  // namespace

// Adds bv.profiler to the `bv` table on top of the stack.
void open_profiler(lua_State* L) {
  static const luaL_Reg functions[] = {BV_FN("start", profiler_start),
                                       BV_FN("running", profiler_running),
                                       BV_FN("step", profiler_step),
                                       BV_FN("push_range", profiler_push_range),
                                       BV_FN("pop_range", profiler_pop_range),
                                       BV_FN("stop", profiler_stop),
                                       {nullptr, nullptr}};
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "profiler");
}

}  // namespace bv::lua
