#include "core/fs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace bv::fs {

namespace stdfs = std::filesystem;

void mkdirs(const std::string& dir) {
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  BV_CHECK(!ec, "cannot create directory '", dir, "': ", ec.message());
  BV_CHECK(stdfs::is_directory(dir), "cannot create directory '", dir, "': a file is in the way");
}

bool exists(const std::string& path) {
  std::error_code ec;
  return stdfs::exists(path, ec);
}

bool is_dir(const std::string& path) {
  std::error_code ec;
  return stdfs::is_directory(path, ec);
}

std::string current_dir() {
  std::error_code ec;
  stdfs::path cwd = stdfs::current_path(ec);
  BV_CHECK(!ec, "cannot read the current directory: ", ec.message());
  return cwd.string();
}

std::string read_file(const std::string& path) {
  // A directory opens as a stream that reads 0 bytes: a decoder would call it empty data.
  BV_CHECK(!is_dir(path), "'", path, "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  BV_CHECK(in, "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream out;
  if (in.peek() != std::ifstream::traits_type::eof()) out << in.rdbuf();
  BV_CHECK(!in.bad(), "cannot read '", path, "': ", std::strerror(errno));
  return out.str();
}

void write_file(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  BV_CHECK(f, "cannot write '", path, "': ", std::strerror(errno));
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail("cannot write '", path, "': ", std::strerror(err));
  }
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (stdfs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  BV_CHECK(!ec, "cannot list '", dir, "': ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace bv::fs
