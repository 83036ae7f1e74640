#include "core/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/quote.h"

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

namespace {

// A path from Lua or a data file may hold a NUL, which the C calls would take as its end.
void check_path(const std::string& path) {
  BV_CHECK(path.find('\0') == std::string::npos, "a path holds a NUL byte: '", snippet(path), "'");
}

}  // namespace

std::string read_file(const std::string& path) {
  check_path(path);
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
  check_path(path);
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

void truncate(const std::string& path, long long size) {
  BV_CHECK(::truncate(path.c_str(), static_cast<off_t>(size)) == 0, "cannot cut '", path,
           "' back to ", size, " bytes: ", std::strerror(errno));
}

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What a lock file says ("pid N on host H since T"): at most one line of it.
std::string lock_holder(int fd) {
  char buf[256] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  text = text.substr(0, text.find('\n'));
  return text.empty() ? "a process that has not written its name yet" : text;
}

// The pid in a lock file's "pid N on host H ...", or -1; and whether H is this host.
long lock_pid_here(const std::string& holder) {
  long pid = -1;
  char host[256] = {};
  if (std::sscanf(holder.c_str(), "pid %ld on host %255s", &pid, host) != 2) return -1;
  return host_name() == host ? pid : -1;
}

}  // namespace

std::string lock_workdir(const std::string& dir) {
  static std::map<std::string, int> held;  // path -> fd, open for the process's life
  std::string path = dir + "/.bvlua.lock";
  if (held.count(path)) return "";
  // Not close-on-exec: `train --nproc`'s ranks inherit the lock, which lives until the last of
  // them has exited, even when their launcher is killed first.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  BV_CHECK(fd >= 0, "cannot open the workdir's lock file '", path, "': ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string holder = lock_holder(fd);
    ::close(fd);
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      return "the filesystem of '" + dir + "' does not support flock (" + std::strerror(err) +
             "): nothing stops a second bvlua train from writing there at the same time";
    }
    if (err == EWOULDBLOCK && lock_pid_here(holder) == static_cast<long>(::getppid())) return "";
    BV_CHECK(err != EWOULDBLOCK, "workdir '", dir,
             "' is in use: another bvlua train writes there (", holder, "; its lock: ", path,
             "). Wait for it to end or stop it, or use another "
             "--workdir");
    fail("cannot lock the workdir's lock file '", path, "': ", std::strerror(err));
  }
  std::string text = "pid " + std::to_string(::getpid()) + " on host " + host_name() + " since " +
                     utc_now() + "\n";
  bool ok = ::ftruncate(fd, 0) == 0 &&
            ::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
  BV_CHECK(ok, "cannot write the workdir's lock file '", path, "': ", std::strerror(errno));
  held[path] = fd;
  return "";
}

std::vector<std::string> remove_tmp_leftovers(const std::string& dir) {
  std::vector<std::string> removed;
  std::string mine = std::to_string(::getpid());
  for (const std::string& name : list_dir(dir)) {
    // "<name>.tmp-<pid>" (a file being written: fs::write_file, the checkpoint's writers), or a
    // checkpoint's directory "ckpt-<step>.tmp-<pid>[.del]" (being saved, or being deleted).
    size_t at = name.rfind(".tmp-");
    if (at == std::string::npos || at == 0) continue;
    size_t digits = at + 5, end = digits;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == digits || name.compare(digits, end - digits, mine) == 0) continue;
    stdfs::path entry = stdfs::path(dir) / name;
    std::error_code ec;
    bool checkpoint = name.rfind("ckpt-", 0) == 0 &&
                      (end == name.size() || name.substr(end) == ".del");
    bool file = end == name.size() && stdfs::is_regular_file(stdfs::symlink_status(entry, ec));
    if (!checkpoint && !file) continue;
    stdfs::remove_all(entry, ec);
    BV_CHECK(!ec, "cannot remove '", entry.string(),
             "', left by an interrupted run: ", ec.message());
    removed.push_back(name);
  }
  return removed;
}

}  // namespace bv::fs
