// bv.image codecs (runtime/image/codec.h) and line drawing (runtime/image/draw.h). Images are
// uint8 HxWxC tensors; encoded images are Lua strings. Offsets and coordinates are 1-based, as
// everywhere in bv: decode_crop's y, x is the window's first row and column (1 = top/left), and
// draw_line's (1, 1) is the centre of the top-left pixel.
//
//   bv.image.decode(bytes [, opts])                  JPEG or PNG -> HxWxC uint8
//   bv.image.read(path [, opts])                     read the file + decode
//   bv.image.peek(bytes) -> {height=, width=, channels=, format="jpeg"|"png"}   header only
//   bv.image.decode_crop(bytes, y, x, h, w [, opts]) rows y..y+h-1, columns x..x+w-1
//   bv.image.encode_png(t [, compression])           compression: zlib level 0..9, -1 default
//   bv.image.encode_jpeg(t [, quality])              quality 1..100, default 95; 4:2:0 chroma
//   bv.image.write_png(t, path [, compression])      atomic write (bv.fs.write_file)
//   bv.image.write_jpeg(t, path [, quality])
//   bv.image.draw_line(t, x0, y0, x1, y1, color [, thickness]) -> t   in place
//
// opts = {channels = 3, precise = false, max_pixels = 2^27}: channels 1, 2, 3, 4 or 0 (the
// file's own); precise = the accurate JPEG IDCT instead of TF's default fast one; max_pixels
// caps height * width, checked on the header before decoding. In a data worker's state the
// default cap is the pipeline's (input.max_pixels: set_default_max_pixels).
#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "image.h"
#include "image/codec.h"
#include "image/draw.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

std::string check_bytes(lua_State* L, int arg) {
  size_t n = 0;
  const char* s = luaL_checklstring(L, arg, &n);
  return std::string(s, n);
}

void push_bytes(lua_State* L, const std::string& s) { lua_pushlstring(L, s.data(), s.size()); }

// An integer at stack index `idx` that is not a function argument (a table field), with a
// message naming it.
int64_t field_int(lua_State* L, int idx, const char* fn, const std::string& what) {
  int ok = 0;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok) raise(L, str(fn, ": ", what, " must be an integer, got ", luaL_typename(L, idx)));
  return v;
}

struct DecodeOpts {
  int channels = 3;
  bool precise = false;
  int64_t max_pixels = image::kDefaultMaxPixels;
  std::string cap_name = "max_pixels";  // what a refusal calls the cap
};

constexpr const char* kMaxPixelsField = "bv.image.max_pixels";  // registry: the state's default
constexpr const char* kCapNameField = "bv.image.max_pixels_key";

// The state's default cap: set_default_max_pixels's, else the codec's.
DecodeOpts default_decode_opts(lua_State* L) {
  DecodeOpts opts;
  if (lua_getfield(L, LUA_REGISTRYINDEX, kMaxPixelsField) == LUA_TNUMBER) {
    opts.max_pixels = lua_tointeger(L, -1);
    lua_getfield(L, LUA_REGISTRYINDEX, kCapNameField);
    opts.cap_name = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return opts;
}

// The optional opts table at `arg`; unknown keys are errors (a typo must not pass silently).
DecodeOpts check_decode_opts(lua_State* L, int arg, const char* fn) {
  DecodeOpts opts = default_decode_opts(L);
  if (lua_isnoneornil(L, arg)) return opts;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    int value = lua_gettop(L);
    const char* key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : nullptr;
    if (key && std::strcmp(key, "channels") == 0) {
      int64_t c = field_int(L, value, fn, "opts.channels");
      if (c < 0 || c > 4) {
        raise(L, str(fn, ": opts.channels must be 0 (the file's own), 1, 2, 3 or 4, got ", c));
      }
      opts.channels = static_cast<int>(c);
    } else if (key && std::strcmp(key, "precise") == 0) {
      if (!lua_isboolean(L, value)) raise(L, str(fn, ": opts.precise must be a boolean"));
      opts.precise = lua_toboolean(L, value);
    } else if (key && std::strcmp(key, "max_pixels") == 0) {
      opts.max_pixels = field_int(L, value, fn, "opts.max_pixels");
      opts.cap_name = "max_pixels";
    } else {
      lua_pushvalue(L, -2);
      std::string name = luaL_tolstring(L, -1, nullptr);
      raise(L, str(fn, ": unknown option '", name, "' (known: channels, precise, max_pixels)"));
    }
    lua_pop(L, 1);
  }
  return opts;
}

int image_decode(lua_State* L) {
  std::string bytes = check_bytes(L, 1);
  DecodeOpts o = check_decode_opts(L, 2, "bv.image.decode");
  push_tensor(L, image::decode(bytes, o.channels, o.precise, o.max_pixels, o.cap_name));
  return 1;
}

// Errors name the file: "read 'x.png': decode: ...".
int image_read(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  DecodeOpts o = check_decode_opts(L, 2, "bv.image.read");
  std::string bytes = fs::read_file(path);
  at::Tensor img;
  try {
    img = image::decode(bytes, o.channels, o.precise, o.max_pixels, o.cap_name);
  } catch (const Error& e) {
    fail("bv.image.read '", path, "': ", e.what());
  }
  push_tensor(L, std::move(img));
  return 1;
}

int image_peek(lua_State* L) {
  image::ImageInfo info = image::peek(check_bytes(L, 1));
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, info.height);
  lua_setfield(L, -2, "height");
  lua_pushinteger(L, info.width);
  lua_setfield(L, -2, "width");
  lua_pushinteger(L, info.channels);
  lua_setfield(L, -2, "channels");
  lua_pushstring(L, info.format.c_str());
  lua_setfield(L, -2, "format");
  return 1;
}

int image_decode_crop(lua_State* L) {
  std::string bytes = check_bytes(L, 1);
  int64_t y = check_int(L, 2), x = check_int(L, 3), h = check_int(L, 4), w = check_int(L, 5);
  DecodeOpts o = check_decode_opts(L, 6, "bv.image.decode_crop");
  if (y < 1 || x < 1) {
    raise(L, str("bv.image.decode_crop: y and x are 1-based (the first row/column is 1), got y=", y,
                 " x=", x));
  }
  push_tensor(L, image::decode_crop(bytes, y - 1, x - 1, h, w, o.channels, o.precise, o.max_pixels,
                                    o.cap_name));
  return 1;
}

int opt_int_arg(lua_State* L, int arg, int fallback) {
  if (lua_isnoneornil(L, arg)) return fallback;
  int64_t v = check_int(L, arg);
  luaL_argcheck(L, v >= -1000 && v <= 1000, arg, "out of range");  // levels and qualities are small
  return static_cast<int>(v);
}

int image_encode_png(lua_State* L) {
  push_bytes(L, image::encode_png(check_tensor(L, 1), opt_int_arg(L, 2, -1)));
  return 1;
}

int image_encode_jpeg(lua_State* L) {
  push_bytes(L, image::encode_jpeg(check_tensor(L, 1), opt_int_arg(L, 2, 95)));
  return 1;
}

int image_write_png(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  std::string path = luaL_checkstring(L, 2);
  fs::write_file(path, image::encode_png(t, opt_int_arg(L, 3, -1)));
  return 0;
}

int image_write_jpeg(lua_State* L) {
  const at::Tensor& t = check_tensor(L, 1);
  std::string path = luaL_checkstring(L, 2);
  fs::write_file(path, image::encode_jpeg(t, opt_int_arg(L, 3, 95)));
  return 0;
}

// draw_line(t, x0, y0, x1, y1, color [, thickness = 1]): color is a table of one 0..255 value
// per channel ({255, 0, 0} is red in an RGB image). Returns t, drawn on in place.
int image_draw_line(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  double x0 = luaL_checknumber(L, 2), y0 = luaL_checknumber(L, 3);
  double x1 = luaL_checknumber(L, 4), y1 = luaL_checknumber(L, 5);
  luaL_checktype(L, 6, LUA_TTABLE);
  std::vector<uint8_t> color;
  for (lua_Integer i = 1, n = luaL_len(L, 6); i <= n; ++i) {
    lua_geti(L, 6, i);
    int64_t v = field_int(L, -1, "bv.image.draw_line", str("color[", i, "]"));
    if (v < 0 || v > 255) {
      raise(L, str("bv.image.draw_line: color[", i, "] = ", v, " is not 0..255"));
    }
    color.push_back(static_cast<uint8_t>(v));
    lua_pop(L, 1);
  }
  double thickness = luaL_optnumber(L, 7, 1.0);
  image::draw_line(t, x0 - 1, y0 - 1, x1 - 1, y1 - 1, color, thickness);
  lua_pushvalue(L, 1);
  return 1;
}

}  // namespace

void set_default_max_pixels(lua_State* L, int64_t max_pixels, const std::string& cap_name) {
  lua_pushinteger(L, max_pixels);
  lua_setfield(L, LUA_REGISTRYINDEX, kMaxPixelsField);
  lua_pushlstring(L, cap_name.data(), cap_name.size());
  lua_setfield(L, LUA_REGISTRYINDEX, kCapNameField);
}

void open_image_codec(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      BV_FN("decode", image_decode),
      BV_FN("read", image_read),
      BV_FN("peek", image_peek),
      BV_FN("decode_crop", image_decode_crop),
      BV_FN("encode_png", image_encode_png),
      BV_FN("encode_jpeg", image_encode_jpeg),
      BV_FN("write_png", image_write_png),
      BV_FN("write_jpeg", image_write_jpeg),
      BV_FN("draw_line", image_draw_line),
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_pop(L, 1);
}

}  // namespace bv::lua
