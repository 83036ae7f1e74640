// bv.image: native image functions (codecs, resizes, crops, flips) that the pp ops in
// lib/bv/pp/ops_image.lua call, and that scripts and the REPL can call directly.
// Images are HxWxC tensors (uint8 unless said otherwise), as in big_vision.
#pragma once

#include <lua.hpp>

#include <cstdint>
#include <string>

namespace bv::lua {

// Each adds its functions to the bv.image table at stack index `table`.
void open_image_codec(lua_State* L, int table);    // image_codec.cpp
void open_image_resize(lua_State* L, int table);   // image_resize.cpp
void open_image_crop(lua_State* L, int table);     // image_crop.cpp
void open_image_randaug(lua_State* L, int table);  // image_randaug.cpp

// Creates bv.image in the table on top of the stack.
void open_image(lua_State* L);

// Makes `max_pixels` the cap of L's decoders when a call gives none (opts.max_pixels), named
// `cap_name` in a refusal: a data worker's state gets its pipeline's (input.max_pixels).
void set_default_max_pixels(lua_State* L, int64_t max_pixels, const std::string& cap_name);

}  // namespace bv::lua
