// bv._data: sources and the threaded pipeline (runtime/data) seen from Lua. lib/bv/data.lua
// builds the user-facing bv.data.training / bv.data.inference on top.
//
// Each pipeline worker thread owns a Lua state made like every other (new_state), which first
// registers the run's config's own pp ops (bv.config.register_pp_ops: the config's
// register_pp_ops, never its get_config) and requires any `requires`, then builds the pp
// functions from their strings. Examples cross between threads as C++ values (at::Tensor
// refcounts are atomic), never as Lua values.
#include <lua.hpp>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/quote.h"
#include "data/pipeline.h"
#include "data/sources.h"
#include "data/tf_example.h"
#include "data/tfrecord.h"
#include "image.h"
#include "lua_util.h"
#include "rng.h"
#include "state.h"
#include "tensor.h"

namespace bv::lua {

namespace {

constexpr const char* kSourceMeta = "bv.Source";
constexpr const char* kPipelineMeta = "bv.Pipeline";

using SourcePtr = std::shared_ptr<const data::Source>;

// File bytes read once and kept (input.cache_raw), shared by the workers.
struct FileCache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const std::string>> bytes;
};

std::shared_ptr<const std::string> read_bytes(const std::string& path, FileCache* cache) {
  if (cache) {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto it = cache->bytes.find(path);
    if (it != cache->bytes.end()) return it->second;
  }
  auto data = std::make_shared<const std::string>(fs::read_file(path));
  if (cache) {
    std::lock_guard<std::mutex> lock(cache->mu);
    cache->bytes.emplace(path, data);
  }
  return data;
}

// bv:tfrecord's record i, read (or taken from the cache: input.cache_raw) and parsed.
data::Example read_tf_example(const data::TFRecordIndex& index, int64_t i, FileCache* cache) {
  std::string where = data::record_where(index, i);
  // The key: no file's path (those start with a NUL, which no path has), one per source and record.
  std::string key = str('\0', static_cast<const void*>(&index), ':', i);
  std::shared_ptr<const std::string> bytes;
  if (cache) {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto it = cache->bytes.find(key);
    if (it != cache->bytes.end()) bytes = it->second;
  }
  if (!bytes) {
    bytes = std::make_shared<const std::string>(data::read_record(index, i));
    if (cache) {
      std::lock_guard<std::mutex> lock(cache->mu);
      cache->bytes.emplace(key, bytes);
    }
  }
  return data::parse_tf_example(*bytes, where);
}

// ---------------------------------------------------------------------------------------------
// Values between C++ and Lua

void push_value(lua_State* L, const data::Value& v, FileCache* cache) {
  using K = data::Value::Kind;
  switch (v.kind) {
    case K::kNone: lua_pushnil(L); break;
    case K::kBool: lua_pushboolean(L, v.b); break;
    case K::kInt: lua_pushinteger(L, v.i); break;
    case K::kFloat: lua_pushnumber(L, v.f); break;
    case K::kString: lua_pushlstring(L, v.s.data(), v.s.size()); break;
    case K::kFile: {
      auto bytes = read_bytes(v.s, cache);
      lua_pushlstring(L, bytes->data(), bytes->size());
      break;
    }
    case K::kTensor: push_tensor(L, v.tensor); break;
    case K::kList:
      lua_createtable(L, static_cast<int>(v.list.size()), 0);
      for (size_t i = 0; i < v.list.size(); ++i) {
        push_value(L, v.list[i], cache);
        lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
      }
      break;
  }
}

void push_example(lua_State* L, const data::Example& ex, FileCache* cache) {
  lua_createtable(L, 0, static_cast<int>(ex.size()));
  for (const auto& [key, value] : ex) {
    push_value(L, value, cache);
    lua_setfield(L, -2, key.c_str());
  }
}

data::Value to_value(lua_State* L, int idx, const std::string& key) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return data::Value::boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
      return lua_isinteger(L, idx) ? data::Value::integer(lua_tointeger(L, idx))
                                   : data::Value::number(lua_tonumber(L, idx));
    case LUA_TSTRING: {
      size_t n = 0;
      const char* s = lua_tolstring(L, idx, &n);
      return data::Value::string(std::string(s, n));
    }
    case LUA_TUSERDATA:
      if (at::Tensor* t = test_tensor(L, idx)) return data::Value::of_tensor(*t);
      break;
    case LUA_TTABLE: {
      data::Value list;
      list.kind = data::Value::Kind::kList;
      lua_Integer n = luaL_len(L, idx);
      for (lua_Integer i = 1; i <= n; ++i) {
        lua_geti(L, idx, i);
        if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TTABLE) {
          fail("the pp result's key '", snippet(key), "' is a list holding a ",
               luaL_typename(L, -1), "; lists may hold strings only (make numbers a tensor)");
        }
        list.list.push_back(to_value(L, -1, key));
        lua_pop(L, 1);
      }
      return list;
    }
    default: break;
  }
  fail("the pp result's key '", snippet(key), "' is a ", luaL_typename(L, idx),
       " (expected a tensor, number, boolean, string or list of strings)");
}

// A pp result table -> Example, keys sorted so every worker produces the same order.
data::Example to_example(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  BV_CHECK(lua_istable(L, idx), "the pp function returned a ", luaL_typename(L, idx),
           ", not an example table");
  std::vector<std::string> keys;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    BV_CHECK(lua_type(L, -1) == LUA_TSTRING, "the pp result has a non-string key (",
             luaL_typename(L, -1), ")");
    keys.push_back(lua_tostring(L, -1));
  }
  std::sort(keys.begin(), keys.end());
  data::Example ex;
  for (const auto& k : keys) {
    lua_getfield(L, idx, k.c_str());
    ex.emplace_back(k, to_value(L, -1, k));
    lua_pop(L, 1);
  }
  return ex;
}

// ---------------------------------------------------------------------------------------------
// Sources

SourcePtr& check_source(lua_State* L, int arg) {
  return *static_cast<SourcePtr*>(luaL_checkudata(L, arg, kSourceMeta));
}

std::string opt_string_field(lua_State* L, int table, const char* name, const std::string& def) {
  lua_getfield(L, table, name);
  std::string out = lua_isnil(L, -1) ? def : luaL_checkstring(L, -1);
  lua_pop(L, 1);
  return out;
}

int64_t opt_int_field(lua_State* L, int table, const char* name, int64_t def) {
  lua_getfield(L, table, name);
  int64_t out = def;
  if (!lua_isnil(L, -1)) {
    int ok = 0;
    out = lua_tointegerx(L, -1, &ok);
    if (!ok) raise(L, str("data: '", name, "' must be an integer"));
  }
  lua_pop(L, 1);
  return out;
}

// The keys of table `t` that are not in `known`, as "'a', 'b'" ("" when there are none).
std::string unknown_keys(lua_State* L, int t, std::initializer_list<const char*> known) {
  std::vector<std::string> bad;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    bool ok = lua_type(L, -1) == LUA_TSTRING &&
              std::any_of(known.begin(), known.end(),
                          [&](const char* k) { return std::string(k) == lua_tostring(L, -1); });
    if (!ok) bad.push_back("'" + snippet(luaL_tolstring(L, -1, nullptr)) + "'");
    if (!ok) lua_pop(L, 1);  // luaL_tolstring's copy
  }
  std::sort(bad.begin(), bad.end());
  std::string out;
  for (const auto& b : bad) out += (out.empty() ? "" : ", ") + b;
  return out;
}

// bv:tfrecord's shards = {{file = PATH, skip = 0, take = -1}, ...} (take -1: to the end).
std::vector<data::TFRecordShard> tfrecord_shards(lua_State* L) {
  std::string extra = unknown_keys(L, 1, {"name", "shards"});
  if (!extra.empty()) raise(L, str("bv:tfrecord: unknown key ", extra, " (it takes shards)"));
  lua_getfield(L, 1, "shards");
  if (!lua_istable(L, -1)) {
    raise(L, str("bv:tfrecord: 'shards' must be a list of {file = ..., skip = ..., take = ...}, "
                 "got a ",
                 luaL_typename(L, -1)));
  }
  int list = lua_gettop(L);
  std::vector<data::TFRecordShard> shards;
  lua_Integer n = luaL_len(L, list);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, list, i);
    int t = lua_gettop(L);
    std::string at = str("bv:tfrecord: shards[", i, "]");
    if (!lua_istable(L, t)) raise(L, str(at, " must be a table, got a ", luaL_typename(L, t)));
    extra = unknown_keys(L, t, {"file", "skip", "take"});
    if (!extra.empty()) raise(L, str(at, ": unknown key ", extra, " (it takes file, skip, take)"));
    data::TFRecordShard shard;
    lua_getfield(L, t, "file");
    if (lua_type(L, -1) != LUA_TSTRING) raise(L, str(at, ": 'file' (a path) is required"));
    shard.file = lua_tostring(L, -1);
    lua_pop(L, 1);
    for (const char* key : {"skip", "take"}) {
      lua_getfield(L, t, key);
      if (!lua_isnil(L, -1)) {
        if (!lua_isinteger(L, -1)) {
          raise(L, str(at, ": '", key, "' must be an integer, got ", luaL_typename(L, -1)));
        }
        (std::string(key) == "skip" ? shard.skip : shard.take) = lua_tointeger(L, -1);
      }
      lua_pop(L, 1);
    }
    shards.push_back(std::move(shard));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (shards.empty()) raise(L, "bv:tfrecord: 'shards' is empty");
  return shards;
}

// bv._data.source({name = "bv:jsonl", fname = ..., fopen_keys = {...}, start, stop} |
//                 {name = "bv:imagefolder", root = ...} |
//                 {name = "bv:tfrecord", shards = {{file = ..., skip = 0, take = -1}, ...}}
//                 [, {skip_errors = bool}])
// skip_errors: a bad JSON-L line, or a TFRecord record whose length header is corrupt, is kept
// as an example that fails in the pipeline (and is skipped and counted there) instead of
// failing here.
int data_source(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  bool skip_errors = false;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "skip_errors");
    skip_errors = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  std::string name = opt_string_field(L, 1, "name", "");
  data::Source src;
  if (name == "bv:jsonl") {
    data::JsonlOptions o;
    o.fname = opt_string_field(L, 1, "fname", "");
    if (o.fname.empty()) raise(L, "bv:jsonl: 'fname' is required");
    o.start = opt_int_field(L, 1, "start", 0);
    o.stop = opt_int_field(L, 1, "stop", -1);
    o.keep_bad_lines = skip_errors;
    lua_getfield(L, 1, "fopen_keys");
    if (lua_istable(L, -1)) {
      // A list of keys (no prefix) or a map key -> directory.
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        if (lua_type(L, -2) == LUA_TNUMBER) {
          o.fopen_keys[luaL_checkstring(L, -1)] = "";
        } else {
          o.fopen_keys[luaL_checkstring(L, -2)] = luaL_checkstring(L, -1);
        }
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "download_keys");
    if (lua_istable(L, -1)) {
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= n; ++i) {
        lua_geti(L, -1, i);
        o.download_keys.push_back(luaL_checkstring(L, -1));
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
    src = data::load_jsonl(o);
  } else if (name == "bv:imagefolder") {
    std::string root = opt_string_field(L, 1, "root", "");
    if (root.empty()) raise(L, "bv:imagefolder: 'root' is required");
    src = data::load_image_folder(root);
  } else if (name == "bv:tfrecord") {
    src = data::load_tfrecord(tfrecord_shards(L), skip_errors);
  } else {
    raise(L, str("data: unknown source '", snippet(name),
                 "' (bvlua has bv:jsonl, bv:imagefolder and bv:tfrecord)"));
  }
  void* p = lua_newuserdatauv(L, sizeof(SourcePtr), 0);
  new (p) SourcePtr(std::make_shared<const data::Source>(std::move(src)));
  luaL_setmetatable(L, kSourceMeta);
  return 1;
}

int source_size(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(data::source_size(*check_source(L, 1))));
  return 1;
}

// source:example(i): the raw example i (1-based) as the pp receives it (file bytes read).
int source_example(lua_State* L) {
  const SourcePtr& src = check_source(L, 1);
  int64_t i = check_int(L, 2);
  int64_t n = data::source_size(*src);
  if (i < 1 || i > n) raise(L, str("example ", i, " out of range 1..", n));
  push_example(L, data::source_example(*src, i - 1), nullptr);
  return 1;
}

// source:bad_lines(): how many lines were kept as failing examples (skip_errors).
int source_bad_lines(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(check_source(L, 1)->bad_lines.size()));
  return 1;
}

int source_origin(lua_State* L) {
  const SourcePtr& src = check_source(L, 1);
  int64_t i = check_int(L, 2);
  if (i < 1 || i > data::source_size(*src)) raise(L, "origin index out of range");
  lua_pushstring(L, data::source_origin(*src, i - 1).c_str());
  return 1;
}

int source_class_names(lua_State* L) {
  const SourcePtr& src = check_source(L, 1);
  lua_createtable(L, static_cast<int>(src->class_names.size()), 0);
  for (size_t i = 0; i < src->class_names.size(); ++i) {
    lua_pushstring(L, src->class_names[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

int source_gc(lua_State* L) {
  static_cast<SourcePtr*>(luaL_checkudata(L, 1, kSourceMeta))->~SourcePtr();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Pipelines

struct WorkerSetup {
  std::string lib_dir;
  std::string config;                // "path.lua[:args]" whose pp ops the workers register, or ""
  std::vector<std::string> modules;  // the config's `requires`
  std::vector<std::string> pp;       // one pp string per source
  std::vector<SourcePtr> sources;
  uint64_t seed = 0;
  std::shared_ptr<FileCache> cache;  // null unless cache_raw
  int64_t max_pixels = 0;            // the decoders' cap in the workers (0: the codec's own)
  std::string max_pixels_key;        // the config key a refusal names (input.max_pixels)
};

struct LuaCloser {
  void operator()(lua_State* L) const { lua_close(L); }
};

// Runs `code` in L with the traceback handler; throws bv::Error with the Lua message.
void run_or_throw(lua_State* L, int nargs, int nresults, const std::string& what) {
  if (pcall_traceback(L, nargs, nresults) != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)";
    lua_pop(L, 1);
    fail(what, ": ", msg);
  }
}

std::string describe(const WorkerSetup& s, const data::Item& item) {
  const data::Source& src = *s.sources[static_cast<size_t>(item.source)];
  std::string out = data::source_origin(src, item.index);
  if (src.records) return out;
  for (const auto& [key, v] : src.examples[static_cast<size_t>(item.index)]) {
    if (v.kind == data::Value::Kind::kFile) out += " (" + snippet(key) + ": " + snippet(v.s) + ")";
  }
  return out;
}

data::WorkerFn make_worker(std::shared_ptr<const WorkerSetup> setup) {
  std::shared_ptr<lua_State> state(new_state(setup->lib_dir), LuaCloser());
  lua_State* L = state.get();
  if (setup->max_pixels > 0) set_default_max_pixels(L, setup->max_pixels, setup->max_pixels_key);
  if (!setup->config.empty()) {
    // The config's own pp ops (its register_pp_ops), not the config: get_config is not run.
    lua_getglobal(L, "bv");
    lua_getfield(L, -1, "config");
    lua_getfield(L, -1, "register_pp_ops");
    lua_pushstring(L, setup->config.c_str());
    run_or_throw(L, 1, 0,
                 "registering the pp ops of the config '" + setup->config + "' in a data worker");
    lua_pop(L, 2);
  }
  for (const auto& mod : setup->modules) {
    lua_getglobal(L, "require");
    lua_pushstring(L, mod.c_str());
    run_or_throw(L, 1, 0, "require '" + mod + "' in a data worker");
  }
  // The pp functions, one per source, kept in a table in the registry.
  lua_createtable(L, static_cast<int>(setup->pp.size()), 0);
  for (size_t i = 0; i < setup->pp.size(); ++i) {
    lua_getglobal(L, "bv");
    lua_getfield(L, -1, "pp");
    lua_getfield(L, -1, "build");
    lua_pushstring(L, setup->pp[i].c_str());
    run_or_throw(L, 1, 1, "building the pp '" + snippet(setup->pp[i]) + "'");
    lua_rawseti(L, -4, static_cast<lua_Integer>(i + 1));
    lua_pop(L, 2);
  }
  int pp_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  return [state, setup, pp_ref](const data::Item& item) {
    lua_State* L = state.get();
    int top = lua_gettop(L);
    try {
      lua_rawgeti(L, LUA_REGISTRYINDEX, pp_ref);
      lua_rawgeti(L, -1, item.source + 1);
      const data::Source& src = *setup->sources[static_cast<size_t>(item.source)];
      auto bad = src.bad_lines.find(item.index);
      if (bad != src.bad_lines.end()) throw Error(bad->second);
      if (src.records) {
        push_example(L, read_tf_example(*src.records, item.index, setup->cache.get()), nullptr);
      } else {
        push_example(L, src.examples[static_cast<size_t>(item.index)], setup->cache.get());
      }
      push_rng(L, Rng(data::mix_seed(setup->seed, item.seq)));
      // The visit: which epoch of its source this is, and the pipeline's seed (lib/bv/pp's
      // `visit` argument; choice_no_replacement's rounds come from it).
      lua_createtable(L, 0, 2);
      lua_pushinteger(L, static_cast<lua_Integer>(item.epoch));
      lua_setfield(L, -2, "epoch");
      lua_pushinteger(L, static_cast<lua_Integer>(setup->seed));
      lua_setfield(L, -2, "seed");
      run_or_throw(L, 3, 1, describe(*setup, item));
      data::Example ex = to_example(L, -1);
      lua_settop(L, top);
      return ex;
    } catch (const std::exception& e) {
      lua_settop(L, top);
      std::string msg = e.what();
      std::string where = describe(*setup, item);
      if (msg.rfind(where, 0) != 0) msg = where + ": " + msg;
      throw Error(msg);
    }
  };
}

struct PipelineBox {
  std::unique_ptr<data::Pipeline> pipeline;
  std::vector<std::string> names;  // one per source; "" when the spec gave none
};

data::Pipeline& check_pipeline(lua_State* L, int arg) {
  auto* box = static_cast<PipelineBox*>(luaL_checkudata(L, arg, kPipelineMeta));
  if (!box->pipeline) raise(L, "the pipeline was closed");
  return *box->pipeline;
}

std::vector<std::string> string_list_field(lua_State* L, int table, const char* name) {
  std::vector<std::string> out;
  lua_getfield(L, table, name);
  if (lua_istable(L, -1)) {
    lua_Integer n = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_geti(L, -1, i);
      out.push_back(luaL_checkstring(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return out;
}

bool bool_field(lua_State* L, int table, const char* name, bool def) {
  lua_getfield(L, table, name);
  bool out = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return out;
}

// bv._data.pipeline{sources = {src...}, pp = {string...}, weights = {w...}, batch_size, workers,
//   seed, shuffle, shuffle_buffer_size, repeat, prefetch, skip_errors, max_consecutive_errors,
//   pad_last_batch, pin_memory, position, rank, world, cache_raw, config, requires = {...},
//   names = {string...} (one per source, for skipped_by_source), max_pixels and max_pixels_key
//   (the workers' decoders' cap and the config key it is), batch_size_key (the config key a
//   batch that cannot fit in memory names), memory_bytes (what it must fit in; default: what
//   the machine has available)}
int data_pipeline(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  auto setup = std::make_shared<WorkerSetup>();
  setup->lib_dir = current_lib_dir();
  setup->config = opt_string_field(L, 1, "config", "");
  setup->modules = string_list_field(L, 1, "requires");
  setup->pp = string_list_field(L, 1, "pp");
  setup->seed = static_cast<uint64_t>(opt_int_field(L, 1, "seed", 0));
  if (bool_field(L, 1, "cache_raw", false)) setup->cache = std::make_shared<FileCache>();
  setup->max_pixels = opt_int_field(L, 1, "max_pixels", 0);
  setup->max_pixels_key = opt_string_field(L, 1, "max_pixels_key", "max_pixels");
  if (setup->max_pixels < 0) {
    raise(L, str("data: ", setup->max_pixels_key, " must be positive, got ", setup->max_pixels));
  }

  lua_getfield(L, 1, "sources");
  luaL_argexpected(L, lua_istable(L, -1), 1, "sources list");
  lua_Integer nsrc = luaL_len(L, -1);
  for (lua_Integer i = 1; i <= nsrc; ++i) {
    lua_geti(L, -1, i);
    setup->sources.push_back(check_source(L, lua_gettop(L)));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (setup->sources.empty()) raise(L, "data: no sources");
  if (setup->pp.size() != setup->sources.size()) {
    raise(L,
          str("data: ", setup->sources.size(), " sources but ", setup->pp.size(), " pp strings"));
  }
  std::vector<double> weights(setup->sources.size(), 1.0);
  lua_getfield(L, 1, "weights");
  if (lua_istable(L, -1)) {
    for (size_t i = 0; i < weights.size(); ++i) {
      lua_geti(L, -1, static_cast<lua_Integer>(i + 1));
      weights[i] = luaL_checknumber(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);

  int rank = static_cast<int>(opt_int_field(L, 1, "rank", 0));
  int world = static_cast<int>(opt_int_field(L, 1, "world", 1));
  bool shuffle = bool_field(L, 1, "shuffle", true);
  bool repeat = bool_field(L, 1, "repeat", true);
  int64_t buffer = opt_int_field(L, 1, "shuffle_buffer_size", 0);
  std::vector<data::IndexStream> streams;
  for (size_t s = 0; s < setup->sources.size(); ++s) {
    auto indices = data::process_indices(data::source_size(*setup->sources[s]), rank, world);
    uint64_t seed = data::mix_seed(setup->seed, 1000 + s * 7919 + static_cast<uint64_t>(rank));
    streams.emplace_back(std::move(indices), seed, shuffle, buffer, repeat);
  }
  data::ItemStream stream(std::move(streams), weights, setup->seed);

  data::PipelineOptions o;
  o.batch_size = opt_int_field(L, 1, "batch_size", 1);
  o.workers = static_cast<int>(opt_int_field(L, 1, "workers", 1));
  o.prefetch_batches = opt_int_field(L, 1, "prefetch", 2);
  o.skip_errors = bool_field(L, 1, "skip_errors", false);
  o.max_consecutive_errors = opt_int_field(L, 1, "max_consecutive_errors", 20);
  o.pad_last_batch = bool_field(L, 1, "pad_last_batch", false);
  o.pin_memory = bool_field(L, 1, "pin_memory", false);
  o.batch_size_key = opt_string_field(L, 1, "batch_size_key", "batch_size");
  o.memory_bytes = opt_int_field(L, 1, "memory_bytes", -1);
  lua_Integer start = opt_int_field(L, 1, "position", 0);
  BV_CHECK(start >= 0, "bv.data: position must be 0 or more (examples already read), got ", start);
  uint64_t position = static_cast<uint64_t>(start);

  std::vector<std::string> names = string_list_field(L, 1, "names");
  names.resize(setup->sources.size());
  void* p = lua_newuserdatauv(L, sizeof(PipelineBox), 0);
  auto* box = new (p) PipelineBox();
  box->names = std::move(names);
  luaL_setmetatable(L, kPipelineMeta);
  std::shared_ptr<const WorkerSetup> shared = setup;
  box->pipeline = std::make_unique<data::Pipeline>(
      std::move(stream), [shared](int) { return make_worker(shared); }, o, position);
  return 1;
}

// pipeline:next() -> batch table, or nil at the end of a finite stream.
int pipeline_next(lua_State* L) {
  data::Pipeline& p = check_pipeline(L, 1);
  data::Example batch;
  if (!p.next(&batch)) {
    lua_pushnil(L);
    return 1;
  }
  push_example(L, batch, nullptr);
  return 1;
}

int pipeline_position(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(check_pipeline(L, 1).position()));
  return 1;
}

int pipeline_skipped(lua_State* L) {
  lua_pushinteger(L, check_pipeline(L, 1).skipped());
  return 1;
}

// pipeline:skipped_by_source() -> {name = count} for every source (names from the spec's
// `names`, else 1, 2, ...).
int pipeline_skipped_by_source(lua_State* L) {
  auto* box = static_cast<PipelineBox*>(luaL_checkudata(L, 1, kPipelineMeta));
  if (!box->pipeline) raise(L, "the pipeline was closed");
  std::vector<int64_t> counts = box->pipeline->skipped_by_source();
  lua_createtable(L, 0, static_cast<int>(box->names.size()));
  for (size_t i = 0; i < box->names.size(); ++i) {
    lua_pushinteger(L, static_cast<lua_Integer>(i < counts.size() ? counts[i] : 0));
    if (box->names[i].empty()) {
      lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
    } else {
      lua_setfield(L, -2, box->names[i].c_str());
    }
  }
  return 1;
}

// pipeline:last_skipped_error() -> the error of the last example skipped, or nil.
int pipeline_last_skipped_error(lua_State* L) {
  std::string e = check_pipeline(L, 1).last_skipped_error();
  if (e.empty()) {
    lua_pushnil(L);
  } else {
    lua_pushlstring(L, e.data(), e.size());
  }
  return 1;
}

// __gc and __close: stop the worker threads now.
int pipeline_close(lua_State* L) {
  auto* box = static_cast<PipelineBox*>(luaL_checkudata(L, 1, kPipelineMeta));
  box->pipeline.reset();
  return 0;
}

int pipeline_gc(lua_State* L) {
  static_cast<PipelineBox*>(luaL_checkudata(L, 1, kPipelineMeta))->~PipelineBox();
  return 0;
}

void new_class(lua_State* L, const char* name, const luaL_Reg* methods, lua_CFunction gc) {
  luaL_newmetatable(L, name);
  lua_newtable(L);  // (luaL_newlib needs an array, not a pointer, to size its table)
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
}

}  // namespace

void open_data(lua_State* L) {
  static const luaL_Reg source_methods[] = {
      BV_FN("size", source_size),
      BV_FN("example", source_example),
      BV_FN("origin", source_origin),
      BV_FN("bad_lines", source_bad_lines),
      BV_FN("class_names", source_class_names),
      {nullptr, nullptr},
  };
  new_class(L, kSourceMeta, source_methods, source_gc);
  static const luaL_Reg pipeline_methods[] = {
      BV_FN("next", pipeline_next),
      BV_FN("position", pipeline_position),
      BV_FN("skipped", pipeline_skipped),
      BV_FN("skipped_by_source", pipeline_skipped_by_source),
      BV_FN("last_skipped_error", pipeline_last_skipped_error),
      BV_FN("close", pipeline_close),
      {nullptr, nullptr},
  };
  new_class(L, kPipelineMeta, pipeline_methods, pipeline_gc);
  luaL_getmetatable(L, kPipelineMeta);
  lua_pushcfunction(L, guarded<pipeline_close>);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);

  static const luaL_Reg functions[] = {
      BV_FN("source", data_source),
      BV_FN("pipeline", data_pipeline),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "_data");
}

}  // namespace bv::lua
