// bv.attach: the sockets of `bvlua attach` (runtime/attach/socket.h), for the server inside a
// run (lib/bv/attach.lua) and the prompt that attaches to it (lib/bv/commands/attach.lua).
//
//   local l, note = bv.attach.listen(path)  -- note: a stale socket was replaced (else nil)
//   l:pending()          --> whether l:poll would report something (one poll(): per step)
//   l:poll(timeout_s)    --> a list of events, each one of
//       {event = "connected", id =, uid =, pid =, user =}
//       {event = "refused", uid =, pid =, user =, message =}   -- another user, told and closed
//       {event = "frame", id =, kind = "C", payload = "..."}
//       {event = "closed", id =, message =}   -- message only when the listener cut it off
//   l:send(id, kind, payload) --> false when that prompt is gone;  l:drop(id);  l:path()
//   l:close()            -- also on __gc and __close; idempotent
//   local c = bv.attach.connect(path)
//   c:send(kind, payload) --> bool;  c:recv(timeout_s) --> kind, payload | nil (timeout) |
//                                                         false, "closed";  c:close()
//   bv.attach.run_interruptible(l, id, fn, ...) --> as pcall(fn, ...); an 'I' frame from `id`
//                                                   (Ctrl-C) or its going away raises in fn
//   bv.attach.hold(fn, ...) --> fn(...) with those checks suspended (collectives: never cut)
#include <lua.hpp>

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "attach/socket.h"
#include "core/error.h"
#include "core/quote.h"
#include "lua_util.h"

namespace bv::lua {

namespace {

constexpr const char* kListenerMeta = "bv.AttachListener";
constexpr const char* kClientMeta = "bv.AttachClient";
using ListenerPtr = std::unique_ptr<attach::Listener>;
using ClientPtr = std::unique_ptr<attach::Connection>;

attach::Listener& check_listener(lua_State* L, int arg, const char* fn) {
  auto* p = static_cast<ListenerPtr*>(luaL_testudata(L, arg, kListenerMeta));
  if (p == nullptr) {
    raise(L, str(fn, ": argument #", arg, " must be a listener from bv.attach.listen, got a ",
                 luaL_typename(L, arg)));
  }
  return **p;
}

attach::Listener& open_listener(lua_State* L, const char* fn) {
  attach::Listener& l = check_listener(L, 1, fn);
  if (!l.is_open()) raise(L, str(fn, ": the listener at ", l.path(), " is closed"));
  return l;
}

int check_id(lua_State* L, int arg, const char* fn) {
  if (!lua_isinteger(L, arg)) {
    raise(L,
          str(fn, ": argument #", arg, " (id) must be an integer, got a ", luaL_typename(L, arg)));
  }
  return static_cast<int>(lua_tointeger(L, arg));
}

char check_kind(lua_State* L, int arg, const char* fn) {
  size_t n = 0;
  const char* s = lua_type(L, arg) == LUA_TSTRING ? lua_tolstring(L, arg, &n) : nullptr;
  if (s == nullptr || n != 1) {
    raise(L, str(fn, ": argument #", arg, " (kind) must be a one-character string, got ",
                 s ? "\"" + snippet({s, n}) + "\"" : std::string("a ") + luaL_typename(L, arg)));
  }
  return s[0];
}

std::string_view check_payload(lua_State* L, int arg, const char* fn) {
  if (lua_type(L, arg) != LUA_TSTRING) {
    raise(L, str(fn, ": argument #", arg, " (payload) must be a string, got a ",
                 luaL_typename(L, arg)));
  }
  size_t n = 0;
  const char* s = lua_tolstring(L, arg, &n);
  return {s, n};
}

double check_timeout(lua_State* L, int arg, const char* fn) {
  if (lua_isnoneornil(L, arg)) return 0;
  if (!lua_isnumber(L, arg) || lua_tonumber(L, arg) < 0) {
    raise(L, str(fn, ": argument #", arg, " (timeout_s) must be a number >= 0, got ",
                 lua_isnumber(L, arg) ? std::to_string(lua_tonumber(L, arg))
                                      : std::string("a ") + luaL_typename(L, arg)));
  }
  return lua_tonumber(L, arg);
}

// --- the listener -----------------------------------------------------------------------------

int attach_listen(lua_State* L) {
  if (lua_type(L, 1) != LUA_TSTRING) {
    raise(L, str("bv.attach.listen: argument #1 (path) must be a string, got a ",
                 luaL_typename(L, 1)));
  }
  auto l = std::make_unique<attach::Listener>(lua_tostring(L, 1));
  void* p = lua_newuserdatauv(L, sizeof(ListenerPtr), 0);
  auto* held = new (p) ListenerPtr(std::move(l));  // constructed before the metatable
  luaL_setmetatable(L, kListenerMeta);
  if ((*held)->note().empty()) lua_pushnil(L);
  else lua_pushstring(L, (*held)->note().c_str());
  return 2;
}

int listener_pending(lua_State* L) {
  lua_pushboolean(L, open_listener(L, "listener:pending").pending());
  return 1;
}

void set_int(lua_State* L, const char* key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}

void set_string(lua_State* L, const char* key, const std::string& v) {
  lua_pushlstring(L, v.data(), v.size());
  lua_setfield(L, -2, key);
}

void push_event(lua_State* L, const attach::Event& e) {
  using Kind = attach::Event::Kind;
  lua_createtable(L, 0, 5);
  switch (e.kind) {
    case Kind::kConnected:
    case Kind::kRefused:
      set_string(L, "event", e.kind == Kind::kConnected ? "connected" : "refused");
      if (e.kind == Kind::kConnected) set_int(L, "id", e.id);
      if (e.uid >= 0) {
        set_int(L, "uid", e.uid);
        set_int(L, "pid", e.pid);
        set_string(L, "user", attach::user_name(e.uid));
      }
      if (e.kind == Kind::kRefused) set_string(L, "message", e.text);
      break;
    case Kind::kFrame:
      set_string(L, "event", "frame");
      set_int(L, "id", e.id);
      set_string(L, "kind", std::string(1, e.frame_kind));
      set_string(L, "payload", e.text);
      break;
    case Kind::kClosed:
      set_string(L, "event", "closed");
      set_int(L, "id", e.id);
      if (!e.text.empty()) set_string(L, "message", e.text);
      break;
  }
}

int listener_poll(lua_State* L) {
  attach::Listener& l = open_listener(L, "listener:poll");
  std::vector<attach::Event> events = l.poll(check_timeout(L, 2, "listener:poll"));
  lua_createtable(L, static_cast<int>(events.size()), 0);
  for (size_t i = 0; i < events.size(); ++i) {
    push_event(L, events[i]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

int listener_send(lua_State* L) {
  const char* fn = "listener:send";
  attach::Listener& l = open_listener(L, fn);
  lua_pushboolean(L, l.send(check_id(L, 2, fn), check_kind(L, 3, fn), check_payload(L, 4, fn)));
  return 1;
}

int listener_drop(lua_State* L) {
  attach::Listener& l = open_listener(L, "listener:drop");
  l.drop(check_id(L, 2, "listener:drop"));
  return 0;
}

int listener_path(lua_State* L) {
  lua_pushstring(L, check_listener(L, 1, "listener:path").path().c_str());
  return 1;
}

int listener_close(lua_State* L) {
  check_listener(L, 1, "listener:close").close();
  return 0;
}

int listener_gc(lua_State* L) {
  static_cast<ListenerPtr*>(luaL_checkudata(L, 1, kListenerMeta))->~ListenerPtr();
  return 0;
}

int listener_tostring(lua_State* L) {
  attach::Listener& l = check_listener(L, 1, "tostring");
  lua_pushstring(L,
                 str("bv.attach listener at ", l.path(), l.is_open() ? "" : " (closed)").c_str());
  return 1;
}

// --- the client -------------------------------------------------------------------------------

attach::Connection& check_client_at(lua_State* L, int arg, const char* fn) {
  auto* p = static_cast<ClientPtr*>(luaL_testudata(L, arg, kClientMeta));
  if (p == nullptr) {
    raise(L, str(fn, ": argument #", arg, " must be a client from bv.attach.connect, got a ",
                 luaL_typename(L, arg)));
  }
  return **p;
}

int attach_connect(lua_State* L) {
  if (lua_type(L, 1) != LUA_TSTRING) {
    raise(L, str("bv.attach.connect: argument #1 (path) must be a string, got a ",
                 luaL_typename(L, 1)));
  }
  auto c = std::make_unique<attach::Connection>(attach::connect_to(lua_tostring(L, 1)));
  void* p = lua_newuserdatauv(L, sizeof(ClientPtr), 0);
  new (p) ClientPtr(std::move(c));
  luaL_setmetatable(L, kClientMeta);
  return 1;
}

int client_send(lua_State* L) {
  const char* fn = "client:send";
  attach::Connection& c = check_client_at(L, 1, fn);
  lua_pushboolean(L, c.send(check_kind(L, 2, fn), check_payload(L, 3, fn)));
  return 1;
}

int push_frame(lua_State* L, const attach::Frame& f) {
  lua_pushlstring(L, &f.kind, 1);
  lua_pushlstring(L, f.payload.data(), f.payload.size());
  return 2;
}

int client_recv(lua_State* L) {
  attach::Connection& c = check_client_at(L, 1, "client:recv");
  double timeout = check_timeout(L, 2, "client:recv");
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  while (true) {
    if (auto f = c.next_frame()) return push_frame(L, *f);
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    attach::ReadResult r = c.fill(left > 0 ? left : 0);
    if (r == attach::ReadResult::kClosed) {
      if (auto f = c.next_frame()) return push_frame(L, *f);
      lua_pushboolean(L, false);
      lua_pushliteral(L, "closed");
      return 2;
    }
    // A timeout, or a signal cut the wait short: wait on until the deadline.
    if (r == attach::ReadResult::kTimeout && Clock::now() >= deadline) return 0;
  }
}

int client_close(lua_State* L) {
  check_client_at(L, 1, "client:close").close();
  return 0;
}

int client_gc(lua_State* L) {
  static_cast<ClientPtr*>(luaL_checkudata(L, 1, kClientMeta))->~ClientPtr();
  return 0;
}

// --- interrupting a command -------------------------------------------------------------------
// While run_interruptible's fn runs, a count hook asks the listener whether its prompt sent an
// 'I' frame or went away, and raises in fn if so. Asking is a recv() syscall, so the hook does
// it at most every kCheckEvery; Lua code still stops within a fraction of a second. Native work
// (a training step, a collective) cannot be cut: the hook fires at the next Lua instruction.

constexpr int kHookCount = 1000;
constexpr auto kCheckEvery = std::chrono::milliseconds(20);

struct Watch {
  lua_State* L;
  attach::Listener* listener;
  int id;
  std::chrono::steady_clock::time_point last_check;
};

// The innermost run_interruptible last; hold()'s depth. One Lua state per thread, so per thread.
thread_local std::vector<Watch*> t_watches;
thread_local int t_held = 0;

void interrupt_check_hook(lua_State* L, lua_Debug*) {
  if (t_held > 0 || t_watches.empty() || t_watches.back()->L != L) return;
  Watch& w = *t_watches.back();
  auto now = std::chrono::steady_clock::now();
  if (now - w.last_check < kCheckEvery) return;
  w.last_check = now;
  if (!w.listener->interrupt_requested(w.id)) return;
  luaL_where(L, 0);  // in a hook, level 0 is the Lua function that was running
  lua_pushstring(L, w.listener->peer_gone(w.id) ? "the attached prompt went away"
                                                : "interrupted at the prompt (Ctrl-C)");
  lua_concat(L, 2);
  lua_error(L);
}

// Installs the check for the life of the object; puts back whatever hook was set before (an
// outer run_interruptible's, a debugger's), also when fn raised.
class WatchScope {
 public:
  WatchScope(lua_State* L, Watch* w)
      : L_(L), hook_(lua_gethook(L)), mask_(lua_gethookmask(L)), count_(lua_gethookcount(L)) {
    t_watches.push_back(w);
    lua_sethook(L, interrupt_check_hook, LUA_MASKCOUNT, kHookCount);
  }
  ~WatchScope() {
    t_watches.pop_back();
    lua_sethook(L_, hook_, mask_, count_);
  }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  lua_State* L_;
  lua_Hook hook_;
  int mask_, count_;
};

// bv.attach.run_interruptible(listener, id, fn, ...) --> true, fn's results | false, message
int attach_run_interruptible(lua_State* L) {
  const char* fn = "bv.attach.run_interruptible";
  attach::Listener& l = check_listener(L, 1, fn);
  int id = check_id(L, 2, fn);
  if (lua_type(L, 3) != LUA_TFUNCTION) {
    raise(L, str(fn, ": argument #3 (fn) must be a function, got a ", luaL_typename(L, 3)));
  }
  Watch w{L, &l, id, std::chrono::steady_clock::now()};
  int status;
  {
    WatchScope scope(L, &w);
    status = lua_pcall(L, lua_gettop(L) - 3, LUA_MULTRET, 0);
  }
  lua_pushboolean(L, status == LUA_OK);
  lua_replace(L, 2);  // [listener, ok, results or message]
  return lua_gettop(L) - 1;
}

// bv.attach.hold(fn, ...) --> fn(...), with no interrupt check until it returns or raises
int attach_hold(lua_State* L) {
  if (lua_type(L, 1) != LUA_TFUNCTION) {
    raise(L,
          str("bv.attach.hold: argument #1 (fn) must be a function, got a ", luaL_typename(L, 1)));
  }
  struct Held {
    Held() { ++t_held; }
    ~Held() { --t_held; }  // a Lua error is a C++ exception here: this runs on errors too
  } held;
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

}  // namespace

// The connection of a bv.attach client at `arg`, for bv._repl.remote_loop (repl.cpp).
attach::Connection& check_attach_client(lua_State* L, int arg, const char* fn) {
  return check_client_at(L, arg, fn);
}

// Adds bv.attach to the `bv` table on top of the stack.
void open_attach(lua_State* L) {
  static const luaL_Reg listener_methods[] = {
      BV_FN("pending", listener_pending),
      BV_FN("poll", listener_poll),
      BV_FN("send", listener_send),
      BV_FN("drop", listener_drop),
      BV_FN("path", listener_path),
      BV_FN("close", listener_close),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kListenerMeta);
  luaL_newlib(L, listener_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, listener_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, guarded<listener_close>);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, guarded<listener_tostring>);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  static const luaL_Reg client_methods[] = {
      BV_FN("send", client_send),
      BV_FN("recv", client_recv),
      BV_FN("close", client_close),
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kClientMeta);
  luaL_newlib(L, client_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, client_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, guarded<client_close>);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);

  static const luaL_Reg functions[] = {
      BV_FN("listen", attach_listen),
      BV_FN("connect", attach_connect),
      BV_FN("run_interruptible", attach_run_interruptible),
      BV_FN("hold", attach_hold),
      {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  lua_setfield(L, -2, "attach");
}

}  // namespace bv::lua
