// bv.ckpt.open: a checkpoint opened lazily (runtime/ckpt/index.h). The REPL's `ckpt` object
// (lib/bv/inspect.lua) is built on it.
//
//   local c = bv.ckpt.open(path)   -- x.npz, x.safetensors, WORKDIR/ckpt-N/ or WORKDIR
//   c:entries()   -> {{name=, shape={...}, dtype="float32", bytes=}, ...} sorted by name
//   c:info(name)  -> the entry of one name, or nil
//   c:load(name)  -> the tensor, read now
//   c:file(), c:format() ("npz" or "safetensors"), c:step() (nil unless a training checkpoint)
#include <ATen/ATen.h>

#include <memory>
#include <new>
#include <string>

#include "ckpt.h"
#include "ckpt/index.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

constexpr const char* kIndexMeta = "bv.CheckpointIndex";
using IndexPtr = std::shared_ptr<const ckpt::CheckpointIndex>;

const ckpt::CheckpointIndex& check_index(lua_State* L, int arg) {
  return **static_cast<IndexPtr*>(luaL_checkudata(L, arg, kIndexMeta));
}

void push_entry(lua_State* L, const ckpt::IndexEntry& e) {
  lua_createtable(L, 0, 4);
  lua_pushlstring(L, e.name.data(), e.name.size());
  lua_setfield(L, -2, "name");
  push_shape(L, e.shape);
  lua_setfield(L, -2, "shape");
  lua_pushstring(L, dtype_name(e.dtype).c_str());
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, static_cast<lua_Integer>(e.nbytes));
  lua_setfield(L, -2, "bytes");
}

int ckpt_open(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  auto index = std::make_shared<const ckpt::CheckpointIndex>(ckpt::CheckpointIndex::open(path));
  void* p = lua_newuserdatauv(L, sizeof(IndexPtr), 0);
  new (p) IndexPtr(std::move(index));
  luaL_setmetatable(L, kIndexMeta);
  return 1;
}

int index_entries(lua_State* L) {
  const auto& entries = check_index(L, 1).entries();
  lua_createtable(L, static_cast<int>(entries.size()), 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    push_entry(L, entries[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

int index_info(lua_State* L) {
  const ckpt::IndexEntry* e = check_index(L, 1).find(luaL_checkstring(L, 2));
  if (!e) return 0;
  push_entry(L, *e);
  return 1;
}

int index_load(lua_State* L) {
  push_tensor(L, check_index(L, 1).load(luaL_checkstring(L, 2)));
  return 1;
}

int index_file(lua_State* L) {
  lua_pushstring(L, check_index(L, 1).file().c_str());
  return 1;
}

int index_format(lua_State* L) {
  lua_pushstring(L, check_index(L, 1).format().c_str());
  return 1;
}

int index_step(lua_State* L) {
  int64_t step = check_index(L, 1).step();
  if (step < 0) return 0;
  lua_pushinteger(L, step);
  return 1;
}

int index_tostring(lua_State* L) {
  const auto& index = check_index(L, 1);
  lua_pushfstring(L, "bv.CheckpointIndex: %s (%s, %d tensors)", index.file().c_str(),
                  index.format().c_str(), static_cast<int>(index.entries().size()));
  return 1;
}

int index_gc(lua_State* L) {
  static_cast<IndexPtr*>(luaL_checkudata(L, 1, kIndexMeta))->~IndexPtr();
  return 0;
}

}  // namespace

void open_ckpt_index(lua_State* L, int table) {
  static const luaL_Reg methods[] = {
      BV_FN("entries", index_entries),
      BV_FN("info", index_info),
      BV_FN("load", index_load),
      BV_FN("file", index_file),
      BV_FN("format", index_format),
      BV_FN("step", index_step),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kIndexMeta);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, index_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, guarded<index_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  lua_pushcfunction(L, guarded<ckpt_open>);
  lua_setfield(L, table, "open");
}

}  // namespace bv::lua
