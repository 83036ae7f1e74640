// The transport of `bvlua attach`: local Unix-domain stream sockets that carry frames between a
// running `bvlua train` (a Listener at WORKDIR's socket) and the prompt that attaches to it (a
// Connection from connect_to). No Lua here; bindings/attach.cpp binds it as bv.attach.
//
// A frame is 1 byte of kind, the payload's length as 4 bytes big-endian, then the payload (at
// most kMaxPayload bytes). The kinds are the protocol's business (lib/bv/attach.lua), except
// two the Listener itself sends or reads: 'X' (the server ends the session: a refusal) and 'I'
// (the prompt asks to interrupt the running command; see interrupt_requested).
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bv::attach {

constexpr size_t kMaxPayload = size_t{64} << 20;  // 64 MiB

struct Frame {
  char kind = 0;
  std::string payload;
};

// A listening socket at `path` (backlog 8, non-blocking, close-on-exec), mode 0600. A socket
// file already there is a stale one from a killed run (the caller holds the workdir's lock, so
// no live run owns it): it is replaced and *note says so; anything else there is an error.
// Paths longer than sun_path (108 bytes) work through the parent directory's /proc/self/fd.
int listen_at(const std::string& path, std::string* note);

// A blocking, close-on-exec connection to the listener at `path`; errors say what the user can
// do (no run there, a stale socket, another user's run).
int connect_to(const std::string& path);

struct PeerCred {
  int uid = -1;
  int pid = -1;
};
PeerCred peer_cred(int fd);  // the process at the other end of a connected socket

std::string user_name(int uid);  // the login name, or "uid N" when there is none

enum class ReadResult { kData, kTimeout, kClosed };

// One end of a connection: owns the fd (closed by close() or the destructor) and what was read
// but not yet taken as frames.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Writes one whole frame (blocking, looping on partial writes); false when the peer is gone
  // (or stopped reading for longer than the socket's send timeout, if one is set: the stream is
  // then cut mid-frame, so the connection counts as broken). A payload over kMaxPayload throws.
  bool send(char kind, std::string_view payload);
  // The next whole frame already read, else nullopt. A header announcing more than kMaxPayload
  // throws (the stream cannot be trusted past it).
  std::optional<Frame> next_frame();
  bool has_frame() const;  // whether next_frame() would return one (no allocation)
  // Waits up to timeout_s (0: not at all) for data and reads what is there. kTimeout also when a
  // signal interrupted the wait; kClosed once the peer has closed and nothing new came.
  ReadResult fill(double timeout_s);
  void close();

  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  // The peer closed its end (or a send found it gone); frames read before may still be buffered.
  bool peer_gone() const { return eof_ || broken_; }

 private:
  int fd_ = -1;
  std::string buf_;
  size_t start_ = 0;  // buf_[0, start_) was taken already
  bool eof_ = false;
  bool broken_ = false;
};

struct Event {
  enum class Kind { kConnected, kRefused, kFrame, kClosed };
  Kind kind = Kind::kFrame;
  int id = 0;              // the connection (kConnected, kFrame, kClosed)
  int uid = -1, pid = -1;  // the peer (kConnected, kRefused)
  char frame_kind = 0;     // kFrame
  // kFrame: the payload; kRefused: what the peer was told; kClosed: why the listener closed it
  // ("" when the peer closed it).
  std::string text;
};

// The server end: the listening socket and the connections it accepted. Connections from
// another user than `allowed_uid` (default: this process's effective uid) are told why in an 'X'
// frame and closed. Single-threaded: call it from the thread that runs the training loop.
class Listener {
 public:
  explicit Listener(const std::string& path, std::optional<int> allowed_uid = std::nullopt);
  ~Listener() { close(); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  const std::string& path() const { return path_; }
  const std::string& note() const { return note_; }  // listen_at's note ("" when none)
  bool is_open() const { return fd_ >= 0; }

  // Whether poll() would report something now: one poll() with timeout 0 over every fd, no
  // allocation (it runs once per training step).
  bool pending();
  // Waits up to timeout_s for activity, then accepts, reads and reports what happened.
  std::vector<Event> poll(double timeout_s);
  bool send(int id, char kind, std::string_view payload);  // false when `id` is gone
  void drop(int id);  // closes the connection; no kClosed event follows
  // Reads what has arrived on `id` without waiting: true when an 'I' frame came (it is taken)
  // or the peer is gone (or `id` is unknown); other frames stay for poll().
  bool interrupt_requested(int id);
  bool peer_gone(int id) const;  // `id` is unknown, or its peer closed
  // Closes every connection and the listening socket, and removes the socket file if it is
  // still the one this listener made. Idempotent.
  void close();

 private:
  struct Client {
    int id;
    PeerCred cred;
    Connection conn;
    std::deque<Frame> parsed;  // whole frames read by interrupt_requested, not yet reported
    std::string error;         // a protocol error: reported with kClosed
    Client(int i, PeerCred c, int fd) : id(i), cred(c), conn(fd) {}
  };

  Client* find(int id) const;
  void read_frames(Client& c);  // moves whole frames into c.parsed; a bad header sets c.error
  void accept_all(std::vector<Event>& events);
  void rebuild_pollfds();
  bool any_ready() const;  // something to report without reading

  int fd_ = -1;
  std::string path_, note_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  int allowed_uid_;
  int next_id_ = 1;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<pollfd> pollfds_;  // [0]: the listening fd, [i + 1]: clients_[i]
};

}  // namespace bv::attach
