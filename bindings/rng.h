// bv.Rng: Lua userdata owning a bv::Rng stream (bv.rng(seed)).
#pragma once

#include <lua.hpp>

#include "core/rng.h"

namespace bv::lua {

constexpr const char* kRngMeta = "bv.Rng";

Rng* test_rng(lua_State* L, int arg);   // nullptr when not an Rng
Rng& check_rng(lua_State* L, int arg);  // raises a Lua argument error when not an Rng
void push_rng(lua_State* L, Rng rng);
void open_rng(lua_State* L);  // adds bv.rng to the table on top of the stack

}  // namespace bv::lua
