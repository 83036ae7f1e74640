#include "lua_host.h"

#include <lua.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifndef BV_SOURCE_LIB_DIR
#define BV_SOURCE_LIB_DIR "lib"
#endif

// libFuzzer's (FuzzerTracePC.cpp), the entry points of SanitizerCoverage's inline counters.
extern "C" void __sanitizer_cov_8bit_counters_init(uint8_t* start, uint8_t* stop);
extern "C" void __sanitizer_cov_pcs_init(const uintptr_t* pcs_beg, const uintptr_t* pcs_end);

namespace bv::fuzz {

namespace {

// Lua coverage as libFuzzer's own: a table of 8-bit counters with a table of "PCs" (one per
// counter: its address, no flags), registered the way a compiled module's coverage registers
// itself (SanitizerCoverage's module constructor calls these two). libFuzzer then counts the
// counters hit in `cov:` and their hit-count buckets in `ft:`, and clears them before each input.
constexpr size_t kCounters = size_t{1} << 16;
uint8_t g_counters[kCounters];
uintptr_t g_pc_table[2 * kCounters];
uintptr_t g_prev = 0;

__attribute__((constructor)) void register_lua_coverage() {
  for (size_t i = 0; i < kCounters; ++i) {
    g_pc_table[2 * i] = reinterpret_cast<uintptr_t>(&g_counters[i]);
    g_pc_table[2 * i + 1] = 0;
  }
  __sanitizer_cov_8bit_counters_init(g_counters, g_counters + kCounters);
  __sanitizer_cov_pcs_init(g_pc_table, g_pc_table + 2 * kCounters);
}

void line_hook(lua_State* L, lua_Debug* ar) {
  if (!lua_getinfo(L, "S", ar)) return;
  // The source string of a loaded chunk stays put while the chunk lives: its address names it.
  uintptr_t cur = reinterpret_cast<uintptr_t>(ar->source) * 0x9E3779B97F4A7C15ull +
                  static_cast<uintptr_t>(ar->currentline) * 0x2545F4914F6CDD1Dull;
  cur ^= cur >> 29;
  size_t i = (cur ^ g_prev) & (kCounters - 1);
  if (g_counters[i] != 255) ++g_counters[i];
  g_prev = cur >> 1;
}

int fuzz_abort(lua_State* L) {
  std::fprintf(stderr, "\n==== Lua fuzz finding ====\n%s\n", luaL_tolstring(L, 1, nullptr));
  std::fflush(stderr);
  std::abort();
}

// fuzz_try(f, ...) -> true, results... | false, message: pcall that aborts on the findings named
// in lua_host.h, with a traceback of where the error was raised. An error is the parser's own
// message when error() raised it; the VM's errors ("attempt to index a nil value", "stack
// overflow") and a standard function's ("bad argument #1 to 'format'") mean the parser itself
// failed. Parsers that catch an error and raise it again with error() hide where it came from,
// so a message holding such words counts too, unless the input itself holds them (messages
// quote the input).
constexpr const char* kPrelude = R"lua(
local abort, traceback, find, getinfo, raise = ...
local BUG = {"attempt to ", "stack overflow", "bad argument #"}
local last_tb, by_error
local function handler(e)
  local info = getinfo(2, "f")
  by_error = info ~= nil and info.func == raise
  last_tb = traceback(tostring(e), 2)
  return e
end
function fuzz_try(f, ...)
  local r = table.pack(xpcall(f, handler, ...))
  if r[1] then return table.unpack(r, 1, r.n) end
  local e = r[2]
  if type(e) ~= "string" then abort("a " .. type(e) .. " raised as an error\n" .. last_tb) end
  if not by_error then abort("the parser failed (an error not raised by error()): " .. last_tb) end
  for _, p in ipairs(BUG) do
    if find(e, p, 1, true) and not find(fuzz_input, p, 1, true) then
      abort("the parser failed (its message says so): " .. last_tb)
    end
  end
  return false, e
end

-- The global `bv`: Lua submodules on first use (as lib/bv/init.lua), bv.null, and an error for
-- the native functions.
local stub_mt = {}
function stub_mt.__index(t, name)
  if type(name) ~= "string" then return nil end
  local modname = "bv." .. name
  if package.searchpath(modname, package.path) then
    local ok, mod = pcall(require, modname)
    if ok then
      rawset(t, name, mod)
      return mod
    end
  end
  local native = setmetatable({__native = true}, {
    __index = function(_, k)
      error("bv." .. name .. "." .. tostring(k) .. ": native bvlua functions are not in the "
            .. "fuzz harness", 2)
    end,
    __call = function()
      error("bv." .. name .. ": native bvlua functions are not in the fuzz harness", 2)
    end,
  })
  rawset(t, name, native)
  return native
end
bv = setmetatable({}, stub_mt)
bv.null = require("bv.literal").null
)lua";

lua_State* g_L = nullptr;
int g_driver_ref = LUA_NOREF;

void fail_setup(lua_State* L, const char* what) {
  std::fprintf(stderr, "lua fuzz host: %s: %s\n", what, lua_tostring(L, -1));
  std::abort();
}

void setup(const char* name, const char* driver) {
  lua_State* L = luaL_newstate();
  if (!L) std::abort();
  luaL_openlibs(L);
  const char* env = std::getenv("BV_LIB_DIR");
  std::string lib = env && *env ? env : BV_SOURCE_LIB_DIR;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  std::string path = lib + "/?.lua;" + lib + "/?/init.lua;" + lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, path.c_str());
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);

  if (luaL_loadbuffer(L, kPrelude, std::strlen(kPrelude), "=fuzz_prelude") != LUA_OK) {
    fail_setup(L, "prelude");
  }
  lua_pushcfunction(L, fuzz_abort);
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "traceback");
  lua_remove(L, -2);
  lua_getglobal(L, "string");
  lua_getfield(L, -1, "find");
  lua_remove(L, -2);
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "getinfo");
  lua_remove(L, -2);
  lua_getglobal(L, "error");
  if (lua_pcall(L, 5, 0, 0) != LUA_OK) fail_setup(L, "prelude");

  std::string chunk = std::string("=") + name;
  if (luaL_loadbuffer(L, driver, std::strlen(driver), chunk.c_str()) != LUA_OK ||
      lua_pcall(L, 0, 1, 0) != LUA_OK) {
    fail_setup(L, "driver");
  }
  if (!lua_isfunction(L, -1)) {
    std::fprintf(stderr, "lua fuzz host: the driver must return a function\n");
    std::abort();
  }
  g_driver_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  // Coverage from here on: module loading is the same for every input.
  lua_sethook(L, line_hook, LUA_MASKLINE, 0);
  g_L = L;
}

}  // namespace

void run_lua_driver(const char* name, const char* driver, const uint8_t* data, size_t size) {
  if (!g_L) setup(name, driver);
  lua_State* L = g_L;
  g_prev = 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, g_driver_ref);
  lua_pushlstring(L, reinterpret_cast<const char*>(data), size);
  lua_pushvalue(L, -1);
  lua_setglobal(L, "fuzz_input");
  // The driver calls the parsers through fuzz_try; an error reaching here is the driver's own
  // or a finding fuzz_try let through (it aborts before).
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    std::fprintf(stderr, "lua fuzz host: the driver failed: %s\n", luaL_tolstring(L, -1, nullptr));
    std::abort();
  }
  // Garbage now, so that each input's allocations are freed within it (libFuzzer's leak check
  // looks at mallocs minus frees per input).
  lua_gc(L, LUA_GCCOLLECT);
}

}  // namespace bv::fuzz
