#include "repl.h"

#include <dirent.h>
#include <editline/readline.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attach/socket.h"
#include "core/signals.h"
#include "lua_util.h"

namespace bv::lua {

attach::Connection& check_attach_client(lua_State* L, int arg, const char* fn);  // attach.cpp

namespace {

// ---------------------------------------------------------------------------------------------
// Ctrl-C. While a command runs, SIGINT sets a debug hook (lua.c's way: lua_sethook is safe to
// call from a signal handler) that raises "interrupted" at the next Lua instruction, so a
// runaway loop ends with an ordinary error and the prompt comes back. Native code cannot be
// stopped in the middle; a second Ctrl-C before the hook has fired kills the process as usual.
// At the prompt, SIGINT only sets a flag that the line reader turns into "discard this line".

std::atomic<lua_State*> g_running{nullptr};
volatile sig_atomic_t g_hook_pending = 0;
volatile sig_atomic_t g_prompt_interrupt = 0;

void interrupt_hook(lua_State* L, lua_Debug*) {
  lua_sethook(L, nullptr, 0, 0);
  g_hook_pending = 0;
  luaL_error(L, "interrupted (Ctrl-C)");
}

extern "C" void on_sigint(int) {
  lua_State* L = g_running.load();
  if (L == nullptr) {
    g_prompt_interrupt = 1;
    return;
  }
  if (g_hook_pending) {
    ::signal(SIGINT, SIG_DFL);
    ::raise(SIGINT);
    return;
  }
  g_hook_pending = 1;
  lua_sethook(L, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

// Our handler, without SA_RESTART so a blocked read() returns at once with EINTR. Installed
// again before every line: a command may have installed its own (a trainer's stop handler).
void install_sigint(struct sigaction* previous) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, previous);
}

// Runs the function below `nargs` arguments like pcall_traceback, with Ctrl-C armed.
int call_interruptible(lua_State* L, int nargs, int nresults) {
  clear_stop_request();  // a trainer run by an earlier command and stopped: this one starts anew
  g_hook_pending = 0;
  g_running.store(L);
  int status = pcall_traceback(L, nargs, nresults);
  g_running.store(nullptr);
  lua_sethook(L, nullptr, 0, 0);
  g_hook_pending = 0;
  return status;
}

// ---------------------------------------------------------------------------------------------
// The Lua half: functions of the bv.repl module, found through a registry reference.

int g_module_ref = LUA_NOREF;
lua_State* g_L = nullptr;  // for libedit's completion callback, which has no user pointer

// Pushes bv.repl[name].
void push_repl_fn(lua_State* L, const char* name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, g_module_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

// Errors as the user should read them: the message, then the traceback down to the typed
// chunk ("stdin"), without the frames of the REPL itself; no traceback when the error is in the
// chunk itself.
std::string trim_traceback(const std::string& text) {
  const std::string mark = "\nstack traceback:\n";
  size_t at = text.find(mark);
  if (at == std::string::npos) return text;
  std::string message = text.substr(0, at), frames;
  size_t pos = at + mark.size();
  int kept = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string frame = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    bool chunk = frame.find("stdin:") != std::string::npos &&
                 frame.find("in main chunk") != std::string::npos;
    if (chunk) break;
    if (frame.find("[C]: in ?") != std::string::npos) continue;
    frames += frame + "\n";
    ++kept;
  }
  if (kept == 0) return message;
  return message + mark + frames.substr(0, frames.size() - 1);
}

void print_error(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  std::string text = msg ? msg : "(error object is not a string)";
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", trim_traceback(text).c_str());
  std::fflush(stderr);
  lua_pop(L, 1);
}

// ---------------------------------------------------------------------------------------------
// Line sources: libedit on a terminal, plain reads otherwise (pipes, CI).

enum class ReadResult { kLine, kEof, kInterrupted };

class LineSource {
 public:
  virtual ~LineSource() = default;
  virtual ReadResult read(const char* prompt, std::string* line) = 0;
  virtual void remember(const std::string& line) {}
};

class PlainSource : public LineSource {
 public:
  ReadResult read(const char* prompt, std::string* line) override {
    g_prompt_interrupt = 0;
    if (std::getline(std::cin, *line)) return ReadResult::kLine;
    if (g_prompt_interrupt) {
      std::cin.clear();
      return ReadResult::kInterrupted;
    }
    return ReadResult::kEof;
  }
};

// libedit's characters: Ctrl-C arrives either as SIGINT (the terminal's ISIG) or as the byte 3;
// both end the line at once, and read() reports it as an interrupted line.
int edit_getc(FILE* in) {
  while (true) {
    unsigned char c = 0;
    ssize_t n = ::read(fileno(in), &c, 1);
    if (n == 1 && c == 3) {
      g_prompt_interrupt = 1;
      return '\n';
    }
    if (n == 1) return c;
    if (n < 0 && errno == EINTR) {
      if (g_prompt_interrupt) return '\n';
      continue;
    }
    return EOF;
  }
}

std::vector<std::string> g_matches;

char* next_match(const char* /*text*/, int state) {
  static size_t i = 0;
  if (state == 0) i = 0;
  return i < g_matches.size() ? ::strdup(g_matches[i++].c_str()) : nullptr;
}

// Asks bv.repl.complete(line before the cursor) -> start (1-based), candidates that replace
// line[start..]. libedit replaces from its own word start (`start`, split at the break
// characters below), so each candidate is cut or extended to begin there.
char** complete(const char* text, int start, int end) {
  rl_attempted_completion_over = 1;       // never fall back to libedit's file names
  rl_completion_append_character = '\0';  // no space after `bv.ckpt` or a directory
  lua_State* L = g_L;
  if (L == nullptr) return nullptr;  // the attached prompt: the names live in the run
  std::string before(rl_line_buffer, static_cast<size_t>(std::max(end, 0)));
  int top = lua_gettop(L);
  push_repl_fn(L, "complete");
  lua_pushlstring(L, before.data(), before.size());
  g_matches.clear();
  if (lua_pcall(L, 1, 2, 0) == LUA_OK && lua_isinteger(L, -2) && lua_istable(L, -1)) {
    size_t from = static_cast<size_t>(std::max<lua_Integer>(lua_tointeger(L, -2) - 1, 0));
    size_t word = static_cast<size_t>(start);
    lua_Integer n = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_rawgeti(L, -1, i);
      if (const char* c = lua_tostring(L, -1)) {
        std::string cand = c;
        if (from <= word) {
          std::string skip = before.substr(from, word - from);
          if (cand.compare(0, skip.size(), skip) == 0) {
            g_matches.push_back(cand.substr(skip.size()));
          }
        } else {
          g_matches.push_back(before.substr(word, from - word) + cand);
        }
      }
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  if (g_matches.empty()) return nullptr;
  return rl_completion_matches(text, next_match);
}

class EditSource : public LineSource {
 public:
  explicit EditSource(std::string history) : history_(std::move(history)) {
    rl_readline_name = "bvlua";
    rl_catch_signals = 0;  // Ctrl-C is ours (see edit_getc)
    rl_getc_function = edit_getc;
    // A word is what can be a Lua name path (a.b:c); inside strings bv.repl finds the start.
    rl_basic_word_break_characters = " \t\n\"'`@$><=;|&{([,+-*/%^~#)}]!?";
    rl_attempted_completion_function = complete;
    using_history();
    stifle_history(2000);
    if (!history_.empty()) read_history(history_.c_str());
  }

  ReadResult read(const char* prompt, std::string* line) override {
    g_prompt_interrupt = 0;
    rl_completion_append_character = '\0';
    char* text = readline(prompt);
    if (g_prompt_interrupt) {
      std::free(text);
      std::fflush(stdout);
      return ReadResult::kInterrupted;
    }
    if (text == nullptr) return ReadResult::kEof;
    *line = text;
    std::free(text);
    return ReadResult::kLine;
  }

  void remember(const std::string& line) override {
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    add_history(line.c_str());
    if (!history_.empty()) write_history(history_.c_str());
  }

 private:
  std::string history_;
};

// ---------------------------------------------------------------------------------------------
// Evaluating a chunk.

// A syntax error whose message ends in "<eof>" means "this chunk is not finished yet".
bool is_incomplete(lua_State* L, int status) {
  if (status != LUA_ERRSYNTAX) return false;
  size_t n = 0;
  const char* msg = lua_tolstring(L, -1, &n);
  const char* mark = "<eof>";
  size_t m = std::strlen(mark);
  return msg && n >= m && std::strcmp(msg + n - m, mark) == 0;
}

// Compiles `code`, first as `return <code>` so that expressions print their value (lua.c's
// trick), then as statements followed by an expression. A trailing ';' marks a command whose
// value stays unprinted.
int compile(lua_State* L, const std::string& code, bool* expression, bool* quiet) {
  std::string body = code;
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.pop_back();
  *quiet = !body.empty() && body.back() == ';';
  if (*quiet) body.pop_back();  // `return x;;` would not compile
  std::string ret = "return " + body + ";";
  if (luaL_loadbuffer(L, ret.data(), ret.size(), "=stdin") == LUA_OK) {
    *expression = true;
    return LUA_OK;
  }
  lua_pop(L, 1);
  // Statements then an expression (`x = f(); x`, as Python's prompt takes it): the value of the
  // last part after a ';' or a line break that compiles as `return <part>` after the rest.
  int tries = 0;
  for (size_t at = body.find_last_of(";\n"); at != std::string::npos && tries < 64;
       at = at == 0 ? std::string::npos : body.find_last_of(";\n", at - 1), ++tries) {
    std::string tail = body.substr(at + 1);
    if (tail.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    // The statements must be whole on their own: `for i = 1, 2 do <split> f(i) end` is not.
    std::string head = body.substr(0, at + 1);
    if (luaL_loadbuffer(L, head.data(), head.size(), "=stdin") != LUA_OK) {
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    std::string split = head + "\nreturn " + tail + ";";
    if (luaL_loadbuffer(L, split.data(), split.size(), "=stdin") == LUA_OK) {
      *expression = true;
      return LUA_OK;
    }
    lua_pop(L, 1);
  }
  *expression = false;
  return luaL_loadbuffer(L, code.data(), code.size(), "=stdin");
}

int terminal_columns() {
  struct winsize ws {};
  if (::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// A command that took a while gets its time, right-aligned and dim, as th showed it.
void print_elapsed(double seconds) {
  if (seconds < 1.0 || !::isatty(1)) return;
  char text[64];
  if (seconds < 60) {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  } else {
    std::snprintf(text, sizeof text, "%dm %02ds", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  }
  int pad = std::max(0, terminal_columns() - static_cast<int>(std::strlen(text)) - 1);
  std::printf("%*s\x1b[2m%s\x1b[0m\n", pad, "", text);
}

// Runs the compiled chunk on top of the stack and shows its values through bv.repl.show_results.
void run_chunk(lua_State* L, bool print_values) {
  auto started = std::chrono::steady_clock::now();
  int base = lua_gettop(L) - 1;
  if (call_interruptible(L, 0, LUA_MULTRET) != LUA_OK) {
    print_error(L);
  } else {
    int n = lua_gettop(L) - base;
    if (print_values && n > 0) {
      push_repl_fn(L, "show_results");
      lua_insert(L, base + 1);
      if (call_interruptible(L, n, 0) != LUA_OK) print_error(L);
    }
  }
  lua_settop(L, base);
  std::fflush(stdout);
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  print_elapsed(took.count());
  std::fflush(stdout);
}

// `?name` and other lines bv.repl.special handles itself; true when it did.
bool run_special(lua_State* L, const std::string& line) {
  int top = lua_gettop(L);
  push_repl_fn(L, "special");
  lua_pushlstring(L, line.data(), line.size());
  bool handled = false;
  if (call_interruptible(L, 1, 1) != LUA_OK) {
    print_error(L);
    handled = true;
  } else {
    handled = lua_toboolean(L, -1);
  }
  lua_settop(L, top);
  std::fflush(stdout);
  return handled;
}

// bv._repl.loop([{history = path | false}])
int repl_loop(lua_State* L) {
  std::string history;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "history");
    if (lua_type(L, -1) == LUA_TSTRING) history = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  lua_getglobal(L, "require");
  lua_pushliteral(L, "bv.repl");
  lua_call(L, 1, 1);
  int previous_ref = g_module_ref;
  lua_State* previous_L = g_L;
  g_module_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  g_L = L;

  bool tty = ::isatty(0);
  std::unique_ptr<LineSource> source;
  if (tty) source = std::make_unique<EditSource>(history);
  else source = std::make_unique<PlainSource>();

  struct sigaction before {};
  install_sigint(&before);
  std::string chunk;
  while (true) {
    install_sigint(nullptr);
    std::string line;
    ReadResult r = source->read(chunk.empty() ? "> " : ">> ", &line);
    if (r == ReadResult::kEof) break;
    if (r == ReadResult::kInterrupted) {
      chunk.clear();
      continue;
    }
    source->remember(line);
    if (chunk.empty()) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (run_special(L, line)) continue;
    }
    chunk = chunk.empty() ? line : chunk + "\n" + line;
    bool expression = false, quiet = false;
    int status = compile(L, chunk, &expression, &quiet);
    if (is_incomplete(L, status)) {
      lua_pop(L, 1);
      continue;
    }
    chunk.clear();
    if (status != LUA_OK) {
      print_error(L);
      continue;
    }
    run_chunk(L, expression && !quiet);
  }
  if (tty) std::fputs("\n", stdout);
  std::fflush(stdout);
  sigaction(SIGINT, &before, nullptr);
  luaL_unref(L, LUA_REGISTRYINDEX, g_module_ref);
  g_module_ref = previous_ref;
  g_L = previous_L;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The prompt of `bvlua attach`: lines are read and edited here and run inside the trainer
// (lib/bv/attach.lua answers). Sent: 'C' a chunk, 'I' Ctrl-C while it runs, 'Q' detaching.
// Received: 'O' and 'E' output, 'N' a notice, 'D' the chunk is done (its seconds), 'X' the run
// ends the session (why).

const char* const kRunClosed = "bvlua attach: the run closed the connection (it ended or stopped)";

// Whether `chunk` needs more lines, as the local prompt decides it; nothing runs here.
bool chunk_incomplete(lua_State* L, const std::string& chunk) {
  int top = lua_gettop(L);
  bool expression = false, quiet = false;
  bool incomplete = is_incomplete(L, compile(L, chunk, &expression, &quiet));
  lua_settop(L, top);
  return incomplete;
}

void write_to(FILE* out, const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

// Shows the frames that answer a chunk until its 'D'. Ctrl-C meanwhile (g_prompt_interrupt, which
// the caller cleared before sending the chunk) sends 'I'; the run then answers "interrupted" and
// 'D'. False when the session ended: *why is then the 'X' frame's text, or "" when the
// connection just closed.
bool await_reply(attach::Connection& conn, std::string* why) {
  bool tty = ::isatty(1);
  // A command still running after 2 s with nothing shown yet: say that the run waits for it.
  auto started = std::chrono::steady_clock::now();
  bool heard = false;
  std::optional<std::chrono::steady_clock::time_point> interrupted_at;
  while (true) {
    if (!heard && std::chrono::steady_clock::now() - started > std::chrono::seconds(2)) {
      heard = true;
      const char* text =
          "(waiting: a command starts at the end of the run's step, and the run waits while it "
          "runs; Ctrl-C interrupts it)";
      write_to(stdout,
               tty ? std::string("\x1b[2m") + text + "\x1b[0m\n" : std::string(text) + "\n");
    }
    if (g_prompt_interrupt) {
      g_prompt_interrupt = 0;
      // A second Ctrl-C within 2 s: the command did not stop (native code cannot be cut), so
      // the prompt leaves it running in the run and detaches.
      auto now = std::chrono::steady_clock::now();
      if (interrupted_at && now - *interrupted_at < std::chrono::seconds(2)) {
        std::fflush(stdout);
        std::fputs("bvlua attach: second Ctrl-C: detached, leaving the command to finish in the "
                   "run\n",
                   stderr);
        std::fflush(stderr);
        conn.close();
        *why = "";
        return false;
      }
      interrupted_at = now;
      conn.send('I', "");  // a run that is gone shows as the connection closing, below
    }
    std::optional<attach::Frame> f = conn.next_frame();
    if (!f) {
      // Short waits: SIGINT (no SA_RESTART) ends poll() early, and the flag is seen at once.
      if (conn.fill(0.2) == attach::ReadResult::kClosed && !conn.has_frame()) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", kRunClosed);
        std::fflush(stderr);
        conn.close();
        *why = "";
        return false;
      }
      continue;
    }
    const std::string& text = f->payload;
    heard = true;
    switch (f->kind) {
      case 'O': write_to(stdout, text); break;
      case 'E':
        std::fflush(stdout);
        write_to(stderr, text);
        break;
      case 'N': write_to(stdout, tty ? "\x1b[2m" + text + "\x1b[0m\n" : text + "\n"); break;
      case 'D':
        std::fflush(stdout);
        if (!text.empty()) print_elapsed(std::strtod(text.c_str(), nullptr));
        std::fflush(stdout);
        return true;
      case 'X':
        std::fflush(stdout);
        write_to(stderr, text.empty() || text.back() == '\n' ? text : text + "\n");
        conn.close();
        *why = text;
        return false;
      default:
        std::fflush(stdout);
        std::fprintf(stderr, "bvlua attach: ignored a frame of unknown kind 0x%02x from the run\n",
                     static_cast<unsigned char>(f->kind));
        std::fflush(stderr);
    }
  }
}

// What the run sent while the prompt waited for a line (a notice, or the end: the run stopped or
// finished), shown before the next line goes out. False when the run is gone (`why`: what it
// said). The prompt does not watch the socket while it reads a line, so this is when it learns.
bool show_unsolicited(attach::Connection& conn, std::string* why) {
  while (true) {
    std::optional<attach::Frame> f = conn.next_frame();
    if (!f) {
      attach::ReadResult r = conn.fill(0);
      if (r == attach::ReadResult::kData) continue;
      if (r == attach::ReadResult::kClosed && !conn.has_frame()) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", kRunClosed);
        std::fflush(stderr);
        conn.close();
        *why = "";
        return false;
      }
      return true;
    }
    std::fflush(stdout);
    if (f->kind == 'X') {
      const std::string& text = f->payload;
      write_to(stderr, text.empty() || text.back() == '\n' ? text : text + "\n");
      conn.close();
      *why = text;
      return false;
    }
    if (f->kind == 'N') write_to(stderr, f->payload + "\n");
  }
}

// What remote_loop changes in the process, put back however it returns.
class RemoteScope {
 public:
  RemoteScope() : module_ref_(g_module_ref), L_(g_L), running_(g_running.exchange(nullptr)) {
    // Ctrl-C is a flag for await_reply, even when a local command called this loop.
    install_sigint(&sigint_);
    g_module_ref = LUA_NOREF;  // no local completion: see complete()
    g_L = nullptr;
  }
  ~RemoteScope() {
    sigaction(SIGINT, &sigint_, nullptr);
    g_module_ref = module_ref_;
    g_L = L_;
    g_running.store(running_);
  }
  RemoteScope(const RemoteScope&) = delete;
  RemoteScope& operator=(const RemoteScope&) = delete;

 private:
  struct sigaction sigint_ {};
  int module_ref_;
  lua_State* L_;
  lua_State* running_;
};

// bv._repl.remote_loop(client, {history = path | false, prompt = "attach> "})
//   --> "detached" (Ctrl-D or the end of input) | "closed", the run's message (if it gave one)
int repl_remote_loop(lua_State* L) {
  attach::Connection& conn = check_attach_client(L, 1, "bv._repl.remote_loop");
  check_option_keys(L, 2, "bv._repl.remote_loop", {"history", "prompt"});
  std::string history, prompt = "attach> ";
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "history");
    if (lua_type(L, -1) == LUA_TSTRING) history = lua_tostring(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "prompt");
    if (lua_type(L, -1) == LUA_TSTRING) prompt = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  // "attach> " continues as "attach>> ", as "> " does as ">> ".
  size_t mark = prompt.rfind('>');
  std::string more = mark == std::string::npos ? prompt
                                               : prompt.substr(0, mark) + ">" + prompt.substr(mark);
  bool tty = ::isatty(0);
  RemoteScope scope;
  std::unique_ptr<LineSource> source;
  if (tty) source = std::make_unique<EditSource>(history);
  else source = std::make_unique<PlainSource>();

  std::string chunk, why;
  bool detached = false;
  while (true) {
    std::string line;
    ReadResult r = source->read(chunk.empty() ? prompt.c_str() : more.c_str(), &line);
    if (!show_unsolicited(conn, &why)) break;
    if (r == ReadResult::kEof) {
      conn.send('Q', "");
      conn.close();
      detached = true;
      break;
    }
    // Ctrl-C at the prompt detaches, as Ctrl-D does (the run goes on); inside an unfinished
    // chunk it only drops the chunk. (While a command runs, it interrupts the command.)
    if (r == ReadResult::kInterrupted && !chunk.empty()) {
      chunk.clear();
      continue;
    }
    if (r == ReadResult::kInterrupted) {
      conn.send('Q', "");
      conn.close();
      detached = true;
      break;
    }
    source->remember(line);
    if (chunk.empty() && line.find_first_not_of(" \t\r") == std::string::npos) continue;
    chunk = chunk.empty() ? line : chunk + "\n" + line;
    // Only an unfinished chunk waits here; syntax errors and `?name` are the run's to answer.
    if (chunk_incomplete(L, chunk)) continue;
    std::string code;
    code.swap(chunk);
    // A send to a run that is gone fails; await_reply then reads what it said before going.
    g_prompt_interrupt = 0;  // before the send: a Ctrl-C right after it must count
    conn.send('C', code);
    if (!await_reply(conn, &why)) break;
  }
  if (tty && detached) std::fputs("\n", stdout);
  std::fflush(stdout);
  lua_pushstring(L, detached ? "detached" : "closed");
  if (detached || why.empty()) return 1;
  lua_pushlstring(L, why.data(), why.size());
  return 2;
}

// bv._repl.listdir(dir) -> sorted names, directories with a trailing "/"; nil, message on error.
int repl_listdir(lua_State* L) {
  std::string dir = luaL_checkstring(L, 1);
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (d == nullptr) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", dir.c_str(), std::strerror(errno));
    return 2;
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
      struct stat st;
      std::string full = (dir.empty() ? "." : dir) + "/" + name;
      is_dir = ::stat(full.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    names.push_back(is_dir ? name + "/" : name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  lua_createtable(L, static_cast<int>(names.size()), 0);
  for (size_t i = 0; i < names.size(); ++i) {
    lua_pushlstring(L, names[i].data(), names[i].size());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

int repl_isatty(lua_State* L) {
  lua_pushboolean(L, ::isatty(static_cast<int>(luaL_optinteger(L, 1, 1))));
  return 1;
}

int repl_columns(lua_State* L) {
  lua_pushinteger(L, terminal_columns());
  return 1;
}

int open_repl_module(lua_State* L) {
  static const luaL_Reg functions[] = {
      BV_FN("loop", repl_loop),       BV_FN("remote_loop", repl_remote_loop),
      BV_FN("listdir", repl_listdir), BV_FN("isatty", repl_isatty),
      BV_FN("columns", repl_columns), {nullptr, nullptr},
  };
  luaL_newlib(L, functions);
  return 1;
}

}  // namespace

void preload_repl(lua_State* L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_repl_module);
  lua_setfield(L, -2, "bv._repl");
  lua_pop(L, 2);
}

}  // namespace bv::lua
