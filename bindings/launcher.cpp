// bvlua: the command users type. It answers `--help` and `--version` itself and execs
// bvlua-core, the program with libtorch and Lua (bindings/main.cpp), for everything else.
//
// Why two executables: libtorch's operator registrations and the CUDA libraries it links run
// before main, about 0.6 s of every start, which a question about the version should
// not pay. exec, not a child process: bvlua-core takes over this process (its pid, signals, exit
// code and terminal), as if it had been started directly.
//
// It never reports a usage error itself: anything it does not answer, valid or not, goes to
// bvlua-core, which owns the whole command line (the global flags are read here only to find
// --help and --version among them, by the same rules).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cli.h"

namespace {

// bvlua-core beside this executable (the build puts both in one directory).
std::string core_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "bvlua-core";
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "bvlua-core";
}

// Whether this process can answer the command line without bvlua-core: --help or --version
// among the global flags, reached with every flag before it valid (a bad --threads or
// $BV_THREADS is bvlua-core's usage error, whatever follows).
bool answer_here(int argc, char** argv) {
  int threads = 0;
  if (const char* env = std::getenv("BV_THREADS")) {
    if (!bv::parse_threads(env, &threads)) return false;
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(bv::kUsage, stdout);
      return true;
    }
    if (a == "--version") {
      bv::print_version();
      return true;
    }
    if (a == "--threads") {
      if (i + 1 >= argc || !bv::parse_threads(argv[++i], &threads)) return false;
    } else if (a.rfind("--threads=", 0) == 0) {
      if (!bv::parse_threads(a.substr(10), &threads)) return false;
    } else {
      return false;  // the command, or an unknown option
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (answer_here(argc, argv)) return std::fflush(stdout) == 0 ? 0 : 1;
  std::string core = core_path();
  // SIGTERM and SIGINT stay blocked (pending, not lost) across the exec, until bvlua-core has its
  // stop handlers: a run stopped while libtorch loads stops cleanly (runtime/core/signals.h).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  ::execv(core.c_str(), argv);  // returns only on failure
  ::sigprocmask(SIG_UNBLOCK, &stop_signals, nullptr);
  std::fprintf(stderr, "bvlua: cannot run %s: %s (build it: scripts/setup, or cmake --build)\n",
               core.c_str(), std::strerror(errno));
  return 1;
}
