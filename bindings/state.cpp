#include "state.h"

#include <ATen/Context.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ckpt.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/notes.h"
#include "core/quote.h"
#include "core/regex.h"
#include "core/signals.h"
#include "device/fake_device.h"
#include "device/machine.h"
#include "device/precision.h"
#include "image.h"
#include "lua_util.h"
#include "rng.h"
#include "tensor.h"

#ifndef BV_SOURCE_LIB_DIR
#define BV_SOURCE_LIB_DIR ""
#endif

namespace bv::lua {

void open_fs(lua_State* L);           // fs.cpp
void open_ops(lua_State* L);          // ops.cpp
void open_data(lua_State* L);         // data.cpp
void open_models(lua_State* L);       // models.cpp
void open_optim(lua_State* L);        // optim.cpp
void open_losses(lua_State* L);       // losses.cpp
void open_text(lua_State* L);         // text.cpp
void open_dist(lua_State* L);         // dist.cpp
void open_device_copy(lua_State* L);  // device_copy.cpp
void open_process(lua_State* L);      // process.cpp
void open_plot(lua_State* L);         // plot.cpp
void open_profiler(lua_State* L);     // profiler.cpp
void open_pp_state(lua_State* L);     // pp_state.cpp
void open_attach(lua_State* L);       // attach.cpp

namespace {

int bv_threads(lua_State* L) {
  if (!lua_isnoneornil(L, 1)) set_threads(static_cast<int>(check_int(L, 1)));
  lua_pushinteger(L, get_threads());
  return 1;
}

// bv.clock(): seconds on a monotonic clock, for timing (os.clock is CPU time of all threads).
int bv_clock(lua_State* L) {
  auto now = std::chrono::steady_clock::now().time_since_epoch();
  lua_pushnumber(L, std::chrono::duration<double>(now).count());
  return 1;
}

// bv.rematch(pattern, text): Python's re.match (a prefix) -> nil, or {[0] = the matched prefix,
// group 1, group 2, ...}.
int bv_rematch(lua_State* L) {
  std::vector<std::string> groups;
  if (!regex_match_prefix(luaL_checkstring(L, 1), luaL_checkstring(L, 2), &groups)) return 0;
  lua_createtable(L, static_cast<int>(groups.size()), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    lua_pushlstring(L, groups[i].data(), groups[i].size());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i));
  }
  return 1;
}

// bv.snippet(text [, max_bytes]): text as error messages quote it, at most a few hundred bytes
// with control bytes escaped (core/quote.h); every message that quotes input goes through it.
int bv_snippet(lua_State* L) {
  size_t n = 0;
  const char* s = luaL_checklstring(L, 1, &n);
  lua_Integer max = luaL_optinteger(L, 2, static_cast<lua_Integer>(kSnippetBytes));
  luaL_argcheck(L, max > 0, 2, "max_bytes must be positive");
  std::string out = snippet(std::string_view(s, n), static_cast<size_t>(max));
  lua_pushlstring(L, out.data(), out.size());
  return 1;
}

// bv.fullmatch(pattern, text): Python's re.fullmatch for config regexes.
int bv_fullmatch(lua_State* L) {
  lua_pushboolean(L, regex_fullmatch(luaL_checkstring(L, 1), luaL_checkstring(L, 2)));
  return 1;
}

// bv.handle_stop_signals(): from now on SIGTERM/SIGINT only set a flag that
// bv.stop_requested() reports (with the signal's name), so a trainer can save and exit. A
// request already made (`bvlua train` installs the handlers before Lua starts) is kept.
int bv_handle_stop_signals(lua_State* L) {
  install_stop_handlers();
  return 0;
}

// bv.stop_progress{announce = bool, step = N, saved = M}: what a SIGINT/SIGTERM tells the user
// at once (core/signals.h): whether to (the process at the terminal), the step under way, the
// last checkpoint's step (-1 or absent: none).
int bv_stop_progress(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lua_getfield(L, 1, "announce") != LUA_TNIL) stop_announcements(lua_toboolean(L, -1));
  lua_getfield(L, 1, "step");
  lua_getfield(L, 1, "saved");
  stop_progress(static_cast<long>(luaL_optinteger(L, -2, -1)),
                static_cast<long>(luaL_optinteger(L, -1, -1)));
  lua_pop(L, 3);
  return 0;
}

int bv_stop_requested(lua_State* L) {
  if (!stop_requested()) {
    lua_pushboolean(L, false);
    return 1;
  }
  lua_pushstring(L, stop_signal_name());
  return 1;
}

// bv.device(spec [, local_rank]): the device to train on ("cpu", "cuda:N") for a --device or
// config.device value ("auto", "cpu", "cuda", "cuda:N"); an error says why a GPU asked for is
// not there. local_rank defaults to $LOCAL_RANK's value (0 without it).
int bv_device(lua_State* L) {
  std::string spec = luaL_optstring(L, 1, "auto");
  int local_rank = 0;
  if (!lua_isnoneornil(L, 2)) {
    local_rank = static_cast<int>(check_int(L, 2));
  } else if (const char* env = std::getenv("LOCAL_RANK")) {
    local_rank = std::atoi(env);
  }
  lua_pushstring(L, resolve_device(spec, local_rank).c_str());
  return 1;
}

// bv.set_device(device): makes `device` (bv.device's answer) the process's current device, as
// a CUDA process must before its first allocation; nothing for "cpu".
int bv_set_device(lua_State* L) {
  set_current_device(luaL_checkstring(L, 1));
  return 0;
}

// bv.seed_device(device, seed): seeds `device`'s default generator, from which its random ops
// (dropout) draw when given none: CUDA's is its own, apart from the CPU's (the fake device's
// too). Trainers seed it at every step from (seed, rank, step), so that each rank draws its own
// numbers and a resumed run draws the same ones as an uninterrupted run, with no state to save.
int bv_seed_device(lua_State* L) {
  c10::Device device(luaL_checkstring(L, 1));
  auto seed = static_cast<uint64_t>(luaL_checkinteger(L, 2));
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  return 0;
}

// bv.memory([device]) -> {bytes_in_use =, peak_bytes_in_use =, bytes_reserved =,
// peak_bytes_reserved =}: the device's caching allocator, as JAX names it; {} for "cpu". The
// device defaults to the one `bvlua train` would pick (bv.device()).
int bv_memory(lua_State* L) {
  std::string device = lua_isnoneornil(L, 1) ? resolve_device("auto", 0)
                                             : std::string(luaL_checkstring(L, 1));
  c10::Device d(device);
  if (d.is_cuda()) {
    // CUDA's caching allocator is set up by CUDA's lazy init, which the first CUDA tensor
    // runs: asked before that (a log step ahead of any allocation, a REPL), it has no
    // devices yet. Initialising here makes no context and allocates nothing.
    BV_CHECK(cuda_available(), "bv.memory('", device, "'): no CUDA GPU is available here");
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    int count = cuda_device_count();
    BV_CHECK(d.index() < count, "bv.memory('", device, "'): only ", count,
             " CUDA device(s) are visible");
  }
  auto stats = device_memory_stats(device);
  lua_createtable(L, 0, static_cast<int>(stats.size()));
  for (const auto& [name, bytes] : stats) {
    lua_pushinteger(L, bytes);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

// bv.usage() -> {user_s, system_s, minor_faults, major_faults, max_rss_bytes, malloc}: what
// this process has cost so far (device/machine.h process_usage) and the malloc it runs on.
int bv_usage(lua_State* L) {
  ProcessUsage u = process_usage();
  lua_createtable(L, 0, 6);
  lua_pushnumber(L, u.user_s);
  lua_setfield(L, -2, "user_s");
  lua_pushnumber(L, u.system_s);
  lua_setfield(L, -2, "system_s");
  lua_pushinteger(L, u.minor_faults);
  lua_setfield(L, -2, "minor_faults");
  lua_pushinteger(L, u.major_faults);
  lua_setfield(L, -2, "major_faults");
  lua_pushinteger(L, u.max_rss_bytes);
  lua_setfield(L, -2, "max_rss_bytes");
  lua_pushstring(L, malloc_name().c_str());
  lua_setfield(L, -2, "malloc");
  return 1;
}

// bv.set_matmul_precision(name): config.matmul_precision, JAX's "default", "high" or "highest"
// (device/precision.h): whether CUDA's float32 matmuls and convolutions may use TF32.
int bv_set_matmul_precision(lua_State* L) {
  set_matmul_precision(luaL_checkstring(L, 1));
  return 0;
}

// bv.set_deterministic(on): config.deterministic (device/precision.h); bv.deterministic() -> bool.
int bv_set_deterministic(lua_State* L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  set_deterministic(lua_toboolean(L, 1));
  return 0;
}

int bv_deterministic(lua_State* L) {
  lua_pushboolean(L, deterministic());
  return 1;
}

// bv.tf32() -> {cublas = bool, cudnn = bool}: libtorch's TF32 flags as they are now.
int bv_tf32(lua_State* L) {
  Tf32Flags f = tf32_flags();
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, f.cublas);
  lua_setfield(L, -2, "cublas");
  lua_pushboolean(L, f.cudnn);
  lua_setfield(L, -2, "cudnn");
  return 1;
}

// bv._take_notes() -> {line, ...} or nil: the notes C++ posted since the last call
// (core/notes.h), for bv.log; lib/bv/models.lua prints them after each call into a model.
int bv_take_notes(lua_State* L) {
  std::vector<std::string> notes = take_notes();
  if (notes.empty()) return 0;
  lua_createtable(L, static_cast<int>(notes.size()), 0);
  for (size_t i = 0; i < notes.size(); ++i) {
    lua_pushstring(L, notes[i].c_str());
    lua_rawseti(L, -2, static_cast<lua_Integer>(i + 1));
  }
  return 1;
}

// bv._fake_device() -> "fake:0": the test device (device/fake_device.h), for tests; users reach
// it through bv.device("fake") with BV_TEST_DEVICE=1.
int bv_fake_device(lua_State* L) {
  lua_pushstring(L, enable_fake_device().str().c_str());
  return 1;
}

// bv._test_device() -> the device the tests' device cases run on: the GPU when BV_TEST_DEVICE
// names one ("cuda", "cuda:1"; scripts/gpu_check), else the fake device as bv._fake_device().
int bv_test_device(lua_State* L) {
  const char* spec = std::getenv("BV_TEST_DEVICE");
  if (spec && std::string(spec).rfind("cuda", 0) == 0) {
    BV_CHECK(cuda_available(), "BV_TEST_DEVICE=", spec, ": no GPU is available to this process");
    lua_pushstring(L, resolve_device(spec, 0).c_str());
    return 1;
  }
  return bv_fake_device(L);
}

int bv_cuda_available(lua_State* L) {
  lua_pushboolean(L, cuda_available());
  return 1;
}

std::string executable_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

bool has_bv_lib(const std::string& dir) { return !dir.empty() && fs::exists(dir + "/bv/init.lua"); }

}  // namespace

std::string find_lib_dir(const char* /*argv0*/) {
  if (const char* env = std::getenv("BV_LIB_DIR")) {
    BV_CHECK(has_bv_lib(env), "BV_LIB_DIR='", env, "' has no bv/init.lua");
    return env;
  }
  std::string beside = executable_dir() + "/../lib";
  if (has_bv_lib(beside)) return beside;
  std::string source = BV_SOURCE_LIB_DIR;
  if (has_bv_lib(source)) return source;
  fail("cannot find the bvlua Lua library (bv/init.lua): looked in ", beside, " and '", source,
       "'; set BV_LIB_DIR to the project's lib/ directory");
}

int open_native(lua_State* L) {
  lua_newtable(L);
  open_tensor(L);
  open_rng(L);
  open_fs(L);
  open_image(L);
  open_ops(L);
  open_data(L);
  open_ckpt(L);
  open_models(L);
  open_optim(L);
  open_losses(L);
  open_text(L);
  open_dist(L);
  open_device_copy(L);
  open_process(L);
  open_plot(L);
  open_profiler(L);
  open_pp_state(L);
  open_attach(L);
  static const luaL_Reg functions[] = {
      BV_FN("threads", bv_threads),
      BV_FN("device", bv_device),
      BV_FN("memory", bv_memory),
      BV_FN("set_device", bv_set_device),
      BV_FN("seed_device", bv_seed_device),
      BV_FN("usage", bv_usage),
      BV_FN("set_matmul_precision", bv_set_matmul_precision),
      BV_FN("set_deterministic", bv_set_deterministic),
      BV_FN("deterministic", bv_deterministic),
      BV_FN("tf32", bv_tf32),
      BV_FN("_take_notes", bv_take_notes),
      BV_FN("_fake_device", bv_fake_device),
      BV_FN("_test_device", bv_test_device),
      BV_FN("cuda_available", bv_cuda_available),
      BV_FN("clock", bv_clock),
      BV_FN("snippet", bv_snippet),
      BV_FN("fullmatch", bv_fullmatch),
      BV_FN("rematch", bv_rematch),
      BV_FN("handle_stop_signals", bv_handle_stop_signals),
      BV_FN("stop_requested", bv_stop_requested),
      BV_FN("stop_progress", bv_stop_progress),
      {nullptr, nullptr},
  };
  luaL_setfuncs(L, functions, 0);
  lua_pushstring(L, torch_version().c_str());
  lua_setfield(L, -2, "torch_version");
  lua_pushstring(L, BV_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}

namespace {
std::string g_lib_dir;
std::mutex g_lib_dir_mu;
}  // namespace

std::string current_lib_dir() {
  std::lock_guard<std::mutex> lock(g_lib_dir_mu);
  return g_lib_dir;
}

lua_State* new_state(const std::string& lib_dir) {
  {
    std::lock_guard<std::mutex> lock(g_lib_dir_mu);
    g_lib_dir = lib_dir;
  }
  lua_State* L = luaL_newstate();
  BV_CHECK(L, "cannot create a Lua state: out of memory");
  luaL_openlibs(L);

  // package.path: lib/ first, so `require "bv.config"` finds ours before anything installed.
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  std::string path = lib_dir + "/?.lua;" + lib_dir + "/?/init.lua;" + lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, path.c_str());
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, open_native);
  lua_setfield(L, -2, "bv._C");
  lua_pop(L, 2);

  lua_getglobal(L, "require");
  lua_pushstring(L, "bv");
  if (pcall_traceback(L, 1, 1) != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)";
    lua_close(L);
    fail("loading the bv library failed: ", msg);
  }
  lua_setglobal(L, "bv");
  return L;
}

}  // namespace bv::lua
