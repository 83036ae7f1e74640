// `bvlua repl`: a plain prompt. Reads Lua lines, keeps reading while a chunk is incomplete, and
// prints the value of expressions (a trailing ';' suppresses it).
#pragma once

#include <lua.hpp>

namespace bv::lua {

int run_repl(lua_State* L);  // returns the process exit code

}  // namespace bv::lua
