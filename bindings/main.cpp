// bvlua-core: the program behind `bvlua` (bindings/launcher.cpp answers --version and --help
// without loading libtorch and execs this for everything else). Parses the global flags and the
// subcommand, makes a Lua state and hands over to Lua (scripts, `bv.commands.train`) or to the
// prompt.
//   exit codes: 0 ok, 1 a Lua error (message and traceback on stderr), 2 a usage error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "core/signals.h"
#include "device/machine.h"
#include "distributed/launch.h"
#include "lua_util.h"
#include "repl.h"
#include "state.h"

namespace {

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "bvlua: %s\n%s", msg.c_str(), bv::kUsage);
  return 2;
}

// Prints a Lua error (already carrying its traceback) and returns exit code 1.
int report_lua_error(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  std::fprintf(stderr, "bvlua: %s\n", msg ? msg : "(error object is not a string)");
  return 1;
}

// The `arg` table as lua.c builds it: arg[0] is the script, arg[1..] its arguments, and the
// interpreter's own words at negative indices.
void set_arg_table(lua_State* L, const std::vector<std::string>& argv, int script_index) {
  lua_createtable(L, static_cast<int>(argv.size()), script_index + 1);
  for (int i = 0; i < static_cast<int>(argv.size()); ++i) {
    lua_pushstring(L, argv[i].c_str());
    lua_rawseti(L, -2, i - script_index);
  }
  lua_setglobal(L, "arg");
}

int run_script(lua_State* L, const std::vector<std::string>& argv, int script_index) {
  set_arg_table(L, argv, script_index);
  const std::string& path = argv[script_index];
  if (luaL_loadfilex(L, path.c_str(), "t") != LUA_OK) return report_lua_error(L);
  int nargs = 0;
  for (size_t i = script_index + 1; i < argv.size(); ++i, ++nargs)
    lua_pushstring(L, argv[i].c_str());
  if (bv::lua::pcall_traceback(L, nargs, 0) != LUA_OK) return report_lua_error(L);
  return 0;
}

int run_chunk(lua_State* L, const std::string& code) {
  if (luaL_loadbufferx(L, code.data(), code.size(), "=(command line)", "t") != LUA_OK) {
    return report_lua_error(L);
  }
  if (bv::lua::pcall_traceback(L, 0, 0) != LUA_OK) return report_lua_error(L);
  return 0;
}

// Whether a chunk's source ("@path") is one of bvlua's own library files.
bool is_bvlua_lib(const char* source) {
  return source != nullptr && source[0] == '@' && std::strstr(source, "/lib/bv/") != nullptr;
}

// The message handler of the commands (train, runs, ...): the message without the location of
// bvlua's own library file that raised it, then the user's own file:line nearest to the error
// (a config's inline pp op, a trainer file), without the traceback through bvlua's library;
// BV_TRACEBACK=1 gives the whole traceback.
int user_error_handler(lua_State* L) {
  const char* env = std::getenv("BV_TRACEBACK");
  if (env != nullptr && std::strcmp(env, "0") != 0 && env[0] != '\0') {
    return bv::lua::traceback_handler(L);
  }
  const char* raw = lua_tostring(L, 1);
  if (raw == nullptr) return bv::lua::traceback_handler(L);
  std::string msg = raw;
  // "/x/lib/bv/evaluators/init.lua:48: message" -> "message".
  size_t lua_ext = msg.find(".lua:");
  if (lua_ext != std::string::npos && msg.find("/lib/bv/") < lua_ext && msg.find(' ') > lua_ext) {
    size_t colon = msg.find(": ", lua_ext + 5);
    if (colon != std::string::npos && msg.find_first_not_of("0123456789", lua_ext + 5) == colon) {
      msg = msg.substr(colon + 2);
    }
  }
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); ++level) {
    lua_getinfo(L, "Sl", &ar);
    if (ar.currentline <= 0 || ar.source[0] != '@' || is_bvlua_lib(ar.source)) continue;
    std::string where = std::string(ar.source + 1) + ":" + std::to_string(ar.currentline);
    if (msg.find(where) == std::string::npos) msg += "\n  in " + where;
    break;
  }
  msg += "\n  (BV_TRACEBACK=1 shows where in bvlua)";
  lua_pushstring(L, msg.c_str());
  return 1;
}

int pcall_user(lua_State* L, int nargs, int nresults) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, user_error_handler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nresults, base);
  lua_remove(L, base);
  return status;
}

// Calls require(module).main(args) and returns its integer result as the exit code.
int run_lua_command(lua_State* L, const char* module, const std::vector<std::string>& args) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  if (bv::lua::pcall_traceback(L, 1, 1) != LUA_OK) return report_lua_error(L);
  lua_getfield(L, -1, "main");
  lua_createtable(L, static_cast<int>(args.size()), 0);
  for (size_t i = 0; i < args.size(); ++i) {
    lua_pushstring(L, args[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  if (pcall_user(L, 1, 1) != LUA_OK) return report_lua_error(L);
  return lua_isinteger(L, -1) ? static_cast<int>(lua_tointeger(L, -1)) : 0;
}

const char* kLaunchUsage =
    "usage: bvlua launch --nproc N [--port P] [--grace S] [--] COMMAND [ARGS...]\n\n"
    "Starts N copies of `bvlua COMMAND ARGS...` on this machine as ranks 0..N-1 of one process\n"
    "group (torchrun's variables: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1,\n"
    "MASTER_PORT), so that `bv.dist.init{}` in them joins. Rank 0's output passes through; the\n"
    "others' lines start with \"[rank N] \". When a rank fails, the others get SIGTERM and, S\n"
    "seconds later (--grace, default 30), SIGKILL. --port: the store's port (default: a free\n"
    "one).\n"
    "Exit code: 0 when every rank succeeded, else the first failing rank's (128+signal if killed).";

// `bvlua launch ...`: runs in C++ without a Lua state. Returns the exit code.
int run_launch(const std::vector<std::string>& rest, const std::string& threads_flag) {
  int nproc = 0, port = 0;
  double grace = 30;
  size_t i = 0;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= rest.size()) throw bv::Error("launch: " + flag + " needs a value");
    return rest[++i];
  };
  auto to_int = [](const std::string& flag, const std::string& text, int lo, int hi) {
    char* end = nullptr;
    long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < lo || v > hi) {
      throw bv::Error(
          bv::str("launch: ", flag, " needs an integer in [", lo, ", ", hi, "], got '", text, "'"));
    }
    return static_cast<int>(v);
  };
  for (; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    if (a == "--nproc") {
      nproc = to_int(a, value(a), 1, 1024);
    } else if (a == "--port") {
      port = to_int(a, value(a), 0, 65535);
    } else if (a == "--grace") {
      std::string text = value(a);
      char* end = nullptr;
      grace = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(grace >= 0)) {
        throw bv::Error("launch: --grace needs a number of seconds >= 0, got '" + text + "'");
      }
    } else if (a == "--") {
      ++i;
      break;
    } else if (!a.empty() && a[0] == '-') {
      throw bv::Error("launch: unknown option '" + a + "'");
    } else {
      break;
    }
  }
  if (nproc == 0) throw bv::Error("launch: --nproc N is required");
  if (i >= rest.size()) throw bv::Error("launch: missing the bvlua COMMAND to run");
  std::vector<std::string> argv{bv::current_executable()};
  if (!threads_flag.empty()) argv.insert(argv.end(), {"--threads", threads_flag});
  argv.insert(argv.end(), rest.begin() + static_cast<long>(i), rest.end());
  try {
    return bv::launch_local(argv, nproc, port, grace);
  } catch (const std::exception& e) {  // not a usage error: report it as a failure
    std::fprintf(stderr, "bvlua: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  int threads = bv::cpu_cores();
  std::string threads_flag;  // --threads as given, passed on to `launch`'s ranks
  if (const char* env = std::getenv("BV_THREADS")) {
    if (!bv::parse_threads(env, &threads))
      return usage_error(std::string("bad BV_THREADS='") + env + "'");
  }

  // Global flags come before the command.
  size_t i = 1;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(bv::kUsage, stdout);
      return 0;
    } else if (a == "--version") {
      bv::print_version();
      return 0;
    } else if (a == "--threads" || a.rfind("--threads=", 0) == 0) {
      std::string value = a == "--threads" ? (i + 1 < args.size() ? args[++i] : "") : a.substr(10);
      if (!bv::parse_threads(value, &threads))
        return usage_error("--threads needs a positive integer, got '" + value + "'");
      threads_flag = value;
    } else if (!a.empty() && a[0] == '-' && a != "-e") {
      return usage_error("unknown option '" + a + "'");
    } else {
      break;
    }
  }
  if (i == args.size()) return usage_error("missing command");
  const std::string command = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
  // The commands bvlua implements take the global --threads among their own options too (the
  // arguments of `run` and `-e` belong to the script, launch's to the command it starts).
  if (command != "run" && command != "-e" && command != "launch") {
    for (size_t k = 0; k < rest.size();) {
      const std::string& a = rest[k];
      if (a != "--threads" && a.rfind("--threads=", 0) != 0) {
        ++k;
        continue;
      }
      bool separate = a == "--threads";
      std::string value = separate ? (k + 1 < rest.size() ? rest[k + 1] : "") : a.substr(10);
      if (!bv::parse_threads(value, &threads))
        return usage_error("--threads needs a positive integer, got '" + value + "'");
      threads_flag = value;
      rest.erase(rest.begin() + static_cast<long>(k),
                 rest.begin() + static_cast<long>(k + (separate && k + 1 < rest.size() ? 2 : 1)));
    }
  }
  bool wants_help = !rest.empty() && (rest[0] == "-h" || rest[0] == "--help");

  // The launcher held SIGTERM/SIGINT blocked across its exec (core/signals.h): `train` and
  // `sweep` turn them into stop requests from here on, a signal sent during start-up included;
  // every other command gets their default action back.
  bv::release_stop_signals(command == "train" || command == "sweep");
  if (command != "run" && command != "-e" && command != "train" && command != "repl" &&
      command != "runs" && command != "sweep" && command != "plot" && command != "mistakes" &&
      command != "attach" && command != "launch") {
    return usage_error("unknown command '" + command + "'");
  }
  if (command == "launch") {
    if (wants_help) {
      std::puts(kLaunchUsage);
      return 0;
    }
    try {
      return run_launch(rest, threads_flag);
    } catch (const std::exception& e) {
      return usage_error(e.what());
    }
  }
  if (command == "run" && wants_help) {
    std::puts(
        "usage: bvlua run SCRIPT.lua [ARGS...]\n\nRuns a Lua script in a bvlua state (the `bv` "
        "library loaded); ARGS are in the global `arg` table and in `...`.");
    return 0;
  }
  if (command == "repl" && wants_help) {
    std::puts("usage: bvlua repl [WORKDIR | FILE.npz | FILE.safetensors | WORKDIR/ckpt-N]\n\n"
              "An interactive Lua prompt with the `bv` library loaded. An expression prints its "
              "value; a\ntrailing ';' keeps it quiet; Tab completes; `?name` shows a doc; `?` "
              "explains the rest.\nCtrl-C stops a command, Ctrl-D exits. With a WORKDIR: `run`, "
              "`config` and `ckpt` (its\nlatest checkpoint); with a checkpoint file: `ckpt`, "
              "opened lazily (`ckpt:tree()`).");
    return 0;
  }
  if (command == "run" && rest.empty()) return usage_error("run: missing SCRIPT.lua");
  if (command == "-e" && rest.empty()) return usage_error("-e: missing CODE");

  lua_State* L = nullptr;
  try {
    bv::set_threads(threads);
    L = bv::lua::new_state(bv::lua::find_lib_dir(argv[0]));
    bv::lua::preload_repl(L);  // `bvlua repl`, and `bvlua train --debug` on an error
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bvlua: %s\n", e.what());
    return 1;
  }

  int code = 0;
  if (command == "run") {
    code = run_script(L, args, static_cast<int>(i + 1));
  } else if (command == "-e") {
    code = run_chunk(L, rest[0]);
  } else if (command == "train") {
    code = run_lua_command(L, "bv.commands.train", rest);
  } else if (command == "runs") {
    code = run_lua_command(L, "bv.commands.runs", rest);
  } else if (command == "sweep") {
    code = run_lua_command(L, "bv.commands.sweep", rest);
  } else if (command == "plot") {
    code = run_lua_command(L, "bv.commands.plot", rest);
  } else if (command == "mistakes") {
    code = run_lua_command(L, "bv.commands.mistakes", rest);
  } else if (command == "attach") {
    code = run_lua_command(L, "bv.commands.attach", rest);
  } else {
    code = run_lua_command(L, "bv.repl", rest);
  }
  lua_close(L);
  return code;
}
