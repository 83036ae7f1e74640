// bv.pp_state: state that pp ops share across data worker threads (runtime/pp/unseen_pool.h).
// lib/bv/pp/ops_general.lua's choice_no_replacement calls these.
#include <lua.hpp>

#include "lua_util.h"
#include "pp/unseen_pool.h"
#include "rng.h"

namespace bv::lua {

namespace {

// bv.pp_state.take_unseen(scope, id, n, rng) -> 1-based item in [1, n] that (scope, id) has not
// drawn in its current round.
int pp_take_unseen(lua_State* L) {
  size_t scope_len = 0, id_len = 0;
  const char* scope = luaL_checklstring(L, 1, &scope_len);
  const char* id = luaL_checklstring(L, 2, &id_len);
  int64_t n = check_int(L, 3);
  Rng& rng = check_rng(L, 4);
  int64_t item = pp::take_unseen(std::string(scope, scope_len), std::string(id, id_len), n, rng);
  lua_pushinteger(L, item + 1);
  return 1;
}

// bv.pp_state.forget_unseen(prefix="") -> number of (scope, id) entries dropped.
int pp_forget_unseen(lua_State* L) {
  size_t len = 0;
  const char* prefix = luaL_optlstring(L, 1, "", &len);
  lua_pushinteger(L, pp::forget_unseen(std::string(prefix, len)));
  return 1;
}

}  // namespace

void open_pp_state(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("take_unseen", pp_take_unseen),
      BV_FN("forget_unseen", pp_forget_unseen),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "pp_state");
}

}  // namespace bv::lua
