// bv.ckpt training checkpoints and safetensors files:
//   bv.ckpt.save(workdir, step, tensors, state [, {keep = bool}]) -> {warning, ...}
//   bv.ckpt.load(workdir) -> nil | {step=, tensors={name=tensor}, state={...}, path=, warning=,
//                                   keep=, version=}
//   bv.ckpt.list(workdir) -> {steps...}
//   bv.ckpt.sync_file(path)                 fsync: on disk before a checkpoint depending on it
//   bv.ckpt.write_durable(path, data)       PATH.tmp-<pid>, fsync, rename over PATH, fsync dir
// (the last two are for files that must agree with the checkpoints: the metrics file)
//   bv.ckpt.save_safetensors(path, tensors [, metadata])
//   bv.ckpt.load_safetensors(path) -> tensors, metadata
//   bv.ckpt.safetensors_header(path) -> {metadata=, tensors={{name=, dtype=, shape=}, ...}}
// The state is any table bv.json can encode; the binding calls bv.json itself so the manifest
// holds exactly what bv.json writes and reads back.
#include <ATen/ATen.h>

#include <map>
#include <string>

#include "ckpt.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

// A table name -> tensor as a list of pairs; the error names the bad entry.
ckpt::NamedTensors check_named_tensors(lua_State* L, int arg, const char* fn) {
  luaL_checktype(L, arg, LUA_TTABLE);
  ckpt::NamedTensors out;
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      raise(L, str(fn, ": tensor names must be strings, got a ", luaL_typename(L, -2), " key"));
    }
    std::string name = lua_tostring(L, -2);
    at::Tensor* t = test_tensor(L, -1);
    if (!t) {
      raise(L, str(fn, ": tensors['", name, "'] is a ", luaL_typename(L, -1), ", not a tensor"));
    }
    if (!t->defined()) raise(L, str(fn, ": tensors['", name, "'] was released (closed)"));
    out.emplace_back(std::move(name), *t);
    lua_pop(L, 1);
  }
  return out;
}

void push_named_tensors(lua_State* L, ckpt::NamedTensors tensors) {
  lua_createtable(L, 0, static_cast<int>(tensors.size()));
  for (auto& [name, t] : tensors) {
    push_tensor(L, std::move(t));
    lua_setfield(L, -2, name.c_str());
  }
}

void push_string_map(lua_State* L, const std::map<std::string, std::string>& m) {
  lua_createtable(L, 0, static_cast<int>(m.size()));
  for (const auto& [k, v] : m) {
    lua_pushlstring(L, v.data(), v.size());
    lua_setfield(L, -2, k.c_str());
  }
}

// Calls require("bv.json")[fn](value at `arg`) and returns nothing: the result is left on the
// stack. Errors from bv.json are re-raised with the caller's file:line and `what` in front.
void call_json(lua_State* L, const char* fn, int arg, const std::string& what) {
  arg = lua_absindex(L, arg);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "bv.json");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_pushvalue(L, arg);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)";
    raise(L, what + ": " + msg);
  }
}

// bv.ckpt.save(workdir, step, tensors, state [, {keep = bool}]) -> warnings (a list, usually
// empty: leftovers that could not be deleted), for the caller to show
int ckpt_save(lua_State* L) {
  std::string workdir = luaL_checkstring(L, 1);
  int64_t step = check_int(L, 2);
  ckpt::NamedTensors tensors = check_named_tensors(L, 3, "bv.ckpt.save");
  std::string state = "{}";
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    call_json(L, "encode", 4, "bv.ckpt.save: the state cannot be stored as JSON");
    state = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  bool keep = false;
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 5) != 0) {
      lua_pop(L, 1);
      bool known = lua_type(L, -1) == LUA_TSTRING && std::string(lua_tostring(L, -1)) == "keep";
      if (!known)
        raise(L, str("bv.ckpt.save: unknown option '", luaL_tolstring(L, -1, nullptr),
                     "' (options: keep)"));
    }
    lua_getfield(L, 5, "keep");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) {
      raise(L, str("bv.ckpt.save: option keep must be a boolean, got a ", luaL_typename(L, -1)));
    }
    keep = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  std::vector<std::string> warnings = ckpt::save_checkpoint(workdir, step, tensors, state, keep);
  lua_createtable(L, static_cast<int>(warnings.size()), 0);
  for (size_t i = 0; i < warnings.size(); ++i) {
    lua_pushstring(L, warnings[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

// bv.ckpt.load(workdir [, {tensors = false}]) -> nil | {step, tensors, state, path, warning,
// keep}; tensors = false verifies the checkpoint all the same but loads no tensor (a resume reads
// them one at a time through bv.ckpt.open(path)).
int ckpt_load(lua_State* L) {
  std::string workdir = luaL_checkstring(L, 1);
  check_option_keys(L, 2, "bv.ckpt.load", {"tensors"});
  bool with_tensors = true;
  if (!lua_isnoneornil(L, 2)) {
    lua_getfield(L, 2, "tensors");
    if (!lua_isnil(L, -1)) {
      if (!lua_isboolean(L, -1)) raise(L, "bv.ckpt.load: option 'tensors' must be a boolean");
      with_tensors = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
  }
  std::optional<ckpt::LoadedCheckpoint> loaded =
      ckpt::load_latest_checkpoint(workdir, with_tensors);
  if (!loaded) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 6);
  int result = lua_gettop(L);
  lua_pushinteger(L, loaded->step);
  lua_setfield(L, result, "step");
  if (with_tensors) {
    push_named_tensors(L, std::move(loaded->tensors));
    lua_setfield(L, result, "tensors");
  }
  lua_pushlstring(L, loaded->state_json.data(), loaded->state_json.size());
  call_json(L, "decode", -1, "bv.ckpt.load: the state in '" + loaded->path + "'");
  lua_setfield(L, result, "state");
  lua_pop(L, 1);  // the JSON string
  lua_pushstring(L, loaded->path.c_str());
  lua_setfield(L, result, "path");
  if (!loaded->warning.empty()) {
    lua_pushstring(L, loaded->warning.c_str());
    lua_setfield(L, result, "warning");
  }
  lua_pushboolean(L, loaded->keep);
  lua_setfield(L, result, "keep");
  lua_pushinteger(L, loaded->version);
  lua_setfield(L, result, "version");
  return 1;
}

int ckpt_sync_file(lua_State* L) {
  ckpt::sync_file(luaL_checkstring(L, 1));
  return 0;
}

int ckpt_write_durable(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  size_t n = 0;
  const char* data = luaL_checklstring(L, 2, &n);
  ckpt::write_file_durable(path, std::string(data, n));
  return 0;
}

int ckpt_list(lua_State* L) {
  std::vector<int64_t> steps = ckpt::list_checkpoints(luaL_checkstring(L, 1));
  lua_createtable(L, static_cast<int>(steps.size()), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    lua_pushinteger(L, steps[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

// bv.ckpt.save_safetensors(path, tensors [, metadata]): metadata values are strings (numbers are
// converted), as the format allows nothing else.
int ckpt_save_safetensors(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  ckpt::NamedTensors tensors = check_named_tensors(L, 2, "bv.ckpt.save_safetensors");
  std::map<std::string, std::string> metadata;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 3) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        raise(L, str("bv.ckpt.save_safetensors: metadata keys must be strings, got a ",
                     luaL_typename(L, -2)));
      }
      std::string key = lua_tostring(L, -2);
      int type = lua_type(L, -1);
      if (type != LUA_TSTRING && type != LUA_TNUMBER) {
        raise(L, str("bv.ckpt.save_safetensors: metadata['", key, "'] is a ", luaL_typename(L, -1),
                     "; values must be strings"));
      }
      size_t n = 0;
      const char* v = luaL_tolstring(L, -1, &n);
      metadata[key] = std::string(v, n);
      lua_pop(L, 2);  // the converted string and the value
    }
  }
  ckpt::save_safetensors(path, tensors, metadata);
  return 0;
}

int ckpt_load_safetensors(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  ckpt::SafetensorsFile header = ckpt::read_safetensors_header(path);
  push_named_tensors(L, ckpt::load_safetensors(path));
  push_string_map(L, header.metadata);
  return 2;
}

int ckpt_safetensors_header(lua_State* L) {
  ckpt::SafetensorsFile header = ckpt::read_safetensors_header(luaL_checkstring(L, 1));
  lua_createtable(L, 0, 2);
  push_string_map(L, header.metadata);
  lua_setfield(L, -2, "metadata");
  lua_createtable(L, static_cast<int>(header.tensors.size()), 0);
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const ckpt::TensorInfo& info = header.tensors[i];
    lua_createtable(L, 0, 3);
    lua_pushstring(L, info.name.c_str());
    lua_setfield(L, -2, "name");
    lua_pushstring(L, dtype_name(info.dtype).c_str());
    lua_setfield(L, -2, "dtype");
    push_shape(L, info.shape);
    lua_setfield(L, -2, "shape");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  lua_setfield(L, -2, "tensors");
  return 1;
}

}  // namespace

void open_ckpt_train(lua_State* L, int table) {
  static const luaL_Reg functions[] = {
      BV_FN("save", ckpt_save),
      BV_FN("load", ckpt_load),
      BV_FN("list", ckpt_list),
      BV_FN("sync_file", ckpt_sync_file),
      BV_FN("write_durable", ckpt_write_durable),
      BV_FN("save_safetensors", ckpt_save_safetensors),
      BV_FN("load_safetensors", ckpt_load_safetensors),
      BV_FN("safetensors_header", ckpt_safetensors_header),
      {nullptr, nullptr},
  };
  lua_pushvalue(L, table);
  luaL_setfuncs(L, functions, 0);
  lua_pop(L, 1);
}

}  // namespace bv::lua
