#include "repl.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "lua_util.h"

namespace bv::lua {

namespace {

// A syntax error whose message ends in "<eof>" means "this chunk is not finished yet".
bool is_incomplete(lua_State* L, int status) {
  if (status != LUA_ERRSYNTAX) return false;
  size_t n = 0;
  const char* msg = lua_tolstring(L, -1, &n);
  const char* mark = "<eof>";
  size_t m = std::strlen(mark);
  return n >= m && std::strcmp(msg + n - m, mark) == 0;
}

// Compiles `code`, first as `return <code>` so expressions print their value.
int compile(lua_State* L, const std::string& code, bool* is_expression) {
  std::string ret = "return " + code + ";";
  if (luaL_loadbuffer(L, ret.data(), ret.size(), "=stdin") == LUA_OK) {
    *is_expression = true;
    return LUA_OK;
  }
  lua_pop(L, 1);
  *is_expression = false;
  return luaL_loadbuffer(L, code.data(), code.size(), "=stdin");
}

void print_results(lua_State* L, int base) {
  int n = lua_gettop(L) - base;
  if (n == 0) return;
  lua_getglobal(L, "print");
  lua_insert(L, base + 1);
  if (pcall_traceback(L, n, 0) != LUA_OK) {
    std::fprintf(stderr, "error printing result: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
}

}  // namespace

int run_repl(lua_State* L) {
  bool tty = ::isatty(0);
  std::string line;
  while (true) {
    if (tty) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    std::string code = line;
    bool quiet = false;
    bool is_expression = false;
    int status;
    while (true) {
      std::string trimmed = code;
      while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
      quiet = !trimmed.empty() && trimmed.back() == ';';
      if (quiet) trimmed.pop_back();  // `return x;;` would not compile
      status = compile(L, quiet ? trimmed : code, &is_expression);
      if (!is_incomplete(L, status)) break;
      lua_pop(L, 1);
      if (tty) {
        std::fputs(">> ", stdout);
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, line)) break;
      code += "\n" + line;
    }
    if (status != LUA_OK) {
      std::fprintf(stderr, "%s\n", lua_tostring(L, -1));
      lua_pop(L, 1);
      continue;
    }
    int base = lua_gettop(L) - 1;
    if (pcall_traceback(L, 0, LUA_MULTRET) != LUA_OK) {
      std::fprintf(stderr, "%s\n", lua_tostring(L, -1));
      lua_settop(L, base);
      continue;
    }
    if (is_expression && !quiet) print_results(L, base);
    lua_settop(L, base);
    std::fflush(stdout);
  }
  if (tty) std::fputs("\n", stdout);
  return 0;
}

}  // namespace bv::lua
