// bv.image.resize / resize_small / resize_long: big_vision's resize pp ops on one image.
//   bv.image.resize(t, size [, method="bilinear"] [, antialias=false])   size: n or {h, w}
//   bv.image.resize_small(t, size [, method="area"] [, antialias=false])
//   bv.image.resize_long(t, size [, method="area"] [, antialias=true])
// The defaults are those of big_vision's ops. Images are HxWxC (or HxW) uint8 or float32 and
// come back in the same dtype.
#include <ATen/ATen.h>

#include <string>

#include "core/error.h"
#include "image.h"
#include "image/resize.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

// The method name, with the function named in the error for an unknown one.
image::ResizeMethod opt_method(lua_State* L, int arg, const char* op, const char* fallback) {
  try {
    return image::resize_method_from_name(luaL_optstring(L, arg, fallback));
  } catch (const Error& e) {
    fail("bv.image.", op, ": ", e.what());
  }
}

bool opt_bool(lua_State* L, int arg, bool fallback) {
  return lua_isnoneornil(L, arg) ? fallback : check_bool(L, arg);
}

// An integer n means n x n; a table {h, w} gives both.
void check_size(lua_State* L, int arg, int64_t* height, int64_t* width) {
  if (lua_type(L, arg) != LUA_TTABLE) {
    *height = *width = check_int(L, arg);
    return;
  }
  if (luaL_len(L, arg) != 2) {
    raise(L, "bv.image.resize: size must be an integer or a table {h, w}, got a table of " +
                 std::to_string(luaL_len(L, arg)) + " elements");
  }
  lua_geti(L, arg, 1);
  lua_geti(L, arg, 2);
  int ok_h = 0, ok_w = 0;
  *height = lua_tointegerx(L, -2, &ok_h);
  *width = lua_tointegerx(L, -1, &ok_w);
  lua_pop(L, 2);
  if (!ok_h || !ok_w) raise(L, "bv.image.resize: size {h, w} must hold two integers");
}

int resize(lua_State* L) {
  const at::Tensor& img = check_tensor(L, 1);
  int64_t height = 0, width = 0;
  check_size(L, 2, &height, &width);
  push_tensor(L, image::resize(img, height, width, opt_method(L, 3, "resize", "bilinear"),
                               opt_bool(L, 4, false)));
  return 1;
}

int resize_small(lua_State* L) {
  const at::Tensor& img = check_tensor(L, 1);
  push_tensor(L, image::resize_small(img, check_int(L, 2), opt_method(L, 3, "resize_small", "area"),
                                     opt_bool(L, 4, false)));
  return 1;
}

int resize_long(lua_State* L) {
  const at::Tensor& img = check_tensor(L, 1);
  push_tensor(L, image::resize_long(img, check_int(L, 2), opt_method(L, 3, "resize_long", "area"),
                                    opt_bool(L, 4, true)));
  return 1;
}

}  // namespace

void open_image_resize(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      BV_FN("resize", resize),
      BV_FN("resize_small", resize_small),
      BV_FN("resize_long", resize_long),
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_pop(L, 1);
}

}  // namespace bv::lua
