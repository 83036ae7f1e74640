// bv._plot.save(figure, path): draws line charts (runtime/plot/figure.h) into a PNG or SVG.
//   figure = {columns = 2, panels = {{title =, xlabel =, ylabel =, ylabel_right =,
//             series = {{name =, color = 0, dash = 0, marker = false, x = {...}, y = {...}}, ...},
//             series_right = {...}}}, legend = {{name =, color =, dash =, x = {}, y = {}}, ...}}
// Returns what it drew: {panels = {{x = AXIS, y = AXIS, y_right = AXIS or nil,
//   legend = {{name =, x =, y =, marker =}, ...}}, ...}, legend = {...}}, AXIS = {lo =, hi =,
//   ticks = {"0.5", ...}}, a legend sample's x, y its centre in pixels of the figure.
// lib/bv/commands/plot.lua builds the figure from metrics files.
#include <ATen/ATen.h>
#include <lua.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "lua_util.h"
#include "plot/figure.h"
#include "tensor.h"

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
      lua_getfield(L, s, "dash");
      series.dash = static_cast<int>(lua_tointeger(L, -1));
      lua_getfield(L, s, "marker");
      series.marker = lua_toboolean(L, -1) != 0;
      lua_pop(L, 3);
      series.x = numbers(L, s, "x", here);
      series.y = numbers(L, s, "y", here);
      out.push_back(std::move(series));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return out;
}

void push_axis(lua_State* L, const plot::Axis& a) {
  lua_createtable(L, 0, 3);
  lua_pushnumber(L, a.lo);
  lua_setfield(L, -2, "lo");
  lua_pushnumber(L, a.hi);
  lua_setfield(L, -2, "hi");
  lua_createtable(L, static_cast<int>(a.ticks.size()), 0);
  for (size_t i = 0; i < a.ticks.size(); ++i) {
    lua_pushstring(L, a.ticks[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i) + 1);
  }
  lua_setfield(L, -2, "ticks");
}

void push_legend(lua_State* L, const std::vector<plot::LegendSample>& legend) {
  lua_createtable(L, static_cast<int>(legend.size()), 0);
  for (size_t i = 0; i < legend.size(); ++i) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, legend[i].name.c_str());
    lua_setfield(L, -2, "name");
    lua_pushnumber(L, legend[i].x);
    lua_setfield(L, -2, "x");
    lua_pushnumber(L, legend[i].y);
    lua_setfield(L, -2, "y");
    lua_pushboolean(L, legend[i].marker);
    lua_setfield(L, -2, "marker");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i) + 1);
  }
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
  figure.legend = series_list(L, 1, "legend", "figure");
  plot::FigureDrawn drawn = plot::save_figure(figure, path);
  lua_createtable(L, 0, 2);
  lua_createtable(L, static_cast<int>(drawn.panels.size()), 0);
  for (size_t i = 0; i < drawn.panels.size(); ++i) {
    const plot::PanelDrawn& p = drawn.panels[i];
    lua_createtable(L, 0, 4);
    push_axis(L, p.x);
    lua_setfield(L, -2, "x");
    push_axis(L, p.y);
    lua_setfield(L, -2, "y");
    if (!figure.panels[i].series_right.empty()) {
      push_axis(L, p.y_right);
      lua_setfield(L, -2, "y_right");
    }
    push_legend(L, p.legend);
    lua_setfield(L, -2, "legend");
    lua_rawseti(L, -2, static_cast<lua_Integer>(i) + 1);
  }
  lua_setfield(L, -2, "panels");
  push_legend(L, drawn.legend);
  lua_setfield(L, -2, "legend");
  return 1;
}

// bv._plot.contact_sheet({{image = uint8 tensor [H, W, 3], title = "..."}, ...}, path
//                        [, {columns = 4, cell = 224}])
int plot_contact_sheet(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  std::string path = luaL_checkstring(L, 2);
  int columns = 4, cell = 224;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "columns");
    if (lua_isinteger(L, -1)) columns = static_cast<int>(lua_tointeger(L, -1));
    lua_getfield(L, 3, "cell");
    if (lua_isinteger(L, -1)) cell = static_cast<int>(lua_tointeger(L, -1));
    lua_pop(L, 2);
  }
  std::vector<plot::Tile> tiles;
  for (lua_Integer i = 1; i <= luaL_len(L, 1); ++i) {
    lua_geti(L, 1, i);
    int t = lua_gettop(L);
    lua_getfield(L, t, "image");
    at::Tensor* img = test_tensor(L, -1);
    if (!img || img->dim() != 3 || img->size(2) != 3 || img->scalar_type() != at::kByte) {
      raise(L, str("contact_sheet: picture ", i, " must be a uint8 tensor [H, W, 3]"));
    }
    at::Tensor c = img->to(at::kCPU).contiguous();  // a device's picture: read through a copy
    plot::Tile tile;
    tile.height = static_cast<int>(c.size(0));
    tile.width = static_cast<int>(c.size(1));
    tile.rgb.assign(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel());
    lua_pop(L, 1);
    tile.title = string_field(L, t, "title");
    tiles.push_back(std::move(tile));
    lua_pop(L, 1);
  }
  plot::save_contact_sheet(tiles, columns, cell, path);
  return 0;
}

}  // namespace

void open_plot(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("save", plot_save), BV_FN("contact_sheet", plot_contact_sheet), {nullptr, nullptr}};
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "_plot");
}

}  // namespace bv::lua
