// The exception trampoline: C++ exceptions from bound functions become ordinary Lua errors that
// carry the script's file:line, can be caught with pcall, and unwind C++ destructors.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <string>

#include "core/error.h"
#include "lua_util.h"
#include "state.h"

namespace {

int g_live_guards = 0;

struct Guard {
  Guard() { ++g_live_guards; }
  ~Guard() { --g_live_guards; }
};

int throws_bv_error(lua_State*) {
  Guard g;
  bv::fail("pp op 'resize': bad size ", -3);
}

int throws_c10_error(lua_State*) {
  Guard g;
  at::ones({2, 3}).matmul(at::ones({4, 5}));  // shapes cannot be multiplied
  return 0;
}

int raises_lua_error(lua_State* L) {
  Guard g;
  return luaL_error(L, "plain lua error %d", 7);
}

int returns_ok(lua_State* L) {
  lua_pushinteger(L, 42);
  return 1;
}

struct State {
  lua_State* L = luaL_newstate();
  State() {
    luaL_openlibs(L);
    lua_register(L, "throws_bv_error", bv::lua::guarded<throws_bv_error>);
    lua_register(L, "throws_c10_error", bv::lua::guarded<throws_c10_error>);
    lua_register(L, "raises_lua_error", bv::lua::guarded<raises_lua_error>);
    lua_register(L, "returns_ok", bv::lua::guarded<returns_ok>);
  }
  ~State() { lua_close(L); }
  // Runs `code` as chunk "=script.lua" and returns the string it returns.
  std::string run(const std::string& code) {
    REQUIRE(luaL_loadbuffer(L, code.data(), code.size(), "@script.lua") == LUA_OK);
    int status = lua_pcall(L, 0, 1, 0);
    std::string out = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(nil)";
    lua_pop(L, 1);
    REQUIRE(status == LUA_OK);
    return out;
  }
};

}  // namespace

TEST_CASE("a bv::Error becomes a Lua error with the caller's file:line", "[guard]") {
  State s;
  std::string msg = s.run("local ok, err = pcall(throws_bv_error)\nreturn err");
  CHECK(msg == "script.lua:1: pp op 'resize': bad size -3");
  CHECK(g_live_guards == 0);
}

TEST_CASE("a c10::Error arrives without libtorch's C++ backtrace", "[guard]") {
  State s;
  std::string msg = s.run("\n\nlocal ok, err = pcall(throws_c10_error)\nreturn err");
  CHECK(msg.rfind("script.lua:3: ", 0) == 0);
  CHECK(msg.find("cannot be multiplied") != std::string::npos);
  CHECK(msg.find("frame #") == std::string::npos);
  CHECK(g_live_guards == 0);
}

TEST_CASE("a Lua error raised inside a bound function unwinds C++ destructors", "[guard]") {
  State s;
  std::string msg = s.run("local ok, err = pcall(raises_lua_error)\nreturn err");
  CHECK(msg == "plain lua error 7");
  CHECK(g_live_guards == 0);
}

TEST_CASE("an uncaught error fails lua_pcall with the message, not a crash", "[guard]") {
  State s;
  std::string code = "throws_bv_error()";
  REQUIRE(luaL_loadbuffer(s.L, code.data(), code.size(), "@x.lua") == LUA_OK);
  CHECK(lua_pcall(s.L, 0, 0, 0) == LUA_ERRRUN);
  CHECK(std::string(lua_tostring(s.L, -1)) == "x.lua:1: pp op 'resize': bad size -3");
}

TEST_CASE("a guarded function returns normally when nothing throws", "[guard]") {
  State s;
  CHECK(s.run("return tostring(returns_ok())") == "42");
}
