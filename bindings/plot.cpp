// bv._plot.save(figure, path): draws line charts (runtime/plot/figure.h) into a PNG or SVG.
//   figure = {columns = 2, panels = {{title =, xlabel =, ylabel =, ylabel_right =,
//             series = {{name =, color = 0, x = {...}, y = {...}}, ...}, series_right = {...}}}}
// lib/bv/commands/plot.lua builds the figure from metrics files.
#include <lua.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "lua_util.h"
#include "plot/figure.h"

namespace bv::lua {

namespace {

std::string string_field(lua_State* L, int t, const char* key) {
  lua_getfield(L, t, key);
  std::string out = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
  lua_pop(L, 1);
  return out;
}

std::vector<double> numbers(lua_State* L, int t, const char* key, const std::string& where) {
  std::vector<double> out;
  lua_getfield(L, t, key);
  if (!lua_istable(L, -1)) raise(L, str("plot: ", where, ".", key, " must be a list of numbers"));
  for (lua_Integer i = 1; i <= luaL_len(L, -1); ++i) {
    lua_geti(L, -1, i);
    if (!lua_isnumber(L, -1)) raise(L, str("plot: ", where, ".", key, "[", i, "] is not a number"));
    out.push_back(lua_tonumber(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return out;
}

std::vector<plot::Series> series_list(lua_State* L, int panel, const char* key,
                                      const std::string& where) {
  std::vector<plot::Series> out;
  lua_getfield(L, panel, key);
  if (lua_istable(L, -1)) {
    int t = lua_gettop(L);
    for (lua_Integer i = 1; i <= luaL_len(L, t); ++i) {
      lua_geti(L, t, i);
      int s = lua_gettop(L);
      std::string here = str(where, ".", key, "[", i, "]");
      plot::Series series;
      series.name = string_field(L, s, "name");
      lua_getfield(L, s, "color");
      series.color = static_cast<int>(lua_tointeger(L, -1));
      lua_pop(L, 1);
      series.x = numbers(L, s, "x", here);
      series.y = numbers(L, s, "y", here);
      out.push_back(std::move(series));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return out;
}

int plot_save(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  std::string path = luaL_checkstring(L, 2);
  plot::Figure figure;
  lua_getfield(L, 1, "columns");
  if (lua_isinteger(L, -1)) figure.columns = static_cast<int>(lua_tointeger(L, -1));
  lua_pop(L, 1);
  lua_getfield(L, 1, "panels");
  if (!lua_istable(L, -1)) raise(L, "plot: figure.panels must be a list");
  int panels = lua_gettop(L);
  for (lua_Integer i = 1; i <= luaL_len(L, panels); ++i) {
    lua_geti(L, panels, i);
    int p = lua_gettop(L);
    std::string where = str("panels[", i, "]");
    plot::Panel panel;
    panel.title = string_field(L, p, "title");
    panel.xlabel = string_field(L, p, "xlabel");
    panel.ylabel = string_field(L, p, "ylabel");
    panel.ylabel_right = string_field(L, p, "ylabel_right");
    panel.series = series_list(L, p, "series", where);
    panel.series_right = series_list(L, p, "series_right", where);
    figure.panels.push_back(std::move(panel));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  plot::save_figure(figure, path);
  return 0;
}

}  // namespace

void open_plot(lua_State* L) {
  static const luaL_Reg functions[] = {BV_FN("save", plot_save), {nullptr, nullptr}};
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "_plot");
}

}  // namespace bv::lua
