// The Lua <-> C++ boundary: every Lua-visible C++ function is registered through `guarded`,
// which turns a C++ exception (bv::Error, c10::Error, std::bad_alloc, ...) into an ordinary Lua
// error prefixed with the calling script's file:line. The Lua library is the C++ build
// (lua5.4-c++), so a Lua error raised inside a bound function unwinds C++ destructors too.
#pragma once

#include <ATen/core/grad_mode.h>
#include <lua.hpp>

#include <exception>
#include <initializer_list>
#include <string>

namespace bv::lua {

// Pushes "file:line: " of the nearest calling Lua function ("" when there is none).
void push_where(lua_State* L);

// Pushes "file:line: message" for an exception caught in a bound function.
void push_exception_message(lua_State* L, const std::exception& e);

// Never `catch (...)` here: in the C++ build Lua's own errors are C++ exceptions that must pass.
// Tensor work called from Lua records no autograd graph (Lua tensors are data); the one place
// that needs gradients, the training step, turns them on for its own scope.
template <lua_CFunction F>
int guarded(lua_State* L) {
  try {
    at::NoGradGuard no_grad;
    return F(L);
  } catch (const std::exception& e) {
    push_exception_message(L, e);
  }
  return lua_error(L);  // raised after the catch block has ended and the exception is gone
}

// A luaL_Reg entry whose function goes through the guard.
#define BV_FN(name, fn) \
  { name, ::bv::lua::guarded<fn> }

// Message handler for lua_pcall: appends a traceback to string errors.
int traceback_handler(lua_State* L);

// Calls the function below its nargs arguments with the traceback handler. Returns the Lua status;
// on error the message (with traceback) is left on the stack.
int pcall_traceback(lua_State* L, int nargs, int nresults);

// Argument helpers with messages that name the function argument.
int64_t check_int(lua_State* L, int arg);
bool check_bool(lua_State* L, int arg);
// An options table at `arg` (absent is fine) whose keys are all among `allowed`; another key
// raises "<fn>: unknown option 'k' (known: a, b)": a typo must not fall back to a default.
void check_option_keys(lua_State* L, int arg, const char* fn,
                       std::initializer_list<const char*> allowed);

// Raises a Lua error "file:line: <message>" from inside a bound function.
[[noreturn]] void raise(lua_State* L, const std::string& message);

}  // namespace bv::lua
