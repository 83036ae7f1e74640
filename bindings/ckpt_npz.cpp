#include "ckpt.h"
#include "lua_util.h"

namespace bv::lua {

void open_ckpt_npz(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_pop(L, 1);
}

}  // namespace bv::lua
