#include "ckpt.h"

namespace bv::lua {

void open_ckpt(lua_State* L) {
  lua_newtable(L);
  int table = lua_gettop(L);
  open_ckpt_npz(L, table);
  open_ckpt_train(L, table);
  open_ckpt_index(L, table);
  lua_setfield(L, -2, "ckpt");
}

}  // namespace bv::lua
