// bv.fs: the few file operations Lua code needs that the Lua standard library lacks (mkdir)
// or does badly (atomic writes).
#include <lua.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/quote.h"
#include "lua_util.h"

namespace bv::lua {

namespace {

// A path argument, refused when it holds a NUL (the C calls would take it as the path's end).
std::string path_arg(lua_State* L, int i) {
  size_t n = 0;
  const char* p = luaL_checklstring(L, i, &n);
  std::string path(p, n);
  BV_CHECK(path.find('\0') == std::string::npos, "a path holds a NUL byte: '", snippet(path), "'");
  return path;
}

// Pushes a Lua list of the names.
void push_names(lua_State* L, const std::vector<std::string>& names) {
  lua_createtable(L, static_cast<int>(names.size()), 0);
  for (size_t i = 0; i < names.size(); ++i) {
    lua_pushstring(L, names[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
}

int fs_mkdirs(lua_State* L) {
  fs::mkdirs(path_arg(L, 1));
  return 0;
}

int fs_exists(lua_State* L) {
  lua_pushboolean(L, fs::exists(path_arg(L, 1)));
  return 1;
}

int fs_is_dir(lua_State* L) {
  lua_pushboolean(L, fs::is_dir(path_arg(L, 1)));
  return 1;
}

// bv.fs.cwd() -> the current directory, what relative paths are relative to
int fs_cwd(lua_State* L) {
  lua_pushstring(L, fs::current_dir().c_str());
  return 1;
}

// bv.fs.list(dir) -> the names in dir, sorted
int fs_list(lua_State* L) {
  push_names(L, fs::list_dir(path_arg(L, 1)));
  return 1;
}

int fs_read_file(lua_State* L) {
  std::string data = fs::read_file(path_arg(L, 1));
  lua_pushlstring(L, data.data(), data.size());
  return 1;
}

int fs_write_file(lua_State* L) {
  size_t n = 0;
  const char* data = luaL_checklstring(L, 2, &n);
  fs::write_file(path_arg(L, 1), std::string(data, n));
  return 0;
}

// bv.fs.truncate(path, size): cuts the file to size bytes
int fs_truncate(lua_State* L) {
  fs::truncate(path_arg(L, 1), luaL_checkinteger(L, 2));
  return 0;
}

// bv.fs.lock_workdir(dir) -> nil, or a warning where the filesystem has no flock: this process
// is the workdir's one writer until it exits (core/fs.h)
int fs_lock_workdir(lua_State* L) {
  std::string warning = fs::lock_workdir(path_arg(L, 1));
  if (warning.empty()) return 0;
  lua_pushstring(L, warning.c_str());
  return 1;
}

// bv.fs.remove_tmp_leftovers(dir) -> the names of interrupted writers' *.tmp-<pid> files removed
int fs_remove_tmp_leftovers(lua_State* L) {
  push_names(L, fs::remove_tmp_leftovers(path_arg(L, 1)));
  return 1;
}

}  // namespace

// Adds bv.fs to the table on top of the stack.
void open_fs(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("mkdirs", fs_mkdirs),
      BV_FN("exists", fs_exists),
      BV_FN("is_dir", fs_is_dir),
      BV_FN("read_file", fs_read_file),
      BV_FN("write_file", fs_write_file),
      BV_FN("list", fs_list),
      BV_FN("cwd", fs_cwd),
      BV_FN("truncate", fs_truncate),
      BV_FN("lock_workdir", fs_lock_workdir),
      BV_FN("remove_tmp_leftovers", fs_remove_tmp_leftovers),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "fs");
}

}  // namespace bv::lua
