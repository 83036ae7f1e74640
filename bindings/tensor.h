// bv.Tensor: a Lua userdata owning one at::Tensor (one reference; libtorch refcounts the rest).
#pragma once

#include <ATen/core/Tensor.h>
#include <lua.hpp>

#include <cstdint>
#include <vector>

namespace bv::lua {

constexpr const char* kTensorMeta = "bv.Tensor";

// Pushes a new userdata owning `t` and reports its bytes to Lua's collector, so loops that make
// big temporaries get collected long before memory runs out.
void push_tensor(lua_State* L, at::Tensor t);
at::Tensor& check_tensor(lua_State* L, int arg);
at::Tensor* test_tensor(lua_State* L, int arg);  // nullptr when not a tensor

// Pushes a shape as a Lua list {d1, d2, ...} (what t:shape() returns).
void push_shape(lua_State* L, const std::vector<int64_t>& shape);

// Registers the metatable and the bv.* tensor functions into the table on top of the stack.
void open_tensor(lua_State* L);

}  // namespace bv::lua
