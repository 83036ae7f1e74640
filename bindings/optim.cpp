#include <lua.hpp>

#include "lua_util.h"

namespace bv::lua {

// bv.optim: filled in by optim's author (see runtime/optim/optimizer.h).
void open_optim(lua_State* L) {
  static const luaL_Reg functions[] = {
      {nullptr, nullptr},
  };
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_setfield(L, -2, "optim");
}

}  // namespace bv::lua
