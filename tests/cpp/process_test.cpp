// Child processes (core/process.h): bvlua itself starts with SIGTERM and SIGINT blocked, held
// pending until its stop handlers exist (core/signals.h); any other program with none blocked.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "core/fs.h"
#include "core/process.h"

namespace {

// The "SigBlk:" line of /proc/self/status as the program `program` (a link to cat) sees it.
std::string blocked_signals_of(const std::string& program) {
  std::string log = program + ".log";
  int pid = bv::spawn_process({program, "/proc/self/status"}, {}, log);
  for (int i = 0; i < 500 && !bv::poll_process(pid); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string status = bv::fs::read_file(log);
  size_t at = status.find("SigBlk:");
  return at == std::string::npos ? "" : status.substr(at, status.find('\n', at) - at);
}

}  // namespace

TEST_CASE("process: a bvlua child starts with SIGTERM and SIGINT blocked, others with none") {
  namespace stdfs = std::filesystem;
  stdfs::path dir =
      stdfs::temp_directory_path() / ("bv_process_test_" + std::to_string(::getpid()));
  stdfs::create_directories(dir);
  for (const char* name : {"bvlua-core", "bvlua", "other"}) {
    stdfs::create_symlink("/bin/cat", dir / name);
  }
  // SIGINT is signal 2 (bit 1), SIGTERM 15 (bit 14).
  CHECK(blocked_signals_of((dir / "bvlua-core").string()) == "SigBlk:\t0000000000004002");
  CHECK(blocked_signals_of((dir / "bvlua").string()) == "SigBlk:\t0000000000004002");
  CHECK(blocked_signals_of((dir / "other").string()) == "SigBlk:\t0000000000000000");
  stdfs::remove_all(dir);
}
