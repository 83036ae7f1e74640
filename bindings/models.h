// check_params, for the bindings that take a model's parameters from Lua (models.cpp).
#pragma once

#include <lua.hpp>

#include "models/model.h"

namespace bv::lua {

// A Lua table name -> tensor as a parameter map; raises naming a key that is not a tensor.
models::Params check_params(lua_State* L, int arg);

}  // namespace bv::lua
