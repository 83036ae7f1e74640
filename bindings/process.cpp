// bv._proc: child processes for `bvlua sweep` (runtime/core/process.h), and bv.sleep.
//   local pid = bv._proc.spawn({exe, "train", ...}, {BV_THREADS = "1"}, "run/sweep.log")
//   bv._proc.poll(pid)            --> nil while it runs, then its exit code
//   bv._proc.signal(pid, "TERM")  -- or "INT", "KILL"
//   bv.sleep(0.5)
#include <lua.hpp>

#include <chrono>
#include <csignal>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/process.h"
#include "lua_util.h"

namespace bv::lua {

namespace {

int proc_spawn(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  std::vector<std::string> argv;
  for (lua_Integer i = 1; i <= luaL_len(L, 1); ++i) {
    lua_geti(L, 1, i);
    if (!lua_isstring(L, -1)) raise(L, str("spawn: argv[", i, "] is not a string"));
    argv.emplace_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  std::map<std::string, std::string> env;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1)) {
        raise(L, "spawn: env must map names to strings");
      }
      env[lua_tostring(L, -2)] = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pushinteger(L, spawn_process(argv, env, luaL_checkstring(L, 3)));
  return 1;
}

int proc_poll(lua_State* L) {
  auto code = poll_process(static_cast<int>(check_int(L, 1)));
  if (!code) return 0;
  lua_pushinteger(L, *code);
  return 1;
}

int proc_signal(lua_State* L) {
  static const std::map<std::string, int> kSignals = {
      {"TERM", SIGTERM}, {"INT", SIGINT}, {"KILL", SIGKILL}};
  std::string name = luaL_checkstring(L, 2);
  auto it = kSignals.find(name);
  if (it == kSignals.end()) raise(L, "signal: '" + name + "' is not TERM, INT or KILL");
  signal_process(static_cast<int>(check_int(L, 1)), it->second);
  return 0;
}

int bv_sleep(lua_State* L) {
  double s = luaL_checknumber(L, 1);
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
  return 0;
}

}  // namespace

// Adds bv._proc and bv.sleep to the `bv` table on top of the stack.
void open_process(lua_State* L) {
  static const luaL_Reg proc[] = {BV_FN("spawn", proc_spawn),
                                  BV_FN("poll", proc_poll),
                                  BV_FN("signal", proc_signal),
                                  {nullptr, nullptr}};
  luaL_newlib(L, proc);
  lua_setfield(L, -2, "_proc");
  lua_pushcfunction(L, guarded<bv_sleep>);
  lua_setfield(L, -2, "sleep");
}

}  // namespace bv::lua
