// bv.image crops and flips (runtime/image/crop.h). Lua offsets are 1-based: crop's y, x and the
// y, x that sample_inception_box returns count rows and columns from 1, as everywhere in bv; the
// conversion to the runtime's 0-based boxes happens here and nowhere else.
//
//   bv.image.crop(t, y, x, h, w)                   rows y..y+h-1, columns x..x+w-1
//   bv.image.central_crop(t [, size])              size: n or {h, w}; nil or 0: largest square
//   bv.image.random_crop(t, size, rng)             offsets uniform, as tf.image.random_crop
//   bv.image.sample_inception_box(h, w, rng [, opts]) -> y, x, h, w
//   bv.image.inception_crop(t, rng [, opts])       sample_inception_box + crop (no resize)
//   bv.image.flip_lr(t), bv.image.flip_ud(t)       deterministic mirror images
//
// opts = {area_min = 5, area_max = 100, ratio_min = 0.75, ratio_max = 1.33, max_attempts = 100}
// with areas in percent of the image, as the arguments of big_vision's inception_crop op.
#include <ATen/ATen.h>

#include <string>

#include "core/error.h"
#include "core/tensor_util.h"
#include "image.h"
#include "image/crop.h"
#include "lua_util.h"
#include "rng.h"
#include "tensor.h"

namespace bv::lua {

namespace {

// Rows and columns of an HxW or HxWxC image argument (the runtime checks the rest).
void image_hw(lua_State* L, const char* fn, const at::Tensor& t, int64_t* h, int64_t* w) {
  if (t.dim() != 2 && t.dim() != 3) {
    raise(L, str(fn, ": expected an HxWxC or HxW image, got shape ", shape_string(t)));
  }
  *h = t.size(0);
  *w = t.size(1);
}

// A crop size argument: an integer n (n x n) or a table {h, w}.
void check_crop_size(lua_State* L, const char* fn, int arg, int64_t* h, int64_t* w) {
  if (lua_type(L, arg) == LUA_TTABLE) {
    if (luaL_len(L, arg) != 2) {
      raise(L, str(fn, ": size must be an integer or a table {h, w}, got a table of length ",
                   luaL_len(L, arg)));
    }
    int64_t hw[2];
    for (int i = 0; i < 2; ++i) {
      lua_geti(L, arg, i + 1);
      int isnum = 0;
      hw[i] = lua_tointegerx(L, -1, &isnum);
      if (!isnum) raise(L, str(fn, ": size[", i + 1, "] must be an integer"));
      lua_pop(L, 1);
    }
    *h = hw[0];
    *w = hw[1];
  } else {
    *h = *w = check_int(L, arg);
  }
}

// The optional opts table of the inception functions; unknown keys are errors, not ignored.
image::InceptionCropParams check_inception_opts(lua_State* L, const char* fn, int arg) {
  image::InceptionCropParams params;
  if (lua_isnoneornil(L, arg)) return params;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    // key at -2, value at -1
    if (lua_type(L, -2) != LUA_TSTRING) raise(L, str(fn, ": option names must be strings"));
    const std::string key = lua_tostring(L, -2);
    if (key == "max_attempts") {
      int isnum = 0;
      lua_Integer v = lua_tointegerx(L, -1, &isnum);
      if (!isnum) raise(L, str(fn, ": option max_attempts must be an integer"));
      if (v < 1 || v > 1000000) raise(L, str(fn, ": max_attempts ", v, " must be in [1, 1e6]"));
      params.max_attempts = static_cast<int>(v);
    } else {
      if (lua_type(L, -1) != LUA_TNUMBER) raise(L, str(fn, ": option ", key, " must be a number"));
      const double v = lua_tonumber(L, -1);
      if (key == "area_min") {
        params.area_min = v / 100.0;  // percent, as big_vision's op arguments
      } else if (key == "area_max") {
        params.area_max = v / 100.0;
      } else if (key == "ratio_min") {
        params.ratio_min = v;
      } else if (key == "ratio_max") {
        params.ratio_max = v;
      } else {
        raise(L, str(fn, ": unknown option '", key,
                     "' (known: area_min, area_max, ratio_min, ratio_max, max_attempts)"));
      }
    }
    lua_pop(L, 1);
  }
  // Checked here as well as in the runtime so that the message speaks in percent, as given.
  if (!(params.area_min > 0 && params.area_max > 0 && params.area_min <= 1 &&
        params.area_max <= 1)) {
    raise(L, str(fn, ": area_min ", params.area_min * 100, " and area_max ", params.area_max * 100,
                 " must lie in (0, 100] (percent of the image area)"));
  }
  return params;
}

// bv.image.crop(t, y, x, h, w): y, x are 1-based.
int image_crop(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  const int64_t y = check_int(L, 2), x = check_int(L, 3);
  const int64_t h = check_int(L, 4), w = check_int(L, 5);
  int64_t img_h, img_w;
  image_hw(L, "bv.image.crop", t, &img_h, &img_w);
  // Checked here so that the message speaks in the caller's 1-based offsets.
  if (h < 1 || w < 1 || y < 1 || x < 1 || h > img_h - (y - 1) || w > img_w - (x - 1)) {
    raise(L, str("bv.image.crop: window y=", y, ", x=", x, " (1-based), h=", h, ", w=", w,
                 " does not fit in the image of shape ", shape_string(t)));
  }
  push_tensor(L, image::crop(t, image::Box{y - 1, x - 1, h, w}));
  return 1;
}

// bv.image.central_crop(t [, size]): no size (or 0) -> the largest centred square.
int image_central_crop(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  if (lua_isnoneornil(L, 2) || (lua_isinteger(L, 2) && lua_tointeger(L, 2) == 0)) {
    push_tensor(L, image::central_crop(t));
    return 1;
  }
  int64_t h, w;
  check_crop_size(L, "bv.image.central_crop", 2, &h, &w);
  push_tensor(L, image::central_crop(t, h, w));
  return 1;
}

// bv.image.random_crop(t, size, rng)
int image_random_crop(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  int64_t h, w;
  check_crop_size(L, "bv.image.random_crop", 2, &h, &w);
  Rng& rng = check_rng(L, 3);
  push_tensor(L, image::random_crop(t, h, w, rng));
  return 1;
}

// bv.image.sample_inception_box(height, width, rng [, opts]) -> y, x, h, w (y, x 1-based)
int image_sample_inception_box(lua_State* L) {
  const int64_t img_h = check_int(L, 1), img_w = check_int(L, 2);
  Rng& rng = check_rng(L, 3);
  const auto params = check_inception_opts(L, "bv.image.sample_inception_box", 4);
  const image::Box box = image::sample_inception_box(img_h, img_w, params, rng);
  lua_pushinteger(L, box.y + 1);
  lua_pushinteger(L, box.x + 1);
  lua_pushinteger(L, box.height);
  lua_pushinteger(L, box.width);
  return 4;
}

// bv.image.inception_crop(t, rng [, opts]): the crop only; the pp op resizes afterwards.
int image_inception_crop(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  Rng& rng = check_rng(L, 2);
  const auto params = check_inception_opts(L, "bv.image.inception_crop", 3);
  int64_t img_h, img_w;
  image_hw(L, "bv.image.inception_crop", t, &img_h, &img_w);
  push_tensor(L, image::crop(t, image::sample_inception_box(img_h, img_w, params, rng)));
  return 1;
}

int image_flip_lr(lua_State* L) {
  push_tensor(L, image::flip_lr(check_tensor(L, 1)));
  return 1;
}

int image_flip_ud(lua_State* L) {
  push_tensor(L, image::flip_ud(check_tensor(L, 1)));
  return 1;
}

}  // namespace

void open_image_crop(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      BV_FN("crop", image_crop),
      BV_FN("central_crop", image_central_crop),
      BV_FN("random_crop", image_random_crop),
      BV_FN("sample_inception_box", image_sample_inception_box),
      BV_FN("inception_crop", image_inception_crop),
      BV_FN("flip_lr", image_flip_lr),
      BV_FN("flip_ud", image_flip_ud),
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_pop(L, 1);
}

}  // namespace bv::lua
