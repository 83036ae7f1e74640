// bv._text: SentencePiece tokenizers (runtime/text/tokenizer.h) for lib/bv/text.lua, which wraps
// them in big_vision's tokenizer API (to_int, to_str, bos/eos rules, tokenizer specs, caching).
//
//   local tok = bv._text.load(path, {"<loc0000>", ...})   -- a bv.Tokenizer
//   tok:encode("a cat")          --> {ids...} (SentencePiece ids, 0-based: they are ids)
//   tok:encode_tensor(s, bos, eos)  --> int32 tensor, bos/eos ids added when asked
//   tok:decode(ids)              --> string; ids: a list or a 1-D integer tensor
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "lua_util.h"
#include "tensor.h"
#include "text/tokenizer.h"

namespace bv::lua {

namespace {

constexpr const char* kTokenizerMeta = "bv.Tokenizer";

Tokenizer& check_tokenizer(lua_State* L, int arg) {
  return *static_cast<Tokenizer*>(luaL_checkudata(L, arg, kTokenizerMeta));
}

void push_tokenizer(lua_State* L, Tokenizer tok) {
  void* p = lua_newuserdatauv(L, sizeof(Tokenizer), 0);
  new (p) Tokenizer(std::move(tok));  // constructed before the metatable: no __gc on garbage
  luaL_setmetatable(L, kTokenizerMeta);
}

// A Lua list of strings (argument `arg`); `what` names it in errors.
std::vector<std::string> check_string_list(lua_State* L, int arg, const char* what) {
  std::vector<std::string> out;
  if (lua_isnoneornil(L, arg)) return out;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_Integer n = luaL_len(L, arg);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, arg, i);
    size_t len = 0;
    const char* s = lua_tolstring(L, -1, &len);
    if (lua_type(L, -1) != LUA_TSTRING) {
      raise(L, bv::str(what, "[", i, "] must be a string, got a ", luaL_typename(L, -1)));
    }
    out.emplace_back(s, len);
    lua_pop(L, 1);
  }
  return out;
}

// Token ids from a Lua list of integers or a 1-D integer tensor.
std::vector<int> check_ids(lua_State* L, int arg) {
  std::vector<int> ids;
  if (at::Tensor* t = test_tensor(L, arg)) {
    if (t->dim() != 1 || at::isFloatingType(t->scalar_type()) || t->scalar_type() == at::kBool) {
      raise(L, bv::str("tokenizer:decode: expected a 1-D integer tensor, got ", t->dim(), "-D ",
                       t->scalar_type()));
    }
    at::Tensor ids64 = t->to(at::kCPU).to(at::kLong).contiguous();
    const int64_t* p = ids64.data_ptr<int64_t>();
    ids.assign(p, p + ids64.numel());
    return ids;
  }
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_Integer n = luaL_len(L, arg);
  ids.reserve(static_cast<size_t>(n));
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, arg, i);
    int isnum = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isnum);
    if (!isnum) {
      raise(L, bv::str("tokenizer:decode: ids[", i, "] must be an integer, got ",
                       luaL_typename(L, -1)));
    }
    ids.push_back(static_cast<int>(v));
    lua_pop(L, 1);
  }
  return ids;
}

void push_int_list(lua_State* L, const std::vector<int>& ids) {
  lua_createtable(L, static_cast<int>(ids.size()), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    lua_pushinteger(L, ids[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

void push_string_list(lua_State* L, const std::vector<std::string>& items) {
  lua_createtable(L, static_cast<int>(items.size()), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    lua_pushlstring(L, items[i].data(), items[i].size());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

std::string_view check_view(lua_State* L, int arg) {
  size_t len = 0;
  const char* s = luaL_checklstring(L, arg, &len);
  return {s, len};
}

// bv._text.load(path [, extra_pieces]) -> bv.Tokenizer
int text_load(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  push_tokenizer(L, Tokenizer::from_file(path, check_string_list(L, 2, "extra_pieces")));
  return 1;
}

// bv._text.tokenset(name) -> the pieces of a built-in tokenset ("loc", "seg").
int text_tokenset(lua_State* L) {
  push_string_list(L, tokenset(luaL_checkstring(L, 1)));
  return 1;
}

// bv._text.train_sentencepiece(lines, vocab_size, model_path [, options]): options is a table of
// SentencePiece trainer flags (values may be strings, numbers or booleans).
int text_train(lua_State* L) {
  auto lines = check_string_list(L, 1, "lines");
  int vocab_size = static_cast<int>(check_int(L, 2));
  std::string path = luaL_checkstring(L, 3);
  std::map<std::string, std::string> options;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 4)) {
      if (lua_type(L, -2) != LUA_TSTRING) raise(L, "train_sentencepiece: option names are strings");
      std::string key = lua_tostring(L, -2);
      std::string value;
      if (lua_type(L, -1) == LUA_TBOOLEAN) {
        value = lua_toboolean(L, -1) ? "true" : "false";
      } else if (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER) {
        lua_pushvalue(L, -1);  // tostring on a copy: lua_next needs the key untouched
        value = lua_tostring(L, -1);
        lua_pop(L, 1);
      } else {
        raise(L, bv::str("train_sentencepiece: option '", key,
                         "' must be a string, number or "
                         "boolean, got a ",
                         luaL_typename(L, -1)));
      }
      options[key] = value;
      lua_pop(L, 1);
    }
  }
  train_sentencepiece(lines, vocab_size, path, options);
  return 0;
}

int text_gemma_special_ids(lua_State* L) {
  lua_newtable(L);
  for (const auto& [key, value] : gemma_special_ids()) {
    lua_pushstring(L, value.c_str());
    lua_setfield(L, -2, key.c_str());
  }
  return 1;
}

// tok:encode(text) -> list of ids
int tok_encode(lua_State* L) {
  push_int_list(L, check_tokenizer(L, 1).encode(check_view(L, 2)));
  return 1;
}

// tok:encode_tensor(text [, bos [, eos]]) -> int32 tensor [n], with bos/eos ids when asked.
int tok_encode_tensor(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  std::vector<int> ids = tok.encode(check_view(L, 2));
  bool bos = lua_toboolean(L, 3), eos = lua_toboolean(L, 4);
  if (bos) ids.insert(ids.begin(), tok.bos_id());
  if (eos) ids.push_back(tok.eos_id());
  at::Tensor out = at::empty({static_cast<int64_t>(ids.size())}, at::kInt);
  std::copy(ids.begin(), ids.end(), out.data_ptr<int32_t>());
  push_tensor(L, out);
  return 1;
}

int tok_decode(lua_State* L) {
  std::string text = check_tokenizer(L, 1).decode(check_ids(L, 2));
  lua_pushlstring(L, text.data(), text.size());
  return 1;
}

int tok_piece_to_id(lua_State* L) {
  lua_pushinteger(L, check_tokenizer(L, 1).piece_to_id(check_view(L, 2)));
  return 1;
}

int tok_id_to_piece(lua_State* L) {
  lua_pushstring(L, check_tokenizer(L, 1).id_to_piece(static_cast<int>(check_int(L, 2))).c_str());
  return 1;
}

int tok_is_control(lua_State* L) {
  lua_pushboolean(L, check_tokenizer(L, 1).is_control(static_cast<int>(check_int(L, 2))));
  return 1;
}

template <int (Tokenizer::*Get)() const>
int tok_int(lua_State* L) {
  lua_pushinteger(L, (check_tokenizer(L, 1).*Get)());
  return 1;
}

int tok_name(lua_State* L) {
  lua_pushstring(L, check_tokenizer(L, 1).name().c_str());
  return 1;
}

int tok_serialized(lua_State* L) {
  std::string bytes = check_tokenizer(L, 1).serialized();
  lua_pushlstring(L, bytes.data(), bytes.size());
  return 1;
}

int tok_gc(lua_State* L) {
  static_cast<Tokenizer*>(luaL_checkudata(L, 1, kTokenizerMeta))->~Tokenizer();
  return 0;
}

int tok_tostring(lua_State* L) {
  const Tokenizer& tok = check_tokenizer(L, 1);
  lua_pushfstring(L, "bv.Tokenizer('%s', vocab %d)", tok.name().c_str(), tok.vocab_size());
  return 1;
}

}  // namespace

void open_text(lua_State* L) {
  static const luaL_Reg methods[] = {
      BV_FN("encode", tok_encode),
      BV_FN("encode_tensor", tok_encode_tensor),
      BV_FN("decode", tok_decode),
      BV_FN("piece_to_id", tok_piece_to_id),
      BV_FN("id_to_piece", tok_id_to_piece),
      BV_FN("is_control", tok_is_control),
      BV_FN("vocab_size", tok_int<&Tokenizer::vocab_size>),
      BV_FN("pad_id", tok_int<&Tokenizer::pad_id>),
      BV_FN("eos_id", tok_int<&Tokenizer::eos_id>),
      BV_FN("bos_id", tok_int<&Tokenizer::bos_id>),
      BV_FN("unk_id", tok_int<&Tokenizer::unk_id>),
      BV_FN("name", tok_name),
      BV_FN("serialized", tok_serialized),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kTokenizerMeta);
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, tok_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, guarded<tok_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  static const luaL_Reg functions[] = {
      BV_FN("load", text_load),
      BV_FN("tokenset", text_tokenset),
      BV_FN("train_sentencepiece", text_train),
      BV_FN("gemma_special_ids", text_gemma_special_ids),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "_text");
}

}  // namespace bv::lua
