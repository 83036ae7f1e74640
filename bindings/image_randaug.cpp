// bv.image RandAugment (runtime/image/randaug.h): big_vision's randaug op and its 16 ops one by
// one, on uint8 HxWx3 images.
//
//   bv.image.randaug(t, num_layers, magnitude, rng [, fix_contrast=false])
//   bv.image.augment(t, op, level [, rng] [, fix_contrast=false])
//       one op by name ("Posterize", "shear_x", ...) at a level, with big_vision's level ->
//       argument mapping; rng is needed by Rotate, ShearX/Y, TranslateX/Y and Cutout
//   bv.image.randaug_ops    {"AutoContrast", ..., "SolarizeAdd"}: the 16 names in big_vision's
//                           order (randaug draws an index into this list)
#include <ATen/ATen.h>

#include <climits>

#include "core/error.h"
#include "image.h"
#include "image/randaug.h"
#include "lua_util.h"
#include "rng.h"
#include "tensor.h"

namespace bv::lua {

namespace {

bool opt_bool(lua_State* L, int arg, bool fallback) {
  return lua_isnoneornil(L, arg) ? fallback : check_bool(L, arg);
}

// bv.image.randaug(t, num_layers, magnitude, rng [, fix_contrast])
int image_randaug(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  const int64_t num_layers = check_int(L, 2);
  const double magnitude = luaL_checknumber(L, 3);
  Rng& rng = check_rng(L, 4);
  const bool fix_contrast = opt_bool(L, 5, false);
  if (num_layers < 0 || num_layers > INT_MAX) {
    raise(L, str("bv.image.randaug: num_layers ", num_layers, " must be in [0, ", INT_MAX, "]"));
  }
  push_tensor(L, image::randaug(t, static_cast<int>(num_layers), magnitude, rng, fix_contrast));
  return 1;
}

// bv.image.augment(t, op, level [, rng] [, fix_contrast])
int image_augment(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  const image::AugmentOp op = image::augment_op_from_name(luaL_checkstring(L, 2));
  const double level = luaL_checknumber(L, 3);
  Rng* rng = nullptr;
  if (!lua_isnoneornil(L, 4)) rng = &check_rng(L, 4);
  const bool fix_contrast = opt_bool(L, 5, false);
  push_tensor(L, image::augment(t, op, level, rng, fix_contrast));
  return 1;
}

}  // namespace

void open_image_randaug(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      BV_FN("randaug", image_randaug),
      BV_FN("augment", image_augment),
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_createtable(L, image::kNumAugmentOps, 0);
  for (int i = 0; i < image::kNumAugmentOps; ++i) {
    lua_pushstring(L, image::augment_op_name(static_cast<image::AugmentOp>(i)).c_str());
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "randaug_ops");
  lua_pop(L, 1);
}

}  // namespace bv::lua
