// The native half of `bvlua repl`: line editing and history (libedit), Ctrl-C, and the
// read-eval-print loop. The Lua half (lib/bv/repl.lua) decides what to show: it prints values,
// lists completion candidates and answers `?name`. `bvlua repl` and `bvlua train --debug` both
// enter through lib/bv/repl.lua, which calls the loop below.
//
//   local native = require "bv._repl"
//   native.loop({history = "/home/me/.bvlua_history"})  -- until Ctrl-D; history = false: none
//   native.listdir(dir) -> sorted names, directories with a trailing "/" (nil, message on error)
//   native.isatty(fd)   -> whether fd 0, 1 or 2 is a terminal
//   native.columns()    -> the terminal's width (80 when unknown)
//   native.remote_loop(client, {history =, prompt = "attach> "})   -- `bvlua attach`'s prompt:
//                          the same line reading, each whole chunk sent to the run (a
//                          bv.attach client) and its answer shown -> "detached" | "closed", msg
#pragma once

#include <lua.hpp>

namespace bv::lua {

// Makes `require "bv._repl"` work in this state (package.preload).
void preload_repl(lua_State* L);

}  // namespace bv::lua
