// Shared by the C++ fuzz harnesses: a per-process scratch directory (in /dev/shm when it exists)
// for parsers that take file paths, and the rule for what a parser may throw.
//
// A parser meets untrusted input correctly when it returns or throws an exception with a
// message. Anything else is a finding: a sanitizer report, a crash, an abort, a hang, or (with
// BV_FUZZ_STRICT=1) an exception that is not bv::Error, i.e. a library's raw error (nlohmann,
// c10) that escaped the parser's own checks and messages.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <typeinfo>

#include "core/error.h"

namespace bv::fuzz {

// The directory, made once per process and removed at exit (never destroyed itself: the exit
// handler still reads it).
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    auto* d = new std::string(base + "/bvfuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

// Writes `n` bytes to `path` (replacing it), aborting on I/O errors: those are the harness's.
inline void write_file(const std::string& path, const uint8_t* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
}

// Once per process: libtorch on one thread (the fuzzer runs one input at a time).
inline void init_torch() {
  static bool done = [] {
    at::set_num_threads(1);
    return true;
  }();
  (void)done;
}

inline bool strict() {
  static const bool s = [] {
    const char* e = std::getenv("BV_FUZZ_STRICT");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return s;
}

// Runs `body`, accepting the exceptions a parser may throw (see the top of this file).
template <typename F>
void run_parser(F&& body) {
  try {
    body();
  } catch (const bv::Error&) {
  } catch (const std::exception& e) {
    if (strict()) {
      std::fprintf(stderr, "BV_FUZZ_STRICT: an exception other than bv::Error escaped (%s): %s\n",
                   typeid(e).name(), e.what());
      std::abort();
    }
  }
}

}  // namespace bv::fuzz
