// The tensor userdata from C++: lifetime (Lua owns one reference, libtorch refcounts the rest),
// dtype names and conversions, and errors from bad arguments.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <string>

#include "core/error.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "state.h"
#include "tensor.h"

namespace {

struct BvState {
  lua_State* L = bv::lua::new_state(BV_SOURCE_LIB_DIR);
  ~BvState() { lua_close(L); }
  void exec(const std::string& code) {
    REQUIRE(luaL_loadbuffer(L, code.data(), code.size(), "@test.lua") == LUA_OK);
    int status = bv::lua::pcall_traceback(L, 0, LUA_MULTRET);
    if (status != LUA_OK) FAIL(lua_tostring(L, -1));
  }
};

}  // namespace

TEST_CASE("dtype names round trip and bad names are named", "[dtype]") {
  for (const char* name : {"float32", "float64", "float16", "bfloat16", "uint8", "int8", "int16",
                           "int32", "int64", "bool"}) {
    CHECK(bv::dtype_name(bv::dtype_from_name(name)) == name);
  }
  CHECK(bv::dtype_from_name("float") == at::kFloat);
  CHECK(bv::dtype_from_name("long") == at::kLong);
  try {
    bv::dtype_from_name("float33");
    FAIL("no error");
  } catch (const bv::Error& e) {
    CHECK(std::string(e.what()).find("'float33'") != std::string::npos);
  }
}

TEST_CASE("a tensor pushed to Lua keeps its storage alive until collected", "[lifetime]") {
  BvState s;
  at::Tensor t = at::arange(6, at::kFloat);
  bv::lua::push_tensor(s.L, t);
  lua_setglobal(s.L, "t");
  CHECK(t.use_count() == 2);  // ours and Lua's
  s.exec("t2 = t:view({2, 3}); t = nil; collectgarbage(); collectgarbage()");
  s.exec("assert(t2[2][3]:item() == 5)");  // the view outlives the userdata it came from
  s.exec("t2 = nil; collectgarbage(); collectgarbage()");
  CHECK(t.use_count() == 1);  // every Lua reference is gone
}

TEST_CASE("__close releases a tensor early and later use is a clear error", "[lifetime]") {
  BvState s;
  at::Tensor t = at::zeros({4});
  bv::lua::push_tensor(s.L, t);
  lua_setglobal(s.L, "t");
  s.exec("do local x <close> = t end");
  CHECK(t.use_count() == 1);
  s.exec("local ok, err = pcall(function() return t:sum() end)\n"
         "assert(not ok and err:find('released'), err)");
}

TEST_CASE("values convert between Lua and tensors with the expected dtypes", "[dtype]") {
  BvState s;
  s.exec(R"(
    assert(bv.tensor({1, 2, 3}):dtype() == "int64")
    assert(bv.tensor({1.5, 2}):dtype() == "float32")
    assert(bv.tensor({true, false}):dtype() == "bool")
    assert(bv.tensor({1, 2}, "uint8"):dtype() == "uint8")
    assert(math.type(bv.tensor({7})[1]:item()) == "integer")
    assert(math.type(bv.tensor({7.0})[1]:item()) == "float")
    assert(bv.tensor(300):to("uint8"):item() == 44)  -- wraps like a C cast, as in torch
    assert(bv.tensor({0.1}, "float64")[1]:item() == 0.1)  -- no detour through float32
  )");
  lua_getglobal(s.L, "bv");
  lua_getfield(s.L, -1, "tensor");
  lua_pushnumber(s.L, 2.5);
  lua_pushstring(s.L, "bfloat16");
  lua_call(s.L, 2, 1);
  at::Tensor& t = bv::lua::check_tensor(s.L, -1);
  CHECK(t.scalar_type() == at::kBFloat16);
  CHECK(t.item<float>() == 2.5f);
}
