#include "attach/socket.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace bv::attach {

namespace {

// A peer that stops reading (a prompt suspended with Ctrl-Z) must not hold the training loop
// forever: after this long a send gives up and the connection counts as gone.
constexpr int kSendTimeoutS = 10;
constexpr size_t kHeader = 5;
constexpr size_t kReadChunk = 64 * 1024;

// The socket address of `path`. sun_path holds 107 bytes and a NUL; a longer path is reached
// through its parent directory, opened O_PATH and named /proc/self/fd/<fd>/<basename>.
class Address {
 public:
  explicit Address(const std::string& path) {
    std::string name = path;
    if (path.size() >= sizeof addr_.sun_path) {
      size_t slash = path.rfind('/');
      std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
      std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
      dirfd_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dirfd_ < 0) {
        error_ = errno;
        return;
      }
      name = "/proc/self/fd/" + std::to_string(dirfd_) + "/" + base;
      if (name.size() >= sizeof addr_.sun_path) {
        ::close(dirfd_);  // a throwing constructor runs no destructor
        fail("attach socket ", path, ": its file name ('", base,
             "') is too long for a socket address, even reached through its directory");
      }
    }
    addr_.sun_family = AF_UNIX;
    std::memcpy(addr_.sun_path, name.c_str(), name.size() + 1);
    len_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  }
  ~Address() {
    if (dirfd_ >= 0) ::close(dirfd_);
  }
  Address(const Address&) = delete;
  Address& operator=(const Address&) = delete;

  int error() const { return error_; }  // errno of opening the parent directory, or 0
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&addr_); }
  socklen_t size() const { return len_; }

 private:
  sockaddr_un addr_{};
  socklen_t len_ = 0;
  int dirfd_ = -1;
  int error_ = 0;
};

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a fifo";
  return "not a socket";
}

int to_ms(double timeout_s) {
  if (timeout_s < 0) return -1;
  return static_cast<int>(std::min(std::ceil(timeout_s * 1000.0), double{INT_MAX}));
}

uint32_t read_be32(const char* p) {
  auto b = [&](int i) { return static_cast<uint32_t>(static_cast<unsigned char>(p[i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

std::string quoted_kind(char kind) {
  unsigned char k = static_cast<unsigned char>(kind);
  if (k >= 0x20 && k < 0x7f) return std::string("'") + kind + "'";
  return "0x" + std::string(1, "0123456789abcdef"[k >> 4]) + "0123456789abcdef"[k & 15];
}

}  // namespace

int listen_at(const std::string& path, std::string* note) {
  BV_CHECK(!path.empty() && path.back() != '/', "attach socket '", path, "': not a file name");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    BV_CHECK(S_ISSOCK(st.st_mode), "attach socket ", path, ": something else is there (",
             file_kind(st.st_mode), "); remove it, or run with --no-attach");
    BV_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT,
             "cannot remove the stale attach socket ", path, ": ", std::strerror(errno));
    if (note) {
      *note = "replaced a stale attach socket at " + path +
              " (left by a run that did not exit cleanly)";
    }
  } else {
    BV_CHECK(errno == ENOENT, "attach socket ", path, ": ", std::strerror(errno));
  }
  Address addr(path);
  BV_CHECK(addr.error() == 0, "attach socket ", path, ": ", std::strerror(addr.error()));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  BV_CHECK(fd >= 0, "attach socket ", path, ": socket(): ", std::strerror(errno));
  // Owner-only from the start: Linux gives the file the socket's own mode (fchmod before bind)
  // less the umask, which is not changed here (it is process-wide, and data threads make files).
  // Nobody can connect before listen() below anyway, which comes after the chmod.
  ::fchmod(fd, 0600);
  int rc = ::bind(fd, addr.get(), addr.size());
  int err = errno;
  if (rc != 0) {
    ::close(fd);
    fail("cannot make the attach socket ", path, ": ", std::strerror(err));
  }
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 8) != 0) {
    err = errno;
    ::close(fd);
    ::unlink(path.c_str());
    fail("cannot make the attach socket ", path, ": ", std::strerror(err));
  }
  return fd;
}

int connect_to(const std::string& path) {
  auto failure = [&](int err) -> std::string {
    struct stat st {};
    switch (err) {
      case ENOENT:
        return str("no run is listening: ", path,
                   " does not exist (is `bvlua train` running on this workdir, without "
                   "--no-attach?)");
      case ECONNREFUSED:
        if (::stat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
          return str(path, " is not a socket (", file_kind(st.st_mode), ")");
        }
        return str(path, " is a stale socket: the run that made it is gone");
      case EACCES: return str("permission denied on ", path, " (the run belongs to another user)");
      default: return str("cannot connect to ", path, ": ", std::strerror(err));
    }
  };
  Address addr(path);
  if (addr.error() != 0) fail(failure(addr.error()));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  BV_CHECK(fd >= 0, "cannot connect to ", path, ": socket(): ", std::strerror(errno));
  int rc;
  do {
    rc = ::connect(fd, addr.get(), addr.size());
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    ::close(fd);
    fail(failure(err));
  }
  return fd;
}

PeerCred peer_cred(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  BV_CHECK(::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0,
           "attach: cannot read the peer's credentials: ", std::strerror(errno));
  return {static_cast<int>(cred.uid), static_cast<int>(cred.pid)};
}

std::string user_name(int uid) {
  std::vector<char> buf(4096);
  passwd pw{};
  passwd* found = nullptr;
  int rc;
  while ((rc = ::getpwuid_r(static_cast<uid_t>(uid), &pw, buf.data(), buf.size(), &found)) ==
             ERANGE &&
         buf.size() < (1u << 20)) {
    buf.resize(buf.size() * 2);
  }
  if (rc == 0 && found && found->pw_name) return found->pw_name;
  return "uid " + std::to_string(uid);
}

// --- Connection -------------------------------------------------------------------------------

bool Connection::send(char kind, std::string_view payload) {
  BV_CHECK(payload.size() <= kMaxPayload, "attach: a frame of ", payload.size(), " bytes (kind ",
           quoted_kind(kind), ") is over the limit of ", kMaxPayload, " bytes (64 MiB)");
  if (fd_ < 0 || broken_) return false;
  uint32_t n = static_cast<uint32_t>(payload.size());
  char head[kHeader] = {kind, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                        static_cast<char>(n >> 8), static_cast<char>(n)};
  iovec iov[2] = {{head, kHeader}, {const_cast<char*>(payload.data()), payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  while (msg.msg_iovlen > 0) {
    ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      broken_ = true;  // EPIPE, ECONNRESET, or the send timeout: the stream is cut
      return false;
    }
    size_t left = static_cast<size_t>(sent);
    while (msg.msg_iovlen > 0 && left >= msg.msg_iov->iov_len) {
      left -= msg.msg_iov->iov_len;
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
    if (msg.msg_iovlen > 0) {
      msg.msg_iov->iov_base = static_cast<char*>(msg.msg_iov->iov_base) + left;
      msg.msg_iov->iov_len -= left;
    }
  }
  return true;
}

bool Connection::has_frame() const {
  size_t avail = buf_.size() - start_;
  if (avail < kHeader) return false;
  uint32_t n = read_be32(buf_.data() + start_ + 1);
  return n > kMaxPayload || avail - kHeader >= n;  // an oversized one: next_frame reports it
}

std::optional<Frame> Connection::next_frame() {
  size_t avail = buf_.size() - start_;
  if (avail < kHeader) return std::nullopt;
  uint32_t n = read_be32(buf_.data() + start_ + 1);
  BV_CHECK(n <= kMaxPayload, "attach: the peer announced a frame of ", n, " bytes (kind ",
           quoted_kind(buf_[start_]), "), over the limit of ", kMaxPayload,
           " bytes (64 MiB): it does not speak bvlua's attach protocol");
  if (avail - kHeader < n) return std::nullopt;
  Frame f{buf_[start_], buf_.substr(start_ + kHeader, n)};
  start_ += kHeader + n;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  }
  return f;
}

ReadResult Connection::fill(double timeout_s) {
  if (fd_ < 0 || eof_) return ReadResult::kClosed;
  if (timeout_s != 0) {
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, to_ms(timeout_s));
    if (n < 0 && errno != EINTR) fail("attach: poll: ", std::strerror(errno));
    if (n <= 0) return ReadResult::kTimeout;
  }
  if (start_ > 0 && start_ >= buf_.size() / 2) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  bool got = false;
  char chunk[kReadChunk];
  // Bounded: a peer that floods is cut off at a frame's worth, which next_frame then refuses.
  while (buf_.size() - start_ <= kMaxPayload + kHeader) {
    ssize_t r = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (r > 0) {
      buf_.append(chunk, static_cast<size_t>(r));
      got = true;
      if (static_cast<size_t>(r) < sizeof chunk) break;  // drained: spare a recv that fails
      continue;
    }
    if (r == 0 || errno == ECONNRESET) {
      eof_ = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    fail("attach: reading from the connection: ", std::strerror(errno));
  }
  if (got) return ReadResult::kData;
  return eof_ ? ReadResult::kClosed : ReadResult::kTimeout;
}

void Connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// --- Listener ---------------------------------------------------------------------------------

Listener::Listener(const std::string& path, std::optional<int> allowed_uid)
    : path_(path), allowed_uid_(allowed_uid.value_or(static_cast<int>(::geteuid()))) {
  fd_ = listen_at(path, &note_);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
  rebuild_pollfds();
}

void Listener::close() {
  clients_.clear();
  pollfds_.clear();
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  // Only our own file: a later run may have replaced it (after taking the workdir's lock).
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == dev_ &&
      st.st_ino == ino_) {
    ::unlink(path_.c_str());
  }
}

Listener::Client* Listener::find(int id) const {
  for (const auto& c : clients_) {
    if (c->id == id) return c.get();
  }
  return nullptr;
}

void Listener::rebuild_pollfds() {
  pollfds_.assign(1 + clients_.size(), pollfd{-1, POLLIN, 0});
  pollfds_[0].fd = fd_;
  for (size_t i = 0; i < clients_.size(); ++i) pollfds_[i + 1].fd = clients_[i]->conn.fd();
}

bool Listener::any_ready() const {
  for (const auto& c : clients_) {
    if (!c->parsed.empty() || !c->error.empty() || c->conn.peer_gone() || c->conn.has_frame()) {
      return true;
    }
  }
  return false;
}

bool Listener::pending() {
  if (fd_ < 0) return false;
  if (any_ready()) return true;
  int n = ::poll(pollfds_.data(), pollfds_.size(), 0);
  return n > 0;
}

void Listener::read_frames(Client& c) {
  try {
    while (auto f = c.conn.next_frame()) c.parsed.push_back(std::move(*f));
  } catch (const Error& e) {
    c.error = e.what();
  }
}

void Listener::accept_all(std::vector<Event>& events) {
  while (true) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of fds or memory: say so once; the connection waits in the backlog meanwhile.
        Event e;
        e.kind = Event::Kind::kRefused;
        e.text = str("cannot accept a connection on ", path_, ": ", std::strerror(errno));
        events.push_back(std::move(e));
      }
      return;
    }
    Event e;
    try {
      PeerCred cred = peer_cred(fd);
      e.uid = cred.uid;
      e.pid = cred.pid;
    } catch (const Error& err) {
      ::close(fd);
      e.kind = Event::Kind::kRefused;
      e.text = err.what();
      events.push_back(std::move(e));
      continue;
    }
    if (e.uid != allowed_uid_) {
      Connection refused(fd);
      e.kind = Event::Kind::kRefused;
      e.text = str("refused: this run belongs to ", user_name(allowed_uid_), " (uid ", allowed_uid_,
                   "); ", user_name(e.uid), " (uid ", e.uid, ", pid ", e.pid,
                   ") may not attach to it");
      refused.send('X', e.text);
      events.push_back(std::move(e));
      continue;
    }
    timeval tv{kSendTimeoutS, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // best effort
    e.kind = Event::Kind::kConnected;
    e.id = next_id_++;
    clients_.push_back(std::make_unique<Client>(e.id, PeerCred{e.uid, e.pid}, fd));
    events.push_back(std::move(e));
  }
}

std::vector<Event> Listener::poll(double timeout_s) {
  BV_CHECK(fd_ >= 0, "attach: the listener at ", path_, " is closed");
  std::vector<Event> events;
  int n = ::poll(pollfds_.data(), pollfds_.size(), any_ready() ? 0 : to_ms(timeout_s));
  BV_CHECK(n >= 0 || errno == EINTR, "attach: poll on ", path_, ": ", std::strerror(errno));
  bool any_gone = false;
  for (size_t i = 0; i < clients_.size(); ++i) {
    Client& c = *clients_[i];
    if (n > 0 && pollfds_[i + 1].revents != 0 && c.error.empty()) {
      try {
        c.conn.fill(0);
      } catch (const Error& e) {
        c.error = e.what();
      }
    }
    if (c.error.empty()) read_frames(c);
    for (Frame& f : c.parsed) {
      Event e;
      e.kind = Event::Kind::kFrame;
      e.id = c.id;
      e.frame_kind = f.kind;
      e.text = std::move(f.payload);
      events.push_back(std::move(e));
    }
    c.parsed.clear();
    if (c.conn.peer_gone() || !c.error.empty()) {
      if (!c.error.empty()) c.conn.send('X', c.error);  // tell a live peer why it is cut off
      Event e;
      e.kind = Event::Kind::kClosed;
      e.id = c.id;
      e.text = c.error;
      events.push_back(std::move(e));
      c.conn.close();
      any_gone = true;
    }
  }
  if (any_gone) {
    std::erase_if(clients_, [](const auto& c) { return !c->conn.is_open(); });
  }
  if (n > 0 && (pollfds_[0].revents & POLLIN)) accept_all(events);
  rebuild_pollfds();
  return events;
}

bool Listener::send(int id, char kind, std::string_view payload) {
  Client* c = find(id);
  return c != nullptr && c->conn.send(kind, payload);
}

void Listener::drop(int id) {
  std::erase_if(clients_, [id](const auto& c) { return c->id == id; });
  rebuild_pollfds();
}

bool Listener::interrupt_requested(int id) {
  Client* c = find(id);
  if (c == nullptr) return true;
  if (c->error.empty()) {
    try {
      c->conn.fill(0);
    } catch (const Error& e) {
      c->error = e.what();
    }
  }
  if (c->error.empty()) read_frames(*c);
  for (auto it = c->parsed.begin(); it != c->parsed.end(); ++it) {
    if (it->kind == 'I') {
      c->parsed.erase(it);
      return true;
    }
  }
  return c->conn.peer_gone() || !c->error.empty();
}

bool Listener::peer_gone(int id) const {
  Client* c = find(id);
  return c == nullptr || c->conn.peer_gone() || !c->error.empty();
}

}  // namespace bv::attach
