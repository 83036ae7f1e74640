// bv.pp_state: what pp ops need beyond one example (runtime/pp/visits.h).
// lib/bv/pp/ops_general.lua's choice_no_replacement calls these.
#include <lua.hpp>

#include <string>

#include "lua_util.h"
#include "pp/visits.h"

namespace bv::lua {

namespace {

std::string check_string(lua_State* L, int arg) {
  size_t len = 0;
  const char* s = luaL_checklstring(L, arg, &len);
  return std::string(s, len);
}

// bv.pp_state.shuffled_item(seed, scope, id, visit, n) -> 1-based item in [1, n] for the
// example's visit (0-based): every item once per round of n visits, in a new order each round.
int pp_shuffled_item(lua_State* L) {
  auto seed = static_cast<uint64_t>(check_int(L, 1));
  std::string scope = check_string(L, 2), id = check_string(L, 3);
  int64_t visit = check_int(L, 4), n = check_int(L, 5);
  lua_pushinteger(L, pp::shuffled_item(seed, scope, id, visit, n) + 1);
  return 1;
}

// bv.pp_state.count_visit(scope, id) -> how many times (scope, id) was counted before (0-based).
int pp_count_visit(lua_State* L) {
  lua_pushinteger(L, pp::count_visit(check_string(L, 1), check_string(L, 2)));
  return 1;
}

// bv.pp_state.forget_visits(prefix="") -> number of (scope, id) counts dropped.
int pp_forget_visits(lua_State* L) {
  size_t len = 0;
  const char* prefix = luaL_optlstring(L, 1, "", &len);
  lua_pushinteger(L, pp::forget_visits(std::string(prefix, len)));
  return 1;
}

}  // namespace

void open_pp_state(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("shuffled_item", pp_shuffled_item),
      BV_FN("count_visit", pp_count_visit),
      BV_FN("forget_visits", pp_forget_visits),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "pp_state");
}

}  // namespace bv::lua
