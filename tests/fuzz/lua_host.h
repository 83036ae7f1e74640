// The host of the Lua fuzz harnesses: one Lua 5.4 state per process, set up as bvlua's
// (bindings/state.cpp: standard libraries, lib/ first on package.path), with coverage of the Lua
// code fed to libFuzzer.
//
// The parsers under test are pure Lua (lib/bv/literal.lua, config.lua, json.lua, pp/*.lua), so
// the harnesses link no libtorch: the global `bv` loads Lua submodules on first use, as
// lib/bv/init.lua does, has bv.null, and raises an error for the native functions (bv.tensor,
// bv.image.*, ...) that a pp op's factory may call; such an op then fails with that message.
//
// Coverage: libFuzzer instruments C and C++, not Lua, so a line hook records each Lua
// line-to-line transition (source, previous line, line) in a table of 8-bit counters that the
// host registers with libFuzzer as one more instrumented module. Its `cov:` and `ft:` figures
// then grow as inputs reach new Lua lines (65,536 counters: hashed edges may share one).
//
// Outcomes: a Lua error with a message is fine. A finding aborts (libFuzzer saves the input):
// an error that is not a string, or whose message shows the parser itself failed ("attempt to
// ...", "stack overflow", "bad argument #..." from a standard function), besides what the
// sanitizers and libFuzzer's timeout catch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bv::fuzz {

// Runs the harness: `driver` is a Lua chunk returning a function; it is loaded once (with the
// `fuzz_try` global, see lua_host.cpp) and then called with each input as a string.
void run_lua_driver(const char* name, const char* driver, const uint8_t* data, size_t size);

}  // namespace bv::fuzz
