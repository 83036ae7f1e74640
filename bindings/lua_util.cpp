#include "lua_util.h"

#include <c10/util/Exception.h>

#include "core/error.h"

namespace bv::lua {

void push_where(lua_State* L) {
  // The nearest Lua function on the call stack: for `pcall(bv.zeros, ...)` the direct caller is
  // pcall itself, which has no line to report.
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); ++level) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.currentline > 0) {
      lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
      return;
    }
  }
  lua_pushliteral(L, "");
}

void push_exception_message(lua_State* L, const std::exception& e) {
  push_where(L);
  // c10::Error's what() carries a C++ backtrace of libtorch's frames: useless to a Lua user.
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    lua_pushstring(L, c10_error->what_without_backtrace());
  } else {
    lua_pushstring(L, e.what());
  }
  lua_concat(L, 2);
}

int traceback_handler(lua_State* L) {
  const char* msg = lua_tostring(L, 1);
  if (msg == nullptr) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) {
      msg = lua_tostring(L, -1);
    } else {
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

int pcall_traceback(lua_State* L, int nargs, int nresults) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback_handler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nresults, base);
  lua_remove(L, base);
  return status;
}

void check_option_keys(lua_State* L, int arg, const char* fn,
                       std::initializer_list<const char*> allowed) {
  if (lua_isnoneornil(L, arg)) return;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    lua_pop(L, 1);
    bool ok = false;
    if (lua_type(L, -1) == LUA_TSTRING) {
      for (const char* a : allowed) ok = ok || std::string(lua_tostring(L, -1)) == a;
    }
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      raise(L, bv::str(fn, ": unknown option '", luaL_tolstring(L, -1, nullptr), "' (known: ", list,
                       ")"));
    }
  }
}

int64_t check_int(lua_State* L, int arg) {
  int isnum = 0;
  lua_Integer v = lua_tointegerx(L, arg, &isnum);
  if (!isnum) {
    if (lua_type(L, arg) == LUA_TNUMBER)
      luaL_argerror(L, arg, "number has no integer representation");
    luaL_typeerror(L, arg, "integer");
  }
  return v;
}

bool check_bool(lua_State* L, int arg) {
  luaL_checktype(L, arg, LUA_TBOOLEAN);
  return lua_toboolean(L, arg);
}

void raise(lua_State* L, const std::string& message) {
  push_where(L);
  lua_pushlstring(L, message.data(), message.size());
  lua_concat(L, 2);
  lua_error(L);
  __builtin_unreachable();  // lua_error never returns; it is just not declared noreturn
}

}  // namespace bv::lua
