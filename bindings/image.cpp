#include "image.h"

namespace bv::lua {

void open_image(lua_State* L) {
  lua_newtable(L);
  int table = lua_gettop(L);
  open_image_codec(L, table);
  open_image_resize(L, table);
  open_image_crop(L, table);
  open_image_randaug(L, table);
  lua_setfield(L, -2, "image");
}

}  // namespace bv::lua
