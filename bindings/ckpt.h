// bv.ckpt: checkpoints. big_vision's npz files (ckpt_npz.cpp) and bvlua's own atomic training
// checkpoints (ckpt_train.cpp).
#pragma once

#include <lua.hpp>

namespace bv::lua {

// Each adds its functions to the bv.ckpt table at stack index `table`.
void open_ckpt_npz(lua_State* L, int table);    // ckpt_npz.cpp
void open_ckpt_train(lua_State* L, int table);  // ckpt_train.cpp
void open_ckpt_index(lua_State* L, int table);  // ckpt_index.cpp: bv.ckpt.open

// Creates bv.ckpt in the table on top of the stack.
void open_ckpt(lua_State* L);

}  // namespace bv::lua
