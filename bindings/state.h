// Making a Lua state the way every bvlua state is made: standard libraries, lib/ on the package
// path, the native module `bv._C` preloaded and the `bv` library loaded as a global.
#pragma once

#include <lua.hpp>

#include <string>

namespace bv::lua {

// Where lib/ lives: $BV_LIB_DIR, else <dir of the executable>/../lib, else the source tree's lib/
// this binary was built from. Throws bv::Error naming the places it looked.
std::string find_lib_dir(const char* argv0);

// Returns a new state, or throws bv::Error with the Lua message if lib/bv/init.lua fails.
lua_State* new_state(const std::string& lib_dir);

// The lib/ directory of the last state made (data workers make their states from it).
std::string current_lib_dir();

// The native module: tensors, rng, fs, machine facts.
int open_native(lua_State* L);

}  // namespace bv::lua
